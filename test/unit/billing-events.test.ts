/**
 * src/billing/events.ts and src/billing/event-id.ts: the payloads of spec sections 2.6, 2.7
 * and 2.8 (exact field sets, exact `*Decimal` strings, numbers derived from them) and the
 * deterministic ids (same crossing → same id; any identifying part changed → another id).
 */
import t from 'tap';
import { ZERO, mul, toCanonicalString as str } from '../../src/billing/decimal.js';
import { consume, openPool, topUp } from '../../src/billing/credits.js';
import { addUsage } from '../../src/billing/overage.js';
import { spendAgainstCap } from '../../src/billing/caps.js';
import { nthPeriod, periodContaining } from '../../src/billing/periods.js';
import { deterministicEventId, EVENT_ID_VERSION } from '../../src/billing/event-id.js';
import {
  type CapConfig,
  CREDIT_CAP_REACHED,
  CREDITS_DEPLETED,
  OVERAGE_INCURRED,
  creditCapReachedEvent,
  creditsDepletedEvent,
  overageCreditEvent,
  overageUsageEvent,
} from '../../src/billing/events.js';
import { dec } from '../helpers/billing.js';

const ID = /^evt_[0-9a-f]{32}$/;
const CURRENCY = '3f1c1a52-0b7e-4c1e-9d1f-5c2b8f0a9e11';

t.test('deterministicEventId: stable, unambiguous, pinned', async (t) => {
  t.equal(EVENT_ID_VERSION, 'billing-event-id/v1');
  const a = deterministicEventId(['org', 'ev', 'x', null]);
  t.match(a, ID);
  t.equal(deterministicEventId(['org', 'ev', 'x', null]), a, 'same parts, same id');
  t.not(deterministicEventId(['org', 'ev', 'x', 'null']), a, 'null is not "null"');
  t.not(deterministicEventId(['a,b']), deterministicEventId(['a', 'b']), 'no separator ambiguity');
  t.not(deterministicEventId(['a', 'b']), deterministicEventId(['b', 'a']), 'order matters');
  // pinned: a change here changes every published id (dedupe across a deploy would break)
  t.equal(deterministicEventId(['org_1', 'billing-credits-depleted', 'cus_1', 'ola_1', null, 'sig_1']), 'evt_b5b77ecd0f724308a1bf2ac49afd01be');
  // (= first 32 hex digits of: printf '%s' '["billing-event-id/v1","org_1","billing-credits-depleted","cus_1","ola_1",null,"sig_1"]' | sha256sum)
  t.throws(() => deterministicEventId([1 as unknown as string]), TypeError);
});

const base = {
  organizationId: 'org_1',
  customerId: 'cus_1',
  customerName: 'Acme' as string | null,
  orderLineAttributeId: 'ola_1',
  creditsCurrencyId: CURRENCY as string | null,
  eventName: 'api.call',
  signalId: 'sig_1',
  at: '2024-03-01T12:00:00.000Z',
};

t.test('credits depleted (2.6): exact field set, decimals exact beyond 2^53, numbers nearest doubles', async (t) => {
  const pool = openPool(dec('98765432109876543210.123456'));
  const c = consume(pool, dec('98765432109876543210.623456'));
  const e = creditsDepletedEvent({ ...base, consumption: c });
  t.equal(e.event, CREDITS_DEPLETED);
  t.match(e.id, ID);
  t.same(Object.keys(e.data), ['credits']);
  t.strictSame(e.data.credits, {
    customerId: 'cus_1',
    customerName: 'Acme',
    orderLineAttributeId: 'ola_1',
    creditsCurrencyId: CURRENCY,
    totalCredits: 98765432109876543210.123456,
    remainingCredits: -0.5,
    usedCredits: 98765432109876543210.623456,
    totalCreditsDecimal: '98765432109876543210.123456',
    remainingCreditsDecimal: '-0.5',
    usedCreditsDecimal: '98765432109876543210.623456',
    eventName: 'api.call',
    signalId: 'sig_1',
    depletedAt: '2024-03-01T12:00:00Z',
  });
  const wire = JSON.parse(JSON.stringify(e.data)) as typeof e.data;
  t.equal(wire.credits.totalCreditsDecimal, '98765432109876543210.123456', 'the string survives JSON');
});

t.test('credits depleted: exact depletion gives 0 and "0"; nulls where the spec allows them', async (t) => {
  const c = consume(openPool(dec('0.3')), dec('0.3'));
  const e = creditsDepletedEvent({ ...base, customerName: null, creditsCurrencyId: null, consumption: c });
  t.ok(Object.is(e.data.credits.remainingCredits, 0));
  t.equal(e.data.credits.remainingCreditsDecimal, '0');
  t.equal(e.data.credits.usedCreditsDecimal, e.data.credits.totalCreditsDecimal, 'one signal consumed the whole pool');
  t.equal(e.data.credits.customerName, null);
  t.equal(e.data.credits.creditsCurrencyId, null);
});

t.test('credits depleted: id is the crossing (org, customer, attribute, currency, signal), not the time or the name', async (t) => {
  const c = consume(openPool(dec('1')), dec('1'));
  const id = creditsDepletedEvent({ ...base, consumption: c }).id;
  t.equal(creditsDepletedEvent({ ...base, consumption: c, at: '2030-01-01T00:00:00Z', customerName: 'Other' }).id, id);
  for (const [k, v] of [
    ['organizationId', 'org_2'],
    ['customerId', 'cus_2'],
    ['orderLineAttributeId', 'ola_2'],
    ['creditsCurrencyId', null],
    ['signalId', 'sig_2'],
  ] as const) {
    t.not(creditsDepletedEvent({ ...base, [k]: v, consumption: c }).id, id, `${k} is part of the id`);
  }
  t.equal(creditsDepletedEvent({ ...base, creditsCurrencyId: CURRENCY.toUpperCase(), consumption: c }).id, id, 'UUID case does not matter');
  t.throws(() => creditsDepletedEvent({ ...base, consumption: consume(openPool(dec('2')), dec('1')) }), /did not deplete/);
});

const overageBase = { ...base, planId: 'plan_1', planName: 'Pro' as string | null };

t.test('overage incurred (2.7), OverageUsage: exact field set, threshold and current usage', async (t) => {
  const step = addUsage(dec('1000'), dec('0.5'), dec('1000'));
  const e = overageUsageEvent({ ...overageBase, usage: step });
  t.equal(e.event, OVERAGE_INCURRED);
  t.match(e.id, ID);
  t.same(Object.keys(e.data), ['overage']);
  t.strictSame(e.data.overage, {
    customerId: 'cus_1',
    customerName: 'Acme',
    planId: 'plan_1',
    planName: 'Pro',
    orderLineAttributeId: 'ola_1',
    eventType: 'OverageUsage',
    threshold: 1000,
    currentUsage: 1000.5,
    occurredAt: '2024-03-01T12:00:00Z',
  });
  t.throws(() => overageUsageEvent({ ...overageBase, usage: addUsage(ZERO, dec('1'), dec('5')) }), /did not cross/);
  const nulls = overageUsageEvent({ ...overageBase, customerId: null, customerName: null, planName: null, usage: step });
  t.same([nulls.data.overage.customerId, nulls.data.overage.customerName, nulls.data.overage.planName], [null, null, null]);
});

t.test('overage incurred, OverageCredit: threshold = pool total, currentUsage = consumed so far', async (t) => {
  const pool = topUp(openPool(dec('10')), dec('2.5'));
  const c1 = consume(pool, dec('12'));
  const c2 = consume(c1.after, dec('1.25'));
  t.ok(c2.creditOverage);
  const e = overageCreditEvent({ ...overageBase, consumption: c2 });
  t.strictSame(e.data.overage, {
    customerId: 'cus_1',
    customerName: 'Acme',
    planId: 'plan_1',
    planName: 'Pro',
    orderLineAttributeId: 'ola_1',
    eventType: 'OverageCredit',
    threshold: 12.5,
    currentUsage: 13.25,
    occurredAt: '2024-03-01T12:00:00Z',
  });
  t.throws(() => overageCreditEvent({ ...overageBase, consumption: c1 }), /did not go past/);
  const usage = overageUsageEvent({ ...overageBase, usage: addUsage(ZERO, dec('2'), dec('1')) });
  t.not(e.id, usage.id, 'the two kinds of overage on one signal have different ids');
  t.equal(overageCreditEvent({ ...overageBase, consumption: c2, at: 0 }).id, e.id, 'not the time');
  t.not(overageCreditEvent({ ...overageBase, consumption: c2, signalId: 'sig_9' }).id, e.id);
});

t.test('credit cap reached (2.8): exact data, canonical times, used may exceed the amount', async (t) => {
  const cap: CapConfig = { creditsCurrencyId: CURRENCY, amount: dec('5000.5'), frequency: 'MONTHLY', effectiveFrom: '2024-01-31T00:00:00.000+00:00' };
  const period = periodContaining(cap.effectiveFrom, cap.frequency, '2024-02-29T10:00:00Z');
  if (period === null) throw new Error('no period');
  const step = spendAgainstCap({ amount: cap.amount, usedBefore: dec('4999'), spend: dec('2.000001'), alreadyReached: false });
  const input = {
    organizationId: 'org_1',
    customer: { id: 'cus_1', externalId: null },
    cap,
    breachedUnit: { externalId: 'team-a', externalType: null },
    period,
    step,
    at: '2024-02-29T10:00:00.250Z',
  };
  const e = creditCapReachedEvent(input);
  t.equal(e.event, CREDIT_CAP_REACHED);
  t.match(e.id, ID);
  t.strictSame(e.data, {
    customer: { id: 'cus_1', externalId: null },
    cap: { creditsCurrencyId: CURRENCY, amount: 5000.5, amountDecimal: '5000.5', frequency: 'MONTHLY', effectiveFrom: '2024-01-31T00:00:00Z' },
    breachedUnit: { externalId: 'team-a', externalType: null },
    used: 5001.000001,
    usedDecimal: '5001.000001',
    period: { start: '2024-02-29T00:00:00Z', end: '2024-03-31T00:00:00Z' },
    detectedAt: '2024-02-29T10:00:00.250Z',
  });

  // the id is the cap and the period: not the signal, the time, or the spend
  const other = spendAgainstCap({ amount: cap.amount, usedBefore: ZERO, spend: dec('9999'), alreadyReached: false });
  t.equal(creditCapReachedEvent({ ...input, step: other, at: '2024-03-30T00:00:00Z' }).id, e.id);
  t.not(creditCapReachedEvent({ ...input, period: nthPeriod(cap.effectiveFrom, cap.frequency, 2) }).id, e.id, 'another period');
  t.not(creditCapReachedEvent({ ...input, breachedUnit: { externalId: 'team-b', externalType: null } }).id, e.id, 'another unit');
  t.not(creditCapReachedEvent({ ...input, breachedUnit: { externalId: 'team-a', externalType: 'team' } }).id, e.id, 'another unit type');
  t.not(creditCapReachedEvent({ ...input, organizationId: 'org_2' }).id, e.id, 'another organization');
  const weekly = { ...cap, frequency: 'WEEKLY' as const };
  const weeklyPeriod = nthPeriod(weekly.effectiveFrom, 'WEEKLY', 0);
  t.not(creditCapReachedEvent({ ...input, cap: weekly, period: weeklyPeriod }).id,
    creditCapReachedEvent({ ...input, period: nthPeriod(cap.effectiveFrom, cap.frequency, 0) }).id, 'same start, other end');

  // refusals
  t.throws(() => creditCapReachedEvent({ ...input, step: { ...step, reached: false } }), /did not reach/);
  t.throws(() => creditCapReachedEvent({ ...input, cap: { ...cap, creditsCurrencyId: 'credits' } }), /not a UUID/);
  t.throws(() => creditCapReachedEvent({ ...input, cap: { ...cap, amount: dec('1') } }), /another amount/);
  t.throws(() => creditCapReachedEvent({ ...input, period: { ...period, endMs: period.endMs + 1 } }), /not a period of this cap/);
  t.throws(() => creditCapReachedEvent({ ...input, cap: { ...cap, effectiveFrom: '2024-01-30T00:00:00Z' } }), /not a period of this cap/);
});

t.test('payload numbers beyond the double range are refused rather than sent as Infinity', async (t) => {
  const huge = dec('9'.repeat(60));
  let big = huge;
  for (let i = 0; i < 6; i++) big = mul(big, huge);
  const c = consume(openPool(big), big);
  t.equal(str(c.after.balance), '0');
  t.throws(() => creditsDepletedEvent({ ...base, consumption: c }), /beyond the range/);
});
