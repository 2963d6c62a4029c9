/** The per-organization bound on URL checks and test deliveries in flight (src/webhooks/in-flight.ts). */
import t from 'tap';
import { InFlight } from '../../src/webhooks/in-flight.js';

t.test('at most `limit` per key; keys are independent; leaving is idempotent', async (t) => {
  const f = new InFlight(2);
  const a1 = f.tryEnter('org_a:live');
  const a2 = f.tryEnter('org_a:live');
  t.type(a1, 'function');
  t.type(a2, 'function');
  t.equal(f.tryEnter('org_a:live'), null, 'the third is refused');
  t.type(f.tryEnter('org_a:test'), 'function', 'another mode has its own places');
  t.type(f.tryEnter('org_b:live'), 'function', 'another organization too');
  a1!();
  a1!();
  t.equal(f.count('org_a:live'), 1, 'leaving twice gives back one place');
  const a3 = f.tryEnter('org_a:live');
  t.type(a3, 'function', 'a place came back');
  t.equal(f.tryEnter('org_a:live'), null);
  a2!();
  a3!();
  t.equal(f.count('org_a:live'), 0);
});

t.test('a limit below 1 is a programming error', async (t) => {
  for (const bad of [0, -1, 1.5, Number.NaN]) t.throws(() => new InFlight(bad), TypeError, String(bad));
});
