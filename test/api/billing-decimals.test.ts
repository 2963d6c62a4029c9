/**
 * Exact stored decimals, through the real HTTP API: configuration by the
 * billing API, signals by the ingress (raw JSON text, so numbers keep the digits written),
 * rows read back by the analytics API, balances by the pool API. The reference for every
 * expected value is decimal.js at a precision that never rounds these numbers.
 */
import t from 'tap';
import { Decimal as DecimalJs } from 'decimal.js';
import { billed, busEvents } from '../helpers/bus.js';
import { createOrg, http, ok, useService, type TestOrg } from '../helpers/service.js';
import { EXACT_TEXTS_MAX_BYTES } from '../../src/pipeline/exact-numbers.js';

const { iso, svc } = useService(t, 'billing-decimals');
const CUR = '9a1c2b1e-0000-4000-8000-00000000dec1';
const Decimal = DecimalJs.clone({ precision: 200 });
const exact = (d: DecimalJs): string => (d.isZero() ? '0' : d.toFixed());

interface Setup {
  org: TestOrg;
  customerId: string;
  tokensOla: string;
  drawOla: string;
}

/**
 * Customer `acme`: `tokens` priced at 0.333333333333 per data.usage.tokens, and `draw`
 * priced at 1 per data.q and drawing 0.000001 credits per unit from a pool of 1 credit.
 */
async function setup(): Promise<Setup> {
  const org = await createOrg(svc.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const call = (method: string, path: string, body?: unknown) => ok(http(svc.url, method, path, { token: org.live, body }));
  const customer = await call('POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme Inc' });
  const plan = await call('POST', '/api/v2/plans', { name: 'Pro' });
  const tokens = await call('POST', `/api/v2/customers/${customer.id}/order-line-attributes`, {
    planId: plan.id, eventName: 'tokens', quantity: { kind: 'path', path: 'usage.tokens' }, unitPrice: '0.333333333333', currency: 'USD',
  });
  const draw = await call('POST', `/api/v2/customers/${customer.id}/order-line-attributes`, {
    planId: plan.id, eventName: 'draw', quantity: { kind: 'path', path: 'q' }, unitPrice: '1', currency: 'USD', creditsCurrencyId: CUR, creditsPerUnit: '0.000001',
  });
  await call('POST', `/api/v2/customers/${customer.id}/credit-pools`, { orderLineAttributeId: draw.id, credits: '1' });
  return { org, customerId: customer.id, tokensOla: tokens.id, drawOla: draw.id };
}

const query = async (key: string, q: string): Promise<unknown[][]> => (await ok(http(svc.url, 'POST', '/api/v2/analytics/query', { token: key, body: { query: q } }), [200])).rows;

/** A signal as raw JSON text (the one place this file builds a signal): `data` is written as given, so numbers keep every digit. */
const raw = (eventName: string, second: number, data: string, unitId?: string): string =>
  `{"eventName":"${eventName}","customer":{"externalCustomerId":"acme"},${unitId === undefined ? '' : `"unitId":${JSON.stringify(unitId)},`}"timestamp":"2026-01-10T00:00:${String(second).padStart(2, '0')}Z","data":${data}}`;
const bulk = (key: string, signals: string[]) => ok(http(svc.url, 'POST', '/api/v2/signals/bulk', { token: key, raw: `{"signals":[${signals.join(',')}]}` }), [202]);

t.test('costs and credit draws are stored exactly; sums equal the exact sums; draws equal the pool balance to the last digit', async (t) => {
  const s = await setup();
  // Quantities of `tokens`: JSON numbers (one with 22 significant digits, which a double would
  // cut to 17) and decimal strings; the last two come through the legacy endpoint.
  const tokenQuantities = ['7.5', '"7.5"', '1234567890.123456789012', '"0.123456789012"', '3', '999999999999999.999999999999'];
  await bulk(s.org.live, tokenQuantities.slice(0, 4).map((q, i) => raw('tokens', i, `{"usage":{"tokens":${q}}}`)));
  await ok(http(svc.url, 'POST', '/api/v1/usage', { token: s.org.live, raw: raw('tokens', 4, `{"usage":{"tokens":${tokenQuantities[4]}}}`) }), [202]);
  await ok(http(svc.url, 'POST', '/api/v1/usage', { token: s.org.live, raw: `[${raw('tokens', 5, `{"usage":{"tokens":${tokenQuantities[5]}}}`)}]` }), [202]);
  // Quantities of `draw`, in one batch so they are drawn in this order.
  const drawQuantities = ['0.123456789012', '"7.5"', '123456.789012345678', '1e-6'];
  await bulk(s.org.live, drawQuantities.map((q, i) => raw('draw', 10 + i, `{"q":${q}}`)));
  await billed(iso);

  const price = new Decimal('0.333333333333');
  const tokenValues = tokenQuantities.map((q) => new Decimal(q.replaceAll('"', '')));
  const expectedCosts = tokenValues.map((q) => q.times(price));
  t.same(await query(s.org.live, "SELECT toString(quantity), toString(cost_amount) FROM fact_cost WHERE event_name = 'tokens' ORDER BY created_at"), tokenValues.map((q, i) => [exact(q), exact(expectedCosts[i]!)]), 'every cost to its last digit');
  t.same(await query(s.org.live, "SELECT toString(cost_amount) FROM fact_cost WHERE event_name = 'tokens' ORDER BY created_at LIMIT 1"), [['2.4999999999975']], '7.5 × 0.333333333333, not 2.499999999997');
  const exactSum = expectedCosts.reduce((a, b) => a.plus(b), new Decimal(0));
  t.same(await query(s.org.live, "SELECT toString(sum(cost_amount)), toTypeName(sum(cost_amount)) FROM fact_cost WHERE event_name = 'tokens'"), [[exact(exactSum), 'Decimal(76, 24)']], `sum(cost_amount) is the exact sum ${exact(exactSum)}`);

  const perUnit = new Decimal('0.000001');
  const drawValues = drawQuantities.map((q) => new Decimal(q.replaceAll('"', '')));
  let balance = new Decimal(1);
  const expectedDraws = drawValues.map((q) => {
    const credits = q.times(perUnit);
    balance = balance.minus(credits);
    return [exact(credits), exact(balance)];
  });
  t.same(await query(s.org.live, 'SELECT toString(credits), toString(balance_after) FROM fact_credit_consumption ORDER BY created_at'), expectedDraws, 'each draw and the balance after it, exact');
  t.equal(expectedDraws[0]![0], '0.000000123456789012', 'a draw with 18 places, not 0.000000123456');
  const pools = await ok(http(svc.url, 'GET', `/api/v2/customers/${s.customerId}/credit-pools`, { token: s.org.live }), [200]);
  const pool = pools.creditPools[0];
  const [sumCredits, lastBalance] = ((await query(s.org.live, 'SELECT toString(sum(credits)), toString(argMax(balance_after, created_at)) FROM fact_credit_consumption')) as string[][])[0]!;
  t.equal(sumCredits, pool.consumedCredits, `the stored draws add up to the pool's consumed credits (${pool.consumedCredits})`);
  t.equal(lastBalance, pool.balance, `the last balance_after is the pool's balance (${pool.balance})`);
  t.equal(pool.balance, exact(balance), 'which is the exact balance');
  t.same(await query(s.org.live, 'SELECT count() FROM fact_unpriced'), [['0']], 'nothing left unpriced');
});

t.test('a quantity outside the rule is not priced, and fact_unpriced says why', async (t) => {
  const s = await setup();
  const signals = [
    raw('draw', 0, '{"q":0.1000000000000000000000001}'), // 25 places; a double reads 0.1
    raw('draw', 1, '{"q":"0.0000000000000000000000001"}'),
    raw('draw', 2, `{"q":1${'0'.repeat(52)}}`),
    raw('draw', 3, '{"q":-1}'),
    raw('draw', 4, '{"q":"ten"}'),
    raw('draw', 5, '{"r":1}'),
    raw('draw', 6, '{"q":1e-400}'), // a double reads 0
    raw('draw', 7, '{"q":0.000000000001}'), // 12 places: priced
  ];
  await bulk(s.org.live, signals);
  await billed(iso);
  t.same(await query(s.org.live, 'SELECT reason, detail, event_name, customer_id, order_line_attribute_id FROM fact_unpriced ORDER BY created_at'), [
    ['QUANTITY_TOO_MANY_DECIMAL_PLACES', 'data.q has 25 decimal places; at most 24 are allowed', 'draw', s.customerId, s.drawOla],
    ['QUANTITY_TOO_MANY_DECIMAL_PLACES', 'data.q has 25 decimal places; at most 24 are allowed', 'draw', s.customerId, s.drawOla],
    ['QUANTITY_TOO_LARGE', 'data.q has 53 integer digits; at most 52 are allowed', 'draw', s.customerId, s.drawOla],
    ['QUANTITY_NEGATIVE', 'data.q must not be negative', 'draw', s.customerId, s.drawOla],
    ['QUANTITY_NOT_A_NUMBER', 'data.q must be a decimal number like "12.5" or "-0.000001", got "ten"', 'draw', s.customerId, s.drawOla],
    ['QUANTITY_MISSING', 'data.q is missing', 'draw', s.customerId, s.drawOla],
    ['QUANTITY_TOO_MANY_DECIMAL_PLACES', 'data.q has 400 decimal places; at most 24 are allowed', 'draw', s.customerId, s.drawOla],
  ]);
  t.same(await query(s.org.live, 'SELECT toString(quantity), toString(cost_amount) FROM fact_cost'), [['0.000000000001', '0.000000000001']], 'only the signal within the rule is priced');
  t.same(await query(s.org.live, 'SELECT toString(credits), toString(balance_after) FROM fact_credit_consumption'), [['0.000000000000000001', '0.999999999999999999']]);
  const pools = await ok(http(svc.url, 'GET', `/api/v2/customers/${s.customerId}/credit-pools`, { token: s.org.live }), [200]);
  t.match(pools.creditPools, [{ consumedCredits: '0.000000000000000001', balance: '0.999999999999999999' }], 'the unpriced signals drew nothing');
  t.same(await query(s.org.live, 'SELECT count() FROM fact_signal'), [[String(signals.length)]], 'every signal is stored as a signal all the same');
  t.same(await query(s.org.test, 'SELECT count() FROM fact_unpriced'), [['0']], 'per mode');
  const other = await createOrg(svc.url);
  t.same(await query(other.live, 'SELECT count() FROM fact_unpriced'), [['0']], 'and per organization');
});

t.test('a quantity far past 10^15 whose cost and draw fit the stored type is priced: cost, draw, depletion and the cap', async (t) => {
  const org = await createOrg(svc.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const call = (method: string, path: string, body?: unknown) => ok(http(svc.url, method, path, { token: org.live, body }));
  const customer = await call('POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme' });
  await call('PUT', `/api/v2/customers/${customer.id}/units/root`, {});
  const plan = await call('POST', '/api/v2/plans', { name: 'Pro' });
  const big = await call('POST', `/api/v2/customers/${customer.id}/order-line-attributes`, {
    planId: plan.id, eventName: 'big', quantity: { kind: 'path', path: 'q' }, unitPrice: '1', currency: 'USD', creditsCurrencyId: CUR, creditsPerUnit: '1',
  });
  await call('POST', `/api/v2/customers/${customer.id}/credit-pools`, { orderLineAttributeId: big.id, credits: '1000' });
  await call('PUT', `/api/v2/customers/${customer.id}/units/root/credit-caps/${CUR}`, { amount: '5', frequency: 'MONTHLY', effectiveFrom: '2026-01-01T00:00:00Z' });
  const q = '123456789012345678901.123456';
  // As a JSON number (its text kept by the pipeline) and as a decimal string.
  await bulk(org.live, [raw('big', 0, `{"q":${q}}`, 'root'), raw('big', 1, `{"q":"${q}"}`, 'root')]);
  await billed(iso);
  t.same(await query(org.live, 'SELECT count() FROM fact_unpriced'), [['0']], 'nothing left unpriced');
  t.same(await query(org.live, 'SELECT toString(quantity), toString(cost_amount) FROM fact_cost ORDER BY created_at'), [[q, q], [q, q]], 'cost = 1.23·10^20, exact');
  const first = new Decimal(1000).minus(q);
  const second = first.minus(q);
  t.same(await query(org.live, 'SELECT toString(credits), toString(balance_after) FROM fact_credit_consumption ORDER BY created_at'), [[q, exact(first)], [q, exact(second)]], 'each draw and the balance after it');
  const events = (await busEvents(iso, org.id)).map((e) => e.event);
  t.equal(events.filter((e) => e === 'billing-credits-depleted').length, 1, 'billing-credits-depleted, once');
  t.equal(events.filter((e) => e === 'billing-credit-cap-reached').length, 1, 'billing-credit-cap-reached, once');
});

t.test('a batch too full of long numbers: the quantities whose digits are not kept are not priced, visibly', async (t) => {
  const s = await setup();
  const long = '0.10000000000000000001';
  const data = `{"usage":{"tokens":1234567890.123456789012,"a":${long},"b":${long},"c":${long},"d":${long}}}`;
  const perSignal = Buffer.byteLength(JSON.stringify({ 'usage.tokens': '1234567890.123456789012', 'usage.a': long, 'usage.b': long, 'usage.c': long, 'usage.d': long }));
  const kept = Math.floor(EXACT_TEXTS_MAX_BYTES / perSignal);
  const n = kept + 20;
  await bulk(s.org.live, Array.from({ length: n }, (_, i) => `{"eventName":"tokens","customer":{"externalCustomerId":"acme"},"timestamp":"2026-01-10T00:${String(Math.floor(i / 60)).padStart(2, '0')}:${String(i % 60).padStart(2, '0')}Z","data":${data}}`));
  await bulk(s.org.live, [raw('tokens', 0, '{"usage":{"tokens":"1234567890.123456789012"}}')]);
  await billed(iso);
  const cost = exact(new Decimal('1234567890.123456789012').times('0.333333333333'));
  t.same(await query(s.org.live, 'SELECT count(), toString(min(cost_amount)), toString(max(cost_amount)) FROM fact_cost'), [[String(kept + 1), cost, cost]], `the first ${kept} numbers and the decimal string, exactly; no double's value`);
  t.same(await query(s.org.live, 'SELECT reason, count(), any(detail) FROM fact_unpriced GROUP BY reason'), [
    ['QUANTITY_DIGITS_NOT_KEPT', '20', 'data.usage.tokens is a JSON number in a batch with more long numbers than the service keeps the digits of; send it as a decimal string'],
  ]);
});
