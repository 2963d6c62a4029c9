/**
 * src/billing/overage.ts: the included-quantity overage (OverageUsage) fires on the signal
 * whose cumulative usage first goes strictly above the included quantity, once per crossing.
 */
import t from 'tap';
import fc from 'fast-check';
import { ZERO, toCanonicalString as str, type Dec } from '../../src/billing/decimal.js';
import { type UsageStep, addUsage, crossesIncluded } from '../../src/billing/overage.js';
import { amountM, dec, decM, fromMillionths } from '../helpers/billing.js';

function run(included: Dec | null, ...quantities: string[]): UsageStep[] {
  let usage = ZERO;
  return quantities.map((q) => {
    const s = addUsage(usage, dec(q), included);
    usage = s.after;
    return s;
  });
}

t.test('fires on the signal that goes strictly above the included quantity, once', async (t) => {
  const steps = run(dec('100'), '60', '40', '0.000001', '5', '1000');
  t.same(
    steps.map((s) => s.crossed),
    [false, false, true, false, false],
    'reaching 100 exactly is included; 100.000001 is the overage',
  );
  t.same(steps.map((s) => str(s.after)), ['60', '100', '100.000001', '105.000001', '1105.000001']);
});

t.test('one signal jumping from below to far above fires once', async (t) => {
  t.same(
    run(dec('10'), '3', '50', '1').map((s) => s.crossed),
    [false, true, false],
  );
});

t.test('included quantity 0: the first positive quantity is the overage; zero quantities are not', async (t) => {
  t.same(
    run(ZERO, '0', '0', '0.5', '1').map((s) => s.crossed),
    [false, false, true, false],
  );
});

t.test('no included quantity: never an overage', async (t) => {
  t.same(
    run(null, '1', '1000000').map((s) => s.crossed),
    [false, false],
  );
  t.equal(crossesIncluded(ZERO, dec('5'), null), false);
});

t.test('re-arming: after a crossing it fires again only once usage is back at or below the included quantity', async (t) => {
  // One running usage, carried from step to step as the evaluator carries it in its state.
  let usage = ZERO;
  const step = (q: string, included: string): boolean => {
    const s = addUsage(usage, dec(q), dec(included));
    usage = s.after;
    return s.crossed;
  };
  t.same([step('6', '10'), step('5', '10'), step('1', '10'), step('100', '10')], [false, true, false, false], 'crosses once; more usage without a re-arm never fires again');
  t.equal(str(usage), '112');
  t.same([step('1', '50')], [false], 'an included quantity still below the usage is no new crossing');
  t.equal(str(usage), '113');
  t.same([step('87', '200'), step('0.000001', '200'), step('5', '200')], [false, true, false], 'an included quantity raised to or above the usage re-arms: reaching 200 is included, 200.000001 fires, once');
  t.equal(str(usage), '205.000001');
  usage = ZERO;
  t.same([step('150', '150'), step('1', '150'), step('1', '150')], [false, true, false], 'a window starting again from zero re-arms: fires once more');
});

t.test('refusals: negative quantity or included quantity', async (t) => {
  t.throws(() => addUsage(ZERO, dec('-1'), dec('10')), RangeError);
  t.throws(() => addUsage(ZERO, dec('1'), dec('-10')), RangeError);
});

t.test('property: fires exactly once iff the final usage is above the included quantity, on the first signal above it', async (t) => {
  const r = fc.check(
    fc.property(fc.option(amountM, { nil: null }), fc.array(amountM, { maxLength: 50 }), (includedM, qs) => {
      const included = includedM === null ? null : decM(includedM);
      let usage = ZERO;
      let cum = 0n;
      let firstAbove = -1;
      const crossedAt: number[] = [];
      qs.forEach((q, i) => {
        const s = addUsage(usage, decM(q), included);
        usage = s.after;
        cum += q;
        if (includedM !== null && firstAbove < 0 && cum > includedM) firstAbove = i;
        if (s.crossed) crossedAt.push(i);
      });
      const expected = firstAbove < 0 ? [] : [firstAbove];
      return JSON.stringify(crossedAt) === JSON.stringify(expected) && str(usage) === fromMillionths(cum);
    }),
    { numRuns: 300 },
  );
  t.equal(r.failed, false, 'once per crossing', r.failed ? { diagnostic: true, counterexample: r.counterexample } : {});
});
