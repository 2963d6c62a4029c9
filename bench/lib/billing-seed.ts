/**
 * Seeding billing configurations for benches: the per-entity KV keys of
 * src/billing/config/store.ts (customer document, externalId claim, listing position, the
 * counters) written directly, in parallel — going through the API for thousands of customers
 * would take most of a run. Customer i of an organization has externalId `ext-<i>`, units
 * root → team → user, one credit-priced order line attribute for event `tokens` (count, unit
 * price 0.5 USD, 1 credit per unit), a pool of 1,000,000 credits and a monthly cap of 500,000
 * on its root unit.
 */
import type { KV } from '@nats-io/kv';
import { customerKey, defaultProfile, externalIdKey, planKey, type CustomerDoc } from '../../src/billing/config/store.js';
import { capKey } from '../../src/billing/model.js';

export const CUR = '7e1c2b1e-0000-4000-8000-0000000000cf';
export const AT = '2024-01-01T00:00:00.000Z';

const pad = (i: number): string => String(i).padStart(12, '0');
export const seedId = (org: string, prefix: string, i: number): string => `${prefix}_${org.slice(-8)}${pad(i)}`;

export function customerDoc(orgId: string, i: number, planId: string): CustomerDoc {
  const id = seedId(orgId, 'cus', i);
  const unit = (externalId: string, parent: string | null) => ({ externalId, externalType: null, name: null, parentExternalId: parent, createdAt: AT, updatedAt: AT });
  const attrId = seedId(orgId, 'ola', i);
  const poolId = `cp_${orgId.slice(-8)}${pad(i)}`;
  return {
    seq: i,
    customer: { id, externalId: `ext-${i}`, name: `customer ${i}`, units: { root: unit('root', null), team: unit('team', 'root'), user: unit('user', 'team') }, createdAt: AT, updatedAt: AT },
    profile: defaultProfile(),
    deletedAt: null,
    attributes: {
      [attrId]: { id: attrId, customerId: id, planId, eventName: 'tokens', quantity: { kind: 'count' }, unitPrice: '0.5', currency: 'USD', includedQuantity: null, creditsCurrencyId: CUR, creditsPerUnit: '1', createdAt: AT },
    },
    pools: { [poolId]: { id: poolId, customerId: id, orderLineAttributeId: attrId, creditsCurrencyId: CUR, granted: '1000000', topUps: [], createdAt: AT } },
    caps: { [capKey(id, 'root', CUR)]: { customerId: id, unitExternalId: 'root', creditsCurrencyId: CUR, amount: '500000', frequency: 'MONTHLY', effectiveFrom: AT, updatedAt: AT } },
  };
}

/** Writes the per-entity keys of `n` customers (and one plan) directly, `parallel` puts in flight. */
export async function seed(kv: KV, orgId: string, n: number, parallel = 256, log = true): Promise<{ planId: string; ms: number }> {
  const t0 = performance.now();
  const planId = seedId(orgId, 'plan', 1);
  await kv.put(planKey(orgId, 'live', planId), JSON.stringify({ id: planId, name: 'Bench', createdAt: AT }));
  await kv.put(`ord.${orgId}.live.plans.1`, JSON.stringify({ id: planId, name: 'Bench', createdAt: AT }));
  await kv.put(`seq.${orgId}.live.plans`, JSON.stringify({ n: 1 }));
  let next = 1;
  const worker = async (): Promise<void> => {
    while (next <= n) {
      const i = next++;
      const d = customerDoc(orgId, i, planId);
      await Promise.all([
        kv.put(externalIdKey(orgId, 'live', d.customer.externalId!), JSON.stringify({ customerId: d.customer.id })),
        kv.put(`ord.${orgId}.live.customers.${i}`, JSON.stringify({ id: d.customer.id })),
        kv.put(customerKey(orgId, 'live', d.customer.id), JSON.stringify(d)),
      ]);
      if (log && i % 20_000 === 0) process.stdout.write(`  seeded ${i} / ${n}\n`);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.floor(parallel / 3)) }, worker));
  await kv.put(`seq.${orgId}.live.customers`, JSON.stringify({ n }));
  return { planId, ms: performance.now() - t0 };
}

