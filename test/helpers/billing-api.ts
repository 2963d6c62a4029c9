/**
 * Billing configuration through the HTTP API, for the tests that bill through a running
 * service (test/api/billing-*.test.ts).
 */
import { http, type TestOrg } from './service.js';

/** A call with the organization's live key: its body, or an error naming the call and the answer (any status ≥ 300). */
export async function call(base: string, org: TestOrg, method: string, path: string, body?: unknown): Promise<any> {
  const r = await http(base, method, path, { token: org.live, body });
  if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/** Customer `acme` with a root unit, a credit-priced attribute for event `e` (1 EUR and 1 credit of currency `cur` per unit) and a pool of `credits`. */
export async function acmeWithPool(url: string, org: TestOrg, credits: string, cur: string): Promise<{ c: { id: string }; pool: { id: string } }> {
  const c = await call(url, org, 'POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme' });
  await call(url, org, 'PUT', `/api/v2/customers/${c.id}/units/root`, {});
  const plan = await call(url, org, 'POST', '/api/v2/plans', { name: 'Pro' });
  const ola = await call(url, org, 'POST', `/api/v2/customers/${c.id}/order-line-attributes`, { planId: plan.id, eventName: 'e', unitPrice: '1', currency: 'EUR', creditsCurrencyId: cur, creditsPerUnit: '1' });
  const pool = await call(url, org, 'POST', `/api/v2/customers/${c.id}/credit-pools`, { orderLineAttributeId: ola.id, credits });
  return { c, pool };
}
