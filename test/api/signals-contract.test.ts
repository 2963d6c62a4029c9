/**
 * The signal contract end to end through the real HTTP API: the nested customer/attribution
 * references and the identity columns of fact_signal, per-signal errors (mixed and
 * all-refused batches, their tokens), `duplicates` (a resent keyed batch, repeats inside one
 * request), the legacy v1 mapping, and a flat `customerId` (outside `customer`) refused.
 */
import t from 'tap';
import { connect } from '@nats-io/transport-node';
import { Kvm } from '@nats-io/kv';
import { billed } from '../helpers/bus.js';
import { NATS_URL, createOrg, drained, http, ok, sendBatch, useService, type TestOrg } from '../helpers/service.js';

const { iso, svc } = useService(t, 'signals-contract');

const query = async (org: TestOrg, q: string): Promise<unknown[][]> => (await ok(http(svc.url, 'POST', '/api/v2/analytics/query', { token: org.live, body: { query: q } }), [200])).rows;
const identities = (org: TestOrg): Promise<unknown[][]> =>
  query(org, 'SELECT toUInt32(splitByChar(\'_\', id)[3]) AS i, customer_id, external_customer_id, product_id, external_product_id FROM fact_signal ORDER BY i');
const indexes = async (org: TestOrg): Promise<number[]> => (await query(org, "SELECT toUInt32(splitByChar('_', id)[3]) AS i FROM fact_signal ORDER BY i")).map((r) => Number(r[0]));

t.test('both customer forms, with and without attribution: the form sent stored, the other filled when the customer or product exists', async (t) => {
  const org = await createOrg(svc.url);
  const customer = await ok(http(svc.url, 'POST', '/api/v2/customers', { token: org.live, body: { externalId: 'acme-ext', name: 'Acme' } }));
  // A product in the billing bucket's product layout (prod./pxid. keys, as the configuration store keeps them).
  const productId = 'prod_AAAAAAAAAAAAAAAAAAA1';
  const nc = await connect({ servers: NATS_URL });
  try {
    const kv = await new Kvm(nc).open(`${iso.natsPrefix}_billing`);
    await kv.put(`prod.${org.id}.live.${productId}`, JSON.stringify({ id: productId, name: 'Agent', externalId: 'agent-ext', active: true }));
    await kv.put(`pxid.${org.id}.live.${Buffer.from('agent-ext').toString('base64url')}`, JSON.stringify({ productId }));
  } finally {
    await nc.close();
  }
  const r = await sendBatch(svc.url, org.live, {
    signals: [
      { eventName: 'e', customer: { customerId: customer.id } },
      { eventName: 'e', customer: { externalCustomerId: 'acme-ext' }, attribution: { externalProductId: 'agent-ext' } },
      { eventName: 'e', customer: { externalCustomerId: 'nobody' }, attribution: { productId } },
      { eventName: 'e', customer: { customerId: 'cus_00000000000000000000' }, attribution: { externalProductId: 'no-such-product' } },
      { eventName: 'e', customer: { externalCustomerId: customer.id }, attribution: null },
    ],
  });
  t.equal(r.status, 202, JSON.stringify(r.body));
  t.match(r.body, { ingested: 5, duplicates: 0, failed: 0, errors: [] });
  await drained(iso);
  t.same(await identities(org), [
    ['0', customer.id, 'acme-ext', '', ''],
    ['1', customer.id, 'acme-ext', productId, 'agent-ext'],
    ['2', '', 'nobody', productId, 'agent-ext'],
    ['3', 'cus_00000000000000000000', '', '', 'no-such-product'],
    // A service id sent as an externalId names no customer: references are read by their kind only.
    ['4', '', customer.id, '', ''],
  ]);
});

t.test('a mixed batch: the valid signals stored, the refused ones reported exactly and stored nowhere; tokens for every signal; an all-refused batch is a 400 that takes no token', async (t) => {
  const org = await createOrg(svc.url, { burst: 1000, refillPerSecond: 0.001 });
  const refused = await sendBatch(svc.url, org.live, {
    signals: [{ eventName: 'e' }, { eventName: 'e', customer: { customerId: 'a', externalCustomerId: 'b' } }, { eventName: 'e', customerId: 'flat' }],
  });
  t.equal(refused.status, 400);
  t.same(refused.body, {
    error: 'Bad Request',
    code: 'INVALID_SIGNAL',
    details: 'signals[0].customer: is required: {"customerId": …} or {"externalCustomerId": …}',
    errors: [
      { index: 0, code: 'INVALID_SIGNAL', field: 'customer', message: 'is required: {"customerId": …} or {"externalCustomerId": …}' },
      { index: 1, code: 'INVALID_SIGNAL', field: 'customer', message: 'must have exactly one of customerId or externalCustomerId, got both' },
      { index: 2, code: 'INVALID_SIGNAL', field: 'customerId', message: 'unknown field' },
    ],
  });
  const mixed = await sendBatch(svc.url, org.live, {
    signals: [
      { eventName: 'e', customer: { externalCustomerId: 'c1' }, idempotencyKey: 'm-0' },
      { eventName: '', customer: { externalCustomerId: 'c1' }, idempotencyKey: 'm-1' },
      { eventName: 'e', customer: { externalCustomerId: 'c1' }, idempotencyKey: 'm-2', data: { n: 2 } },
      { eventName: 'e', customer: { externalCustomerId: 'c1' }, attribution: { productId: 'p', externalProductId: 'q' }, idempotencyKey: 'm-3' },
      ...Array.from({ length: 396 }, () => ({ eventName: 'fill', customer: { externalCustomerId: 'c1' } })),
    ],
  });
  t.equal(mixed.status, 202, JSON.stringify(mixed.body));
  t.same(Object.keys(mixed.body), ['ingested', 'duplicates', 'failed', 'errors', 'batchId']);
  t.match(mixed.body, { ingested: 398, duplicates: 0, failed: 2 });
  t.same(mixed.body.errors, [
    { index: 1, code: 'INVALID_SIGNAL', field: 'eventName', message: 'must not be empty' },
    { index: 3, code: 'INVALID_SIGNAL', field: 'attribution', message: 'must have exactly one of productId or externalProductId, got both' },
  ]);
  // 1000 tokens: the refused request took none, the mixed one 400 (every signal): 600 left.
  const n = (k: number) => ({ signals: Array.from({ length: k }, () => ({ eventName: 'more', customer: { externalCustomerId: 'c1' } })) });
  t.equal((await sendBatch(svc.url, org.live, n(500))).status, 202, '500 of the 600 tokens left');
  t.equal((await sendBatch(svc.url, org.live, n(101))).status, 429, '101 signals need more than the 100 tokens left');
  t.equal((await sendBatch(svc.url, org.live, n(100))).status, 202, '100 signals take the 100 tokens left');
  await drained(iso);
  t.same(await query(org, "SELECT toUInt32(splitByChar('_', id)[3]), idempotency_key FROM fact_signal WHERE event_name = 'e' ORDER BY 1"), [['0', 'm-0'], ['2', 'm-2']], 'the valid signals, with their own indexes');
});

t.test('refused signals claim nothing: their keys are ingested when sent again valid', async (t) => {
  const org = await createOrg(svc.url);
  const first = await sendBatch(svc.url, org.live, {
    signals: [
      { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'r-0' },
      { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'r-1', timestamp: 'yesterday' },
    ],
  });
  t.match(first.body, { ingested: 1, duplicates: 0, failed: 1, errors: [{ index: 1, field: 'timestamp' }] });
  await drained(iso);
  const second = await sendBatch(svc.url, org.live, {
    signals: [
      { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'r-0' },
      { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'r-1' },
    ],
  });
  t.match(second.body, { ingested: 1, duplicates: 1, failed: 0, errors: [] });
  await drained(iso);
  t.same(await query(org, 'SELECT idempotency_key, count() FROM fact_signal GROUP BY idempotency_key ORDER BY 1'), [['r-0', '1'], ['r-1', '1']]);
});

t.test('a keyed batch sent again answers duplicates = n and is stored once', async (t) => {
  const org = await createOrg(svc.url);
  const body = { signals: Array.from({ length: 20 }, (_, i) => ({ eventName: 'e', customer: { externalCustomerId: `c${i % 3}` }, idempotencyKey: `k-${i}`, data: { i } })) };
  const first = await sendBatch(svc.url, org.live, body);
  t.match(first.body, { ingested: 20, duplicates: 0, failed: 0, errors: [] });
  await drained(iso);
  const second = await sendBatch(svc.url, org.live, body);
  t.equal(second.status, 202);
  t.match(second.body, { ingested: 0, duplicates: 20, failed: 0, errors: [] });
  t.not(second.body.batchId, first.body.batchId);
  await drained(iso);
  t.same(await query(org, 'SELECT count(), uniqExact(idempotency_key), uniqExact(batch_id) FROM fact_signal'), [['20', '20', '1']], 'stored once, all from the first batch');
  // The test mode is another scope: the same keys are new there.
  const test = await sendBatch(svc.url, org.test, body);
  t.match(test.body, { ingested: 20, duplicates: 0 });
});

t.test('repeats inside one request: the first occurrence ingested, the others duplicates', async (t) => {
  const org = await createOrg(svc.url);
  const s = (key: string | null, n: number) => ({ eventName: 'e', customer: { externalCustomerId: 'c' }, ...(key === null ? {} : { idempotencyKey: key }), data: { n } });
  const r = await sendBatch(svc.url, org.live, { signals: [s('a', 0), s('b', 1), s('a', 2), s(null, 3), s('a', 4), s('b', 5), s('c', 6)] });
  t.match(r.body, { ingested: 4, duplicates: 3, failed: 0, errors: [] });
  await drained(iso);
  t.same(await indexes(org), [0, 1, 3, 6]);
  // A key escaped differently is the same key.
  const escaped = await http(svc.url, 'POST', '/api/v2/signals/bulk', {
    token: org.live,
    raw: '{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"idempotencyKey":"x\\u0079"},{"eventName":"e","customer":{"externalCustomerId":"c"},"idempotencyKey":"xy"}]}',
  });
  t.match(escaped.body, { ingested: 1, duplicates: 1 });
});

t.test('legacy v1: fields mapped to the v2 shape, numbers in data keep their digits, per-signal errors named the v1 way', async (t) => {
  const org = await createOrg(svc.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const call = (method: string, path: string, body?: unknown) => ok(http(svc.url, method, path, { token: org.live, body }));
  const customer = await call('POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme' });
  const plan = await call('POST', '/api/v2/plans', { name: 'Pro' });
  await call('POST', `/api/v2/customers/${customer.id}/order-line-attributes`, { planId: plan.id, eventName: 'tokens', quantity: { kind: 'path', path: 'usage.tokens' }, unitPrice: '1', currency: 'USD' });
  const v1 = await http(svc.url, 'POST', '/api/v1/usage', {
    token: org.live,
    raw:
      '[{"event_name":"tokens","customer_id":"acme","agent_id":"agent-7","idempotency_key":"v1-0","timestamp":"2026-01-10T00:00:01Z","data":{"usage":{"tokens":1234567890.123456789012}}},' +
      '{"event_name":"tokens","customer_id":""},' +
      '{"event_name":"tokens","customer_id":"acme","unknown":1},' +
      '{"eventName":"tokens","customer":{"externalCustomerId":"acme"},"timestamp":"2026-01-10T00:00:02Z","data":{"usage":{"tokens":2.50}}}]',
  });
  t.equal(v1.status, 202, JSON.stringify(v1.body));
  t.match(v1.body, { ingested: 2, duplicates: 0, failed: 2 });
  t.same(v1.body.errors, [
    { index: 1, code: 'INVALID_SIGNAL', field: 'customer_id', message: 'must not be empty' },
    { index: 2, code: 'INVALID_SIGNAL', field: 'unknown', message: 'unknown field' },
  ]);
  await drained(iso);
  const single = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: { event_name: 'tokens', customer_id: 'acme', idempotency_key: 'v1-0' } });
  t.match(single.body, { ingested: 0, duplicates: 1, failed: 0 }, 'the key of the first v1 signal, sent again');
  const refused = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: { event_name: 5, customer_id: 'acme' } });
  t.equal(refused.status, 400);
  t.same(refused.body, {
    error: 'Bad Request',
    code: 'INVALID_SIGNAL',
    details: 'signal.event_name: must be a string, got number',
    errors: [{ index: 0, code: 'INVALID_SIGNAL', field: 'event_name', message: 'must be a string, got number' }],
  });
  await billed(iso);
  t.same(
    await query(org, "SELECT toUInt32(splitByChar('_', id)[3]) AS i, customer_id, external_customer_id, product_id, external_product_id, idempotency_key FROM fact_signal WHERE batch_id = (SELECT batch_id FROM fact_signal WHERE idempotency_key = 'v1-0') ORDER BY i"),
    [
      ['0', customer.id, 'acme', '', 'agent-7', 'v1-0'],
      ['3', customer.id, 'acme', '', '', null],
    ],
  );
  t.same(await query(org, "SELECT toString(quantity) FROM fact_cost WHERE event_name = 'tokens' ORDER BY created_at"), [['1234567890.123456789012'], ['2.5']], 'the quantity with every digit sent');
});

t.test('a flat customerId (outside customer) is a signal error like any unknown field', async (t) => {
  const org = await createOrg(svc.url);
  const r = await sendBatch(svc.url, org.live, {
    signals: [
      { eventName: 'e', customer: { externalCustomerId: 'c' } },
      { eventName: 'e', customerId: 'c' },
      { eventName: 'e', customer: { externalCustomerId: 'c' }, customerId: 'c' },
      { eventName: 'e', customer: { customerId: 'cus_1', extra: 1 } },
    ],
  });
  t.equal(r.status, 202);
  t.same(r.body.errors, [
    { index: 1, code: 'INVALID_SIGNAL', field: 'customerId', message: 'unknown field' },
    { index: 2, code: 'INVALID_SIGNAL', field: 'customerId', message: 'unknown field' },
    { index: 3, code: 'INVALID_SIGNAL', field: 'customer.extra', message: 'unknown field' },
  ]);
  t.match(r.body, { ingested: 1, failed: 3 });
  await drained(iso);
  t.same(await indexes(org), [0]);
});
