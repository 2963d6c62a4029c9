/**
 * The evaluator's crash-replay scheme for cap periods (consumer.ts steps 3, 7 and 8), run over
 * an in-memory stand-in for the state bucket: per period key {seq, before, after}, the starting
 * total of a period is `before` when the key was written by the batch being evaluated (a
 * replay) and `after` otherwise (startingTotal). Batches crash after writing any subset of
 * their period keys, before their commit, any number of times, and are replayed.
 * Property: the period totals, the state and the events (by id) are those of a run without
 * crashes, every attempt of a batch emits the same events, and every cap period fires exactly
 * once when, and only when, its exact spend reaches the amount (a BigInt model).
 */
import t from 'tap';
import fc from 'fast-check';
import { capPeriods, emptyState, evaluate, startingTotal, type BillableSignal, type BillingState, type EmittedEvent, type PeriodEntry, type PeriodTotal } from '../../src/billing/evaluator/evaluate.js';
import { capKey, emptyConfig, type BillingConfig } from '../../src/billing/model.js';

const CUR = '6f1c2b1e-0000-4000-8000-000000000001';
const DAY = 86_400_000;
const D0 = Date.parse('2026-01-01T00:00:00Z');
const now = '2026-01-01T00:00:00Z';

function config(): BillingConfig {
  const c = emptyConfig();
  const unit = (id: string, parent: string | null) => ({ externalId: id, externalType: null, name: null, parentExternalId: parent, createdAt: now, updatedAt: now });
  c.customers.cus_1 = { id: 'cus_1', externalId: 'acme', name: null, createdAt: now, updatedAt: now, units: { root: unit('root', null), team: unit('team', 'root'), dev: unit('dev', 'team') } };
  c.plans.plan_1 = { id: 'plan_1', name: 'Pro', createdAt: now };
  c.attributes.ola_1 = { id: 'ola_1', customerId: 'cus_1', planId: 'plan_1', eventName: 'e', quantity: { kind: 'path', path: 'q' }, unitPrice: '1', currency: 'USD', includedQuantity: null, creditsCurrencyId: CUR, creditsPerUnit: '1', createdAt: now };
  c.pools.cp_1 = { id: 'cp_1', customerId: 'cus_1', orderLineAttributeId: 'ola_1', creditsCurrencyId: CUR, granted: '1000000', topUps: [], createdAt: now };
  const cap = (unitId: string, amount: string, frequency: 'DAILY' | 'WEEKLY') => ({ customerId: 'cus_1', unitExternalId: unitId, creditsCurrencyId: CUR, amount, frequency, effectiveFrom: now, updatedAt: now });
  c.caps[capKey('cus_1', 'root', CUR)] = cap('root', '4', 'DAILY');
  c.caps[capKey('cus_1', 'team', CUR)] = cap('team', '6', 'WEEKLY');
  return c;
}

interface Sim {
  state: BillingState;
  keys: Map<string, PeriodEntry>;
  bus: Map<string, EmittedEvent>;
}

/** One attempt at batch `seq`; with `crashMask`, writes only the period keys it selects, then "crashes". */
function attempt(sim: Sim, cfg: BillingConfig, seq: number, signals: BillableSignal[], crashMask: number | null): EmittedEvent[] {
  if (sim.state.lastSeq >= seq) return [];
  const refs = capPeriods({ orgId: 'o', mode: 'live', config: cfg, signals });
  const periods: Record<string, PeriodTotal> = {};
  for (const r of refs) periods[r.key] = startingTotal(sim.keys.get(r.key) ?? null, seq);
  const out = evaluate({ orgId: 'o', mode: 'live', config: cfg, state: sim.state, signals, evaluatedAt: D0, periods });
  for (const e of out.events) {
    const had = sim.bus.get(e.id);
    if (had && JSON.stringify(had) !== JSON.stringify(e)) throw new Error(`event ${e.id} published twice with different payloads`);
    sim.bus.set(e.id, e);
  }
  refs.forEach((r, i) => {
    if (crashMask === null || (crashMask >> i % 30) & 1) sim.keys.set(r.key, { seq, before: periods[r.key]!, after: out.periods[r.key]! });
  });
  if (crashMask === null) sim.state = { ...out.state, lastSeq: seq };
  return out.events;
}

const signalArb = fc.record({ day: fc.integer({ min: 0, max: 9 }), q: fc.integer({ min: 0, max: 3 }), unit: fc.constantFrom('root', 'team', 'dev') });

t.test('property: crashes after any subset of period writes, replayed, bill exactly as one orderly run', async (t) => {
  const cfg = config();
  const r = fc.check(
    fc.property(
      fc.array(fc.record({ signals: fc.array(signalArb, { minLength: 1, maxLength: 6 }), crashes: fc.array(fc.integer({ min: 0, max: 2 ** 30 - 1 }), { maxLength: 2 }) }), { minLength: 1, maxLength: 12 }),
      (batches) => {
        let n = 0;
        const toSignals = (b: { day: number; q: number; unit: string }[]): BillableSignal[] => b.map((s) => ({ id: `s${n++}`, eventName: 'e', customerId: 'cus_1', unitId: s.unit, ts: D0 + s.day * DAY + 1_000, data: { q: s.q } }));
        const withIds = batches.map((b) => ({ signals: toSignals(b.signals), crashes: b.crashes }));
        const clean: Sim = { state: emptyState(), keys: new Map(), bus: new Map() };
        const crashy: Sim = { state: emptyState(), keys: new Map(), bus: new Map() };
        withIds.forEach((b, i) => {
          const seq = i + 1;
          attempt(clean, cfg, seq, b.signals, null);
          const emitted = b.crashes.map((mask) => attempt(crashy, cfg, seq, b.signals, mask));
          emitted.push(attempt(crashy, cfg, seq, b.signals, null));
          if (new Set(emitted.map((e) => JSON.stringify(e))).size !== 1) throw new Error(`batch ${seq}: attempts emitted different events`);
          if (attempt(crashy, cfg, seq, b.signals, null).length !== 0) throw new Error('a committed batch was applied again');
        });
        const afters = (s: Sim) => JSON.stringify([...s.keys.entries()].map(([k, v]) => [k, v.after]).sort());
        if (afters(clean) !== afters(crashy)) return false;
        if (JSON.stringify(clean.state) !== JSON.stringify(crashy.state)) return false;
        if (JSON.stringify([...clean.bus.keys()].sort()) !== JSON.stringify([...crashy.bus.keys()].sort())) return false;
        // The model: per cap and period, the exact running total; fires once, on the first reaching it.
        const totals = new Map<string, bigint>();
        const expected: string[] = [];
        for (const s of withIds.flatMap((b) => b.signals)) {
          const q = BigInt(s.data.q as number);
          if (q === 0n) continue;
          const chain = s.unitId === 'dev' ? ['dev', 'team', 'root'] : s.unitId === 'team' ? ['team', 'root'] : ['root'];
          const day = Math.floor((s.ts - D0) / DAY);
          for (const u of chain) {
            if (u === 'dev') continue;
            const [period, amount] = u === 'root' ? [day, 4n] : [Math.floor(day / 7), 6n];
            const k = `${u}:${period}`;
            const before = totals.get(k) ?? 0n;
            totals.set(k, before + q);
            if (before < amount && before + q >= amount) expected.push(`${k}:${before + q}`);
          }
        }
        const got = [...crashy.bus.values()]
          .filter((e) => e.event === 'billing-credit-cap-reached')
          .map((e) => {
            const d = e.data as { breachedUnit: { externalId: string }; period: { start: string }; usedDecimal: string };
            const days = (Date.parse(d.period.start) - D0) / DAY;
            return `${d.breachedUnit.externalId}:${d.breachedUnit.externalId === 'root' ? days : days / 7}:${d.usedDecimal}`;
          });
        return JSON.stringify(got.sort()) === JSON.stringify(expected.sort());
      },
    ),
    { numRuns: 300 },
  );
  t.equal(r.failed, false, 'same totals, state and events as without crashes', r.failed ? { diagnostic: true, counterexample: r.counterexample, error: r.errorInstance } : {});
});

t.test('startingTotal: before for the batch that wrote the key, after for any other, zero without a key', async (t) => {
  const e: PeriodEntry = { seq: 5, before: { used: '1', reached: false }, after: { used: '3', reached: true } };
  t.same(startingTotal(e, 5), e.before);
  t.same(startingTotal(e, 6), e.after);
  t.same(startingTotal(null, 6), { used: '0', reached: false });
});

t.test('the naive rule (always after) double-counts a replayed batch: the scheme is what makes replays exact', async (t) => {
  const cfg = config();
  const sim: Sim = { state: emptyState(), keys: new Map(), bus: new Map() };
  const signals: BillableSignal[] = [{ id: 'x', eventName: 'e', customerId: 'cus_1', unitId: 'root', ts: D0 + 1, data: { q: 3 } }];
  attempt(sim, cfg, 1, signals, 1); // crash after writing its one period key
  const [key, entry] = [...sim.keys.entries()][0]!;
  t.same(entry, { seq: 1, before: { used: '0', reached: false }, after: { used: '3', reached: false } });
  t.same(startingTotal(entry, 1), { used: '0', reached: false }, 'the replay starts from before');
  attempt(sim, cfg, 1, signals, null);
  t.same(sim.keys.get(key)!.after, { used: '3', reached: false }, 'and ends at 3, not 6');
});
