/**
 * What a reader outside the evaluator takes from a partition's pin (src/billing/evaluator/pins.ts
 * pendingFrom): the first sequence of the group pending, or null once it is committed — read
 * from the pin's first and last bytes for the current forms, whatever its documents hold.
 */
import t from 'tap';
import fc from 'fast-check';
import type { KvEntry } from '@nats-io/kv';
import { pendingFrom } from '../../src/billing/evaluator/pins.js';
import { donePin, type Pin } from '../../src/billing/evaluator/consumer.js';
import { emptyConfig } from '../../src/billing/model.js';

const entry = (text: string, operation = 'PUT'): KvEntry => {
  const value = new TextEncoder().encode(text);
  return { operation, length: value.length, value, json: () => JSON.parse(text) } as unknown as KvEntry;
};

const pinArb = fc
  .record({ seq: fc.integer({ min: 1, max: 2 ** 40 }), n: fc.integer({ min: 1, max: 5 }), name: fc.string(), id: fc.string({ minLength: 1 }) })
  .map(({ seq, n, name, id }): Pin => {
    const config = emptyConfig();
    // Texts that look like the markers read, inside the documents: they must not count.
    config.customers[id] = { id, externalId: `${name}"done":true}`, name: ',"done":true}', createdAt: '', updatedAt: '', units: {} } as never;
    const seqs = Array.from({ length: n }, (_, i) => seq + 2 * i);
    return { seq, last: seqs.at(-1)!, seqs, scopes: [{ orgId: 'org_1', mode: 'live', revisions: { k: 3 }, config }] };
  });

t.test('a pending pin gives its first sequence; the same pin committed gives none', async (t) => {
  fc.assert(
    fc.property(pinArb, (pin) => {
      t.equal(pendingFrom(entry(JSON.stringify(pin))), pin.seq);
      t.equal(pendingFrom(entry(JSON.stringify(donePin(pin)))), null);
    }),
    { numRuns: 200 },
  );
});

t.test('a spilled pin is pending; pins of the former form are parsed; no pin, or a deleted one, has nothing pending', async (t) => {
  t.equal(pendingFrom(entry(JSON.stringify({ seq: 7, last: 7, seqs: [7], spilled: { id: 'x', parts: 3 } }))), 7, 'spilled: pending');
  t.equal(pendingFrom(entry(JSON.stringify({ seq: 9, orgId: 'o', mode: 'live', revisions: {}, config: emptyConfig() }))), 9, 'former form, pending');
  t.equal(pendingFrom(entry(JSON.stringify({ seq: 9, orgId: 'o', mode: 'live', revisions: {}, config: emptyConfig(), done: true }))), null, 'former form, done');
  t.equal(pendingFrom(entry(JSON.stringify({ done: true, seq: 9, orgId: 'o', mode: 'live', revisions: {}, config: emptyConfig() }))), null, 'former form, done first');
  t.equal(pendingFrom(null), null);
  t.equal(pendingFrom(entry('', 'DEL')), null);
});
