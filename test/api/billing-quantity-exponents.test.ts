/**
 * JSON-number quantities at the edges of the exponent, through the real HTTP API: signals
 * sent as raw JSON text (the numbers exactly as written), the stored data and the billing
 * outcome read back by the analytics API. A quantity counts at the value its text states,
 * whatever its exponent: never the 0 or the Infinity a double (or decimal.js) makes of it,
 * and a number beyond the double's range keeps its key in the stored data.
 */
import t from 'tap';
import { billed } from '../helpers/bus.js';
import { createOrg, http, ok, useService, type TestOrg } from '../helpers/service.js';

const { iso, svc } = useService(t, 'billing-quantity-exponents');

/** Customer `acme` with `ev` priced at 1 per data.q; returns the org and the attribute's id. */
async function setup(): Promise<{ org: TestOrg; customerId: string; ola: string }> {
  const org = await createOrg(svc.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const call = (method: string, path: string, body?: unknown) => ok(http(svc.url, method, path, { token: org.live, body }));
  const customer = await call('POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme' });
  const plan = await call('POST', '/api/v2/plans', { name: 'Pro' });
  const attr = await call('POST', `/api/v2/customers/${customer.id}/order-line-attributes`, {
    planId: plan.id, eventName: 'ev', quantity: { kind: 'path', path: 'q' }, unitPrice: '1', currency: 'USD',
  });
  return { org, customerId: customer.id, ola: attr.id };
}

const query = async (key: string, q: string): Promise<unknown[][]> => (await ok(http(svc.url, 'POST', '/api/v2/analytics/query', { token: key, body: { query: q } }), [200])).rows;

/** A signal as raw JSON text: `q` written as given, next to a key that must stay. */
const raw = (second: number, q: string): string =>
  `{"eventName":"ev","customer":{"externalCustomerId":"acme"},"timestamp":"2026-01-10T00:${String(Math.floor(second / 60)).padStart(2, '0')}:${String(second % 60).padStart(2, '0')}Z","data":{"q":${q},"keep":"me"}}`;

const FIVE_THOUSAND_AND_ONE = `1${'0'.repeat(5000)}`;

/** The stored data of a zero (toString writes a 64-bit integer quoted). */
const INT0 = '{"keep":"me","q":"0"}';

/**
 * Input, the data stored and the type of data.q there, and the billing outcome: ['cost',
 * quantity] or [reason, detail]. A number a double keeps, or reads as 0, is stored as the double
 * (as any number of the data); one beyond the double's range as the string of its text.
 */
const CASES: [string, string, string, [string, string]][] = [
  // Tiny positive values: a double (and decimal.js) reads 0.
  ['1e-99999999999999999999', INT0, 'Int64', ['QUANTITY_TOO_MANY_DECIMAL_PLACES', 'data.q has 99999999999999999999 decimal places; at most 24 are allowed']],
  ['1e-9007199254740993', INT0, 'Int64', ['QUANTITY_TOO_MANY_DECIMAL_PLACES', 'data.q has 9007199254740993 decimal places; at most 24 are allowed']],
  ['9e-9000000000000000', INT0, 'Int64', ['QUANTITY_TOO_MANY_DECIMAL_PLACES', 'data.q has 9000000000000000 decimal places; at most 24 are allowed']],
  ['1e-999999999', INT0, 'Int64', ['QUANTITY_TOO_MANY_DECIMAL_PLACES', 'data.q has 999999999 decimal places; at most 24 are allowed']],
  ['1e-400', INT0, 'Int64', ['QUANTITY_TOO_MANY_DECIMAL_PLACES', 'data.q has 400 decimal places; at most 24 are allowed']],
  [`0.${'0'.repeat(5000)}1`, INT0, 'Int64', ['QUANTITY_TOO_MANY_DECIMAL_PLACES', 'data.q has 5001 decimal places; at most 24 are allowed']],
  // Beyond the double's range: JSON.parse reads ±Infinity; stored as the string of the text.
  ['1e309', '{"keep":"me","q":"1e309"}', 'String', ['QUANTITY_TOO_LARGE', 'data.q has 310 integer digits; at most 52 are allowed']],
  ['1e400', '{"keep":"me","q":"1e400"}', 'String', ['QUANTITY_TOO_LARGE', 'data.q has 401 integer digits; at most 52 are allowed']],
  ['-1e400', '{"keep":"me","q":"-1e400"}', 'String', ['QUANTITY_NEGATIVE', 'data.q must not be negative']],
  ['12e308', '{"keep":"me","q":"12e308"}', 'String', ['QUANTITY_TOO_LARGE', 'data.q has 310 integer digits; at most 52 are allowed']],
  ['1e+999999999', '{"keep":"me","q":"1e+999999999"}', 'String', ['QUANTITY_TOO_LARGE', 'data.q has 1000000000 integer digits; at most 52 are allowed']],
  ['1e99999999999999999999', '{"keep":"me","q":"1e99999999999999999999"}', 'String', ['QUANTITY_TOO_LARGE', 'data.q has 100000000000000000000 integer digits; at most 52 are allowed']],
  [FIVE_THOUSAND_AND_ONE, `{"keep":"me","q":"${FIVE_THOUSAND_AND_ONE}"}`, 'String', ['QUANTITY_TOO_LARGE', 'data.q has 5001 integer digits; at most 52 are allowed']],
  // Zeros at any exponent are zero; the bounds themselves are priced.
  ['0e99999999999999999999', INT0, 'Int64', ['cost', '0']],
  ['-0', INT0, 'Int64', ['cost', '0']],
  ['-0e-99999999999999999999', INT0, 'Int64', ['cost', '0']],
  ['0.0000000000000000000000001e+30', '{"keep":"me","q":"100000"}', 'Int64', ['cost', '100000']],
  ['1e-24', '{"keep":"me","q":1e-24}', 'Float64', ['cost', '0.000000000000000000000001']],
  ['1e-25', '{"keep":"me","q":1e-25}', 'Float64', ['QUANTITY_TOO_MANY_DECIMAL_PLACES', 'data.q has 25 decimal places; at most 24 are allowed']],
  ['1e51', '{"keep":"me","q":1e51}', 'Float64', ['cost', `1${'0'.repeat(51)}`]],
  ['1e52', '{"keep":"me","q":1e52}', 'Float64', ['QUANTITY_TOO_LARGE', 'data.q has 53 integer digits; at most 52 are allowed']],
];

t.test('JSON-number quantities at extreme exponents: stored with their key, judged on the value their text states', async (t) => {
  const s = await setup();
  await ok(http(svc.url, 'POST', '/api/v2/signals/bulk', { token: s.org.live, raw: `{"signals":[${CASES.map(([q], i) => raw(i, q)).join(',')}]}` }), [202]);
  await billed(iso);
  const rows = (await query(s.org.live, `
    SELECT toString(s.data), dynamicType(s.data.q), c.reason, c.detail, p.quantity, p.cost
    FROM fact_signal AS s
    LEFT JOIN (SELECT signal_id, reason, detail FROM fact_unpriced) AS c ON c.signal_id = s.id
    LEFT JOIN (SELECT signal_id, toString(quantity) AS quantity, toString(cost_amount) AS cost FROM fact_cost) AS p ON p.signal_id = s.id
    ORDER BY s.created_at`)) as (string | null)[][];
  t.equal(rows.length, CASES.length, 'every signal is stored');
  CASES.forEach(([q, data, type, outcome], i) => {
    const [stored, storedType, reason, detail, quantity, cost] = rows[i]!;
    const name = q.length > 40 ? `${q.slice(0, 20)}…(${q.length} characters)` : q;
    t.same([stored, storedType], [data, type], `${name}: the stored data keeps q (${type}) and the other key`);
    if (outcome[0] === 'cost') {
      t.same([reason || null, quantity, cost], [null, outcome[1], outcome[1]], `${name}: priced at ${outcome[1]}`);
    } else {
      t.same([reason, detail, quantity || null], [outcome[0], outcome[1], null], `${name}: not priced, ${outcome[0]}`);
    }
  });
  const unpriced = (await query(s.org.live, 'SELECT count(), uniqExact(order_line_attribute_id), any(customer_id) FROM fact_unpriced')) as string[][];
  t.same(unpriced, [[String(CASES.filter(([, , , o]) => o[0] !== 'cost').length), '1', s.customerId]], 'one fact_unpriced row per refused signal, for the attribute and customer');
  t.same(await query(s.org.live, "SELECT count() FROM fact_signal WHERE data.q::String = '1e400'"), [['1']], 'analytics reads the kept text at its path');
});

t.test('the legacy endpoint: a quantity beyond the double\'s range is kept and refused for its size', async (t) => {
  const s = await setup();
  await ok(http(svc.url, 'POST', '/api/v1/usage', { token: s.org.live, raw: `[${raw(0, '1e400')},${raw(1, '1e-99999999999999999999')}]` }), [202]);
  await billed(iso);
  t.same(await query(s.org.live, 'SELECT toString(s.data), u.reason FROM fact_signal AS s LEFT JOIN fact_unpriced AS u ON u.signal_id = s.id ORDER BY s.created_at'), [
    ['{"keep":"me","q":"1e400"}', 'QUANTITY_TOO_LARGE'],
    [INT0, 'QUANTITY_TOO_MANY_DECIMAL_PLACES'],
  ]);
  t.same(await query(s.org.live, 'SELECT count() FROM fact_cost'), [['0']], 'nothing priced');
});
