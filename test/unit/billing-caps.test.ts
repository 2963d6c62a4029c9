/**
 * src/billing/caps.ts with src/billing/periods.ts: a credit cap fires once per cap and
 * period, on the first spend that brings the period's spend to the amount or above; across
 * period boundaries for every frequency, with month-end anchors and leap years.
 */
import t from 'tap';
import fc from 'fast-check';
import { ZERO, compare, toCanonicalString as str, type Dec } from '../../src/billing/decimal.js';
import { spendAgainstCap } from '../../src/billing/caps.js';
import { FREQUENCIES, type Frequency, periodContaining } from '../../src/billing/periods.js';
import { type CapConfig, creditCapReachedEvent } from '../../src/billing/events.js';
import { MS_PER_DAY, formatUtcInstant, parseUtcInstant } from '../../src/billing/instant.js';
import { amountM, dec, decM } from '../helpers/billing.js';

const CURRENCY = '0b7e3f1c-1a52-4c1e-9d1f-5c2b8f0a9e11';

interface Reached {
  signal: number;
  id: string;
  used: string;
  period: { start: string; end: string };
}

/**
 * What an integration does, in memory: per period of the cap, the spend so far and whether
 * the event went out; each signal (time, spend) counts in the period containing its time.
 */
function evaluate(cap: CapConfig, signals: { at: string | number; spend: Dec }[]): Reached[] {
  const state = new Map<number, { used: Dec; reached: boolean }>();
  const out: Reached[] = [];
  signals.forEach(({ at, spend }, i) => {
    const period = periodContaining(cap.effectiveFrom, cap.frequency, at);
    if (period === null) return;
    const s = state.get(period.index) ?? { used: ZERO, reached: false };
    const step = spendAgainstCap({ amount: cap.amount, usedBefore: s.used, spend, alreadyReached: s.reached });
    state.set(period.index, { used: step.usedAfter, reached: s.reached || step.reached });
    if (!step.reached) return;
    const e = creditCapReachedEvent({
      organizationId: 'org_1',
      customer: { id: 'cus_1', externalId: 'acme' },
      cap,
      breachedUnit: { externalId: 'team-a', externalType: 'team' },
      period,
      step,
      at,
    });
    out.push({ signal: i, id: e.id, used: e.data.usedDecimal, period: e.data.period });
  });
  return out;
}

t.test('the rule: reaching the amount fires once; used may exceed the amount', async (t) => {
  const amount = dec('100');
  const a = spendAgainstCap({ amount, usedBefore: dec('40'), spend: dec('59.999999'), alreadyReached: false });
  t.same([a.reached, str(a.usedAfter)], [false, '99.999999']);
  const b = spendAgainstCap({ amount, usedBefore: a.usedAfter, spend: dec('0.000001'), alreadyReached: false });
  t.same([b.reached, str(b.usedAfter)], [true, '100'], 'reaching exactly (≥) fires');
  const c = spendAgainstCap({ amount, usedBefore: b.usedAfter, spend: dec('5'), alreadyReached: true });
  t.same([c.reached, str(c.usedAfter)], [false, '105'], 'once per period');
  const d = spendAgainstCap({ amount, usedBefore: dec('90'), spend: dec('25.5'), alreadyReached: false });
  t.same([d.reached, str(d.usedAfter)], [true, '115.5'], 'used may exceed the amount');
});

t.test('amount changes within a period: lowered below the spend fires on the next spend; raised after firing does not fire again', async (t) => {
  const lowered = spendAgainstCap({ amount: dec('40'), usedBefore: dec('50'), spend: dec('1'), alreadyReached: false });
  t.same([lowered.reached, str(lowered.usedAfter)], [true, '51']);
  const raised = spendAgainstCap({ amount: dec('200'), usedBefore: dec('150'), spend: dec('60'), alreadyReached: true });
  t.equal(raised.reached, false);
});

t.test('zero spend fires nothing; a cap of 0 fires on the first positive spend', async (t) => {
  t.equal(spendAgainstCap({ amount: dec('10'), usedBefore: dec('10'), spend: ZERO, alreadyReached: false }).reached, false);
  t.equal(spendAgainstCap({ amount: ZERO, usedBefore: ZERO, spend: ZERO, alreadyReached: false }).reached, false);
  t.equal(spendAgainstCap({ amount: ZERO, usedBefore: ZERO, spend: dec('0.000001'), alreadyReached: false }).reached, true);
});

t.test('refusals: negative amount, spend so far or spend', async (t) => {
  t.throws(() => spendAgainstCap({ amount: dec('-1'), usedBefore: ZERO, spend: ZERO, alreadyReached: false }), RangeError);
  t.throws(() => spendAgainstCap({ amount: ZERO, usedBefore: dec('-1'), spend: ZERO, alreadyReached: false }), RangeError);
  t.throws(() => spendAgainstCap({ amount: ZERO, usedBefore: ZERO, spend: dec('-1'), alreadyReached: false }), RangeError);
});

/** For each frequency: an anchor, the last instant of period 0 and the first of period 1. */
const BOUNDARIES: [Frequency, string, string, string, [string, string], [string, string]][] = [
  ['DAILY', '2024-02-28T18:00:00Z', '2024-02-29T17:59:59.999Z', '2024-02-29T18:00:00Z', ['2024-02-28T18:00:00Z', '2024-02-29T18:00:00Z'], ['2024-02-29T18:00:00Z', '2024-03-01T18:00:00Z']],
  ['WEEKLY', '2024-12-26T00:00:00Z', '2025-01-01T23:59:59.999Z', '2025-01-02T00:00:00Z', ['2024-12-26T00:00:00Z', '2025-01-02T00:00:00Z'], ['2025-01-02T00:00:00Z', '2025-01-09T00:00:00Z']],
  ['MONTHLY', '2024-01-31T00:00:00Z', '2024-02-28T23:59:59.999Z', '2024-02-29T00:00:00Z', ['2024-01-31T00:00:00Z', '2024-02-29T00:00:00Z'], ['2024-02-29T00:00:00Z', '2024-03-31T00:00:00Z']],
  ['QUARTERLY', '2099-11-30T12:00:00Z', '2100-02-28T11:59:59.999Z', '2100-02-28T12:00:00Z', ['2099-11-30T12:00:00Z', '2100-02-28T12:00:00Z'], ['2100-02-28T12:00:00Z', '2100-05-30T12:00:00Z']],
  ['YEARLY', '1996-02-29T00:00:00Z', '2000-02-28T23:59:59.999Z', '2000-02-29T00:00:00Z', ['1999-02-28T00:00:00Z', '2000-02-29T00:00:00Z'], ['2000-02-29T00:00:00Z', '2001-02-28T00:00:00Z']],
];

t.test('across a period boundary the cap fires once in each period, for every frequency', async (t) => {
  for (const [frequency, effectiveFrom, lastOfP0, firstOfP1, p0, p1] of BOUNDARIES) {
    const cap: CapConfig = { creditsCurrencyId: CURRENCY, amount: dec('10'), frequency, effectiveFrom };
    const reached = evaluate(cap, [
      { at: effectiveFrom, spend: dec('0.000001') }, // before the boundary periods for YEARLY; harmless otherwise
      { at: lastOfP0, spend: dec('6') },
      { at: lastOfP0, spend: dec('6') }, // reaches (12 ≥ 10, or 12.000001 in period 0)
      { at: lastOfP0, spend: dec('6') }, // same period: nothing more
      { at: firstOfP1, spend: dec('9.999999') },
      { at: firstOfP1, spend: dec('0.000001') }, // exactly 10 in the new period: fires
      { at: firstOfP1, spend: dec('100') },
    ]);
    t.same(
      reached.map((r) => [r.signal, r.period.start, r.period.end]),
      [
        [2, ...p0],
        [5, ...p1],
      ],
      `${frequency}: one event per period`,
    );
    t.equal(reached[1]?.used, '10', `${frequency}: used at detection in period 1`);
    t.not(reached[0]?.id, reached[1]?.id, `${frequency}: ids differ between periods`);
  }
});

t.test('signals before effectiveFrom count in no period', async (t) => {
  const cap: CapConfig = { creditsCurrencyId: CURRENCY, amount: dec('1'), frequency: 'MONTHLY', effectiveFrom: '2024-01-31T00:00:00Z' };
  t.same(evaluate(cap, [{ at: '2024-01-30T23:59:59.999Z', spend: dec('5') }]), []);
});

t.test('month-end anchors: the 31st, 30th and 29th, through February of leap and non-leap years', async (t) => {
  const cases: [string, string, string][] = [
    ['2023-01-31T00:00:00Z', '2023-02-28T00:00:00Z', '2023-03-31T00:00:00Z'],
    ['2024-01-31T00:00:00Z', '2024-02-29T00:00:00Z', '2024-03-31T00:00:00Z'],
    ['2024-01-30T00:00:00Z', '2024-02-29T00:00:00Z', '2024-03-30T00:00:00Z'],
    ['2023-01-29T00:00:00Z', '2023-02-28T00:00:00Z', '2023-03-29T00:00:00Z'],
    ['2100-01-31T00:00:00Z', '2100-02-28T00:00:00Z', '2100-03-31T00:00:00Z'],
    ['2000-01-31T00:00:00Z', '2000-02-29T00:00:00Z', '2000-03-31T00:00:00Z'],
  ];
  for (const [effectiveFrom, feb, mar] of cases) {
    const cap: CapConfig = { creditsCurrencyId: CURRENCY, amount: dec('1'), frequency: 'MONTHLY', effectiveFrom };
    const r = evaluate(cap, [
      { at: parseUtcInstant(feb) - 1, spend: dec('1') },
      { at: feb, spend: dec('1') },
      { at: parseUtcInstant(mar) - 1, spend: dec('1') },
      { at: mar, spend: dec('1') },
    ]);
    t.same(
      r.map((x) => [x.signal, x.period.start, x.period.end]),
      [
        [0, effectiveFrom, feb],
        [1, feb, mar],
        [3, mar, periodContaining(effectiveFrom, 'MONTHLY', mar)?.end ?? 'none'],
      ],
      effectiveFrom,
    );
  }
});

t.test('property: fires exactly once in each period whose spend reaches the amount (and is positive), on the first signal reaching it', async (t) => {
  const anchor = parseUtcInstant('2024-01-31T06:00:00Z');
  const r = fc.check(
    fc.property(
      fc.constantFrom(...FREQUENCIES),
      amountM,
      fc.array(fc.tuple(fc.integer({ min: -5 * MS_PER_DAY, max: 800 * MS_PER_DAY }), amountM), { maxLength: 60 }),
      (frequency, amountMill, raw) => {
        const cap: CapConfig = { creditsCurrencyId: CURRENCY, amount: decM(amountMill), frequency, effectiveFrom: formatUtcInstant(anchor) };
        const signals = raw.map(([offset, m]) => ({ at: anchor + offset, spend: decM(m) }));
        const reached = evaluate(cap, signals);
        // model: per period, the first signal after which the spend is ≥ amount and > 0
        const totals = new Map<number, bigint>();
        const expected: number[] = [];
        const fired = new Set<number>();
        raw.forEach(([offset, m], i) => {
          const p = periodContaining(cap.effectiveFrom, frequency, anchor + offset);
          if (p === null) return;
          const total = (totals.get(p.index) ?? 0n) + m;
          totals.set(p.index, total);
          if (!fired.has(p.index) && m > 0n && total >= amountMill) {
            fired.add(p.index);
            expected.push(i);
          }
        });
        const ids = reached.map((x) => x.id);
        return (
          JSON.stringify(reached.map((x) => x.signal)) === JSON.stringify(expected) &&
          new Set(ids).size === ids.length &&
          reached.every((x) => compare(dec(x.used), cap.amount) >= 0) &&
          JSON.stringify(evaluate(cap, signals)) === JSON.stringify(reached)
        );
      },
    ),
    { numRuns: 200 },
  );
  t.equal(r.failed, false, 'once per cap and period', r.failed ? { diagnostic: true, counterexample: r.counterexample, error: String(r.errorInstance) } : {});
});
