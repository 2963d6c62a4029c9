/**
 * Cap periods held in their customer's state key (src/billing/evaluator/customer-state.ts): a
 * group that changes a customer's periods writes the customer's key with them, spilling the
 * held periods past HELD_PERIODS to their own `cp.…` keys. Property: whatever the groups touch
 * and change, and wherever a group crashes between its writes (any subset of them landed) before
 * it is replayed, every period's total read by the evaluator's rule (the customer's key when it
 * holds the period, the period's own key otherwise, each by the before/after rule) is the total
 * a plain map of committed totals says; the customer's key holds at most HELD_PERIODS periods
 * besides those its last group touched.
 */
import t from 'tap';
import fc from 'fast-check';
import { CustomerStates, HELD_PERIODS, customerStateKey, heldPeriods, heldTotal, spillsOf, type ChangedPeriods, type CustomerEntry, type EntryWrite } from '../../src/billing/evaluator/customer-state.js';
import { ZERO_PERIOD, startingTotal, type PeriodEntry, type PeriodTotal } from '../../src/billing/evaluator/evaluate.js';
import { emptyConfig, type BillingConfig } from '../../src/billing/model.js';
import type { Known } from '../../src/billing/evaluator/state-cache.js';

const ORG = 'org_1';
const CUS = 'cus_1';
const KEY = customerStateKey(ORG, 'live', CUS);
const DAY = 86_400_000;
/** Period keys of one cap, day d of 2026 (evaluate.ts periodKey's form). */
const periodKeyOf = (d: number): string => `cp.${ORG}.live.capHash.${Date.UTC(2026, 0, 1) + d * DAY}.${Date.UTC(2026, 0, 1) + (d + 1) * DAY}`;

const config: BillingConfig = (() => {
  const c = emptyConfig();
  c.customers[CUS] = { id: CUS, externalId: null, name: null, createdAt: '', updatedAt: '', units: {} } as never;
  return c;
})();

interface Group {
  /** Days whose periods the group lists. */
  touched: number[];
  /** Of those, the ones it spends in, with their new totals' `used`. */
  spends: { day: number; used: number }[];
  /** A crash before the commit: which of the group's writes had landed (by index, modulo their count), then a replay. */
  crash: number[] | null;
}

const groupArb: fc.Arbitrary<Group> = fc
  .record({
    touched: fc.uniqueArray(fc.integer({ min: 0, max: 20 }), { minLength: 1, maxLength: 12 }),
    spend: fc.array(fc.boolean(), { minLength: 12, maxLength: 12 }),
    used: fc.array(fc.integer({ min: 1, max: 1_000 }), { minLength: 12, maxLength: 12 }),
    crash: fc.option(fc.uniqueArray(fc.nat(30), { maxLength: 6 }), { nil: null }),
  })
  .map(({ touched, spend, used, crash }) => ({ touched, spends: touched.filter((_, i) => spend[i]).map((day, i) => ({ day, used: used[i]! })), crash }));

/** The state bucket of the property: key → value and revision. */
class Bucket {
  readonly keys = new Map<string, Known>();
  private revision = 0;
  read = async (keys: readonly string[]): Promise<Known[]> => keys.map((k) => this.keys.get(k) ?? { value: null, revision: 0 });
  write(w: EntryWrite): void {
    const current = this.keys.get(w.key)?.revision ?? 0;
    if (current !== w.revision) throw new Error(`compare-and-set on ${w.key}: ${w.revision}, the key is at ${current}`);
    this.keys.set(w.key, { value: JSON.parse(w.value as string) as unknown, revision: ++this.revision });
  }
}

/** The evaluator's steps 3 and 7 for one group (consumer.ts `before` and the writes), on one customer. */
async function stepOf(bucket: Bucket, states: CustomerStates, seq: number, g: Group, totals: Map<string, PeriodTotal>): Promise<{ before: Map<string, PeriodTotal>; writes: EntryWrite[] }> {
  const [read] = await states.readMany([{ orgId: ORG, mode: 'live', config }], seq, bucket.read);
  const c = read!.customers.get(CUS)!;
  const touched = new Set(g.touched.map(periodKeyOf));
  const before = new Map<string, PeriodTotal>();
  const fromKeys: string[] = [];
  for (const k of touched) {
    const held = heldTotal(c.held, k, seq);
    if (held) before.set(k, held);
    else fromKeys.push(k);
  }
  const listed = fromKeys.length;
  fromKeys.push(...spillsOf(c.held, touched));
  const entries = await bucket.read(fromKeys);
  fromKeys.forEach((k, i) => {
    if (i < listed) before.set(k, startingTotal(entries[i]!.value as PeriodEntry | null, seq));
  });
  for (const [k, v] of before) if (JSON.stringify(v) !== JSON.stringify(totals.get(k) ?? ZERO_PERIOD)) throw new Error(`group ${seq} read ${k} as ${JSON.stringify(v)}, committed ${JSON.stringify(totals.get(k) ?? ZERO_PERIOD)}`);
  const changed: ChangedPeriods = {};
  for (const s of g.spends) changed[periodKeyOf(s.day)] = { before: before.get(periodKeyOf(s.day))!, after: { used: String(s.used), reached: s.used > 500 } };
  const revisions = new Map(fromKeys.map((k, i) => [k, entries[i]!.revision]));
  const writes = states.writesOf(ORG, 'live', config, seq, read!, { lastSeq: 0, consumed: {}, usage: {} }, new Map([[CUS, touched]]), new Map([[CUS, changed]]), (k) => revisions.get(k)!);
  return { before, writes };
}

t.test('periods held in the customer key and spilled to their own keys read as committed, through crashes and replays', async (t) => {
  await fc.assert(
    fc.asyncProperty(fc.array(groupArb, { minLength: 1, maxLength: 25 }), async (groups) => {
      const bucket = new Bucket();
      const states = new CustomerStates(null as never, {} as never);
      const totals = new Map<string, PeriodTotal>();
      let seq = 10;
      for (const g of groups) {
        seq += 3;
        let { writes } = await stepOf(bucket, states, seq, g, totals);
        if (g.crash && writes.length > 0) {
          // Some of the writes landed, then the process died: the group is replayed from there.
          for (const i of new Set(g.crash.map((i) => i % writes.length))) bucket.write(writes[i]!);
          ({ writes } = await stepOf(bucket, states, seq, g, totals));
        }
        for (const w of writes) bucket.write(w);
        // Committed.
        for (const s of g.spends) totals.set(periodKeyOf(s.day), { used: String(s.used), reached: s.used > 500 });
        // Every period as the next group would read it.
        const [read] = await states.readMany([{ orgId: ORG, mode: 'live', config }], seq + 1, bucket.read);
        const held = read!.customers.get(CUS)!.held;
        for (let d = 0; d <= 20; d++) {
          const k = periodKeyOf(d);
          const got = heldTotal(held, k, seq + 1) ?? startingTotal(bucket.keys.get(k)?.value as PeriodEntry | null, seq + 1);
          if (JSON.stringify(got) !== JSON.stringify(totals.get(k) ?? ZERO_PERIOD)) throw new Error(`after group ${seq}: day ${d} reads ${JSON.stringify(got)}, committed ${JSON.stringify(totals.get(k) ?? ZERO_PERIOD)}`);
        }
        const entry = bucket.keys.get(KEY)?.value as CustomerEntry | undefined;
        if (entry && entry.seq === seq) {
          const kept = Object.values(entry.periods ?? {}).filter((p) => p.spilled === undefined).length;
          if (kept > Math.max(HELD_PERIODS, g.touched.length)) throw new Error(`the customer key holds ${kept} periods`);
        }
      }
    }),
    { numRuns: 300 },
  );
  t.pass('300 runs');
});

t.test('a spill: the oldest held periods past HELD_PERIODS go to their own keys, flagged in the customer key until its next rewrite', async (t) => {
  const bucket = new Bucket();
  const states = new CustomerStates(null as never, {} as never);
  const totals = new Map<string, PeriodTotal>();
  // One group per day, each spending in its day: the customer key holds the latest HELD_PERIODS.
  let seq = 1;
  for (let d = 0; d <= HELD_PERIODS; d++, seq++) {
    const { writes } = await stepOf(bucket, states, seq, { touched: [d], spends: [{ day: d, used: d + 1 }], crash: null }, totals);
    for (const w of writes) bucket.write(w);
    totals.set(periodKeyOf(d), { used: String(d + 1), reached: false });
  }
  const entry = bucket.keys.get(KEY)!.value as CustomerEntry;
  t.same(
    Object.entries(entry.periods!)
      .filter(([, p]) => p.spilled !== undefined)
      .map(([k, p]) => [k, p.spilled]),
    [[periodKeyOf(0), HELD_PERIODS + 1]],
    'day 0 spilled by the last group, still held, flagged',
  );
  t.same((bucket.keys.get(periodKeyOf(0))!.value as PeriodEntry).after, { used: '1', reached: false }, 'and in its own key');
  t.same([...bucket.keys.keys()].filter((k) => k.startsWith('cp.')), [periodKeyOf(0)], 'no other period has its own key');
  t.same(Object.keys(heldPeriods(entry, seq)).length, HELD_PERIODS, 'the next group holds HELD_PERIODS of them');
  // The next rewrite drops it; a later group that spends in day 0 again holds it again, from its key.
  const { writes } = await stepOf(bucket, states, seq, { touched: [HELD_PERIODS], spends: [{ day: HELD_PERIODS, used: 100 }], crash: null }, totals);
  for (const w of writes) bucket.write(w);
  totals.set(periodKeyOf(HELD_PERIODS), { used: '100', reached: false });
  t.notOk(Object.hasOwn((bucket.keys.get(KEY)!.value as CustomerEntry).periods!, periodKeyOf(0)), 'dropped from the customer key');
  seq++;
  const late = await stepOf(bucket, states, seq, { touched: [0], spends: [{ day: 0, used: 600 }], crash: null }, totals);
  t.same(late.before.get(periodKeyOf(0)), { used: '1', reached: false }, 'read from its own key');
  for (const w of late.writes) bucket.write(w);
  t.same((bucket.keys.get(KEY)!.value as CustomerEntry).periods![periodKeyOf(0)], { seq, before: { used: '1', reached: false }, after: { used: '600', reached: true } }, 'held again, as changed by that group');
});
