/**
 * The official Node client of this API, `@paid-ai/paid-node` (a pinned dev dependency), used
 * unchanged against the running service, the way a producer or a webhook receiver uses it:
 * `new PaidClient({ token, baseUrl: '<service>/api/v2' })`. Every operation the service
 * serves for the client: signals (both customer forms, attribution, duplicates, per-signal
 * errors, the 501-signal refusal, the rate limit with the client's own Retry-After wait),
 * products, customers and credit balances, webhooks (list, configure, a test delivery
 * verified by packages/receiver), and the errors as `PaidError` with `{error, code, details}`.
 */
import t from 'tap';
import http from 'node:http';
import type { PaidClient } from '@paid-ai/paid-node';
import { verifyWebhook } from '../../packages/receiver/src/index.js';
import { paidClient, paidError } from '../helpers/paid.js';
import { createOrg, drained, http as call, useService, type TestOrg } from '../helpers/service.js';

const { iso, svc } = useService(t, 'official-client');

const clientOf = (key: string, opts: { maxRetries?: number } = {}): PaidClient => paidClient(svc.url, key, opts);

/** The rows of an analytics query, through the service's own API (the client has no analytics operation). */
async function rows(org: TestOrg, query: string): Promise<unknown[][]> {
  const r = await call(svc.url, 'POST', '/api/v2/analytics/query', { token: org.live, body: { query } });
  if (r.status !== 200) throw new Error(`query: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.rows;
}

t.test('signals: both customer forms with attribution, stored with both forms resolved', async (t) => {
  const org = await createOrg(svc.url);
  const client = clientOf(org.live);
  const customer = await client.customers.createCustomer({ name: 'Acme', externalId: 'acme-42' });
  const product = await client.products.createProduct({ name: 'Chatbot', externalId: 'chatbot' });
  t.match(customer, { id: /^cus_/, name: 'Acme', externalId: 'acme-42' });
  t.match(product, { id: /^prod_/, name: 'Chatbot', externalId: 'chatbot' });

  const answer = await client.signals.createSignals({
    signals: [
      { eventName: 'api_call', customer: { externalCustomerId: 'acme-42' }, attribution: { externalProductId: 'chatbot' }, idempotencyKey: 'k-1', data: { tokens: 1200 } },
      { eventName: 'api_call', customer: { customerId: customer.id }, attribution: { productId: product.id }, idempotencyKey: 'k-2', timestamp: '2026-01-31T23:00:00Z' },
      { eventName: 'api_call', customer: { externalCustomerId: 'not-configured' } },
    ],
  });
  t.match(answer, { ingested: 3, duplicates: 0, failed: 0, errors: [] });
  await drained(iso);
  const stored = await rows(org, 'SELECT customer_id, external_customer_id, product_id, external_product_id FROM fact_signal ORDER BY external_customer_id, customer_id');
  t.same(stored, [
    [customer.id, 'acme-42', product.id, 'chatbot'],
    [customer.id, 'acme-42', product.id, 'chatbot'],
    ['', 'not-configured', '', ''],
  ]);
});

t.test('signals: a resent keyed batch is reported as duplicates and stored once', async (t) => {
  const org = await createOrg(svc.url);
  const client = clientOf(org.live);
  const signals = Array.from({ length: 20 }, (_, i) => ({ eventName: 'e', customer: { externalCustomerId: `c${i % 3}` }, idempotencyKey: `dup-${i}` }));
  t.match(await client.signals.createSignals({ signals }), { ingested: 20, duplicates: 0, failed: 0 });
  await drained(iso);
  t.match(await client.signals.createSignals({ signals }), { ingested: 0, duplicates: 20, failed: 0 }, 'the retry after a lost answer');
  t.match(await client.signals.createSignals({ signals: [signals[0]!, signals[0]!, { ...signals[0]!, idempotencyKey: 'fresh' }, { ...signals[0]!, idempotencyKey: 'fresh' }] }), { ingested: 1, duplicates: 3, failed: 0 }, 'repeats inside one request and of a committed key');
  await drained(iso);
  t.same(await rows(org, 'SELECT count() FROM fact_signal'), [['21']]);
});

t.test('signals: a mixed batch answers per-signal errors and stores only the good ones', async (t) => {
  const org = await createOrg(svc.url);
  const client = clientOf(org.live);
  const answer = await client.signals.createSignals({
    signals: [
      { eventName: 'ok', customer: { externalCustomerId: 'a' } },
      { eventName: '', customer: { externalCustomerId: 'a' } },
      { eventName: 'ok', customer: {} as never },
      { eventName: 'ok', customer: { externalCustomerId: 'a' }, timestamp: 'yesterday' },
      { eventName: 'ok', customer: { customerId: 'cus_x' }, attribution: { productId: 'p', externalProductId: 'q' } as never },
    ],
  });
  t.match(answer, { ingested: 1, duplicates: 0, failed: 4 });
  const errors = (answer as unknown as { errors: { index: number; code: string; field: string; message: string }[] }).errors;
  t.same(errors.map((e) => [e.index, e.code, e.field]), [
    [1, 'INVALID_SIGNAL', 'eventName'],
    [2, 'INVALID_SIGNAL', 'customer'],
    [3, 'INVALID_SIGNAL', 'timestamp'],
    [4, 'INVALID_SIGNAL', 'attribution'],
  ]);
  for (const e of errors) t.ok(e.message.length > 0, `error ${e.index} says what is wrong`);
  await drained(iso);
  t.same(await rows(org, 'SELECT event_name FROM fact_signal'), [['ok']]);

  const all = await paidError(client.signals.createSignals({ signals: [{ eventName: '', customer: { externalCustomerId: 'a' } }] }));
  t.equal(all.statusCode, 400);
  t.match(all.body, { error: String, code: 'INVALID_SIGNAL', details: /signals\[0\]\.eventName/ });
});

t.test('signals: 501 signals and the rate limit surface as PaidError; the client waits Retry-After', async (t) => {
  const org = await createOrg(svc.url, { burst: 500, refillPerSecond: 100 });
  const client = clientOf(org.live);
  const many = Array.from({ length: 501 }, () => ({ eventName: 'e', customer: { externalCustomerId: 'c' } }));
  const tooMany = await paidError(client.signals.createSignals({ signals: many }));
  t.equal(tooMany.statusCode, 400);
  t.match(tooMany.body, { error: String, code: 'BATCH_TOO_LARGE', details: /at most 500/ });

  const five = many.slice(0, 500);
  t.match(await client.signals.createSignals({ signals: five }), { ingested: 500 });
  const limited = await paidError(clientOf(org.live, { maxRetries: 0 }).signals.createSignals({ signals: five.slice(0, 300) }));
  t.equal(limited.statusCode, 429);
  t.same(limited.body, { error: 'Too Many Requests', code: 'RATE_LIMIT_EXCEEDED', details: limited.body && (limited.body as { details: string }).details });
  const retryAfter = Number(limited.rawResponse?.headers.get('retry-after'));
  t.ok(retryAfter >= 1, `Retry-After ${retryAfter}`);

  // With its default retries the client waits Retry-After and succeeds.
  await new Promise((r) => setTimeout(r, 3_100)); // refill the bucket again
  t.match(await client.signals.createSignals({ signals: five }), { ingested: 500 });
  const started = Date.now();
  t.match(await client.signals.createSignals({ signals: five.slice(0, 300) }), { ingested: 300 });
  t.ok(Date.now() - started >= 1_000 * 2, 'the client waited (Retry-After) before its retry');
});

t.test('customers, products and credit balances', async (t) => {
  const org = await createOrg(svc.url);
  const client = clientOf(org.live);
  const created = await client.customers.createCustomer({ name: 'Globex', externalId: 'globex', email: 'billing@globex.example', metadata: { tier: 'gold' } });
  t.match(created, { id: /^cus_/, name: 'Globex', externalId: 'globex', email: 'billing@globex.example', metadata: { tier: 'gold' }, createdAt: String, updatedAt: String });
  t.same(await client.customers.getCustomerById({ id: created.id }), created);
  t.same(await client.customers.getCustomerByExternalId({ externalId: 'globex' }), created);
  const updated = await client.customers.updateCustomerById({ id: created.id, body: { name: 'Globex Corp' } });
  t.match(updated, { id: created.id, name: 'Globex Corp', externalId: 'globex', email: 'billing@globex.example' });
  t.match(await client.customers.updateCustomerByExternalId({ externalId: 'globex', body: { phone: '+1 555 0100' } }), { name: 'Globex Corp', phone: '+1 555 0100' });
  const other = await client.customers.createCustomer({ name: 'Initech' });
  const page = await client.customers.listCustomers({ limit: 1, offset: 0 });
  t.match(page, { data: [{ id: created.id }], pagination: { limit: 1, offset: 0, total: 2, hasMore: true } });
  t.match(await client.customers.listCustomers({ limit: 1, offset: 1 }), { data: [{ id: other.id }], pagination: { total: 2, hasMore: false } });

  const dup = await paidError(client.customers.createCustomer({ name: 'Again', externalId: 'globex' }));
  t.equal(dup.statusCode, 409);
  t.match(dup.body, { error: String, code: 'CONFLICT', details: /externalId/ });
  const missing = await paidError(client.customers.getCustomerById({ id: 'cus_00000000000000000000' }));
  t.equal(missing.statusCode, 404);
  t.match(missing.body, { error: String, code: 'NOT_FOUND', details: String });
  const noName = await paidError(client.customers.createCustomer({} as never));
  t.equal(noName.statusCode, 400);
  t.match(noName.body, { code: String, details: /name/ });

  // Products: both attribution forms name the same product.
  const p = await client.products.createProduct({ name: 'Search', externalId: 'search', description: 'semantic search' });
  t.same(await client.products.getProductById({ id: p.id }), p);
  t.same(await client.products.getProductByExternalId({ externalId: 'search' }), p);
  t.match(await client.products.updateProductById({ id: p.id, body: { active: false } }), { id: p.id, active: false });
  t.match(await client.products.updateProductByExternalId({ externalId: 'search', body: { active: true } }), { id: p.id, active: true });
  t.match(await client.products.listProducts({}), { data: [{ id: p.id }], pagination: { total: 1, hasMore: false } });

  // Credit balances: a credit-priced attribute with a pool of 10 credits; 3 signals draw 3.
  const cur = '5a1f7c3e-1b2d-4c5e-8f90-0a1b2c3d4e5f';
  const plan = await call(svc.url, 'POST', '/api/v2/plans', { token: org.live, body: { name: 'Pro' } });
  const ola = await call(svc.url, 'POST', `/api/v2/customers/${created.id}/order-line-attributes`, { token: org.live, body: { planId: plan.body.id, eventName: 'search', unitPrice: '1', currency: 'EUR', creditsCurrencyId: cur, creditsPerUnit: '1' } });
  t.equal(ola.status, 201, JSON.stringify(ola.body));
  const pool = await call(svc.url, 'POST', `/api/v2/customers/${created.id}/credit-pools`, { token: org.live, body: { orderLineAttributeId: ola.body.id, credits: '10' } });
  t.equal(pool.status, 201, JSON.stringify(pool.body));
  t.match(await client.signals.createSignals({ signals: [0, 1, 2].map((i) => ({ eventName: 'search', customer: { externalCustomerId: 'globex' }, attribution: { productId: p.id }, idempotencyKey: `s-${i}` })) }), { ingested: 3 });
  await drained(iso);
  const expect = { data: [{ creditsCurrencyId: cur, available: 7, used: 3, total: 10 }] };
  let balances = await client.customers.getCustomerCreditBalances({ id: created.id });
  for (let i = 0; i < 100 && balances.data[0]?.used !== 3; i++) {
    await new Promise((r) => setTimeout(r, 100));
    balances = await client.customers.getCustomerCreditBalances({ id: created.id });
  }
  t.match(balances, expect);
  t.match(await client.customers.getCustomerCreditBalancesByExternalId({ externalId: 'globex' }), expect);

  t.same(await client.customers.deleteCustomerById({ id: other.id }), {}, 'delete answers an empty object or no body');
  t.equal((await paidError(client.customers.getCustomerById({ id: other.id }))).statusCode, 404);
});

t.test('webhooks: list, configure, a test delivery verified by the receiver package', async (t) => {
  const org = await createOrg(svc.url);
  const client = clientOf(org.live);
  const got: { body: Buffer; header: string }[] = [];
  const receiver = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      got.push({ body: Buffer.concat(chunks), header: String(req.headers['x-webhook-signature'] ?? '') });
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => receiver.close(() => r())));
  const url = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hooks`;

  const list = await client.webhooks.listWebhooks();
  t.equal(list.data.length, 10);
  t.match(list.data[0], { id: String, name: 'billing-invoice-created', description: String, enabled: false, url: null, lastSentAt: null, lastStatus: null });
  t.ok(list.data.some((w) => (w.name as string) === 'billing-credit-cap-reached'), 'the credit-cap event the client does not list yet');

  const rotated = await call(svc.url, 'POST', '/api/v2/webhooks/rotate-secret', { token: org.live });
  const secret = rotated.body.signingSecret as string;
  const configured = await client.webhooks.updateWebhook({ webhookName: 'billing-credits-depleted', url, enabled: true });
  t.match(configured, { name: 'billing-credits-depleted', url, enabled: true, lastStatus: null });
  const test = await client.webhooks.testWebhook({ webhookName: 'billing-credits-depleted' });
  t.match(test, { success: true });
  t.equal(got.length, 1);
  const verified = verifyWebhook(got[0]!.body, got[0]!.header, secret);
  t.match(verified, { ok: true });
  t.match(JSON.parse(got[0]!.body.toString()), { event: 'billing-credits-depleted', isTest: true });
  const after = (await client.webhooks.listWebhooks()).data.find((w) => w.name === 'billing-credits-depleted');
  t.match(after, { lastStatus: 'success', lastSentAt: String });

  const bad = await paidError(client.webhooks.updateWebhook({ webhookName: 'billing-credits-depleted', url: 'http://10.0.0.7/x' }));
  t.equal(bad.statusCode, 400);
  t.match(bad.body, { error: String, code: 'INVALID_WEBHOOK', details: /url/ });
  const unknown = await paidError(client.webhooks.testWebhook({ webhookName: 'billing-nope' as never }));
  t.equal(unknown.statusCode, 404);
  t.match(unknown.body, { code: 'NOT_FOUND' });
});

