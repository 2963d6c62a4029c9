/**
 * The evaluator's pure core (src/billing/evaluator/evaluate.ts): pricing, credit pools,
 * overage and caps over a configuration and a running state, batch by batch.
 */
import type { EventData } from '../../src/bus/events.js';
import t from 'tap';
import fc from 'fast-check';
import { ZERO_PERIOD, capPeriods, evaluate, emptyState, periodKey, type BillableSignal, type BillingState, type EvaluationOutput, type PeriodTotal } from '../../src/billing/evaluator/evaluate.js';
import { capKey, emptyConfig, type BillingConfig } from '../../src/billing/model.js';
import { periodContaining } from '../../src/billing/periods.js';

const CUR = '6f1c2b1e-0000-4000-8000-000000000001';
const T0 = Date.parse('2026-01-31T10:00:00Z');

function config(opts: { granted?: string; included?: string | null; creditsPerUnit?: string; path?: string; caps?: { unit: string; amount: string; frequency: 'DAILY' | 'MONTHLY' | 'YEARLY' | 'WEEKLY' | 'QUARTERLY'; from: string }[]; topUps?: string[] } = {}): BillingConfig {
  const c = emptyConfig();
  const now = '2026-01-01T00:00:00Z';
  c.customers.cus_1 = {
    id: 'cus_1',
    externalId: 'acme',
    name: 'Acme',
    createdAt: now,
    updatedAt: now,
    units: {
      root: { externalId: 'root', externalType: 'company', name: null, parentExternalId: null, createdAt: now, updatedAt: now },
      team: { externalId: 'team', externalType: 'team', name: null, parentExternalId: 'root', createdAt: now, updatedAt: now },
      dev: { externalId: 'dev', externalType: 'user', name: null, parentExternalId: 'team', createdAt: now, updatedAt: now },
    },
  };
  c.plans.plan_1 = { id: 'plan_1', name: 'Pro', createdAt: now };
  c.attributes.ola_1 = {
    id: 'ola_1',
    customerId: 'cus_1',
    planId: 'plan_1',
    eventName: 'api_call',
    quantity: opts.path ? { kind: 'path', path: opts.path } : { kind: 'count' },
    unitPrice: '0.0125',
    currency: 'USD',
    includedQuantity: opts.included ?? null,
    creditsCurrencyId: CUR,
    creditsPerUnit: opts.creditsPerUnit ?? '1',
    createdAt: now,
  };
  if (opts.granted !== undefined) {
    c.pools.cp_1 = { id: 'cp_1', customerId: 'cus_1', orderLineAttributeId: 'ola_1', creditsCurrencyId: CUR, granted: opts.granted, topUps: (opts.topUps ?? []).map((credits, i) => ({ id: `tu_${i}`, credits, at: now })), createdAt: now };
  }
  for (const cap of opts.caps ?? []) {
    c.caps[capKey('cus_1', cap.unit, CUR)] = { customerId: 'cus_1', unitExternalId: cap.unit, creditsCurrencyId: CUR, amount: cap.amount, frequency: cap.frequency, effectiveFrom: cap.from, updatedAt: now };
  }
  return c;
}

let n = 0;
const sig = (extra: Partial<BillableSignal> = {}): BillableSignal => ({ id: `sig_${n++}`, eventName: 'api_call', customerId: 'cus_1', unitId: null, ts: T0, data: {}, ...extra });

/**
 * Evaluates batches in order the way the consumer does: the cap periods each batch touches
 * (capPeriods) are looked up in `periods` (the period keys), and the new totals put back.
 */
function run(cfg: BillingConfig, batches: BillableSignal[][], state: BillingState = emptyState(), periods: Record<string, PeriodTotal> = {}): { outs: EvaluationOutput[]; state: BillingState; periods: Record<string, PeriodTotal> } {
  const outs: EvaluationOutput[] = [];
  periods = { ...periods };
  for (const signals of batches) {
    const refs = capPeriods({ orgId: 'org_x', mode: 'live', config: cfg, signals });
    const given = Object.fromEntries(refs.map((r) => [r.key, periods[r.key] ?? ZERO_PERIOD]));
    const out = evaluate({ orgId: 'org_x', mode: 'live', config: cfg, state, signals, evaluatedAt: T0, periods: given });
    if (JSON.stringify(Object.keys(out.periods).sort()) !== JSON.stringify(refs.map((r) => r.key).sort())) throw new Error('evaluate touched other periods than capPeriods listed');
    outs.push(out);
    state = out.state;
    Object.assign(periods, out.periods);
  }
  return { outs, state, periods };
}
const events = (outs: EvaluationOutput[], name?: string) => outs.flatMap((o) => o.events).filter((e) => !name || e.event === name);

t.test('pricing: one cost row per priced signal, exact fractional cents', async (t) => {
  const { outs } = run(config({ path: 'tokens' }), [[sig({ data: { tokens: 3 } }), sig({ data: { tokens: '0.5' } }), sig({ data: {} }), sig({ customerId: 'acme', data: { tokens: 2 } }), sig({ customerId: 'nobody' }), sig({ eventName: 'other' })]]);
  const costs = outs[0]!.costs;
  t.same(costs.map((c) => [c.quantity, c.cost_amount, c.customer_id]), [['3', '0.0375', 'cus_1'], ['0.5', '0.00625', 'cus_1'], ['2', '0.025', 'cus_1']], 'by service id and by external id');
  t.same(outs[0]!.unpriced.map((u) => [u.reason, u.detail, u.order_line_attribute_id]), [['QUANTITY_MISSING', 'data.tokens is missing', 'ola_1']], 'a signal without the quantity path is not priced, and says why');
});

t.test('every digit of a product is kept: costs and credits beyond 12 places', async (t) => {
  const cfg = config({ granted: '1', path: 'q', creditsPerUnit: '0.000001' });
  cfg.attributes.ola_1!.unitPrice = '0.333333333333';
  const { outs, state } = run(cfg, [[sig({ data: { q: 7.5 } }), sig({ data: { q: '0.123456789012' } }), sig({ data: { q: 1234567890.1234567 }, exact: { q: '1234567890.123456789012' } })]]);
  t.same(outs[0]!.costs.map((c) => [c.quantity, c.unit_price, c.cost_amount]), [
    ['7.5', '0.333333333333', '2.4999999999975'],
    ['0.123456789012', '0.333333333333', '0.041152263003958847736996'],
    ['1234567890.123456789012', '0.333333333333', '411522630.040740740373958847736996'],
  ], 'quantity × unitPrice to the last of its 24 places (reference: Python decimal at 200 digits); a JSON number at the value its text states');
  t.same(outs[0]!.consumption.map((c) => [c.credits, c.balance_after]), [
    ['0.0000075', '0.9999925'],
    ['0.000000123456789012', '0.999992376543210988'],
    ['1234.567890123456789012', '-1233.567897746913578024'],
  ]);
  t.equal(state.consumed.cp_1, '1234.567897746913578024', 'the pool state: total − last balance_after, exactly');
});

t.test('a quantity outside the rule is not priced, changes nothing and says why', async (t) => {
  const cfg = config({ granted: '10', path: 'q', included: '1' });
  const bad = [
    sig({ data: { q: 0.1 }, exact: { q: '0.1000000000000000000000001' } }),
    sig({ data: { q: '0.0000000000000000000000001' } }),
    sig({ data: { q: '1' + '0'.repeat(52) } }),
    sig({ data: { q: -2 } }),
    sig({ data: { q: '1e3' } }),
    sig({ data: { q: [1] } }),
    sig({ data: { r: 1 } }),
  ];
  const { outs, state } = run(cfg, [bad]);
  t.same(outs[0]!.costs, [], 'no cost row');
  t.same(outs[0]!.consumption, [], 'no credits drawn');
  t.same(outs[0]!.events, [], 'no event');
  t.same(state, { ...emptyState(), usage: {}, consumed: {} }, 'no state');
  t.same(outs[0]!.unpriced.map((u) => [u.signal_id, u.reason, u.detail]), [
    [bad[0]!.id, 'QUANTITY_TOO_MANY_DECIMAL_PLACES', 'data.q has 25 decimal places; at most 24 are allowed'],
    [bad[1]!.id, 'QUANTITY_TOO_MANY_DECIMAL_PLACES', 'data.q has 25 decimal places; at most 24 are allowed'],
    [bad[2]!.id, 'QUANTITY_TOO_LARGE', 'data.q has 53 integer digits; at most 52 are allowed'],
    [bad[3]!.id, 'QUANTITY_NEGATIVE', 'data.q must not be negative'],
    [bad[4]!.id, 'QUANTITY_NOT_A_NUMBER', 'data.q must be written without an exponent, got "1e3"'],
    [bad[5]!.id, 'QUANTITY_NOT_A_NUMBER', 'data.q must be a JSON number or a decimal string, got array'],
    [bad[6]!.id, 'QUANTITY_MISSING', 'data.q is missing'],
  ]);
  t.match(outs[0]!.unpriced[0], { org_id: 'org_x', livemode: true, created_at: T0, event_name: 'api_call', customer_id: 'cus_1', unit_id: null, plan_id: 'plan_1', order_line_attribute_id: 'ola_1' });
});

t.test('a pool balance the store cannot hold leaves the signal unpriced, not the rows inserter stuck', async (t) => {
  const cfg = config({ granted: '1', path: 'q', creditsPerUnit: '999999999999999999999999999999' });
  // 10^52 − 10^44 consumed: the balance has 52 integer digits, the most the store holds.
  const before: BillingState = { ...emptyState(), consumed: { cp_1: '99999999' + '0'.repeat(44) } };
  const s1 = sig({ data: { q: '1' } });
  const s2 = sig({ data: { q: '999999999999999' } });
  const { outs, state } = run(cfg, [[s1, s2]], before);
  t.same(outs[0]!.consumption.map((c) => [c.signal_id, c.balance_after]), [[s1.id, '-9999999900000000000000999999999999999999999999999998']], 'the first draw fits (balance of 52 digits)');
  t.same(outs[0]!.costs.map((c) => c.signal_id), [s1.id]);
  t.same(outs[0]!.unpriced.map((u) => [u.signal_id, u.reason, u.detail]), [[s2.id, 'AMOUNT_OUT_OF_RANGE', 'the balance of pool cp_1 after the draw (53 integer digits, 0 decimal places) would not fit the stored Decimal(76, 24)']]);
  t.equal(state.consumed.cp_1, '9999999900000000000000999999999999999999999999999999', 'only the first draw is recorded');
});

t.test('exact depletion: remainingCredits 0, usedCredits that signal alone', async (t) => {
  const { outs, state } = run(config({ granted: '3' }), [[sig(), sig()], [sig()], [sig()]]);
  const dep = events(outs, 'billing-credits-depleted');
  t.equal(dep.length, 1);
  const credits = (dep[0]!.data as EventData<'billing-credits-depleted'>).credits;
  t.equal(credits.remainingCreditsDecimal, '0');
  t.equal(credits.usedCreditsDecimal, '1');
  t.equal(credits.totalCreditsDecimal, '3');
  t.equal(credits.remainingCredits, 0);
  const over = events(outs, 'billing-overage-incurred');
  t.equal(over.length, 1, 'the next signal past an exactly empty pool is an OverageCredit');
  t.equal((over[0]!.data as { overage: { eventType: string } }).overage.eventType, 'OverageCredit');
  t.equal(state.consumed.cp_1, '4');
  t.same(outs.flatMap((o) => o.consumption).map((c) => c.balance_after), ['2', '1', '0', '-1']);
});

t.test('overshoot: negative, fractional remainder; depletion and OverageCredit on the same signal', async (t) => {
  const { outs } = run(config({ granted: '1.000001', creditsPerUnit: '0.75' }), [[sig(), sig(), sig()]]);
  const dep = events(outs, 'billing-credits-depleted');
  t.equal(dep.length, 1);
  const c = (dep[0]!.data as EventData<'billing-credits-depleted'>).credits;
  t.equal(c.remainingCreditsDecimal, '-0.499999');
  t.equal(c.usedCreditsDecimal, '0.75');
  t.equal(c.remainingCredits, -0.499999);
  t.equal(events(outs, 'billing-overage-incurred').length, 1);
});

t.test('fractional credits at six places; a top-up re-arms depletion', async (t) => {
  const cfg = config({ granted: '0.000003', creditsPerUnit: '0.000001' });
  const first = run(cfg, [[sig(), sig(), sig()]]);
  t.equal(events(first.outs, 'billing-credits-depleted').length, 1);
  const toppedUp = config({ granted: '0.000003', creditsPerUnit: '0.000001', topUps: ['0.000002'] });
  const second = run(toppedUp, [[sig(), sig()]], first.state);
  t.equal(events(second.outs, 'billing-credits-depleted').length, 1, 'depleted again after the top-up ran out');
  t.equal(second.state.consumed.cp_1, '0.000005');
});

t.test('OverageUsage fires once, on the signal that goes strictly above the included quantity', async (t) => {
  const { outs } = run(config({ included: '3' }), [[sig(), sig(), sig()], [sig(), sig()], [sig()]]);
  const over = events(outs, 'billing-overage-incurred').filter((e) => (e.data as { overage: { eventType: string } }).overage.eventType === 'OverageUsage');
  t.equal(over.length, 1);
  t.same((over[0]!.data as EventData<'billing-overage-incurred'>).overage, {
    customerId: 'cus_1', customerName: 'Acme', planId: 'plan_1', planName: 'Pro', orderLineAttributeId: 'ola_1', eventType: 'OverageUsage', threshold: 3, currentUsage: 4, occurredAt: '2026-01-31T10:00:00Z',
  });
});

t.test('caps: subtree spend counts for ancestors; once per cap and period; again next period', async (t) => {
  const cfg = config({ granted: '1000', caps: [{ unit: 'root', amount: '3', frequency: 'MONTHLY', from: '2025-12-31T00:00:00Z' }, { unit: 'dev', amount: '10', frequency: 'DAILY', from: '2026-01-01T00:00:00Z' }] });
  const jan = Date.parse('2026-01-31T12:00:00Z');
  const feb = Date.parse('2026-02-28T23:00:00Z');
  const mar = Date.parse('2026-03-01T00:00:00Z');
  const { outs, state, periods } = run(cfg, [
    [sig({ unitId: 'dev', ts: jan }), sig({ unitId: 'team', ts: jan })],
    [sig({ unitId: 'dev', ts: jan }), sig({ unitId: 'dev', ts: jan })],
    [sig({ unitId: 'team', ts: feb }), sig({ unitId: 'dev', ts: feb }), sig({ unitId: 'root', ts: feb }), sig({ unitId: 'root', ts: feb })],
    [sig({ unitId: 'root', ts: mar })],
  ]);
  const caps = events(outs, 'billing-credit-cap-reached').map((e) => e.data as { breachedUnit: { externalId: string }; period: { start: string; end: string }; usedDecimal: string });
  t.same(caps.map((c) => [c.breachedUnit.externalId, c.period.start, c.period.end, c.usedDecimal]), [
    ['root', '2026-01-31T00:00:00Z', '2026-02-28T00:00:00Z', '3'],
    ['root', '2026-02-28T00:00:00Z', '2026-03-31T00:00:00Z', '3'],
  ], 'month-end anchor: Jan 31 → Feb 28 → Mar 31; fires on the 3rd credit in each period');
  t.same(Object.keys(state).sort(), ['consumed', 'lastSeq', 'usage'], 'period totals are not in the state');
  const rootJan = periodKey('org_x', 'live', capKey('cus_1', 'root', CUR), { startMs: Date.parse('2026-01-31T00:00:00Z'), endMs: Date.parse('2026-02-28T00:00:00Z') });
  t.same(periods[rootJan], { used: '4', reached: true }, 'one total per cap and period, exact');
  t.same(periods[periodKey('org_x', 'live', capKey('cus_1', 'dev', CUR), { startMs: Date.parse('2026-01-31T00:00:00Z'), endMs: Date.parse('2026-02-01T00:00:00Z') })], { used: '3', reached: false });
});

t.test('deterministic: the same input gives the same output, event ids included', async (t) => {
  const cfg = config({ granted: '2', included: '1', caps: [{ unit: 'root', amount: '1', frequency: 'DAILY', from: '2026-01-01T00:00:00Z' }] });
  const batch = [sig({ unitId: 'dev' }), sig({ unitId: 'team' }), sig({ unitId: 'root' })];
  const zero = (mode: 'live' | 'test') => Object.fromEntries(capPeriods({ orgId: 'o', mode, config: cfg, signals: batch }).map((r) => [r.key, ZERO_PERIOD]));
  const a = evaluate({ orgId: 'o', mode: 'live', config: cfg, state: emptyState(), signals: batch, evaluatedAt: T0, periods: zero('live') });
  const b = evaluate({ orgId: 'o', mode: 'live', config: cfg, state: emptyState(), signals: batch, evaluatedAt: T0, periods: zero('live') });
  t.same(a, b);
  t.equal(new Set(a.events.map((e) => e.id)).size, a.events.length, 'distinct events have distinct ids');
  const test = evaluate({ orgId: 'o', mode: 'test', config: cfg, state: emptyState(), signals: batch, evaluatedAt: T0, periods: zero('test') });
  t.not(test.events[0]!.id, a.events[0]!.id, 'live and test events have different ids');
});

t.test('property: consumption reconciles with the pool, and depletion fires once per crossing', async (t) => {
  await fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 2_000_000 }),
      fc.array(fc.array(fc.integer({ min: 0, max: 500_000 }), { maxLength: 8 }), { maxLength: 8 }),
      (grantedMicros, batches) => {
        const granted = (grantedMicros / 1e6).toFixed(6);
        const cfg = config({ granted, path: 'q', creditsPerUnit: '1' });
        const signalBatches = batches.map((b) => b.map((q) => sig({ data: { q: q / 1e6 } })));
        const { outs, state } = run(cfg, signalBatches);
        const toMicros = (s: string): bigint => {
          const [i, f = ''] = s.replace('-', '').split('.');
          const v = BigInt(i!) * 1_000_000n + BigInt((f + '000000').slice(0, 6));
          return s.startsWith('-') ? -v : v;
        };
        const sent = batches.flat().reduce((a, q) => a + BigInt(q), 0n);
        const consumed = outs.flatMap((o) => o.consumption).reduce((a, c) => a + toMicros(c.credits), 0n);
        if (consumed !== sent) return false;
        if (toMicros(state.consumed.cp_1 ?? '0') !== sent) return false;
        // Depletion fires exactly when the running balance first goes from > 0 to ≤ 0.
        let bal = BigInt(grantedMicros);
        let expected = 0;
        for (const q of batches.flat()) {
          const before = bal;
          bal -= BigInt(q);
          if (before > 0n && bal <= 0n) expected++;
        }
        const dep = events(outs, 'billing-credits-depleted');
        if (dep.length !== expected) return false;
        for (const e of dep) {
          const c = (e.data as { credits: { remainingCreditsDecimal: string; totalCreditsDecimal: string } }).credits;
          if (toMicros(c.totalCreditsDecimal) !== BigInt(grantedMicros)) return false;
        }
        return true;
      },
    ),
    { numRuns: 200 },
  );
});

t.test('caller ids that name Object.prototype members resolve to nothing', async (t) => {
  const cfg = config({ granted: '10' });
  const { outs } = run(cfg, [[sig({ customerId: '__proto__' }), sig({ customerId: 'constructor' }), sig({ unitId: 'constructor' }), sig({ unitId: '__proto__' })]]);
  t.equal(outs[0]!.costs.length, 2, 'only the two signals of the real customer are priced');
  t.same(outs[0]!.costs.map((c) => c.unit_id), ['constructor', '__proto__'], 'unknown units are kept as sent, without caps');
});

const DAY = 86_400_000;
const D0 = Date.parse('2026-01-01T00:00:00Z');

t.test('a late signal in an old period reaches its cap (no window of recent periods forgets it)', async (t) => {
  // DAILY cap 5: 3 credits in P0, 1 in each of P1..P4, then 3 credits late, timestamped in P0.
  const cfg = config({ granted: '1000', path: 'q', caps: [{ unit: 'root', amount: '5', frequency: 'DAILY', from: '2026-01-01T00:00:00Z' }] });
  const at = (day: number, q: number) => sig({ unitId: 'dev', ts: D0 + day * DAY + 3_600_000, data: { q } });
  const { outs, periods } = run(cfg, [[at(0, 3)], [at(1, 1)], [at(2, 1)], [at(3, 1)], [at(4, 1)], [at(0, 3)]]);
  const caps = events(outs, 'billing-credit-cap-reached').map((e) => e.data as { period: { start: string }; usedDecimal: string });
  t.same(caps.map((c) => [c.period.start, c.usedDecimal]), [['2026-01-01T00:00:00Z', '6']], 'fires for P0 with used 6, on the late signal');
  t.equal(outs[5]!.events.length, 1, 'in the late batch');
  const p0 = periodKey('org_x', 'live', capKey('cus_1', 'root', CUR), { startMs: D0, endMs: D0 + DAY });
  t.same(periods[p0], { used: '6', reached: true });
  t.equal(Object.keys(periods).length, 5, 'one total per period, none dropped');
});

t.test('a period fires at most once, however many periods later a signal for it comes', async (t) => {
  const cfg = config({ granted: '100000', caps: [{ unit: 'team', amount: '2', frequency: 'DAILY', from: '2026-01-01T00:00:00Z' }] });
  const at = (day: number) => sig({ unitId: 'team', ts: D0 + day * DAY });
  const batches = [[at(0), at(0)], ...Array.from({ length: 40 }, (_, d) => [at(d + 1)]), [at(0)], [at(0), at(0)]];
  const { outs, periods } = run(cfg, batches);
  const starts = events(outs, 'billing-credit-cap-reached').map((e) => (e.data as { period: { start: string } }).period.start);
  t.same(starts, ['2026-01-01T00:00:00Z'], 'P0 fired once; P1..P40 spent 1 each, below the cap');
  t.same(periods[periodKey('org_x', 'live', capKey('cus_1', 'team', CUR), { startMs: D0, endMs: D0 + DAY })], { used: '5', reached: true }, 'later spend still counted, exactly');
});

t.test('any timestamp from 2000 on: a yearly cap anchored in 2000 counts a signal of 2000 after signals of 2026', async (t) => {
  const cfg = config({ granted: '1000', caps: [{ unit: 'root', amount: '2', frequency: 'YEARLY', from: '2000-01-01T00:00:00Z' }] });
  const { outs } = run(cfg, [[sig({ unitId: 'root', ts: Date.parse('2000-06-01T00:00:00Z') })], ...Array.from({ length: 26 }, (_, y) => [sig({ unitId: 'root', ts: Date.parse(`${2001 + y}-06-01T00:00:00Z`) })]), [sig({ unitId: 'root', ts: Date.parse('2000-12-31T23:59:59.999Z') })]]);
  const caps = events(outs, 'billing-credit-cap-reached').map((e) => e.data as { period: { start: string; end: string }; usedDecimal: string });
  t.same(caps.map((c) => [c.period.start, c.period.end, c.usedDecimal]), [['2000-01-01T00:00:00Z', '2001-01-01T00:00:00Z', '2']]);
});

t.test('capPeriods: each touched period once, ancestors included; nothing for what evaluate does not count', async (t) => {
  const cfg = config({ granted: '10', path: 'q', caps: [{ unit: 'root', amount: '5', frequency: 'DAILY', from: '2026-01-01T00:00:00Z' }, { unit: 'team', amount: '5', frequency: 'MONTHLY', from: '2026-01-01T00:00:00Z' }] });
  const refs = capPeriods({ orgId: 'org_x', mode: 'live', config: cfg, signals: [sig({ unitId: 'dev', ts: D0, data: { q: 1 } }), sig({ unitId: 'dev', ts: D0 + 1, data: { q: 2 } }), sig({ unitId: 'root', ts: D0 + DAY, data: { q: 1 } }), sig({ unitId: 'dev', ts: D0 + 2 * DAY, data: { q: 0 } }), sig({ unitId: 'dev', ts: D0 + 3 * DAY, data: {} }), sig({ unitId: 'nobody', ts: D0 + 4 * DAY, data: { q: 1 } }), sig({ unitId: 'dev', ts: D0 - 1, data: { q: 1 } })] });
  t.same(refs.map((r) => [JSON.parse(r.capKey)[1], r.start]), [['team', '2026-01-01T00:00:00Z'], ['root', '2026-01-01T00:00:00Z'], ['root', '2026-01-02T00:00:00Z']], 'from the unit up; a zero draw, a missing quantity, an unknown unit and a time before effectiveFrom touch nothing');
  t.ok(refs.every((r) => /^cp\.org_x\.live\.[A-Za-z0-9_-]{43}\.\d+\.\d+$/.test(r.key)), 'keys are valid KV keys whatever the unit id');
  t.same(capPeriods({ orgId: 'org_x', mode: 'live', config: config({ granted: '10' }), signals: [sig({ unitId: 'dev' })] }), [], 'no caps: nothing to read');
});

t.test('the thread-level memos (cap hashes, last period per anchor) never change which period or key a signal gets, whatever order times and anchors come in', async (t) => {
  const FREQS = ['DAILY', 'WEEKLY', 'MONTHLY', 'QUARTERLY', 'YEARLY'] as const;
  const ANCHORS = ['2026-01-31T10:00:00Z', '2025-02-28T23:59:59.999Z', '2024-02-29T00:00:00Z'];
  const YEAR = 366 * 86_400_000;
  await fc.assert(
    fc.property(
      // Evaluations one after another on this thread, each with its own anchor and frequency (a new configuration each time), times going back and forth over period ends.
      fc.array(fc.record({ f: fc.constantFrom(...FREQS), a: fc.constantFrom(...ANCHORS), ts: fc.array(fc.integer({ min: -YEAR, max: 2 * YEAR }), { minLength: 1, maxLength: 6 }) }), { minLength: 1, maxLength: 12 }),
      (runs) => {
        for (const r of runs) {
          const cfg = config({ granted: '1000000', caps: [{ unit: 'root', amount: '5', frequency: r.f, from: r.a }] });
          const anchorMs = Date.parse(r.a);
          const signals = r.ts.map((d) => sig({ unitId: 'dev', ts: anchorMs + d }));
          const refs = capPeriods({ orgId: 'org_x', mode: 'live', config: cfg, signals });
          const want = [...new Map(signals.map((s) => periodContaining(r.a, r.f, s.ts)).filter((p) => p !== null).map((p) => [p.startMs, p])).values()];
          const key = capKey('cus_1', 'root', CUR);
          if (JSON.stringify(refs.map((x) => [x.key, x.start])) !== JSON.stringify(want.map((p) => [periodKey('org_x', 'live', key, p), p.start]))) return false;
        }
        return true;
      },
    ),
    { numRuns: 300 },
  );
});

t.test('a cap is found by exactly the key capKey makes: odd unit ids found, a key capKey never makes (upper-case currency, other JSON spacing) never', async (t) => {
  const cfg = config({ granted: '1000' });
  const now = '2026-01-01T00:00:00Z';
  const odd = ['__proto__', 'a"b\u0000c', 'constructor'];
  // Own properties, as JSON.parse makes them (an assignment to "__proto__" would not make one).
  cfg.customers.cus_1!.units = Object.fromEntries(['root', ...odd].map((id, i, ids) => [id, { externalId: id, externalType: null, name: null, parentExternalId: i === 0 ? null : ids[i - 1]!, createdAt: now, updatedAt: now }]));
  const cap = (unit: string) => ({ customerId: 'cus_1', unitExternalId: unit, creditsCurrencyId: CUR, amount: '5', frequency: 'DAILY' as const, effectiveFrom: now, updatedAt: now });
  for (const id of odd) Object.defineProperty(cfg.caps, capKey('cus_1', id, CUR), { value: cap(id), enumerable: true, writable: true, configurable: true });
  cfg.caps[JSON.stringify(['cus_1', 'root', CUR.toUpperCase()])] = cap('root');
  cfg.caps[JSON.stringify(['cus_1', 'root', CUR], null, 1)] = cap('root');
  cfg.caps['not json'] = cap('root');
  const refs = capPeriods({ orgId: 'org_x', mode: 'live', config: cfg, signals: [sig({ unitId: 'constructor' })] });
  t.same(refs.map((r) => JSON.parse(r.capKey)[1]), ['constructor', 'a"b\u0000c', '__proto__'], 'from the unit up, every odd id; none of the keys capKey never makes');
});

t.test('a touched period that is not supplied is an error, not a silent zero', async (t) => {
  const cfg = config({ granted: '10', caps: [{ unit: 'root', amount: '5', frequency: 'DAILY', from: '2026-01-01T00:00:00Z' }] });
  t.throws(() => evaluate({ orgId: 'org_x', mode: 'live', config: cfg, state: emptyState(), signals: [sig({ unitId: 'dev' })], evaluatedAt: T0, periods: {} }), /was not supplied/);
});

t.test('a unit id of any characters gets its own period key', async (t) => {
  const odd = ['a.b', 'a b', '*', '>', 'ü/ß', '__proto__'];
  const keys = odd.map((u) => periodKey('org_x', 'live', capKey('cus_1', u, CUR), { startMs: D0, endMs: D0 + DAY }));
  t.equal(new Set(keys).size, odd.length);
  t.ok(keys.every((k) => /^[-/_=.A-Za-z0-9]+$/.test(k)));
});

t.test('OverageCredit re-arms only after a top-up brings the balance back to zero or above', async (t) => {
  const kinds = (outs: EvaluationOutput[]) => events(outs, 'billing-overage-incurred').length;
  const first = run(config({ granted: '2' }), [[sig(), sig(), sig(), sig()]]);
  t.equal(kinds(first.outs), 1, 'crossing below zero fires once; the 4th signal, still below, does not');
  const short = run(config({ granted: '2', topUps: ['1'] }), [[sig()]], first.state);
  t.equal(kinds(short.outs), 0, 'a top-up leaving the balance below zero does not re-arm');
  const back = run(config({ granted: '2', topUps: ['1', '4'] }), [[sig(), sig(), sig(), sig()]], short.state);
  t.equal(kinds(back.outs), 1, 'balance back at 2: the next crossing fires again, once');
  t.same(back.outs[0]!.consumption.map((c) => c.balance_after), ['1', '0', '-1', '-2']);
});
