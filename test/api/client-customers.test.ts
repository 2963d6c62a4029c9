/**
 * The official client `@paid-ai/paid-node` (pinned dev dependency), unchanged, against a
 * running service: every customer, product and credit-balance operation it has, with the
 * service's errors surfacing as the client's `PaidError` carrying `{error, code, details}`
 * in `err.body`. Credit balances are read after signals have been billed; a deleted customer's
 * later signals draw nothing.
 */
import t, { type Test } from 'tap';
import type { PaidClient } from '@paid-ai/paid-node';
import { paidClient, paidError } from '../helpers/paid.js';
import { billed, stateKeys } from '../helpers/bus.js';
import { createOrg, http, sendBatch, useService, type TestOrg } from '../helpers/service.js';

const { iso, svc } = useService(t, 'paidclient');
const CUR = '5b7d0c1e-2f3a-4b5c-8d6e-7f8091a2b3c4';

/**
 * Signals of `eventName` for the customer `ref` names (its service id `cus_…`, else its
 * externalId), sent through the bulk endpoint; the one place that knows the signal's wire shape here.
 */
async function sendSignals(org: TestOrg, ref: string, eventName: string, keys: string[]): Promise<void> {
  const customer = /^cus_[0-9A-Za-z]{20}$/.test(ref) ? { customerId: ref } : { externalCustomerId: ref };
  const signals = keys.map((idempotencyKey) => ({ eventName, customer, idempotencyKey }));
  const r = await sendBatch(svc.url, org.live, { signals });
  if (r.status >= 300) throw new Error(`signals: ${r.status} ${JSON.stringify(r.body)}`);
}

/** The client's error for `request`, checked: a PaidError of `status` whose body is `{error, code, details}` naming `field`. */
async function refused(t: Test, request: Promise<unknown>, status: number, code: string, field: string): Promise<void> {
  const e = await paidError(request);
  t.equal(e.statusCode, status, `${code}: status`);
  t.match(e.body, { error: String, code, details: new RegExp(`^${field}:`) }, `${code}: {error, code, details} naming ${field}`);
}

let org: TestOrg;
let client: PaidClient;
t.before(async () => {
  org = await createOrg(svc.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  client = paidClient(svc.url, org.live);
});

t.test('customers through the official client', async (t) => {
  const created = await client.customers.createCustomer({
    name: 'Acme',
    externalId: 'acme',
    email: 'billing@acme.example',
    billingAddress: { line1: '1 Road', city: 'Paris', country: 'FR' },
    metadata: { plan: 'pro' },
    defaultCurrency: 'EUR',
  });
  t.match(created, { id: /^cus_/, name: 'Acme', externalId: 'acme', email: 'billing@acme.example', phone: '', website: '', legalName: null, creationState: 'active', churnDate: null, defaultCurrency: 'EUR', metadata: { plan: 'pro' } });
  const second = await client.customers.createCustomer({ name: 'Beta', creationState: 'draft' });
  t.match(second, { externalId: null, creationState: 'draft' });

  t.same(await client.customers.getCustomerById({ id: created.id }), created);
  t.same(await client.customers.getCustomerByExternalId({ externalId: 'acme' }), created);

  const list = await client.customers.listCustomers({ limit: 1, offset: 0 });
  t.same(list.data.map((c) => c.id), [created.id]);
  t.same(list.pagination, { limit: 1, offset: 0, total: 2, hasMore: true });
  const next = await client.customers.listCustomers({ limit: 1, offset: 1 });
  t.same([next.data.map((c) => c.id), next.pagination.hasMore], [[second.id], false]);
  t.same((await client.customers.listCustomers()).data.map((c) => c.id), [created.id, second.id], 'no arguments: the first page');

  const updated = await client.customers.updateCustomerById({ id: created.id, body: { phone: '+33 1 00 00 00 00', legalName: 'Acme SAS' } });
  t.match(updated, { phone: '+33 1 00 00 00 00', legalName: 'Acme SAS', email: 'billing@acme.example', name: 'Acme' });
  const byExternal = await client.customers.updateCustomerByExternalId({ externalId: 'acme', body: { churnDate: '2027-01-01T00:00:00Z', metadata: null } });
  t.match(byExternal, { churnDate: '2027-01-01T00:00:00Z', metadata: null, phone: '+33 1 00 00 00 00' });

  await refused(t, client.customers.getCustomerById({ id: 'cus_AAAAAAAAAAAAAAAAAAAA' }), 404, 'NOT_FOUND', 'customerId');
  await refused(t, client.customers.getCustomerByExternalId({ externalId: 'nobody' }), 404, 'NOT_FOUND', 'externalId');
  await refused(t, client.customers.updateCustomerById({ id: 'cus_AAAAAAAAAAAAAAAAAAAA', body: { name: 'x' } }), 404, 'NOT_FOUND', 'customerId');
  await refused(t, client.customers.createCustomer({ name: 'Dup', externalId: 'acme' }), 409, 'CONFLICT', 'externalId');
  await refused(t, client.customers.updateCustomerById({ id: second.id, body: { externalId: 'acme' } }), 409, 'CONFLICT', 'externalId');
  await refused(t, client.customers.updateCustomerById({ id: created.id, body: { externalId: 'acme-2' } }), 400, 'INVALID_BILLING_CONFIG', 'externalId');
  await refused(t, client.customers.createCustomer({ name: '' }), 400, 'INVALID_BILLING_CONFIG', 'name');
  await refused(t, client.customers.createCustomer({ name: 'x', email: 'nope' }), 400, 'INVALID_BILLING_CONFIG', 'email');
  await refused(t, client.customers.listCustomers({ limit: 0 }), 400, 'INVALID_BILLING_CONFIG', 'limit');
  await refused(t, client.customers.listCustomers({ offset: -1 }), 400, 'INVALID_BILLING_CONFIG', 'offset');
  t.same(await client.customers.getCustomerById({ id: second.id }), second, 'refusals changed nothing');

  await client.customers.deleteCustomerById({ id: second.id });
  await refused(t, client.customers.getCustomerById({ id: second.id }), 404, 'NOT_FOUND', 'customerId');
  await refused(t, client.customers.deleteCustomerById({ id: second.id }), 404, 'NOT_FOUND', 'customerId');
  const third = await client.customers.createCustomer({ name: 'Gamma', externalId: 'gamma' });
  await client.customers.deleteCustomerByExternalId({ externalId: 'gamma' });
  await refused(t, client.customers.getCustomerByExternalId({ externalId: 'gamma' }), 404, 'NOT_FOUND', 'externalId');
  await refused(t, client.customers.deleteCustomerByExternalId({ externalId: 'gamma' }), 404, 'NOT_FOUND', 'externalId');
  await refused(t, client.customers.createCustomer({ name: 'Gamma again', externalId: 'gamma' }), 409, 'CONFLICT', 'externalId');
  t.same((await client.customers.listCustomers()).data.map((c) => c.id), [created.id], `deleted customers are not listed (${third.id})`);
});

t.test('products through the official client', async (t) => {
  const p = await client.products.createProduct({ name: 'Agent', externalId: 'agent', description: 'An agent', productCode: 'AG' });
  t.match(p, { id: /^prod_/, name: 'Agent', externalId: 'agent', description: 'An agent', productCode: 'AG', active: true, archivedAt: null, metadata: null });
  const q = await client.products.createProduct({ name: 'Other' });
  t.same(await client.products.getProductById({ id: p.id }), p);
  t.same(await client.products.getProductByExternalId({ externalId: 'agent' }), p);
  const page = await client.products.listProducts({ limit: 10, offset: 0 });
  t.same([page.data.map((x) => x.id), page.pagination], [[p.id, q.id], { limit: 10, offset: 0, total: 2, hasMore: false }]);
  const archived = await client.products.updateProductById({ id: p.id, body: { active: false, metadata: { v: 2 } } });
  t.match(archived, { active: false, archivedAt: String, metadata: { v: 2 }, name: 'Agent' });
  const renamed = await client.products.updateProductByExternalId({ externalId: 'agent', body: { name: 'Agent 2' } });
  t.match(renamed, { name: 'Agent 2', externalId: 'agent', active: false });
  await refused(t, client.products.getProductById({ id: 'prod_AAAAAAAAAAAAAAAAAAAA' }), 404, 'NOT_FOUND', 'productId');
  await refused(t, client.products.getProductByExternalId({ externalId: 'nobody' }), 404, 'NOT_FOUND', 'externalId');
  await refused(t, client.products.updateProductByExternalId({ externalId: 'nobody', body: { name: 'x' } }), 404, 'NOT_FOUND', 'externalId');
  await refused(t, client.products.createProduct({ name: 'Dup', externalId: 'agent' }), 409, 'CONFLICT', 'externalId');
  await refused(t, client.products.updateProductById({ id: q.id, body: { externalId: 'agent' } }), 409, 'CONFLICT', 'externalId');
  await refused(t, client.products.updateProductById({ id: p.id, body: { externalId: 'agent-2' } }), 400, 'INVALID_BILLING_CONFIG', 'externalId');
  await refused(t, client.products.createProduct({ name: '' }), 400, 'INVALID_BILLING_CONFIG', 'name');
  await refused(t, client.products.listProducts({ limit: 1001 }), 400, 'INVALID_BILLING_CONFIG', 'limit');
  t.same(await client.products.getProductById({ id: q.id }), q, 'refusals changed nothing');
});

t.test('credit balances through the official client, after billed signals; a deleted customer draws nothing more', async (t) => {
  const o = await createOrg(svc.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const c = paidClient(svc.url, o.live);
  const api = async (method: string, path: string, body?: unknown) => {
    const r = await http(svc.url, method, `/api/v2${path}`, { token: o.live, body });
    if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const cus = await c.customers.createCustomer({ name: 'Metered', externalId: 'metered' });
  t.same(await c.customers.getCustomerCreditBalances({ id: cus.id }), { data: [] }, 'no pools yet');
  // Pools and their pricing are the service's own configuration (no client operation has them).
  const plan = await api('POST', '/plans', { name: 'Credits' });
  const ola = await api('POST', `/customers/${cus.id}/order-line-attributes`, { planId: plan.id, eventName: 'call', unitPrice: '1', currency: 'USD', creditsCurrencyId: CUR, creditsPerUnit: '0.1' });
  const pool = await api('POST', `/customers/${cus.id}/credit-pools`, { orderLineAttributeId: ola.id, credits: '5' });
  await api('POST', `/customers/${cus.id}/credit-pools/${pool.id}/top-ups`, { credits: '0.25' });

  await sendSignals(o, 'metered', 'call', ['k1', 'k2', 'k3']);
  await billed(iso);
  const balances = await c.customers.getCustomerCreditBalances({ id: cus.id });
  t.equal(balances.data.length, 1);
  t.match(balances.data[0], {
    creditsCurrencyId: CUR,
    total: 5.25,
    used: 0.3,
    available: 4.95,
    totalDecimal: '5.25',
    usedDecimal: '0.3',
    availableDecimal: '4.95',
    recipient: 'organization',
    grants: [{ total: 5.25, used: 0.3, available: 4.95, poolId: pool.id, expiresAt: null, isInRolloverWindow: false }],
  });
  t.same(await c.customers.getCustomerCreditBalancesByExternalId({ externalId: 'metered' }), balances, 'by externalId');
  const pools = (await api('GET', `/customers/${cus.id}/credit-pools`)).creditPools;
  t.same([pools[0].consumedCredits, pools[0].balance], ['0.3', '4.95'], 'the same figures as the credit-pools view');
  await refused(t, c.customers.getCustomerCreditBalances({ id: 'cus_AAAAAAAAAAAAAAAAAAAA' }), 404, 'NOT_FOUND', 'customerId');
  await refused(t, c.customers.getCustomerCreditBalancesByExternalId({ externalId: 'nobody' }), 404, 'NOT_FOUND', 'externalId');

  // Deleted: later signals naming it are stored as always but priced as a stranger's — no draw.
  const stateKey = `cs.${o.id}.live.${cus.id}`;
  const consumed = async () => ((await stateKeys(iso, `cs.${o.id}.live.`))[stateKey] as { after: { consumed: Record<string, string> } }).after.consumed[pool.id];
  t.equal(await consumed(), '0.3', 'the customer state holds the draws so far');
  await c.customers.deleteCustomerById({ id: cus.id });
  await sendSignals(o, 'metered', 'call', ['k4', 'k5']);
  await sendSignals(o, cus.id, 'call', ['k6']);
  await billed(iso);
  t.equal(await consumed(), '0.3', 'signals after the deletion draw nothing');
  await refused(t, c.customers.getCustomerCreditBalances({ id: cus.id }), 404, 'NOT_FOUND', 'customerId');
});
