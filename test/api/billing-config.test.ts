/**
 * The billing configuration API (src/billing/config), through the real HTTP API: every
 * route's happy path, every validation error (status, code, the field named first in
 * details, and the configuration unchanged afterwards), live/test separation, organization
 * isolation, concurrent changes (within one process and across two ingress processes on
 * the same bucket), cycles in the unit tree and percent-encoded unit ids. The last test
 * drives BillingConfigStore directly with several instances to exercise compare-and-set.
 */
import t, { type Test } from 'tap';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { NATS_URL, ServiceProcess, createOrg, http, useService, type HttpResult, type TestOrg } from '../helpers/service.js';
import { ApiError } from '../../src/errors.js';
import { BillingConfigStore, defaultProfile } from '../../src/billing/config/store.js';

const { iso, svc } = useService(t, 'billingcfg');

const CUR = '3f0c8a52-8d3e-4b7a-9f6e-2b1d4c5a6e70';
const CUR2 = '9a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d';

function client(token: string, base?: string) {
  const call = (method: string, p: string, body?: unknown): Promise<HttpResult> => http(base ?? svc.url, method, p, body === undefined ? { token } : { token, body });
  return {
    get: (p: string) => call('GET', p),
    post: (p: string, body?: unknown) => call('POST', p, body),
    put: (p: string, body?: unknown) => call('PUT', p, body),
    del: (p: string) => call('DELETE', p),
    raw: (method: string, p: string, raw: string) => http(base ?? svc.url, method, p, { token, raw }),
  };
}
type Client = ReturnType<typeof client>;

const C = '/api/v2/customers';
const enc = encodeURIComponent;

/** Every page of a list, following nextCursor. */
async function all<T = any>(c: Client, path: string, key: string, limit = 1000): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | null = null;
  do {
    const r = await c.get(`${path}?limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`);
    if (r.status !== 200) throw new Error(`${path}: ${r.status} ${JSON.stringify(r.body)}`);
    out.push(...(r.body[key] as T[]));
    cursor = r.body.nextCursor;
  } while (cursor);
  return out;
}

/** Every item of an offset-paged list (customers, products), page after page while hasMore. */
async function every<T = any>(c: Client, path: string, limit = 1000): Promise<T[]> {
  const out: T[] = [];
  for (let offset = 0; ; offset += limit) {
    const r = await c.get(`${path}?limit=${limit}&offset=${offset}`);
    if (r.status !== 200) throw new Error(`${path}: ${r.status} ${JSON.stringify(r.body)}`);
    out.push(...(r.body.data as T[]));
    if (!r.body.pagination.hasMore) return out;
  }
}

/** Everything the API shows of a configuration (for "nothing changed" checks). */
async function snapshot(c: Client): Promise<unknown> {
  const customers = await every<{ id: string }>(c, C);
  const products = await every(c, '/api/v2/products');
  const plans = await all(c, '/api/v2/plans', 'plans');
  const per: Record<string, unknown> = {};
  for (const { id } of customers) {
    per[id] = {
      units: (await c.get(`${C}/${id}/units`)).body,
      attributes: (await c.get(`${C}/${id}/order-line-attributes`)).body,
      pools: (await c.get(`${C}/${id}/credit-pools`)).body,
      caps: (await c.get(`${C}/${id}/credit-caps`)).body,
      balances: (await c.get(`${C}/${id}/credits/balances`)).body,
    };
  }
  return { customers, products, plans, per };
}

/** Asserts an error answer: status, code, details starting with `field:`; and nothing changed. */
async function refused(t: Test, c: Client, request: () => Promise<HttpResult>, status: number, code: string, field: string): Promise<HttpResult> {
  const before = await snapshot(c);
  const r = await request();
  t.equal(r.status, status, `${code} ${field}: status (${JSON.stringify(r.body)})`);
  t.equal(r.body?.code, code, `${field}: code`);
  t.ok(typeof r.body?.details === 'string' && r.body.details.startsWith(`${field}:`), `details name ${field}: ${r.body?.details}`);
  t.same(await snapshot(c), before, `${field}: configuration unchanged`);
  return r;
}

async function setup(c: Client): Promise<{ cus: string; plan: string; credit: string; plain: string }> {
  const cus = (await c.post(C, { externalId: `acme-${Math.random()}`, name: 'Acme' })).body.id as string;
  const plan = (await c.post('/api/v2/plans', { name: 'Pro' })).body.id as string;
  const credit = (await c.post(`${C}/${cus}/order-line-attributes`, { planId: plan, eventName: 'tokens', unitPrice: '0.0125', currency: 'USD', creditsCurrencyId: CUR, creditsPerUnit: '1' })).body.id as string;
  const plain = (await c.post(`${C}/${cus}/order-line-attributes`, { planId: plan, eventName: 'api_call', unitPrice: '1', currency: 'USD' })).body.id as string;
  return { cus, plan, credit, plain };
}

let org: TestOrg;
t.before(async () => {
  org = await createOrg(svc.url);
});

t.test('the routes need an API key', async (t) => {
  for (const [m, p] of [['GET', C], ['POST', C], ['GET', '/api/v2/plans'], ['PUT', `${C}/cus_AAAAAAAAAAAAAAAAAAAA/units/u1`], ['DELETE', `${C}/cus_AAAAAAAAAAAAAAAAAAAA/units/u1/credit-caps/${CUR}`]] as const) {
    const r = await http(svc.url, m, p, m === 'GET' || m === 'DELETE' ? {} : { body: {} });
    t.equal(r.status, 401, `${m} ${p}`);
    t.equal(r.body.code, 'UNAUTHORIZED');
  }
});

t.test('customers: create, read by id and by externalId, update, list', async (t) => {
  const c = client(org.live);
  const a = await c.post(C, { externalId: 'acme', name: 'Acme Inc.' });
  t.equal(a.status, 201);
  t.same(a.body, {
    id: a.body.id, name: 'Acme Inc.', legalName: null, email: '', phone: '', website: '', externalId: 'acme', billingAddress: null,
    creationState: 'active', churnDate: null, vatNumber: null, metadata: null, defaultCurrency: 'USD', createdAt: a.body.createdAt, updatedAt: a.body.createdAt,
  }, 'the client\'s Customer, unset fields as documented');
  t.match(a.body.id, /^cus_[0-9A-Za-z]{20}$/);
  const full = {
    name: 'Globex', externalId: 'globex', legalName: 'Globex Corporation', email: 'billing@globex.example', phone: '+1 555 0100', website: 'https://globex.example',
    billingAddress: { line1: '1 Main St', city: 'Springfield', zipCode: '12345', country: 'US' }, creationState: 'draft', vatNumber: 'US123', metadata: { tier: 'gold', seats: 3 }, defaultCurrency: 'EUR',
  };
  const b = await c.post(`${C}/`, full);
  t.equal(b.status, 201, 'the trailing-slash form the client calls');
  t.match(b.body, { ...full, churnDate: null });
  t.same((await every<{ id: string }>(c, C)).slice(-2).map((x) => x.id), [a.body.id, b.body.id], 'in creation order');
  t.same((await c.get(`${C}/${a.body.id}`)).body, a.body);
  t.same((await c.get(`${C}/external/acme`)).body, a.body, 'by externalId');
  t.same((await c.get(`${C}/external/${enc('globex')}`)).body, b.body);

  const u = await c.put(`${C}/${b.body.id}`, { email: 'ap@globex.example', churnDate: '2026-12-31T00:00:00Z', metadata: null });
  t.equal(u.status, 200);
  t.match(u.body, { ...full, email: 'ap@globex.example', churnDate: '2026-12-31T00:00:00Z', metadata: null }, 'a partial update changes only the given fields');
  t.not(u.body.updatedAt, undefined);
  const same = await c.put(`${C}/external/globex`, { legalName: 'Globex Corporation' });
  t.same(same.body, u.body, 'an update that changes nothing keeps updatedAt');
  const renamed = await c.put(`${C}/external/globex`, { name: 'Globex 2', externalId: 'globex', billingAddress: null });
  t.match(renamed.body, { id: b.body.id, name: 'Globex 2', externalId: 'globex', billingAddress: null }, 'the same externalId again is fine');
  await refused(t, c, () => c.put(`${C}/external/globex`, { externalId: 'globex-2' }), 400, 'INVALID_BILLING_CONFIG', 'externalId');
  await refused(t, c, () => c.put(`${C}/${b.body.id}`, { externalId: null }), 400, 'INVALID_BILLING_CONFIG', 'externalId');
  t.equal((await c.get(`${C}/external/globex-2`)).status, 404, 'a refused move claims nothing');
  t.equal((await c.post(C, { name: 'Globex two', externalId: 'globex-2' })).status, 201);
  const later = (await c.post(C, { name: 'Later' })).body;
  const given = await c.put(`${C}/${later.id}`, { externalId: 'later' });
  t.match(given.body, { id: later.id, externalId: 'later' }, 'a customer without an externalId can be given one');
  t.same((await c.get(`${C}/external/later`)).body, given.body);

  await refused(t, c, () => c.get(`${C}/cus_AAAAAAAAAAAAAAAAAAAA`), 404, 'NOT_FOUND', 'customerId');
  await refused(t, c, () => c.get(`${C}/acme`), 404, 'NOT_FOUND', 'customerId');
  await refused(t, c, () => c.get(`${C}/external/nobody`), 404, 'NOT_FOUND', 'externalId');
  await refused(t, c, () => c.put(`${C}/cus_AAAAAAAAAAAAAAAAAAAA`, { name: 'x' }), 404, 'NOT_FOUND', 'customerId');
  await refused(t, c, () => c.put(`${C}/external/nobody`, { name: 'x' }), 404, 'NOT_FOUND', 'externalId');
  await refused(t, c, () => c.get(`${C}/external/${'x'.repeat(256)}`), 400, 'INVALID_BILLING_CONFIG', 'externalId');
  await refused(t, c, () => c.post(C, { name: 'x', externalId: 'acme' }), 409, 'CONFLICT', 'externalId');
  await refused(t, c, () => c.put(`${C}/${later.id}`, { externalId: 'acme' }), 400, 'INVALID_BILLING_CONFIG', 'externalId');
  const noId = (await c.post(C, { name: 'No id yet' })).body.id as string;
  await refused(t, c, () => c.put(`${C}/${noId}`, { externalId: 'acme' }), 409, 'CONFLICT', 'externalId');
  await refused(t, c, () => c.raw('POST', C, ''), 400, 'INVALID_BILLING_CONFIG', 'name');
  await refused(t, c, () => c.post(C, { externalId: 'no-name' }), 400, 'INVALID_BILLING_CONFIG', 'name');
  await refused(t, c, () => c.post(C, { name: '' }), 400, 'INVALID_BILLING_CONFIG', 'name');
  await refused(t, c, () => c.post(C, { name: 'x', externalId: '' }), 400, 'INVALID_BILLING_CONFIG', 'externalId');
  await refused(t, c, () => c.post(C, { name: 'x', externalId: 'x'.repeat(256) }), 400, 'INVALID_BILLING_CONFIG', 'externalId');
  await refused(t, c, () => c.post(C, { name: 'x', externalId: 42 }), 400, 'INVALID_BILLING_CONFIG', 'externalId');
  await refused(t, c, () => c.post(C, { name: '\ud800' }), 400, 'INVALID_BILLING_CONFIG', 'name');
  await refused(t, c, () => c.post(C, { name: 'x', email: 'not an address' }), 400, 'INVALID_BILLING_CONFIG', 'email');
  await refused(t, c, () => c.post(C, { name: 'x', phone: 5550100 }), 400, 'INVALID_BILLING_CONFIG', 'phone');
  await refused(t, c, () => c.post(C, { name: 'x', creationState: 'archived' }), 400, 'INVALID_BILLING_CONFIG', 'creationState');
  await refused(t, c, () => c.post(C, { name: 'x', defaultCurrency: 'usd' }), 400, 'INVALID_BILLING_CONFIG', 'defaultCurrency');
  await refused(t, c, () => c.post(C, { name: 'x', metadata: [1] }), 400, 'INVALID_BILLING_CONFIG', 'metadata');
  await refused(t, c, () => c.post(C, { name: 'x', metadata: { big: 'x'.repeat(17_000) } }), 400, 'INVALID_BILLING_CONFIG', 'metadata');
  await refused(t, c, () => c.post(C, { name: 'x', billingAddress: 'Main St' }), 400, 'INVALID_BILLING_CONFIG', 'billingAddress');
  await refused(t, c, () => c.post(C, { name: 'x', billingAddress: { street: 'Main St' } }), 400, 'INVALID_BODY', 'billingAddress.street');
  await refused(t, c, () => c.post(C, { name: 'x', billingAddress: { city: 7 } }), 400, 'INVALID_BILLING_CONFIG', 'billingAddress.city');
  await refused(t, c, () => c.post(C, { name: 'x', churnDate: '2026-01-01T00:00:00Z' }), 400, 'INVALID_BODY', 'churnDate');
  await refused(t, c, () => c.put(`${C}/${a.body.id}`, { churnDate: 'tomorrow' }), 400, 'INVALID_BILLING_CONFIG', 'churnDate');
  await refused(t, c, () => c.put(`${C}/${a.body.id}`, { name: null }), 400, 'INVALID_BILLING_CONFIG', 'name');
  await refused(t, c, () => c.put(`${C}/${a.body.id}`, { units: {} }), 400, 'INVALID_BODY', 'units');
  await refused(t, c, () => c.post(C, { name: 'x', plan: 'pro' }), 400, 'INVALID_BODY', 'plan');
  await refused(t, c, () => c.post(C, [1]), 400, 'INVALID_BODY', 'body');
  await refused(t, c, () => c.raw('POST', C, '{"name":'), 400, 'INVALID_JSON', 'request body is not valid JSON');
  t.same((await c.get(`${C}/external/acme`)).body, a.body, 'no refusal changed the customer');
  const max = await c.post(C, { name: 'x', externalId: 'y'.repeat(255) });
  t.equal(max.status, 201, '255 characters are fine');
});

t.test('a deleted customer: reads answer 404, lists skip it, its externalId stays reserved, its signals are no longer priced', async (t) => {
  const o = await createOrg(svc.url);
  const c = client(o.live);
  const { cus, credit } = await setup(c);
  const xid = (await c.get(`${C}/${cus}`)).body.externalId as string;
  const pool = (await c.post(`${C}/${cus}/credit-pools`, { orderLineAttributeId: credit, credits: '10' })).body.id as string;
  const other = (await c.post(C, { name: 'Other', externalId: 'other' })).body.id as string;
  t.same((await c.del(`${C}/${cus}`)).body, {}, 'DELETE answers {}');
  for (const p of [`${C}/${cus}`, `${C}/external/${enc(xid)}`, `${C}/${cus}/units`, `${C}/${cus}/credit-pools`, `${C}/${cus}/credits/balances`, `${C}/external/${enc(xid)}/credits/balances`]) {
    t.equal((await c.get(p)).status, 404, `GET ${p}`);
  }
  await refused(t, c, () => c.del(`${C}/${cus}`), 404, 'NOT_FOUND', 'customerId');
  await refused(t, c, () => c.del(`${C}/external/${enc(xid)}`), 404, 'NOT_FOUND', 'externalId');
  await refused(t, c, () => c.put(`${C}/${cus}`, { name: 'back' }), 404, 'NOT_FOUND', 'customerId');
  await refused(t, c, () => c.put(`${C}/${cus}/units/u`, {}), 404, 'NOT_FOUND', 'customerId');
  await refused(t, c, () => c.post(`${C}/${cus}/credit-pools/${pool}/top-ups`, { credits: '1' }), 404, 'NOT_FOUND', 'customerId');
  await refused(t, c, () => c.post(C, { name: 'Impostor', externalId: xid }), 409, 'CONFLICT', 'externalId');
  const bare = (await c.post(C, { name: 'Bare' })).body.id as string;
  await refused(t, c, () => c.put(`${C}/${bare}`, { externalId: xid }), 409, 'CONFLICT', 'externalId');
  t.equal((await c.del(`${C}/${bare}`)).status, 200);
  const list = await c.get(C);
  t.same(list.body.data.map((x: { id: string }) => x.id), [other], 'the list skips it');
  t.same(list.body.pagination, { limit: 100, offset: 0, total: 3, hasMore: false }, 'total counts positions, the deleted ones included');
  t.same((await c.del(`${C}/external/other`)).body, {}, 'by externalId too');
  t.equal((await c.get(`${C}/${other}`)).status, 404);
  t.same((await c.get(C)).body.data, []);

  // Evaluation: forBatch (what the billing evaluator prices with) leaves a deleted customer out.
  const nc = await connect({ servers: NATS_URL });
  t.teardown(() => nc.close());
  const store = new BillingConfigStore(await new Kvm(jetstream(nc)).open(`${iso.natsPrefix}_billing`), nc.info?.max_payload ?? 1024 * 1024);
  const batch = await store.forBatch(o.id, 'live', [cus, xid, 'other']);
  t.same([batch.config.customers, batch.config.attributes, batch.config.pools], [{}, {}, {}], 'a deleted customer prices nothing');
});

t.test('products: create, read, update by id and by externalId, list', async (t) => {
  const o = await createOrg(svc.url);
  const c = client(o.live);
  const P = '/api/v2/products';
  const a = await c.post(`${P}/`, { name: 'Agent', externalId: 'agent-1', description: 'The agent', productCode: 'AG-1', metadata: { k: 'v' } });
  t.equal(a.status, 201);
  t.same(a.body, {
    id: a.body.id, name: 'Agent', description: 'The agent', active: true, productCode: 'AG-1', externalId: 'agent-1', archivedAt: null, metadata: { k: 'v' },
    createdAt: a.body.createdAt, updatedAt: a.body.createdAt,
  });
  t.match(a.body.id, /^prod_[0-9A-Za-z]{20}$/);
  const b = await c.post(P, { name: 'Plain' });
  t.match(b.body, { name: 'Plain', description: null, active: true, productCode: null, externalId: null, metadata: null });
  t.same((await c.get(`${P}/${a.body.id}`)).body, a.body);
  t.same((await c.get(`${P}/external/agent-1`)).body, a.body);
  t.same(await every(c, P), [a.body, b.body]);
  t.same((await c.get(`${P}?limit=1&offset=1`)).body, { data: [b.body], pagination: { limit: 1, offset: 1, total: 2, hasMore: false } });
  const off = await c.put(`${P}/external/agent-1`, { active: false });
  t.match(off.body, { active: false, archivedAt: String, name: 'Agent', description: 'The agent' });
  const on = await c.put(`${P}/${a.body.id}`, { active: true, externalId: 'agent-1', description: null });
  t.match(on.body, { active: true, archivedAt: null, externalId: 'agent-1', description: null });
  const given = await c.put(`${P}/external/${'agent-1'}`, { name: 'Agent' });
  t.equal(given.body.name, 'Agent');
  const named = await c.put(`${P}/${b.body.id}`, { externalId: 'plain' });
  t.equal(named.body.externalId, 'plain', 'a product without an externalId can be given one');
  await refused(t, c, () => c.put(`${P}/${a.body.id}`, { externalId: 'agent-2' }), 400, 'INVALID_BILLING_CONFIG', 'externalId');
  await refused(t, c, () => c.put(`${P}/external/plain`, { externalId: null }), 400, 'INVALID_BILLING_CONFIG', 'externalId');
  const third = (await c.post(P, { name: 'Third' })).body;

  await refused(t, c, () => c.get(`${P}/prod_AAAAAAAAAAAAAAAAAAAA`), 404, 'NOT_FOUND', 'productId');
  await refused(t, c, () => c.get(`${P}/nope`), 404, 'NOT_FOUND', 'productId');
  await refused(t, c, () => c.get(`${P}/external/nobody`), 404, 'NOT_FOUND', 'externalId');
  await refused(t, c, () => c.put(`${P}/prod_AAAAAAAAAAAAAAAAAAAA`, { name: 'x' }), 404, 'NOT_FOUND', 'productId');
  await refused(t, c, () => c.put(`${P}/external/nobody`, { name: 'x' }), 404, 'NOT_FOUND', 'externalId');
  await refused(t, c, () => c.post(P, { name: 'Dup', externalId: 'agent-1' }), 409, 'CONFLICT', 'externalId');
  await refused(t, c, () => c.put(`${P}/${third.id}`, { externalId: 'agent-1' }), 409, 'CONFLICT', 'externalId');
  await refused(t, c, () => c.post(P, {}), 400, 'INVALID_BILLING_CONFIG', 'name');
  await refused(t, c, () => c.post(P, { name: 'x', active: 'yes' }), 400, 'INVALID_BILLING_CONFIG', 'active');
  await refused(t, c, () => c.post(P, { name: 'x', description: 'd'.repeat(4097) }), 400, 'INVALID_BILLING_CONFIG', 'description');
  await refused(t, c, () => c.post(P, { name: 'x', productCode: '' }), 400, 'INVALID_BILLING_CONFIG', 'productCode');
  await refused(t, c, () => c.post(P, { name: 'x', metadata: 'm' }), 400, 'INVALID_BILLING_CONFIG', 'metadata');
  await refused(t, c, () => c.post(P, { name: 'x', price: 1 }), 400, 'INVALID_BODY', 'price');
  await refused(t, c, () => c.put(`${P}/${b.body.id}`, { name: null }), 400, 'INVALID_BILLING_CONFIG', 'name');

  // The live and test modes, and other organizations, have their own products.
  t.equal((await client(o.test).get(`${P}/${a.body.id}`)).status, 404);
  t.equal((await client(org.live).get(`${P}/external/agent-1`)).status, 404);
});

t.test('credit balances: one per credits currency, total = granted + top-ups, exact decimals beside the numbers', async (t) => {
  const o = await createOrg(svc.url);
  const c = client(o.live);
  const { cus, plan, credit } = await setup(c);
  t.same((await c.get(`${C}/${cus}/credits/balances`)).body, { data: [] }, 'no pools: no balances');
  const p1 = (await c.post(`${C}/${cus}/credit-pools`, { orderLineAttributeId: credit, credits: '10.5' })).body;
  await c.post(`${C}/${cus}/credit-pools/${p1.id}/top-ups`, { credits: '0.000001' });
  const other = (await c.post(`${C}/${cus}/order-line-attributes`, { planId: plan, eventName: 'images', unitPrice: '1', currency: 'USD', creditsCurrencyId: CUR2, creditsPerUnit: '2' })).body.id;
  const third = (await c.post(`${C}/${cus}/order-line-attributes`, { planId: plan, eventName: 'minutes', unitPrice: '1', currency: 'USD', creditsCurrencyId: CUR, creditsPerUnit: '1' })).body.id;
  const p2 = (await c.post(`${C}/${cus}/credit-pools`, { orderLineAttributeId: other, credits: '3' })).body;
  const p3 = (await c.post(`${C}/${cus}/credit-pools`, { orderLineAttributeId: third, credits: '1' })).body;
  const r = await c.get(`${C}/${cus}/credits/balances`);
  t.equal(r.status, 200);
  const grant = (p: { id: string; createdAt: string }, total: number, totalDecimal: string) => ({
    available: total, used: 0, total, availableDecimal: totalDecimal, usedDecimal: '0', totalDecimal,
    rolloverAmount: null, periodStart: p.createdAt, periodEnd: null, rolloverEndDate: null, expiresAt: null, isInRolloverWindow: false, poolId: p.id, orderLineAttributeId: (p as { orderLineAttributeId?: string }).orderLineAttributeId,
  });
  t.same(r.body, {
    data: [
      {
        creditsCurrencyId: CUR, currencyName: CUR, currencyKey: CUR, available: 11.500001, used: 0, total: 11.500001, availableDecimal: '11.500001', usedDecimal: '0', totalDecimal: '11.500001',
        periodStart: p1.createdAt, periodEnd: null, rolloverEndDate: null, recipient: 'organization', grants: [grant(p1, 10.500001, '10.500001'), grant(p3, 1, '1')],
      },
      {
        creditsCurrencyId: CUR2, currencyName: CUR2, currencyKey: CUR2, available: 3, used: 0, total: 3, availableDecimal: '3', usedDecimal: '0', totalDecimal: '3',
        periodStart: p2.createdAt, periodEnd: null, rolloverEndDate: null, recipient: 'organization', grants: [grant(p2, 3, '3')],
      },
    ],
  });
  const xid = (await c.get(`${C}/${cus}`)).body.externalId as string;
  t.same((await c.get(`${C}/external/${enc(xid)}/credits/balances`)).body, r.body, 'by externalId');
  await refused(t, c, () => c.get(`${C}/cus_AAAAAAAAAAAAAAAAAAAA/credits/balances`), 404, 'NOT_FOUND', 'customerId');
  await refused(t, c, () => c.get(`${C}/external/nobody/credits/balances`), 404, 'NOT_FOUND', 'externalId');
});

t.test('units: create, replace, tree, cycles', async (t) => {
  const c = client(org.live);
  const cus = (await c.post(C, { name: 'Tree' })).body.id as string;
  const U = `${C}/${cus}/units`;
  const root = await c.put(`${U}/org`, { externalType: 'organization', name: 'Org' });
  t.equal(root.status, 201);
  t.match(root.body, { customerId: cus, externalId: 'org', externalType: 'organization', name: 'Org', parentExternalId: null, createdAt: String, updatedAt: String });
  t.equal((await c.put(`${U}/team-a`, { externalType: 'team', parentExternalId: 'org' })).status, 201);
  t.equal((await c.put(`${U}/user-1`, { externalType: 'user', parentExternalId: 'team-a' })).status, 201);
  const same = await c.put(`${U}/org`, { externalType: 'organization', name: 'Org' });
  t.equal(same.status, 200, 'replacing with the same content');
  t.same(same.body, root.body, 'unchanged, same updatedAt');
  const renamed = await c.put(`${U}/org`, { externalType: 'organization', name: 'Org 2' });
  t.equal(renamed.status, 200);
  t.equal(renamed.body.createdAt, root.body.createdAt);
  t.equal(renamed.body.name, 'Org 2');
  const list = await c.get(U);
  t.equal(list.status, 200);
  t.same(list.body.units.map((u: { externalId: string; parentExternalId: string | null }) => [u.externalId, u.parentExternalId]), [['org', null], ['team-a', 'org'], ['user-1', 'team-a']]);
  t.same((await c.get(`${U}/team-a`)).body.parentExternalId, 'org');

  await refused(t, c, () => c.get(`${U}/nobody`), 404, 'NOT_FOUND', 'unitExternalId');
  await refused(t, c, () => c.put(`${C}/cus_AAAAAAAAAAAAAAAAAAAA/units/x`, {}), 404, 'NOT_FOUND', 'customerId');
  await refused(t, c, () => c.get(`${C}/cus_AAAAAAAAAAAAAAAAAAAA/units`), 404, 'NOT_FOUND', 'customerId');
  await refused(t, c, () => c.put(`${U}/team-b`, { parentExternalId: 'nobody' }), 404, 'NOT_FOUND', 'parentExternalId');
  await refused(t, c, () => c.put(`${U}/team-b`, { parentExternalId: 'constructor' }), 404, 'NOT_FOUND', 'parentExternalId');
  await refused(t, c, () => c.put(`${U}/team-b`, { parentExternalId: '__proto__' }), 404, 'NOT_FOUND', 'parentExternalId');
  await refused(t, c, () => c.put(`${U}/org`, { parentExternalId: 'org' }), 400, 'INVALID_BILLING_CONFIG', 'parentExternalId');
  await refused(t, c, () => c.put(`${U}/new`, { parentExternalId: 'new' }), 400, 'INVALID_BILLING_CONFIG', 'parentExternalId');
  await refused(t, c, () => c.put(`${U}/org`, { parentExternalId: 'user-1' }), 400, 'INVALID_BILLING_CONFIG', 'parentExternalId');
  await refused(t, c, () => c.put(`${U}/team-a`, { parentExternalId: 'user-1' }), 400, 'INVALID_BILLING_CONFIG', 'parentExternalId');
  await refused(t, c, () => c.put(`${U}/x`, { externalType: 7 }), 400, 'INVALID_BILLING_CONFIG', 'externalType');
  await refused(t, c, () => c.put(`${U}/x`, { parent: 'org' }), 400, 'INVALID_BODY', 'parent');
  await refused(t, c, () => c.put(`${U}/${'u'.repeat(256)}`, {}), 400, 'INVALID_BILLING_CONFIG', 'unitExternalId');

  // Moving a subtree elsewhere is fine; PUT without a parent makes a root.
  t.equal((await c.put(`${U}/team-b`, { parentExternalId: 'org' })).status, 201);
  t.equal((await c.put(`${U}/team-a`, { externalType: 'team', parentExternalId: 'team-b' })).status, 200);
  const moved = await c.put(`${U}/team-a`, {});
  t.equal(moved.status, 200);
  t.same([moved.body.parentExternalId, moved.body.externalType], [null, null], 'PUT replaces: absent fields become null');

  // Ids that are also Object.prototype names are plain ids.
  t.equal((await c.put(`${U}/__proto__`, { parentExternalId: 'org' })).status, 201);
  t.equal((await c.put(`${U}/constructor`, { parentExternalId: '__proto__' })).status, 201);
  t.same((await c.get(`${U}/constructor`)).body.parentExternalId, '__proto__');
  await refused(t, c, () => c.put(`${U}/__proto__`, { parentExternalId: 'constructor' }), 400, 'INVALID_BILLING_CONFIG', 'parentExternalId');
  t.ok((await c.get(U)).body.units.some((u: { externalId: string }) => u.externalId === '__proto__'), '__proto__ is listed');
});

t.test('units: a deep chain, and a cycle through all of it', async (t) => {
  const c = client(org.live);
  const cus = (await c.post(C, { name: 'n' })).body.id as string;
  const U = `${C}/${cus}/units`;
  const depth = 300;
  for (let i = 0; i < depth; i++) {
    const r = await c.put(`${U}/n${i}`, i === 0 ? {} : { parentExternalId: `n${i - 1}` });
    if (r.status !== 201) t.fail(`n${i}: ${r.status} ${JSON.stringify(r.body)}`);
  }
  const r = await refused(t, c, () => c.put(`${U}/n0`, { parentExternalId: `n${depth - 1}` }), 400, 'INVALID_BILLING_CONFIG', 'parentExternalId');
  t.match(r.body.details, /cycle/);
  await refused(t, c, () => c.put(`${U}/n100`, { parentExternalId: 'n250' }), 400, 'INVALID_BILLING_CONFIG', 'parentExternalId');
  t.equal((await c.put(`${U}/n250`, { parentExternalId: 'n100' })).status, 200, 'moving a node up its own chain is fine');
  t.equal((await all(c, U, 'units')).length, depth, 'every unit, page by page');
});

t.test('units: percent-encoded ids', async (t) => {
  const c = client(org.live);
  const cus = (await c.post(C, { name: 'n' })).body.id as string;
  const U = `${C}/${cus}/units`;
  const ids = ['team/α β', '100% sure', 'a?b#c', 'x.y.z', ' lead', 'emoji 🚀', '%2F'];
  for (const id of ids) {
    const r = await c.put(`${U}/${enc(id)}`, { name: id });
    t.equal(r.status, 201, id);
    t.equal(r.body.externalId, id, `${id}: decoded`);
    t.equal((await c.get(`${U}/${enc(id)}`)).body.name, id, `${id}: read back`);
  }
  t.same((await c.get(U)).body.units.map((u: { externalId: string }) => u.externalId), ids);
  const child = await c.put(`${U}/child`, { parentExternalId: 'team/α β' });
  t.equal(child.status, 201, 'a parent named in the body is the decoded id');
  await refused(t, c, () => c.put(`${U}/bad%E0%A4%A`, {}), 400, 'INVALID_PATH', 'unitExternalId');
  await refused(t, c, () => c.put(`${U}/%FF`, {}), 400, 'INVALID_PATH', 'unitExternalId');
  const capPath = `${U}/${enc('team/α β')}/credit-caps/${CUR}`;
  const cap = await c.put(capPath, { amount: '10', frequency: 'DAILY', effectiveFrom: '2024-01-01T00:00:00Z' });
  t.equal(cap.status, 201);
  t.equal(cap.body.unitExternalId, 'team/α β');
});

t.test('plans', async (t) => {
  const c = client(org.live);
  const p = await c.post('/api/v2/plans', { name: 'Enterprise' });
  t.equal(p.status, 201);
  t.match(p.body, { id: /^plan_[0-9A-Za-z]{20}$/, name: 'Enterprise', createdAt: String });
  const list = await c.get('/api/v2/plans');
  t.equal(list.status, 200);
  t.same((await all(c, '/api/v2/plans', 'plans')).at(-1), p.body);
  await refused(t, c, () => c.post('/api/v2/plans', {}), 400, 'INVALID_BILLING_CONFIG', 'name');
  await refused(t, c, () => c.post('/api/v2/plans', { name: '' }), 400, 'INVALID_BILLING_CONFIG', 'name');
  await refused(t, c, () => c.post('/api/v2/plans', { name: 'x', price: 1 }), 400, 'INVALID_BODY', 'price');
  const empty = await c.raw('POST', '/api/v2/plans', '');
  t.same([empty.status, empty.body.code], [400, 'INVALID_JSON'], 'a body is required');
});

t.test('order line attributes', async (t) => {
  const c = client(org.live);
  const cus = (await c.post(C, { name: 'n' })).body.id as string;
  const other = (await c.post(C, { name: 'n' })).body.id as string;
  const plan = (await c.post('/api/v2/plans', { name: 'Usage' })).body.id as string;
  const A = `${C}/${cus}/order-line-attributes`;
  const count = await c.post(A, { planId: plan, eventName: 'api_call', unitPrice: '0.012500', currency: 'USD', includedQuantity: '1000.0' });
  t.equal(count.status, 201);
  t.match(count.body, {
    id: /^ola_[0-9A-Za-z]{20}$/, customerId: cus, planId: plan, eventName: 'api_call', quantity: { kind: 'count' },
    unitPrice: '0.0125', currency: 'USD', includedQuantity: '1000', creditsCurrencyId: null, creditsPerUnit: null, createdAt: String,
  });
  const path = await c.post(A, {
    planId: plan, eventName: 'tokens', quantity: { kind: 'path', path: 'usage.tokens' }, unitPrice: '0.000000000001', currency: 'EUR',
    includedQuantity: null, creditsCurrencyId: CUR.toUpperCase(), creditsPerUnit: '0.000001',
  });
  t.equal(path.status, 201);
  t.match(path.body, { quantity: { kind: 'path', path: 'usage.tokens' }, unitPrice: '0.000000000001', includedQuantity: null, creditsCurrencyId: CUR, creditsPerUnit: '0.000001' });
  const explicit = await c.post(A, { planId: plan, eventName: 'free', quantity: { kind: 'count' }, unitPrice: '0', currency: 'JPY' });
  t.equal(explicit.status, 201);
  t.equal(explicit.body.unitPrice, '0');
  const list = await c.get(A);
  t.same(list.body.orderLineAttributes.map((a: { id: string }) => a.id), [count.body.id, path.body.id, explicit.body.id]);
  t.same((await c.get(`${C}/${other}/order-line-attributes`)).body, { orderLineAttributes: [], nextCursor: null }, 'per customer');
  t.equal((await c.post(`${C}/${other}/order-line-attributes`, { planId: plan, eventName: 'api_call', unitPrice: '1', currency: 'USD' })).status, 201, 'the same event name for another customer');

  const ok = { planId: plan, eventName: 'new_event', unitPrice: '1', currency: 'USD' };
  const cases: [Record<string, unknown>, number, string, string][] = [
    [{ planId: 'plan_AAAAAAAAAAAAAAAAAAAA' }, 404, 'NOT_FOUND', 'planId'],
    [{ planId: 'nope' }, 404, 'NOT_FOUND', 'planId'],
    [{ eventName: 'api_call' }, 409, 'CONFLICT', 'eventName'],
    [{ planId: undefined }, 400, 'INVALID_BILLING_CONFIG', 'planId'],
    [{ eventName: undefined }, 400, 'INVALID_BILLING_CONFIG', 'eventName'],
    [{ eventName: '' }, 400, 'INVALID_BILLING_CONFIG', 'eventName'],
    [{ unitPrice: undefined }, 400, 'INVALID_BILLING_CONFIG', 'unitPrice'],
    [{ unitPrice: 0.0125 }, 400, 'INVALID_BILLING_CONFIG', 'unitPrice'],
    [{ unitPrice: '-1' }, 400, 'INVALID_BILLING_CONFIG', 'unitPrice'],
    [{ unitPrice: '1e-3' }, 400, 'INVALID_BILLING_CONFIG', 'unitPrice'],
    [{ unitPrice: '0.0000000000001' }, 400, 'INVALID_BILLING_CONFIG', 'unitPrice'],
    [{ unitPrice: '.5' }, 400, 'INVALID_BILLING_CONFIG', 'unitPrice'],
    [{ unitPrice: 'NaN' }, 400, 'INVALID_BILLING_CONFIG', 'unitPrice'],
    [{ unitPrice: ' 1' }, 400, 'INVALID_BILLING_CONFIG', 'unitPrice'],
    [{ currency: 'usd' }, 400, 'INVALID_BILLING_CONFIG', 'currency'],
    [{ currency: 'USDT' }, 400, 'INVALID_BILLING_CONFIG', 'currency'],
    [{ currency: undefined }, 400, 'INVALID_BILLING_CONFIG', 'currency'],
    [{ includedQuantity: '-5' }, 400, 'INVALID_BILLING_CONFIG', 'includedQuantity'],
    [{ includedQuantity: 100 }, 400, 'INVALID_BILLING_CONFIG', 'includedQuantity'],
    [{ creditsCurrencyId: 'not-a-uuid', creditsPerUnit: '1' }, 400, 'INVALID_BILLING_CONFIG', 'creditsCurrencyId'],
    [{ creditsCurrencyId: `${CUR}0`, creditsPerUnit: '1' }, 400, 'INVALID_BILLING_CONFIG', 'creditsCurrencyId'],
    [{ creditsCurrencyId: CUR }, 400, 'INVALID_BILLING_CONFIG', 'creditsPerUnit'],
    [{ creditsPerUnit: '1' }, 400, 'INVALID_BILLING_CONFIG', 'creditsCurrencyId'],
    [{ creditsCurrencyId: CUR, creditsPerUnit: '0' }, 400, 'INVALID_BILLING_CONFIG', 'creditsPerUnit'],
    [{ creditsCurrencyId: CUR, creditsPerUnit: '0.0000001' }, 400, 'INVALID_BILLING_CONFIG', 'creditsPerUnit'],
    [{ creditsCurrencyId: CUR, creditsPerUnit: '-1' }, 400, 'INVALID_BILLING_CONFIG', 'creditsPerUnit'],
    [{ quantity: { kind: 'sum' } }, 400, 'INVALID_BILLING_CONFIG', 'quantity.kind'],
    [{ quantity: 'count' }, 400, 'INVALID_BILLING_CONFIG', 'quantity'],
    [{ quantity: { kind: 'path' } }, 400, 'INVALID_BILLING_CONFIG', 'quantity.path'],
    [{ quantity: { kind: 'path', path: 'a..b' } }, 400, 'INVALID_BILLING_CONFIG', 'quantity.path'],
    [{ quantity: { kind: 'path', path: 'a.b.c.d.e.f.g.h.i.j.k' } }, 400, 'INVALID_BILLING_CONFIG', 'quantity.path'],
    [{ quantity: { kind: 'count', path: 'a' } }, 400, 'INVALID_BODY', 'quantity.path'],
    [{ price: '1' }, 400, 'INVALID_BODY', 'price'],
  ];
  for (const [patch, status, code, field] of cases) {
    await refused(t, c, () => c.post(A, { ...ok, ...patch }), status, code, field);
  }
  await refused(t, c, () => c.post(`${C}/cus_AAAAAAAAAAAAAAAAAAAA/order-line-attributes`, ok), 404, 'NOT_FOUND', 'customerId');
  const r = await c.post(A, { ...ok, unitPrice: '0.0000000000001' });
  t.match(r.body.details, /13 decimal places; at most 12/);
});

t.test('credit pools and top-ups', async (t) => {
  const c = client(org.live);
  const { cus, credit, plain } = await setup(c);
  const other = await setup(c);
  const P = `${C}/${cus}/credit-pools`;
  const pool = await c.post(P, { orderLineAttributeId: credit, credits: '100.500000' });
  t.equal(pool.status, 201);
  t.match(pool.body, { id: /^cp_[0-9A-Za-z]{20}$/, customerId: cus, orderLineAttributeId: credit, creditsCurrencyId: CUR, granted: '100.5', topUps: [], totalCredits: '100.5', createdAt: String });
  const top = await c.post(`${P}/${pool.body.id}/top-ups`, { credits: '0.000001' });
  t.equal(top.status, 201);
  t.match(top.body, { id: pool.body.id, totalCredits: '100.500001', topUps: [{ id: /^tu_/, credits: '0.000001', at: String }] });
  await c.post(`${P}/${pool.body.id}/top-ups`, { credits: '899.499999' });
  const list = await c.get(P);
  t.equal(list.status, 200);
  t.equal(list.body.creditPools.length, 1);
  t.equal(list.body.creditPools[0].totalCredits, '1000');
  const zero = await c.post(`${C}/${other.cus}/credit-pools`, { orderLineAttributeId: other.credit, credits: '0' });
  t.equal(zero.status, 201, 'a pool may start empty');
  t.equal(zero.body.totalCredits, '0');

  const cases: [Record<string, unknown>, number, string, string][] = [
    [{ orderLineAttributeId: credit }, 409, 'CONFLICT', 'orderLineAttributeId'],
    [{ orderLineAttributeId: plain }, 400, 'INVALID_BILLING_CONFIG', 'orderLineAttributeId'],
    [{ orderLineAttributeId: other.credit }, 404, 'NOT_FOUND', 'orderLineAttributeId'],
    [{ orderLineAttributeId: 'ola_AAAAAAAAAAAAAAAAAAAA' }, 404, 'NOT_FOUND', 'orderLineAttributeId'],
    [{ orderLineAttributeId: undefined }, 400, 'INVALID_BILLING_CONFIG', 'orderLineAttributeId'],
    [{ credits: '-1' }, 400, 'INVALID_BILLING_CONFIG', 'credits'],
    [{ credits: '1.0000001' }, 400, 'INVALID_BILLING_CONFIG', 'credits'],
    [{ credits: '1e6' }, 400, 'INVALID_BILLING_CONFIG', 'credits'],
    [{ credits: 5 }, 400, 'INVALID_BILLING_CONFIG', 'credits'],
    [{ credits: undefined }, 400, 'INVALID_BILLING_CONFIG', 'credits'],
    [{ creditsCurrencyId: CUR }, 400, 'INVALID_BODY', 'creditsCurrencyId'],
  ];
  // A second credit-priced attribute of the customer gives the valid base for these cases.
  const second = (await c.post(`${C}/${cus}/order-line-attributes`, { planId: other.plan, eventName: 'images', unitPrice: '2', currency: 'USD', creditsCurrencyId: CUR2, creditsPerUnit: '3' })).body.id;
  for (const [patch, status, code, field] of cases) {
    await refused(t, c, () => c.post(P, { orderLineAttributeId: second, credits: '10', ...patch }), status, code, field);
  }
  await refused(t, c, () => c.post(`${C}/cus_AAAAAAAAAAAAAAAAAAAA/credit-pools`, { orderLineAttributeId: second, credits: '1' }), 404, 'NOT_FOUND', 'customerId');

  const T = `${P}/${pool.body.id}/top-ups`;
  await refused(t, c, () => c.post(T, { credits: '0' }), 400, 'INVALID_BILLING_CONFIG', 'credits');
  await refused(t, c, () => c.post(T, { credits: '-0.5' }), 400, 'INVALID_BILLING_CONFIG', 'credits');
  await refused(t, c, () => c.post(T, { credits: '0.0000001' }), 400, 'INVALID_BILLING_CONFIG', 'credits');
  await refused(t, c, () => c.post(T, {}), 400, 'INVALID_BILLING_CONFIG', 'credits');
  await refused(t, c, () => c.post(T, { credits: '1', note: 'x' }), 400, 'INVALID_BODY', 'note');
  await refused(t, c, () => c.post(`${P}/cp_AAAAAAAAAAAAAAAAAAAA/top-ups`, { credits: '1' }), 404, 'NOT_FOUND', 'poolId');
  await refused(t, c, () => c.post(`${C}/${other.cus}/credit-pools/${pool.body.id}/top-ups`, { credits: '1' }), 404, 'NOT_FOUND', 'poolId');
});

t.test('credit caps', async (t) => {
  const c = client(org.live);
  const cus = (await c.post(C, { name: 'n' })).body.id as string;
  await c.put(`${C}/${cus}/units/root`, {});
  await c.put(`${C}/${cus}/units/leaf`, { parentExternalId: 'root' });
  const capPath = (unit: string, cur = CUR) => `${C}/${cus}/units/${enc(unit)}/credit-caps/${cur}`;
  const body = { amount: '500.250', frequency: 'MONTHLY', effectiveFrom: '2024-01-31T00:00:00+00:00' };
  const cap = await c.put(capPath('root', CUR.toUpperCase()), body);
  t.equal(cap.status, 201);
  t.same(Object.keys(cap.body).sort(), ['amount', 'creditsCurrencyId', 'customerId', 'effectiveFrom', 'frequency', 'unitExternalId', 'updatedAt']);
  t.match(cap.body, { customerId: cus, unitExternalId: 'root', creditsCurrencyId: CUR, amount: '500.25', frequency: 'MONTHLY', effectiveFrom: '2024-01-31T00:00:00Z' });
  const again = await c.put(capPath('root'), { ...body, effectiveFrom: '2024-01-31T00:00:00.000Z' });
  t.equal(again.status, 200, 'the same cap (same instant, other spelling) is unchanged');
  t.same(again.body, cap.body);
  const changed = await c.put(capPath('root'), { amount: '10', frequency: 'YEARLY', effectiveFrom: '2024-02-29T12:30:00.5Z' });
  t.equal(changed.status, 200);
  t.match(changed.body, { amount: '10', frequency: 'YEARLY', effectiveFrom: '2024-02-29T12:30:00.500Z' });
  for (const f of ['DAILY', 'WEEKLY', 'QUARTERLY']) t.equal((await c.put(capPath('leaf', CUR2), { ...body, frequency: f })).status, f === 'DAILY' ? 201 : 200, f);
  t.equal((await c.get(capPath('root'))).body.amount, '10');
  const list = await c.get(`${C}/${cus}/credit-caps`);
  t.same(list.body.creditCaps.map((x: { unitExternalId: string; creditsCurrencyId: string; frequency: string }) => [x.unitExternalId, x.creditsCurrencyId, x.frequency]), [['root', CUR, 'YEARLY'], ['leaf', CUR2, 'QUARTERLY']]);

  const cases: [Record<string, unknown>, string][] = [
    [{ amount: '-1' }, 'amount'],
    [{ amount: '1.1234567' }, 'amount'],
    [{ amount: '1E3' }, 'amount'],
    [{ amount: 100 }, 'amount'],
    [{ amount: undefined }, 'amount'],
    [{ frequency: 'HOURLY' }, 'frequency'],
    [{ frequency: 'monthly' }, 'frequency'],
    [{ frequency: undefined }, 'frequency'],
    [{ effectiveFrom: '2024-01-01T00:00:00+02:00' }, 'effectiveFrom'],
    [{ effectiveFrom: '2023-02-29T00:00:00Z' }, 'effectiveFrom'],
    [{ effectiveFrom: '2024-01-01' }, 'effectiveFrom'],
    [{ effectiveFrom: '2024-01-01T00:00:00.0001Z' }, 'effectiveFrom'],
    [{ effectiveFrom: 1704067200000 }, 'effectiveFrom'],
    [{ effectiveFrom: undefined }, 'effectiveFrom'],
  ];
  for (const [patch, field] of cases) {
    await refused(t, c, () => c.put(capPath('root'), { ...body, ...patch }), 400, 'INVALID_BILLING_CONFIG', field);
  }
  await refused(t, c, () => c.put(capPath('root'), { ...body, period: 'x' }), 400, 'INVALID_BODY', 'period');
  await refused(t, c, () => c.put(capPath('root', 'not-a-uuid'), body), 400, 'INVALID_BILLING_CONFIG', 'creditsCurrencyId');
  await refused(t, c, () => c.put(capPath('nobody'), body), 404, 'NOT_FOUND', 'unitExternalId');
  await refused(t, c, () => c.put(`${C}/cus_AAAAAAAAAAAAAAAAAAAA/units/root/credit-caps/${CUR}`, body), 404, 'NOT_FOUND', 'customerId');
  await refused(t, c, () => c.get(capPath('leaf', CUR)), 404, 'NOT_FOUND', 'creditsCurrencyId');
  await refused(t, c, () => c.get(capPath('root', 'zzz')), 400, 'INVALID_BILLING_CONFIG', 'creditsCurrencyId');
  await refused(t, c, () => c.del(capPath('nobody')), 404, 'NOT_FOUND', 'unitExternalId');

  const del = await c.del(capPath('root', CUR.toUpperCase()));
  t.equal(del.status, 204);
  t.equal(del.body, '');
  await refused(t, c, () => c.del(capPath('root')), 404, 'NOT_FOUND', 'creditsCurrencyId');
  t.same((await c.get(`${C}/${cus}/credit-caps`)).body.creditCaps.map((x: { unitExternalId: string }) => x.unitExternalId), ['leaf']);
});

t.test('live and test are separate configurations; other organizations see nothing', async (t) => {
  const live = client(org.live);
  const test = client(org.test);
  const { cus, credit } = await setup(live);
  await live.put(`${C}/${cus}/units/u`, {});
  const pool = (await live.post(`${C}/${cus}/credit-pools`, { orderLineAttributeId: credit, credits: '5' })).body.id as string;
  const liveCount = (await every(live, C)).length;

  const before = await snapshot(live);
  t.notOk((await every<{ id: string }>(test, C)).some((x) => x.id === cus), 'test mode does not list the live customer');
  t.equal((await test.get(`${C}/${cus}`)).status, 404);
  t.equal((await test.put(`${C}/${cus}/units/v`, {})).status, 404);
  const tc = await test.post(C, { name: 'Test', externalId: (await live.get(`${C}/${cus}`)).body.externalId });
  t.equal(tc.status, 201, 'the same externalId in the other mode');

  const stranger = await createOrg(svc.url);
  for (const key of [stranger.live, stranger.test]) {
    const s = client(key);
    t.same((await s.get(C)).body, { data: [], pagination: { limit: 100, offset: 0, total: 0, hasMore: false } });
    t.same((await s.get('/api/v2/plans')).body, { plans: [], nextCursor: null });
    for (const [m, p, b] of [
      ['GET', `${C}/${cus}`, undefined],
      ['GET', `${C}/${cus}/units`, undefined],
      ['GET', `${C}/${cus}/units/u`, undefined],
      ['PUT', `${C}/${cus}/units/u`, { name: 'mine' }],
      ['GET', `${C}/${cus}/order-line-attributes`, undefined],
      ['GET', `${C}/${cus}/credit-pools`, undefined],
      ['POST', `${C}/${cus}/credit-pools`, { orderLineAttributeId: credit, credits: '1' }],
      ['POST', `${C}/${cus}/credit-pools/${pool}/top-ups`, { credits: '1000' }],
      ['PUT', `${C}/${cus}/units/u/credit-caps/${CUR}`, { amount: '1', frequency: 'DAILY', effectiveFrom: '2024-01-01T00:00:00Z' }],
      ['DELETE', `${C}/${cus}/units/u/credit-caps/${CUR}`, undefined],
      ['GET', `${C}/${cus}/credit-caps`, undefined],
    ] as const) {
      const r = await http(svc.url, m, p, b === undefined ? { token: key } : { token: key, body: b });
      t.equal(r.status, 404, `${m} ${p} from another organization`);
      t.match(r.body.details, /^customerId:/);
    }
  }
  t.same(await snapshot(live), before, 'the live configuration is untouched');
  t.equal((await every(live, C)).length, liveCount);
});

t.test('concurrent changes in one process are all applied', async (t) => {
  const c = client(org.live);
  const { cus, credit } = await setup(c);
  const pool = (await c.post(`${C}/${cus}/credit-pools`, { orderLineAttributeId: credit, credits: '0' })).body.id as string;
  const n = 20;
  const results = await Promise.all([
    ...Array.from({ length: n }, (_, i) => c.put(`${C}/${cus}/units/p${i}`, { name: `unit ${i}` })),
    ...Array.from({ length: n }, (_, i) => c.post(`${C}/${cus}/credit-pools/${pool}/top-ups`, { credits: `${i + 1}.000001` })),
    ...Array.from({ length: n }, (_, i) => c.post(C, { name: `p${i}`, externalId: `parallel-${i}` })),
    // The same externalId 5 times at once: exactly one wins.
    ...Array.from({ length: 5 }, () => c.post(C, { name: 'race', externalId: 'race' })),
  ]);
  t.same(results.slice(0, 3 * n).map((r) => r.status), Array(3 * n).fill(201));
  t.same(results.slice(3 * n).map((r) => r.status).sort(), [201, 409, 409, 409, 409], 'one duplicate wins');
  const units = (await c.get(`${C}/${cus}/units`)).body.units as { externalId: string }[];
  t.same(units.map((u) => u.externalId).sort(), Array.from({ length: n }, (_, i) => `p${i}`).sort());
  const p = (await c.get(`${C}/${cus}/credit-pools`)).body.creditPools[0];
  t.equal(p.topUps.length, n);
  t.equal(p.totalCredits, `${(n * (n + 1)) / 2}.00002`, 'sum of 1.000001 … 20.000001, exact');
  const customers = await every<{ externalId: string | null }>(c, C);
  t.equal(customers.filter((x) => x.externalId?.startsWith('parallel-')).length, n);
  t.equal(customers.filter((x) => x.externalId === 'race').length, 1);
});

t.test('concurrent changes from two ingress processes on one bucket are all applied', async (t) => {
  const second = new ServiceProcess(iso, { ROLE: 'ingress' });
  await second.start();
  t.teardown(() => second.stop());
  const a = client(org.live);
  const b = client(org.live, second.url);
  const { cus, credit } = await setup(a);
  const pool = (await a.post(`${C}/${cus}/credit-pools`, { orderLineAttributeId: credit, credits: '0.5' })).body.id as string;
  const n = 30;
  const results = await Promise.all(
    Array.from({ length: n }, (_, i) => {
      const c = i % 2 ? a : b;
      return i % 3 === 0 ? c.post(`${C}/${cus}/credit-pools/${pool}/top-ups`, { credits: '0.25' }) : c.put(`${C}/${cus}/units/q${i}`, { parentExternalId: null });
    }),
  );
  t.same(results.map((r) => r.status), Array(n).fill(201), JSON.stringify(results.filter((r) => r.status !== 201).map((r) => r.body)));
  const tops = Array.from({ length: n }, (_, i) => i).filter((i) => i % 3 === 0).length;
  const p = (await a.get(`${C}/${cus}/credit-pools`)).body.creditPools[0];
  t.equal(p.topUps.length, tops);
  t.equal(p.totalCredits, String(0.5 + tops * 0.25));
  t.equal((await a.get(`${C}/${cus}/units`)).body.units.length, n - tops);

  // Cross-entity rules raced from both processes at once: exactly one of each duplicate wins.
  for (let round = 0; round < 3; round++) {
    const xid = `two-proc-${round}-${Math.random()}`;
    const made = await Promise.all([a, b, a, b].map((c) => c.post(C, { name: 'x', externalId: xid })));
    t.same(made.map((r) => r.status).sort(), [201, 409, 409, 409], `externalId ${round}: one of four wins`);
    const owner = made.find((r) => r.status === 201)!.body.id as string;
    const plan = (await b.post('/api/v2/plans', { name: 'race' })).body.id as string;
    const attrs = await Promise.all([a, b].map((c) => c.post(`${C}/${owner}/order-line-attributes`, { planId: plan, eventName: 'e', unitPrice: '1', currency: 'USD', creditsCurrencyId: CUR, creditsPerUnit: '1' })));
    t.same(attrs.map((r) => r.status).sort(), [201, 409], `attribute per eventName ${round}: one wins`);
    const attr = attrs.find((r) => r.status === 201)!.body.id as string;
    const pools = await Promise.all([b, a].map((c) => c.post(`${C}/${owner}/credit-pools`, { orderLineAttributeId: attr, credits: '1' })));
    t.same(pools.map((r) => r.status).sort(), [201, 409], `pool per attribute ${round}: one wins`);
    t.equal((await a.get(`${C}/${owner}/credit-pools`)).body.creditPools.length, 1);
  }
  // A unit move and a cycle-closing move raced: the tree never gets a cycle.
  await a.put(`${C}/${cus}/units/x`, {});
  await a.put(`${C}/${cus}/units/y`, {});
  const moves = await Promise.all([a.put(`${C}/${cus}/units/x`, { parentExternalId: 'y' }), b.put(`${C}/${cus}/units/y`, { parentExternalId: 'x' })]);
  t.same(moves.map((r) => r.status).sort(), [200, 400], 'one move wins, the other would close a cycle');
});

t.test('lists are paginated: limit, opaque cursor, creation order; bad limit or cursor is refused', async (t) => {
  const o = await createOrg(svc.url);
  const c = client(o.live);
  const plans: string[] = [];
  for (let i = 0; i < 7; i++) plans.push((await c.post('/api/v2/plans', { name: `p${i}` })).body.id);
  const ids: string[] = [];
  for (let i = 0; i < 5; i++) ids.push((await c.post(C, { name: `page ${i}`, externalId: `page-${i}` })).body.id);
  const p1 = await c.get('/api/v2/plans?limit=3');
  t.same(p1.body.plans.map((p: { id: string }) => p.id), plans.slice(0, 3));
  t.type(p1.body.nextCursor, 'string');
  const p2 = await c.get(`/api/v2/plans?limit=3&cursor=${p1.body.nextCursor}`);
  t.same(p2.body.plans.map((p: { id: string }) => p.id), plans.slice(3, 6));
  const p3 = await c.get(`/api/v2/plans?limit=3&cursor=${p2.body.nextCursor}`);
  t.same([p3.body.plans.map((p: { id: string }) => p.id), p3.body.nextCursor], [plans.slice(6), null], 'the last page has nextCursor null');
  t.same((await c.get('/api/v2/plans')).body.plans.length, 7, 'no cursor: the first page (default limit 100)');
  t.same((await every<{ id: string }>(c, C, 2)).map((x) => x.id), ids, 'customers page by page, in creation order');
  const page = await c.get(`${C}?limit=2&offset=2`);
  t.same([page.body.data.map((x: { id: string }) => x.id), page.body.pagination], [ids.slice(2, 4), { limit: 2, offset: 2, total: 5, hasMore: true }]);
  const last = await c.get(`${C}?limit=2&offset=4`);
  t.same([last.body.data.map((x: { id: string }) => x.id), last.body.pagination], [ids.slice(4), { limit: 2, offset: 4, total: 5, hasMore: false }]);
  t.same((await c.get(`${C}?offset=99`)).body, { data: [], pagination: { limit: 100, offset: 99, total: 5, hasMore: false } }, 'past the end: an empty page');

  // The longest externalId (255 three-byte characters: a 1,020-character claim key) and ones with dots and slashes.
  for (const xid of ['界'.repeat(255), 'a.b/c*>', '']) {
    const r = await c.post(C, { name: 'x', externalId: xid });
    if (xid === '') {
      t.equal(r.status, 400, 'an empty externalId is refused');
      continue;
    }
    t.equal(r.status, 201, `externalId of ${xid.length} characters`);
    t.equal((await c.post(C, { name: 'x', externalId: xid })).status, 409, 'and is unique');
  }
  const cus = ids[0]!;
  for (let i = 0; i < 5; i++) await c.put(`${C}/${cus}/units/u${i}`, {});
  const u1 = await c.get(`${C}/${cus}/units?limit=2`);
  t.same(u1.body.units.map((u: { externalId: string }) => u.externalId), ['u0', 'u1']);
  t.same((await all<{ externalId: string }>(c, `${C}/${cus}/units`, 'units', 2)).map((u) => u.externalId), ['u0', 'u1', 'u2', 'u3', 'u4']);
  for (const [q, field] of [
    ['limit=0', 'limit'],
    ['limit=1001', 'limit'],
    ['limit=abc', 'limit'],
    ['limit=-1', 'limit'],
    ['offset=-1', 'offset'],
    ['offset=1.5', 'offset'],
    ['offset=x', 'offset'],
  ] as const) {
    for (const list of [C, '/api/v2/products']) {
      const r = await c.get(`${list}?${q}`);
      t.equal(r.status, 400, `${list} ${q}`);
      t.equal(r.body.code, 'INVALID_BILLING_CONFIG');
      t.match(r.body.details, new RegExp(`^${field}:`), `${q}: ${r.body.details}`);
    }
  }
  for (const [q, field] of [
    ['cursor=not-a-cursor', 'cursor'],
    [`cursor=${u1.body.nextCursor}`, 'cursor'], // a units cursor on the plans list
  ] as const) {
    const r = await c.get(`/api/v2/plans?${q}`);
    t.equal(r.status, 400, q);
    t.equal(r.body.code, 'INVALID_BILLING_CONFIG');
    t.match(r.body.details, new RegExp(`^${field}:`), `${q}: ${r.body.details}`);
  }
  const r = await c.get(`${C}/${cus}/units?cursor=${p1.body.nextCursor}`);
  t.same([r.status, r.body.details?.split(':')[0]], [400, 'cursor'], 'a plans cursor on a per-customer list');
});

t.test('BillingConfigStore: compare-and-set across instances, create-only externalId claims, refusals change nothing', async (t) => {
  const nc = await connect({ servers: NATS_URL });
  t.teardown(() => nc.close());
  const kv = await new Kvm(jetstream(nc)).open(`${iso.natsPrefix}_billing`);
  // The bucket is the service's; use an organization id of our own.
  const orgId = 'org_StoreTestStoreTest0';
  const stores = Array.from({ length: 4 }, () => new BillingConfigStore(kv, nc.info?.max_payload ?? 1024 * 1024));
  const cus = 'cus_StoreTestStoreTest01';
  t.equal(await stores[0]!.getCustomer(orgId, 'live', cus), null);
  const taken = (owner: string) => new ApiError('CONFLICT', `externalId: taken by ${owner}`);
  const at = '2024-01-01T00:00:00Z';
  await stores[0]!.createCustomer(orgId, 'live', { id: cus, externalId: 'store-x', name: null, units: {}, createdAt: at, updatedAt: at }, defaultProfile(), taken);

  // Four processes claim one externalId at once: exactly one wins.
  const claims = await Promise.allSettled(
    stores.map((s, i) => s.createCustomer(orgId, 'live', { id: `cus_StoreTestStoreTest1${i}`, externalId: 'store-race', name: null, units: {}, createdAt: at, updatedAt: at }, defaultProfile(), taken)),
  );
  t.equal(claims.filter((c) => c.status === 'fulfilled').length, 1, 'one creation wins the externalId');
  t.ok(claims.filter((c) => c.status === 'rejected').every((c) => (c as PromiseRejectedResult).reason.code === 'CONFLICT'));

  let conflicts = 0;
  const update = kv.update.bind(kv);
  kv.update = async (...args: Parameters<typeof kv.update>) => {
    try {
      return await update(...args);
    } catch (err) {
      conflicts++;
      throw err;
    }
  };
  const missing = () => new ApiError('NOT_FOUND', 'customerId: none');
  const per = 15;
  await Promise.all(
    stores.flatMap((s, j) =>
      Array.from({ length: per }, (_, i) =>
        s.changeCustomer(orgId, 'live', cus, missing, (d) => {
          d.customer.units[`u_${j}_${i}`] = { externalId: `u_${j}_${i}`, externalType: null, name: null, parentExternalId: null, createdAt: at, updatedAt: at };
        }),
      ),
    ),
  );
  const after = await stores[1]!.getCustomer(orgId, 'live', cus);
  t.equal(Object.keys(after!.doc.customer.units).length, stores.length * per, 'every change applied');
  t.ok(conflicts > 0, `compare-and-set conflicts happened and were retried (${conflicts})`);
  kv.update = update;

  await t.rejects(
    stores[2]!.changeCustomer(orgId, 'live', cus, missing, (d) => {
      d.customer.units = {};
      throw new ApiError('CONFLICT', 'x: refused');
    }),
    { code: 'CONFLICT' },
  );
  t.same(await stores[3]!.getCustomer(orgId, 'live', cus), after, 'a refused change writes nothing');
  t.equal(await stores[0]!.changeCustomer(orgId, 'live', cus, missing, () => 'same'), 'same');
  t.same(await stores[0]!.getCustomer(orgId, 'live', cus), after, 'an unchanged document is not written');
  await t.rejects(stores[0]!.changeCustomer(orgId, 'test', cus, missing, () => 1), { code: 'NOT_FOUND' }, 'the test mode has its own documents');

  const big = new BillingConfigStore(kv, 8 * 1024);
  await t.rejects(
    big.changeCustomer(orgId, 'live', cus, missing, (d) => {
      d.customer.name = 'x'.repeat(10_000);
    }),
    { code: 'BILLING_CONFIG_TOO_LARGE' },
  );
  t.same(await big.getCustomer(orgId, 'live', cus), after, 'a document too large for one message is refused, nothing changes');

  // A claim whose customer was never written (a crash between the two): taken over once stale, not before.
  await kv.create(`xid.${orgId}.live.${Buffer.from('orphan').toString('base64url')}`, JSON.stringify({ customerId: 'cus_StoreTestNeverMade00' }));
  const orphan = (s: BillingConfigStore, id: string) => s.createCustomer(orgId, 'live', { id, externalId: 'orphan', name: null, units: {}, createdAt: at, updatedAt: at }, defaultProfile(), taken);
  await t.rejects(orphan(stores[0]!, 'cus_StoreTestStoreTest20'), { code: 'CONFLICT' }, 'a fresh claim without its customer is still taken');
  await orphan(new BillingConfigStore(kv, 1024 * 1024, 0), 'cus_StoreTestStoreTest21');
  t.equal((await stores[0]!.externalIdOwner(orgId, 'live', 'orphan'))?.customerId, 'cus_StoreTestStoreTest21', 'a stale orphaned claim is taken over');

  // A creation that fails after its claim (here: a document too large) releases the claim and leaves a position lists skip.
  await t.rejects(
    big.createCustomer(orgId, 'live', { id: 'cus_StoreTestStoreTest30', externalId: 'released', name: 'x'.repeat(10_000), units: {}, createdAt: at, updatedAt: at }, defaultProfile(), taken),
    { code: 'BILLING_CONFIG_TOO_LARGE' },
  );
  t.equal(await stores[0]!.externalIdOwner(orgId, 'live', 'released'), null, 'the claim is released');
  await stores[0]!.createCustomer(orgId, 'live', { id: 'cus_StoreTestStoreTest31', externalId: 'released', name: null, units: {}, createdAt: at, updatedAt: at }, defaultProfile(), taken);
  const listed = await stores[0]!.list<{ customer: { id: string } }>(orgId, 'live', 'customers', 0, 1000);
  t.notOk(listed.items.some((d) => d.customer.id === 'cus_StoreTestStoreTest30'), 'the failed customer is not listed');
  t.equal(listed.items.at(-1)?.customer.id, 'cus_StoreTestStoreTest31', 'creation order kept past the dangling position');
  t.equal(listed.next, null);

  // An externalId move (update) whose document change never happened leaves a claim naming a customer that does not carry it: taken over once stale, not before.
  await kv.create(`xid.${orgId}.live.${Buffer.from('moved').toString('base64url')}`, JSON.stringify({ customerId: cus }));
  await t.rejects(stores[0]!.createCustomer(orgId, 'live', { id: 'cus_StoreTestStoreTest40', externalId: 'moved', name: null, units: {}, createdAt: at, updatedAt: at }, defaultProfile(), taken), { code: 'CONFLICT' }, 'a fresh claim of a customer that does not carry it is still taken');
  await new BillingConfigStore(kv, 1024 * 1024, 0).createCustomer(orgId, 'live', { id: 'cus_StoreTestStoreTest41', externalId: 'moved', name: null, units: {}, createdAt: at, updatedAt: at }, defaultProfile(), taken);
  t.equal((await stores[0]!.customerByExternalId(orgId, 'live', 'moved'))?.doc.customer.id, 'cus_StoreTestStoreTest41', 'a stale claim of a customer that does not carry it is taken over');
  // Two customers moved to one externalId at once, from two instances: one wins; the loser keeps its own.
  const movers = ['cus_StoreTestStoreTest50', 'cus_StoreTestStoreTest51'];
  for (const [i, id] of movers.entries()) await stores[0]!.createCustomer(orgId, 'live', { id, externalId: `mover-${i}`, name: null, units: {}, createdAt: at, updatedAt: at }, defaultProfile(), taken);
  const moved = await Promise.allSettled(movers.map((id, i) => stores[i]!.changeCustomerClaiming(orgId, 'live', id, 'target', missing, taken, (d) => {
    d.customer.externalId = 'target';
  })));
  t.same(moved.map((m) => m.status).sort(), ['fulfilled', 'rejected'], 'one move to a taken externalId wins');
  const winner = movers[moved.findIndex((m) => m.status === 'fulfilled')]!;
  const loser = movers.find((id) => id !== winner)!;
  t.equal((await stores[2]!.customerByExternalId(orgId, 'live', 'target'))?.doc.customer.id, winner);
  t.equal((await stores[2]!.getCustomer(orgId, 'live', loser))?.doc.customer.externalId, `mover-${movers.indexOf(loser)}`, 'the loser is unchanged');
  t.equal(await stores[2]!.externalIdOwner(orgId, 'live', `mover-${movers.indexOf(winner)}`), null, "the winner's previous claim is released");

  // Products: the same create-only claims (pxid.), crash-safe in the same way.
  const product = (id: string, externalId: string | null, name = 'p') => ({ id, name, description: null, active: true, productCode: null, externalId, archivedAt: null, metadata: null, createdAt: at, updatedAt: at });
  const made = await Promise.allSettled(stores.map((st, i) => st.createProduct(orgId, 'live', product(`prod_StoreTestStoreTest0${i}`, 'p-race'), taken)));
  t.equal(made.filter((m) => m.status === 'fulfilled').length, 1, 'one product creation wins the externalId');
  const pkey = (x: string) => `pxid.${orgId}.live.${Buffer.from(x).toString('base64url')}`;
  await kv.create(pkey('p-orphan'), JSON.stringify({ productId: 'prod_StoreTestNeverMade00' }));
  await t.rejects(stores[0]!.createProduct(orgId, 'live', product('prod_StoreTestStoreTest10', 'p-orphan'), taken), { code: 'CONFLICT' }, 'a fresh product claim without its product is still taken');
  await new BillingConfigStore(kv, 1024 * 1024, 0).createProduct(orgId, 'live', product('prod_StoreTestStoreTest11', 'p-orphan'), taken);
  t.equal((await stores[0]!.productByExternalId(orgId, 'live', 'p-orphan'))?.doc.id, 'prod_StoreTestStoreTest11', 'a stale orphaned product claim is taken over');
  await t.rejects(big.createProduct(orgId, 'live', product('prod_StoreTestStoreTest20', 'p-released', 'x'.repeat(10_000)), taken), { code: 'BILLING_CONFIG_TOO_LARGE' });
  t.equal(await stores[0]!.claimOwner('product', orgId, 'live', 'p-released'), null, 'a failed product creation releases its claim');
  const products = await stores[0]!.list<{ id: string }>(orgId, 'live', 'products', 0, 1000, { window: true });
  t.same(products.items.map((p) => p.id).sort(), [made.map((m, i) => (m.status === 'fulfilled' ? `prod_StoreTestStoreTest0${i}` : null)).find((x) => x)!, 'prod_StoreTestStoreTest11'].sort(), 'listed: the created products, not the failed one');
  t.equal(products.total, 3, 'positions: the race winner, the takeover, the failed creation (claims are taken before positions)');

  const batch = await stores[0]!.forBatch(orgId, 'live', ['store-x', cus, 'nobody', 'cus_StoreTestStoreTest99']);
  t.same(Object.keys(batch.config.customers), [cus], 'a batch reads only the customers it names (by externalId or id)');
  t.same(Object.keys(batch.revisions), [`cus.${orgId}.live.${cus}`]);
});

t.test('references naming no customer are answered from memory while the configuration is unchanged, and found once one is created', async (t) => {
  const nc = await connect({ servers: NATS_URL });
  t.teardown(() => nc.close());
  // Bound as the service binds it (billingConfigBucket): with direct gets, the evaluation's reads.
  const kv = await new Kvm(jetstream(nc)).create(`${iso.natsPrefix}_billing`, { history: 1 });
  const store = new BillingConfigStore(kv, nc.info?.max_payload ?? 1024 * 1024);
  const org = await createOrg(svc.url);
  const c = client(org.live);
  // The store's reads of the bucket, as the server routes them: every direct get names its key.
  const watch = await connect({ servers: NATS_URL });
  t.teardown(() => watch.close());
  const asked: string[] = [];
  watch.subscribe(`$JS.API.DIRECT.GET.KV_${iso.natsPrefix}_billing.>`, {
    callback: (_e, m) => {
      asked.push(m.subject);
    },
  });
  await watch.flush();
  /** The keys read by `f` (a get is routed to this subscriber before it is answered; the flush's PONG comes after it). */
  const readBy = async <T>(f: () => Promise<T>): Promise<{ value: T; keys: string[] }> => {
    asked.length = 0;
    const value = await f();
    await watch.flush();
    return { value, keys: asked.map((s) => s.slice(s.indexOf('$KV.'))) };
  };
  // Kind-prefixed references, as the pipeline carries them (src/pipeline/rows-task.ts): x: an externalId, i: a service id.
  const refs = ['x:nobody-one', 'x:nobody-two', 'i:cus_AAAAAAAAAAAAAAAAAAAA'];
  const resolve = (mode: 'live' | 'test', r: string[]) => store.resolveIdentities(org.id, mode, r, []);
  const ids = (v: { customers: ({ id: string } | null)[] }): (string | null)[] => v.customers.map((c) => c?.id ?? null);

  const first = await readBy(() => resolve('live', refs));
  t.same(ids(first.value), [null, null, null], 'externalIds of no customer, and a service id of no customer: null (a service id is looked up, not taken as its own)');
  t.equal(first.keys.filter((k) => k.includes('.xid.')).length, 2, 'the first time, each externalId is read');
  t.equal(first.keys.filter((k) => k.includes('.cus.')).length, 1, "and the service id's document");
  const again = await readBy(() => resolve('live', refs));
  t.same(again.value, first.value, 'the same answer');
  t.same(again.keys, [], 'then from memory: the bucket has not changed');

  const made = await c.post(C, { externalId: 'nobody-one', name: 'Now somebody' });
  t.equal(made.status, 201);
  const after = await readBy(() => resolve('live', refs));
  t.same(after.value.customers[0], { id: made.body.id, externalId: 'nobody-one' }, 'a customer created since is found at once (the change empties the cache), with both its ids');
  t.equal(after.value.customers[1], null);
  t.ok(after.keys.some((k) => k.includes('.xid.')), 'read again after the change');
  const byKind = await resolve('live', ['i:nobody-one', `x:${made.body.id}`, `i:${made.body.id}`]);
  t.same(ids(byKind), [null, null, made.body.id], 'by kind only: an externalId is not a service id, and a service id is not an externalId');
  const other = await readBy(() => resolve('test', ['x:nobody-one', 'x:nobody-one']));
  t.same(ids(other.value), [null, null], "the other mode's references are its own");
  // Keys of that mode only: the subscription also sees the service's own reads of the live
  // customer just created, which may land in this window on a loaded machine.
  t.equal(other.keys.filter((k) => k.includes(`.${org.id}.test.`)).length, 1, `read in that mode, once: ${JSON.stringify(other.keys)}`);
  const twice = await readBy(() => resolve('live', ['x:nobody-two', 'x:nobody-one', 'x:nobody-two']));
  t.same(ids(twice.value), [null, made.body.id, null], 'each reference from memory');
  t.same(twice.keys, [], `nothing read: ${JSON.stringify(twice.keys)}`);
  // An externalId may have the form of a service id, even another customer's: references never mix kinds.
  const lookalike = await c.post(C, { externalId: made.body.id, name: 'Named like the other' });
  t.equal(lookalike.status, 201, 'an externalId shaped like a service id is taken');
  const mixed = await resolve('live', [`x:${made.body.id}`, `i:${made.body.id}`, `i:${lookalike.body.id}`]);
  t.same(ids(mixed), [lookalike.body.id, made.body.id, lookalike.body.id], "x: finds the customer whose externalId it is; i: the customer whose service id it is");
});

t.test('with replicas, what the configuration caches keep is read from the stream leader, not by direct gets a follower may answer', async (t) => {
  const nc = await connect({ servers: NATS_URL });
  t.teardown(() => nc.close());
  const kv = await new Kvm(jetstream(nc)).create(`${iso.natsPrefix}_billing`, { history: 1 });
  const org = await createOrg(svc.url);
  const watch = await connect({ servers: NATS_URL });
  t.teardown(() => watch.close());
  const asked: string[] = [];
  watch.subscribe(`$JS.API.*.*.KV_${iso.natsPrefix}_billing.>`, {
    callback: (_e, m) => {
      asked.push(m.subject);
    },
  });
  watch.subscribe(`$JS.API.STREAM.MSG.GET.KV_${iso.natsPrefix}_billing`, {
    callback: (_e, m) => {
      asked.push(m.subject);
    },
  });
  await watch.flush();
  const kinds = async (store: BillingConfigStore): Promise<string[]> => {
    asked.length = 0;
    await store.resolveIdentities(org.id, 'live', [`x:nobody-${Math.random()}`], []);
    await store.forBatch(org.id, 'live', [`nobody-${Math.random()}`]);
    await watch.flush();
    return [...new Set(asked.map((s) => (s.includes('.DIRECT.GET.') ? 'direct' : 'leader')))];
  };
  t.same(await kinds(new BillingConfigStore(kv, nc.info?.max_payload ?? 1024 * 1024)), ['direct'], 'one replica: direct gets');
  t.same(await kinds(new BillingConfigStore(kv, nc.info?.max_payload ?? 1024 * 1024, undefined, true)), ['leader'], 'replicated: every read of the caches asks the leader');
});
