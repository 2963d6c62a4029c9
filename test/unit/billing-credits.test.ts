/**
 * src/billing/credits.ts: credit pools, `billing-credits-depleted` and the OverageCredit
 * overage, on exact decimals; properties over random sequences of consumptions and top-ups
 * against a BigInt reference model. The events are built with src/billing/events.ts to
 * check that what goes out reconciles with the signals sent.
 */
import t, { type Test } from 'tap';
import fc from 'fast-check';
import { ZERO, add, sub, sum, toCanonicalString as str, type Dec } from '../../src/billing/decimal.js';
import { type Consumption, type CreditPool, consume, consumedCredits, isCreditOverage, isDepletion, openPool, topUp } from '../../src/billing/credits.js';
import { type CreditsPayload, creditsDepletedEvent, overageCreditEvent } from '../../src/billing/events.js';
import { amountM, dec, decM, fromMillionths } from '../helpers/billing.js';

/** Applies consumptions in order; returns each outcome. */
function run(pool: CreditPool, ...credits: string[]): Consumption[] {
  const out: Consumption[] = [];
  for (const c of credits) {
    const r = consume(pool, dec(c));
    out.push(r);
    pool = r.after;
  }
  return out;
}
const flags = (c: Consumption): [boolean, boolean] => [c.depleted, c.creditOverage];
/** Outcome i of a run (throws when there is none). */
function nth(r: Consumption[], i: number): Consumption {
  const c = r[i];
  if (c === undefined) throw new Error(`no outcome ${i}`);
  return c;
}

t.test('exact depletion: remaining 0, depleted fires, no overage yet', async (t) => {
  const r = run(openPool(dec('10')), '4', '6');
  t.same(flags(nth(r, 0)), [false, false]);
  t.same(flags(nth(r, 1)), [true, false]);
  t.equal(str(nth(r, 1).after.balance), '0');
  t.equal(str(nth(r, 1).used), '6', 'usedCredits is the depleting signal alone');
  t.equal(str(nth(r, 1).after.total), '10');
});

t.test('overshoot: remaining negative, depleted and OverageCredit fire on the same signal', async (t) => {
  const r = run(openPool(dec('10')), '7.5', '5', '1');
  t.same(flags(nth(r, 0)), [false, false]);
  t.same(flags(nth(r, 1)), [true, true]);
  t.equal(str(nth(r, 1).after.balance), '-2.5');
  t.same(flags(nth(r, 2)), [false, false], 'usage continuing below zero fires nothing more');
  t.equal(str(nth(r, 2).after.balance), '-3.5');
});

t.test('fractional credits at six places', async (t) => {
  const r = run(openPool(dec('1.000001')), '0.000001', '1.000001');
  t.same(flags(nth(r, 0)), [false, false]);
  t.equal(str(nth(r, 0).after.balance), '1');
  t.same(flags(nth(r, 1)), [true, true]);
  t.equal(str(nth(r, 1).after.balance), '-0.000001');
  t.same(flags(nth(run(openPool(dec('0.3')), '0.3'), 0)), [true, false], '0.3 − 0.3 is exactly 0 (in binary floating point it is not)');
  const tenths = run(openPool(dec('0.3')), '0.1', '0.1', '0.1');
  t.same(tenths.map(flags), [[false, false], [false, false], [true, false]], 'three tenths deplete 0.3 exactly');
});

t.test('one signal consuming a whole pool: usedCredits = totalCredits', async (t) => {
  const r = run(openPool(dec('123.456789')), '123.456789');
  t.same(flags(nth(r, 0)), [true, false]);
  t.equal(str(nth(r, 0).used), str(nth(r, 0).after.total));
});

t.test('after exact depletion, the first signal consuming from the empty pool fires the overage once', async (t) => {
  const r = run(openPool(dec('5')), '5', '0.25', '3', '0');
  t.same(r.map(flags), [[true, false], [false, true], [false, false], [false, false]]);
});

t.test('zero consumption changes nothing and fires nothing, at any balance', async (t) => {
  for (const b of ['5', '0', '-1']) {
    const pool = b === '-1' ? consume(openPool(ZERO), dec('1')).after : openPool(dec(b));
    const c = consume(pool, ZERO);
    t.same(flags(c), [false, false], `balance ${b}`);
    t.equal(str(c.after.balance), str(pool.balance));
  }
});

t.test('a pool granted zero credits is never "depleted"; its first use is an overage', async (t) => {
  const r = run(openPool(ZERO), '0', '1', '1');
  t.same(r.map(flags), [[false, false], [false, true], [false, false]]);
});

t.test('top-ups: above zero re-arms both; to exactly zero re-arms only the overage; still below zero re-arms nothing', async (t) => {
  let pool = openPool(dec('2'));
  let c = consume(pool, dec('3')); // 2 → -1: depleted + overage
  t.same(flags(c), [true, true]);
  pool = topUp(c.after, dec('0.5')); // -0.5
  c = consume(pool, dec('1')); // -0.5 → -1.5
  t.same(flags(c), [false, false], 'a top-up leaving the balance below zero re-arms nothing');
  pool = topUp(c.after, dec('1.5')); // 0
  t.equal(str(pool.balance), '0');
  c = consume(pool, dec('0.1')); // 0 → -0.1
  t.same(flags(c), [false, true], 'a top-up to exactly zero re-arms the overage, not the depletion');
  pool = topUp(c.after, dec('10.1')); // 10
  c = consume(pool, dec('4')); // 6
  t.same(flags(c), [false, false]);
  c = consume(c.after, dec('6')); // 0
  t.same(flags(c), [true, false], 'a top-up above zero re-arms the depletion');
  t.equal(str(c.after.total), '14.1', 'total = granted + top-ups');
  t.equal(str(consumedCredits(c.after)), '14.1');
});

t.test('amounts beyond 2^53 stay exact', async (t) => {
  const r = run(openPool(dec('12345678901234567890.123456')), '12345678901234567890.123455', '0.000002');
  t.same(flags(nth(r, 0)), [false, false]);
  t.equal(str(nth(r, 0).after.balance), '0.000001');
  t.same(flags(nth(r, 1)), [true, true]);
  t.equal(str(nth(r, 1).after.balance), '-0.000001');
});

t.test('refusals: negative grant, non-positive top-up, negative consumption', async (t) => {
  t.throws(() => openPool(dec('-1')), RangeError);
  t.throws(() => topUp(openPool(ZERO), ZERO), RangeError);
  t.throws(() => topUp(openPool(ZERO), dec('-1')), RangeError);
  t.throws(() => consume(openPool(ZERO), dec('-0.000001')), RangeError);
});

t.test('the rules as predicates of the balance before and after', async (t) => {
  const cases: [string, string, boolean, boolean][] = [
    ['1', '0', true, false],
    ['1', '-1', true, true],
    ['0', '-1', false, true],
    ['0', '0', false, false],
    ['-1', '-2', false, false],
    ['2', '1', false, false],
    ['0.000001', '0', true, false],
  ];
  for (const [before, after, depl, over] of cases) {
    t.same([isDepletion(dec(before), dec(after)), isCreditOverage(dec(before), dec(after))], [depl, over], `${before} → ${after}`);
  }
});

// ---------------------------------------------------------------- properties

type Op = { kind: 'consume'; m: bigint } | { kind: 'topUp'; m: bigint };
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: amountM.map((m): Op => ({ kind: 'consume', m })) },
  { weight: 1, arbitrary: amountM.map((m): Op => ({ kind: 'topUp', m: m === 0n ? 1n : m })) },
);

const ctx = {
  organizationId: 'org_1',
  customerId: 'cus_1',
  customerName: 'Acme',
  orderLineAttributeId: 'ola_1',
  creditsCurrencyId: '3f1c1a52-0b7e-4c1e-9d1f-5c2b8f0a9e11',
  eventName: 'api.call',
  planId: 'plan_1',
  planName: 'Pro',
};

interface RunResult {
  events: { id: string; data: unknown }[];
  depleted: CreditsPayload[];
  finalBalance: Dec;
  consumed: Dec;
  toppedUp: Dec;
  depletedCount: number;
  overageCount: number;
  modelDepletions: number;
  modelOverages: number;
  problems: string[];
}

/** Runs ops on a pool and, in parallel, on a BigInt model; builds every event that fires. */
function simulate(grantedM: bigint, ops: Op[]): RunResult {
  let pool = openPool(decM(grantedM));
  let model = grantedM;
  const r: RunResult = {
    events: [],
    depleted: [],
    finalBalance: ZERO,
    consumed: ZERO,
    toppedUp: ZERO,
    depletedCount: 0,
    overageCount: 0,
    modelDepletions: 0,
    modelOverages: 0,
    problems: [],
  };
  let consumedThisRunM = 0n;
  ops.forEach((op, i) => {
    const signalId = `sig_${i}`;
    if (op.kind === 'topUp') {
      pool = topUp(pool, decM(op.m));
      model += op.m;
      r.toppedUp = add(r.toppedUp, decM(op.m));
      return;
    }
    const before = model;
    model -= op.m;
    consumedThisRunM += op.m;
    const c = consume(pool, decM(op.m));
    pool = c.after;
    r.consumed = add(r.consumed, c.used);
    const wantDepleted = before > 0n && model <= 0n;
    const wantOverage = before >= 0n && model < 0n;
    if (wantDepleted) r.modelDepletions++;
    if (wantOverage) r.modelOverages++;
    if (c.depleted !== wantDepleted || c.creditOverage !== wantOverage) r.problems.push(`op ${i}: flags`);
    if (str(c.after.balance) !== fromMillionths(model)) r.problems.push(`op ${i}: balance`);
    const at = Date.UTC(2024, 0, 1) + i * 1000;
    if (c.depleted) {
      r.depletedCount++;
      const e = creditsDepletedEvent({ ...ctx, signalId, consumption: c, at });
      const p = e.data.credits;
      if (p.usedCreditsDecimal !== fromMillionths(op.m)) r.problems.push(`op ${i}: usedCredits is not this signal's consumption`);
      if (p.remainingCreditsDecimal !== fromMillionths(model)) r.problems.push(`op ${i}: remainingCredits`);
      if (model > 0n || p.remainingCredits > 0) r.problems.push(`op ${i}: remaining above zero`);
      if (p.totalCreditsDecimal !== str(pool.total)) r.problems.push(`op ${i}: total`);
      if (p.usedCredits !== Number(p.usedCreditsDecimal) || p.remainingCredits !== Number(p.remainingCreditsDecimal)) {
        r.problems.push(`op ${i}: numbers are not the nearest doubles`);
      }
      r.events.push(e);
      r.depleted.push(p);
    }
    if (c.creditOverage) {
      r.overageCount++;
      const e = overageCreditEvent({ ...ctx, signalId, consumption: c, at });
      if (e.data.overage.currentUsage !== Number(str(consumedCredits(pool)))) r.problems.push(`op ${i}: currentUsage`);
      r.events.push(e);
    }
  });
  r.finalBalance = pool.balance;
  if (str(r.consumed) !== fromMillionths(consumedThisRunM)) r.problems.push('consumed sum');
  return r;
}

function check<Ts extends unknown[]>(t: Test, name: string, prop: fc.IProperty<Ts>, numRuns = 200): void {
  const r = fc.check(prop, { numRuns });
  t.equal(r.failed, false, name, r.failed ? { diagnostic: true, counterexample: r.counterexample, error: String(r.errorInstance) } : {});
}

t.test('property: every consumption = granted + top-ups − final balance, exactly', async (t) => {
  check(
    t,
    'reconciles',
    fc.property(amountM, fc.array(opArb, { maxLength: 60 }), (g, ops) => {
      const r = simulate(g, ops);
      const sent = sum(ops.filter((o) => o.kind === 'consume').map((o) => decM(o.m)));
      return (
        r.problems.length === 0 &&
        str(sent) === str(r.consumed) &&
        str(r.consumed) === str(sub(add(decM(g), r.toppedUp), r.finalBalance))
      );
    }),
  );
});

t.test('property: depleted fires exactly once per transition from > 0 to ≤ 0; overage once per ≥ 0 to < 0', async (t) => {
  check(
    t,
    'once per crossing',
    fc.property(amountM, fc.array(opArb, { maxLength: 60 }), (g, ops) => {
      const r = simulate(g, ops);
      return r.problems.length === 0 && r.depletedCount === r.modelDepletions && r.overageCount === r.modelOverages;
    }),
  );
});

t.test('property: without top-ups, a pool that ends at or below zero depleted exactly once (if it started above zero)', async (t) => {
  check(
    t,
    'single depletion',
    fc.property(amountM, fc.array(amountM, { maxLength: 40 }), (g, xs) => {
      const r = simulate(
        g,
        xs.map((m): Op => ({ kind: 'consume', m })),
      );
      const spent = xs.reduce((a, b) => a + b, 0n);
      const depletedExpected = g > 0n && spent >= g ? 1 : 0;
      const overageExpected = spent > g ? 1 : 0;
      if (r.depletedCount !== depletedExpected || r.overageCount !== overageExpected) return false;
      if (depletedExpected === 1) {
        // what came before + the depleting signal's usedCredits + the remainder = the pool
        const credits = r.depleted[0];
        if (credits === undefined) return false;
        let before = 0n;
        for (const x of xs) {
          if (g - before - x <= 0n) break;
          before += x;
        }
        return str(add(add(decM(before), dec(credits.usedCreditsDecimal)), dec(credits.remainingCreditsDecimal))) === fromMillionths(g);
      }
      return true;
    }),
  );
});

t.test('property: re-evaluating the same history gives the same events (ids and payloads); ids are distinct', async (t) => {
  check(
    t,
    'deterministic',
    fc.property(amountM, fc.array(opArb, { maxLength: 40 }), (g, ops) => {
      const a = simulate(g, ops);
      const b = simulate(g, ops);
      const ids = a.events.map((e) => e.id);
      return JSON.stringify(a.events) === JSON.stringify(b.events) && new Set(ids).size === ids.length;
    }),
    100,
  );
});
