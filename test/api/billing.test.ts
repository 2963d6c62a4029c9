/**
 * The billing engine end to end: configuration through the HTTP API, signals through the
 * ingress, evaluation in the pipeline processes, events read from the JetStream bus and
 * rows read back through the analytics API.
 */
import t from 'tap';
import { billed, busEvents, stateKeys } from '../helpers/bus.js';
import { connect, headers } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { NATS_URL, createOrg, http, ok, sendBatch, useService, type TestOrg } from '../helpers/service.js';
import { topology } from '../../src/bus/topology.js';
import { periodsOf } from '../helpers/billing-crash.js';
import { HELD_PERIODS } from '../../src/billing/evaluator/customer-state.js';

// Groups of more than 64 signals on a worker (the default bound is 2,048): both evaluation paths are tested here.
const { iso, svc } = useService(t, 'billing', { BILLING_INLINE_SIGNALS: '64' });
const CUR = '9a1c2b1e-0000-4000-8000-00000000abcd';

interface Setup {
  org: TestOrg;
  customerId: string;
  olaId: string;
}

/** A customer `acme` with units root > team > dev, one credit-priced attribute for api_call, a pool and a cap on root. */
async function setup(opts: { granted: string; included?: string; capAmount?: string; capFrequency?: string; capFrom?: string; unitPrice?: string; path?: string }): Promise<Setup> {
  const org = await createOrg(svc.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const call = (method: string, path: string, body?: unknown) => http(svc.url, method, path, { token: org.live, body });
  const customer = await ok(call('POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme Inc' }));
  await ok(call('PUT', `/api/v2/customers/${customer.id}/units/root`, { externalType: 'company' }));
  await ok(call('PUT', `/api/v2/customers/${customer.id}/units/team`, { externalType: 'team', parentExternalId: 'root' }));
  await ok(call('PUT', `/api/v2/customers/${customer.id}/units/dev`, { externalType: 'user', parentExternalId: 'team' }));
  const plan = await ok(call('POST', '/api/v2/plans', { name: 'Pro' }));
  const ola = await ok(
    call('POST', `/api/v2/customers/${customer.id}/order-line-attributes`, {
      planId: plan.id,
      eventName: 'api_call',
      ...(opts.path ? { quantity: { kind: 'path', path: opts.path } } : {}),
      unitPrice: opts.unitPrice ?? '0.5',
      currency: 'USD',
      includedQuantity: opts.included ?? null,
      creditsCurrencyId: CUR,
      creditsPerUnit: '1',
    }),
  );
  await ok(call('POST', `/api/v2/customers/${customer.id}/credit-pools`, { orderLineAttributeId: ola.id, credits: opts.granted }));
  if (opts.capAmount) {
    await ok(call('PUT', `/api/v2/customers/${customer.id}/units/root/credit-caps/${CUR}`, { amount: opts.capAmount, frequency: opts.capFrequency ?? 'MONTHLY', effectiveFrom: opts.capFrom ?? '2026-01-01T00:00:00Z' }));
  }
  return { org, customerId: customer.id, olaId: ola.id };
}

const query = async (key: string, q: string): Promise<unknown[][]> => (await ok(http(svc.url, 'POST', '/api/v2/analytics/query', { token: key, body: { query: q } }))).rows;

t.test('pricing, depletion, overage and a cap from one stream of signals', async (t) => {
  const s = await setup({ granted: '10', included: '5', capAmount: '8' });
  // 12 signals by the external id, on the deepest unit, in January 2026; 4 batches sent at once.
  const batches = Array.from({ length: 4 }, (_, b) => ({
    signals: Array.from({ length: 3 }, (_, i) => ({ eventName: 'api_call', customer: { externalCustomerId: 'acme' }, unitId: 'dev', timestamp: `2026-01-1${b}T00:00:0${i}Z`, idempotencyKey: `k-${b}-${i}` })),
  }));
  const sent = await Promise.all(batches.map((b) => sendBatch(svc.url, s.org.live, b)));
  t.ok(sent.every((r) => r.status === 202));
  await sendBatch(svc.url, s.org.live, batches[0]); // a retried batch: duplicates are not billed again
  await billed(iso);

  const events = (await busEvents(iso)).filter((e) => e.organizationId === s.org.id);
  const named = (n: string) => events.filter((e) => e.event === n);
  t.equal(named('billing-credits-depleted').length, 1, 'one depletion');
  const credits = named('billing-credits-depleted')[0]!.data.credits;
  t.match(credits, { customerId: s.customerId, customerName: 'Acme Inc', orderLineAttributeId: s.olaId, creditsCurrencyId: CUR, totalCredits: 10, totalCreditsDecimal: '10', remainingCredits: 0, remainingCreditsDecimal: '0', usedCredits: 1, usedCreditsDecimal: '1', eventName: 'api_call' });
  t.match(credits.signalId, /^sig_/);
  const overage = named('billing-overage-incurred').map((e) => e.data.overage);
  t.same(overage.map((o) => o.eventType).sort(), ['OverageCredit', 'OverageUsage'], 'usage past the included 5, and credits past the pool: once each');
  t.match(overage.find((o) => o.eventType === 'OverageUsage'), { threshold: 5, currentUsage: 6, planName: 'Pro', customerId: s.customerId });
  const caps = named('billing-credit-cap-reached').map((e) => e.data);
  t.equal(caps.length, 1, 'the cap on root, reached by spend of its grandchild');
  t.match(caps[0], { customer: { id: s.customerId, externalId: 'acme' }, cap: { creditsCurrencyId: CUR, amount: 8, amountDecimal: '8', frequency: 'MONTHLY', effectiveFrom: '2026-01-01T00:00:00Z' }, breachedUnit: { externalId: 'root', externalType: 'company' }, used: 8, usedDecimal: '8', period: { start: '2026-01-01T00:00:00Z', end: '2026-02-01T00:00:00Z' } });
  t.equal(new Set(events.map((e) => e.id)).size, events.length, 'no event twice');

  t.same(await query(s.org.live, 'SELECT count(), toString(sum(cost_amount)), any(currency) FROM fact_cost'), [['12', '6', 'USD']]);
  t.same(await query(s.org.live, 'SELECT count(), toString(sum(credits)), toString(min(balance_after)) FROM fact_credit_consumption'), [['12', '12', '-2']]);
  t.same(await query(s.org.test, 'SELECT count() FROM fact_cost'), [['0']], 'test mode has its own (empty) billing');
  const pools = await ok(http(svc.url, 'GET', `/api/v2/customers/${s.customerId}/credit-pools`, { token: s.org.live }));
  t.match(pools.creditPools, [{ totalCredits: '10', consumedCredits: '12', balance: '-2' }], 'the pool shows what the evaluator recorded');
});

t.test('many concurrent signals draining one pool: one depletion, exact balance', async (t) => {
  const s = await setup({ granted: '100.5' });
  const batches = Array.from({ length: 30 }, (_, b) => ({ signals: Array.from({ length: 5 }, (_, i) => ({ eventName: 'api_call', customer: { customerId: s.customerId }, idempotencyKey: `c-${b}-${i}` })) }));
  const sent = await Promise.all(batches.map((b) => sendBatch(svc.url, s.org.live, b)));
  t.ok(sent.every((r) => r.status === 202));
  await billed(iso);
  const events = (await busEvents(iso)).filter((e) => e.organizationId === s.org.id);
  const dep = events.filter((e) => e.event === 'billing-credits-depleted');
  t.equal(dep.length, 1);
  t.equal(dep[0]!.data.credits.remainingCreditsDecimal, '-0.5', 'the 101st credit overshoots by half a credit');
  t.equal(events.filter((e) => e.event === 'billing-overage-incurred').length, 1);
  t.same(await query(s.org.live, 'SELECT count(), toString(min(balance_after)) FROM fact_credit_consumption'), [['150', '-49.5']]);
});

t.test('a group larger than the inline bound is evaluated on a worker, in one task: the same exact results', async (t) => {
  // 200 signals of one customer in one batch: one partition message, more than this service's
  // BILLING_INLINE_SIGNALS (64), so a worker lists its cap periods, asks for the totals and states, and evaluates.
  const s = await setup({ granted: '100', included: '50', capAmount: '150', capFrequency: 'DAILY', capFrom: '2026-04-01T00:00:00Z' });
  const signals = Array.from({ length: 200 }, (_, i) => ({ eventName: 'api_call', customer: { externalCustomerId: 'acme' }, unitId: 'dev', timestamp: `2026-04-0${1 + (i % 2)}T00:00:${String(i % 60).padStart(2, '0')}Z`, idempotencyKey: `w-${i}` }));
  await ok(sendBatch(svc.url, s.org.live, { signals }), [202]);
  await billed(iso);
  // A second group goes on from the states and period totals the first left (each day 100 of 150).
  await ok(sendBatch(svc.url, s.org.live, { signals: signals.slice(0, 100).map((x, i) => ({ ...x, idempotencyKey: `w2-${i}` })) }), [202]);
  await billed(iso);
  const events = (await busEvents(iso)).filter((e) => e.organizationId === s.org.id);
  const named = (n: string) => events.filter((e) => e.event === n);
  t.equal(named('billing-credits-depleted').length, 1, 'one depletion');
  t.same(named('billing-overage-incurred').map((e) => e.data.overage.eventType).sort(), ['OverageCredit', 'OverageUsage']);
  t.same(named('billing-credit-cap-reached').map((e) => e.data.period.start).sort(), ['2026-04-01T00:00:00Z', '2026-04-02T00:00:00Z'], 'each day reaches its cap of 150 in the second group, once');
  t.same(await query(s.org.live, 'SELECT count(), toString(sum(cost_amount)) FROM fact_cost'), [['300', '150']]);
  t.same(await query(s.org.live, 'SELECT count(), toString(sum(credits)), toString(min(balance_after)) FROM fact_credit_consumption'), [['300', '300', '-200']]);
  const totals = (await periodsOf(iso, s.org.id)).map((v) => v.after.used).sort();
  t.same(totals, ['150', '150'], "both days' period totals");
});

t.test('a configuration change is seen by the next batch, though the evaluator keeps documents between groups', async (t) => {
  const s = await setup({ granted: '2' });
  const pools = async () => (await ok(http(svc.url, 'GET', `/api/v2/customers/${s.customerId}/credit-pools`, { token: s.org.live }))).creditPools as { id: string; balance: string }[];
  const signal = (key: string) => ({ eventName: 'api_call', customer: { externalCustomerId: 'acme' }, unitId: 'dev', idempotencyKey: key });
  await ok(sendBatch(svc.url, s.org.live, { signals: [signal('f1'), signal('f2')] }), [202]);
  await billed(iso);
  const [pool] = await pools();
  t.equal(pool!.balance, '0', 'the document read (and kept) by the evaluator');
  // Top-ups right before each next batch: each batch evaluated against the pool as it is then.
  for (const [i, credits] of ['5', '0.5'].entries()) {
    await ok(http(svc.url, 'POST', `/api/v2/customers/${s.customerId}/credit-pools/${pool!.id}/top-ups`, { token: s.org.live, body: { credits } }), [201]);
    await ok(sendBatch(svc.url, s.org.live, { signals: [signal(`g${i}`)] }), [202]);
    await billed(iso);
  }
  const balances = await query(s.org.live, 'SELECT toString(balance_after) FROM fact_credit_consumption ORDER BY created_at, balance_after DESC');
  t.same(balances.map((r) => r[0]).slice(-2), ['4', '3.5'], 'after +5: 5 − 1 = 4; after +0.5: 4.5 − 1 = 3.5');
  t.match(await pools(), [{ balance: '3.5' }]);
});

t.test('a cap fires once in each period across a boundary', async (t) => {
  const s = await setup({ granted: '1000', capAmount: '2', capFrequency: 'DAILY', capFrom: '2026-03-01T06:00:00Z' });
  const at = (iso: string) => ({ eventName: 'api_call', customer: { externalCustomerId: 'acme' }, unitId: 'team', timestamp: iso });
  await ok(sendBatch(svc.url, s.org.live, { signals: [at('2026-03-01T07:00:00Z'), at('2026-03-01T08:00:00Z'), at('2026-03-01T09:00:00Z'), at('2026-03-02T05:59:59Z')] }), [202]);
  await ok(sendBatch(svc.url, s.org.live, { signals: [at('2026-03-02T06:00:00Z'), at('2026-03-02T06:00:01Z'), at('2026-03-01T05:00:00Z')] }), [202]);
  await billed(iso);
  const caps = (await busEvents(iso)).filter((e) => e.organizationId === s.org.id && e.event === 'billing-credit-cap-reached').map((e) => e.data);
  t.same(caps.map((c) => [c.period.start, c.usedDecimal]), [['2026-03-01T06:00:00Z', '2'], ['2026-03-02T06:00:00Z', '2']], 'a spend before effectiveFrom counts in no period');
});

t.test('a late signal in an old period reaches its cap, once, whatever came in between', async (t) => {
  // DAILY cap 5 on root: 3 credits in P0, 1 in each of the next four periods, then a late
  // signal of 3 credits timestamped in P0: P0's spend is 6 and its cap event must fire.
  const s = await setup({ granted: '1000', capAmount: '5', capFrequency: 'DAILY', capFrom: '2026-04-01T00:00:00Z', path: 'credits' });
  const at = (day: number, credits: number, key: string) => ({ eventName: 'api_call', customer: { externalCustomerId: 'acme' }, unitId: 'dev', timestamp: `2026-04-0${1 + day}T12:00:00Z`, data: { credits }, idempotencyKey: key });
  const capEvents = async () => (await busEvents(iso, s.org.id)).filter((e) => e.event === 'billing-credit-cap-reached').map((e) => [e.data.period.start, e.data.usedDecimal]);
  await ok(sendBatch(svc.url, s.org.live, { signals: [at(0, 3, 'p0')] }), [202]);
  await billed(iso);
  for (let d = 1; d <= 4; d++) {
    await ok(sendBatch(svc.url, s.org.live, { signals: [at(d, 1, `p${d}`)] }), [202]);
    await billed(iso); // one batch at a time: the late signal below is evaluated after all four
  }
  t.same(await capEvents(), [], 'no period reached yet');
  await ok(sendBatch(svc.url, s.org.live, { signals: [at(0, 3, 'late')] }), [202]);
  await billed(iso);
  t.same(await capEvents(), [['2026-04-01T00:00:00Z', '6']], 'fires for P0 with used 6');
  await ok(sendBatch(svc.url, s.org.live, { signals: [at(0, 2, 'later'), at(5, 1, 'p5')] }), [202]);
  await billed(iso);
  t.same(await capEvents(), [['2026-04-01T00:00:00Z', '6']], 'P0 never fires twice');
  const periods = (await periodsOf(iso, s.org.id)).map((v) => v.after);
  t.same(periods.filter((p) => p.reached), [{ used: '8', reached: true }], 'P0 keeps its exact total and its flag');
  t.equal(periods.length, 6, 'one entry per period spent in');
  t.same(await query(s.org.live, "SELECT toString(sum(credits)) FROM fact_credit_consumption WHERE created_at < '2026-04-02 00:00:00'"), [['8']], 'the rows agree');
});

t.test("a customer's cap periods past what its key holds go to their own keys, and a late signal in one of them counts exactly", async (t) => {
  // DAILY cap 5 on root: 3 credits on day 0, then 1 on each of the next HELD_PERIODS + 3 days,
  // a group each: the customer's key holds the latest periods, the oldest are spilled to their
  // own keys. Then a late signal of 3 credits on day 0: 6, the cap fires once.
  const days = HELD_PERIODS + 4;
  const s = await setup({ granted: '1000', capAmount: '5', capFrequency: 'DAILY', capFrom: '2026-05-01T00:00:00Z', path: 'credits' });
  const at = (day: number, credits: number, key: string) => ({ eventName: 'api_call', customer: { externalCustomerId: 'acme' }, unitId: 'dev', timestamp: `2026-05-${String(1 + day).padStart(2, '0')}T12:00:00Z`, data: { credits }, idempotencyKey: key });
  const capEvents = async () => (await busEvents(iso, s.org.id)).filter((e) => e.event === 'billing-credit-cap-reached').map((e) => [e.data.period.start, e.data.usedDecimal]);
  for (let d = 0; d < days; d++) {
    await ok(sendBatch(svc.url, s.org.live, { signals: [at(d, d === 0 ? 3 : 1, `d${d}`)] }), [202]);
    await billed(iso); // one group per day
  }
  const own = Object.keys(await stateKeys(iso, `cp.${s.org.id}.live.`));
  const customer = (await stateKeys(iso, `cs.${s.org.id}.live.`))[`cs.${s.org.id}.live.${s.customerId}`] as { periods: Record<string, { spilled?: number }> };
  const held = Object.values(customer.periods).filter((p) => p.spilled === undefined).length;
  t.equal(held, HELD_PERIODS, 'the customer key holds the latest HELD_PERIODS periods');
  t.ok(own.length >= days - HELD_PERIODS - 1, `the older ones are in their own keys (${own.length})`);
  t.same(await capEvents(), [], 'no period reached yet');
  await ok(sendBatch(svc.url, s.org.live, { signals: [at(0, 3, 'late')] }), [202]);
  await billed(iso);
  await ok(sendBatch(svc.url, s.org.live, { signals: [at(0, 1, 'later'), at(1, 1, 'd1-again')] }), [202]);
  await billed(iso);
  t.same(await capEvents(), [['2026-05-01T00:00:00Z', '6']], 'day 0 fires once, with used 6');
  const periods = await periodsOf(iso, s.org.id);
  t.equal(periods.length, days, 'one entry per period spent in');
  t.same(periods.map((p) => p.after.used).sort(), ['1', ...Array(days - 3).fill('1'), '2', '7'].sort(), 'each period exact');
  t.same(await query(s.org.live, "SELECT toString(sum(credits)) FROM fact_credit_consumption WHERE created_at < '2026-05-02 00:00:00'"), [['7']], 'the rows agree');
});

t.test('a rows message naming its columns in another order (another version\'s) is stored', async (t) => {
  const org = await createOrg(svc.url, { burst: 1_000, refillPerSecond: 1_000 });
  const row = (signal: string, cost: string) => ({
    org_id: org.id, livemode: true, signal_id: signal, created_at: Date.parse('2026-05-01T00:00:00Z'), event_name: 'api_call', customer_id: 'cus_formsformsformsforms',
    unit_id: null, plan_id: 'plan_x', order_line_attribute_id: 'ola_x', quantity: '1', unit_price: cost, cost_amount: cost, currency: 'USD',
    draw_pool_id: null, draw_credits_currency_id: null, draw_credits: null, draw_balance_after: null,
  });
  const columns = ['cost_amount', 'signal_id', 'org_id', 'livemode', 'created_at', 'event_name', 'customer_id', 'unit_id', 'plan_id', 'order_line_attribute_id', 'quantity', 'unit_price', 'currency', 'draw_credits', 'draw_pool_id', 'draw_credits_currency_id', 'draw_balance_after'];
  const compact = (r: ReturnType<typeof row>) => JSON.stringify(columns.map((c) => (r as Record<string, unknown>)[c]));
  const bodies = [
    // this version's: arrays, the column list in the header (here in another order: another version's)
    `{"v":4,"costs":2,"unpriced":0,"columns":{"costs":${JSON.stringify(columns)}}}\n${compact(row('sig_form3a', '1'))}\n${compact(row('sig_form3b', '2'))}\n`,
  ];
  const nc = await connect({ servers: NATS_URL });
  try {
    const js = jetstream(nc);
    for (const [i, body] of bodies.entries()) {
      const h = headers();
      h.set('Billing-Org', org.id);
      h.set('Billing-Mode', 'live');
      await js.publish(`${iso.natsPrefix}.billing-rows.${org.id}`, body, { headers: h, msgID: `rows-forms-${org.id}-${i}` });
    }
  } finally {
    await nc.close();
  }
  const q = "SELECT signal_id, toString(cost_amount), ifNull(unit_id, '-') FROM fact_cost ORDER BY signal_id";
  const want = [['sig_form3a', '1', '-'], ['sig_form3b', '2', '-']];
  let got: unknown[][] = [];
  for (let i = 0; i < 100 && JSON.stringify(got) !== JSON.stringify(want); i++) {
    await new Promise((r) => setTimeout(r, 100));
    got = await query(org.live, q);
  }
  t.same(got, want);
});

t.test('a rows message the engine refuses for its content is dead-lettered with the reason; the others are stored', async (t) => {
  const org = await createOrg(svc.url, { burst: 1_000, refillPerSecond: 1_000 });
  const columns = ['signal_id', 'org_id', 'livemode', 'created_at', 'event_name', 'customer_id', 'unit_id', 'plan_id', 'order_line_attribute_id', 'quantity', 'unit_price', 'cost_amount', 'currency', 'draw_pool_id', 'draw_credits_currency_id', 'draw_credits', 'draw_balance_after'];
  const body = (signal: string, cost: string) =>
    `{"v":4,"costs":1,"unpriced":0,"columns":{"costs":${JSON.stringify(columns)}}}\n${JSON.stringify([signal, org.id, true, Date.parse('2026-05-02T00:00:00Z'), 'api_call', 'cus_x', null, 'plan_x', 'ola_x', '1', cost, cost, 'USD', null, null, null, null])}\n`;
  const nc = await connect({ servers: NATS_URL });
  try {
    const js = jetstream(nc);
    // Both in one flush, most likely: the bad one must not hold the good one back either way.
    await Promise.all(
      [body('sig_poisonrow', 'not-a-number'), body('sig_goodrow', '3')].map((b, i) => {
        const h = headers();
        h.set('Billing-Org', org.id);
        h.set('Billing-Mode', 'live');
        return js.publish(`${iso.natsPrefix}.billing-rows.${org.id}`, b, { headers: h, msgID: `rows-poison-${org.id}-${i}` });
      }),
    );
    let got: unknown[][] = [];
    for (let i = 0; i < 100 && got.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 100));
      got = await query(org.live, 'SELECT signal_id, toString(cost_amount) FROM fact_cost');
    }
    t.same(got, [['sig_goodrow', '3']], 'the good one stored, the bad one not');
    const jsm = await jetstreamManager(nc);
    let dead: { reason: string; stream: string } | null = null;
    for (let i = 0; i < 100 && !dead; i++) {
      const m = await jsm.streams.getMessage(`${iso.natsPrefix}_SIGNALS_DLQ`, { last_by_subj: `${iso.natsPrefix}.dlq.${org.id}` }).catch(() => null);
      if (m) dead = { reason: m.header.get('Billing-Dead-Letter-Reason'), stream: m.header.get('Billing-Original-Stream') };
      else await new Promise((r) => setTimeout(r, 100));
    }
    t.match(dead, { reason: /Code: \d+\./, stream: `${iso.natsPrefix}_BILLING_ROWS` }, 'dead-lettered with the engine\'s reason and where it came from');
    const rows = await jsm.consumers.info(`${iso.natsPrefix}_BILLING_ROWS`, 'billing-rows');
    t.equal(rows.num_ack_pending + rows.num_pending, 0, 'nothing left to retry');
  } finally {
    await nc.close();
  }
});

t.test('a batch is evaluated against (and pins) only the customers it names', async (t) => {
  const s = await setup({ granted: '1000', capAmount: '500' });
  const call = (method: string, path: string, body?: unknown) => ok(http(svc.url, method, path, { token: s.org.live, body }));
  const plan = await call('POST', '/api/v2/plans', { name: 'Other' });
  const others: string[] = [];
  for (let i = 0; i < 3; i++) {
    const c = await call('POST', '/api/v2/customers', { externalId: `bystander-${i}`, name: `Bystander ${i}` });
    await call('POST', `/api/v2/customers/${c.id}/order-line-attributes`, { planId: plan.id, eventName: 'api_call', unitPrice: '1', currency: 'USD' });
    others.push(c.id);
  }
  // By externalId and by service id: one customer.
  const signals = [
    { eventName: 'api_call', customer: { externalCustomerId: 'acme' }, unitId: 'dev', timestamp: '2026-03-01T00:00:00Z' },
    { eventName: 'api_call', customer: { customerId: s.customerId }, unitId: 'dev', timestamp: '2026-03-01T00:00:01Z' },
  ];
  await ok(sendBatch(svc.url, s.org.live, { signals }), [202]);
  await billed(iso);
  // A committed pin keeps, per organization and mode, the revision of each document it pinned.
  const pins = Object.values(await stateKeys(iso, 'pin.')) as { seq: number; done?: boolean; scopes: { orgId: string; revisions: Record<string, number> }[] }[];
  const pin = pins
    .sort((a, b) => b.seq - a.seq)
    .flatMap((p) => p.scopes)
    .find((sc) => sc.orgId === s.org.id)!;
  t.ok(pin, "the batch's pin");
  const keys = Object.keys(pin.revisions).sort();
  t.same(
    keys.filter((k) => k.startsWith('cus.')),
    [`cus.${s.org.id}.live.${s.customerId}`],
    'only the named customer is pinned',
  );
  const plans = keys.filter((k) => k.startsWith('plan.'));
  t.equal(plans.length, 1, 'and only the plan its attributes use');
  t.not(plans[0], `plan.${s.org.id}.live.${plan.id}`, "not the bystanders' plan");
  t.equal(keys.length, 2, 'nothing else');
  const rows = await query(s.org.live, `SELECT count() FROM fact_cost WHERE customer_id = '${s.customerId}' AND created_at >= '2026-03-01'`);
  t.equal(Number(rows[0]![0]), 2, 'both signals priced');
});

t.test('signals naming a customer no configuration has are stored and not sent to billing; once the customer exists, its next signals are billed', async (t) => {
  const org = await createOrg(svc.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const call = (method: string, path: string, body?: unknown) => http(svc.url, method, path, { token: org.live, body });
  const nc = await connect({ servers: NATS_URL });
  t.teardown(() => nc.close());
  const jsm = await jetstreamManager(nc);
  // The billing partitions are a work queue: their last sequence counts every message ever published to them.
  const published = async (): Promise<number> => (await jsm.streams.info(topology(iso.natsPrefix).billableParts.stream)).state.last_seq;
  const signal = (i: number) => ({ eventName: 'api_call', customer: { externalCustomerId: 'later-co' }, idempotencyKey: `later-${i}` });

  const before = await published();
  await ok(sendBatch(svc.url, org.live, { signals: [signal(1), signal(2), signal(3)] }), [202]);
  await billed(iso);
  t.same(await query(org.live, 'SELECT count() FROM fact_signal'), [['3']], 'stored');
  t.equal(await published(), before, 'nothing published to the billing partitions: no customer is named');
  t.same(await query(org.live, 'SELECT count() FROM fact_cost'), [['0']]);

  const customer = await ok(call('POST', '/api/v2/customers', { externalId: 'later-co', name: 'Later Co' }));
  const plan = await ok(call('POST', '/api/v2/plans', { name: 'Pay as you go' }));
  await ok(call('POST', `/api/v2/customers/${customer.id}/order-line-attributes`, { planId: plan.id, eventName: 'api_call', unitPrice: '2', currency: 'USD' }));
  await ok(sendBatch(svc.url, org.live, { signals: [signal(4), signal(5)] }), [202]);
  await billed(iso);
  t.same(await query(org.live, 'SELECT count(), toString(sum(cost_amount)), any(customer_id) FROM fact_cost'), [['2', '4', customer.id]], 'the customer created since is found at once: its next signals are priced');
  t.ok((await published()) > before, 'and sent to billing');
});
