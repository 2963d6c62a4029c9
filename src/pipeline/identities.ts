/**
 * The identity columns of fact_signal (customer_id, external_customer_id, product_id,
 * external_product_id): a signal names its customer (and product) by one of two kinds, the
 * service's id or the producer's externalId (src/pipeline/rows-task.ts: `i:…` / `x:…`). The
 * form sent is always stored; the other one is filled when the customer (product) exists
 * when the batch is stored, else ''. References found are kept (a customer's ids never change
 * once it exists); those naming none are asked again for the next batch (the configuration
 * store answers them from memory while its bucket is unchanged, src/billing/config/store.ts).
 */
import type { Mode } from '../shared/mode.js';
import { REF_ID_PREFIX } from './rows-task.js';

export interface Identity {
  id: string;
  externalId: string;
}

/** The identities of kind-prefixed references, in order (products: '' for none); null where none exists. */
export type IdentityLookup = (
  orgId: string,
  mode: Mode,
  customers: readonly string[],
  products: readonly string[],
) => Promise<{ customers: (Identity | null)[]; products: (Identity | null)[] }>;

const CACHE_MAX = 200_000;

export class Identities {
  /** `<org>\0<mode>\0<c|p><reference>` → its identity, for references found (the oldest go first past cacheMax). */
  private readonly cache = new Map<string, Identity>();

  constructor(
    private readonly lookup: IdentityLookup,
    private readonly cacheMax = CACHE_MAX,
  ) {}

  /** The identities of a batch's distinct references (customers, and products: '' for none). */
  async resolve(orgId: string, mode: Mode, customers: readonly string[], products: readonly string[]): Promise<{ customers: (Identity | null)[]; products: (Identity | null)[] }> {
    const scope = `${orgId}\u0000${mode}\u0000`;
    const c = customers.map((r) => this.cache.get(`${scope}c${r}`) ?? null);
    const p = products.map((r) => (r === '' ? null : (this.cache.get(`${scope}p${r}`) ?? null)));
    const missingC = customers.filter((_, i) => c[i] === null);
    const missingP = products.filter((r, i) => r !== '' && p[i] === null);
    if (missingC.length === 0 && missingP.length === 0) return { customers: c, products: p };
    const found = await this.lookup(orgId, mode, missingC, missingP);
    const byC = new Map(missingC.map((r, i) => [r, found.customers[i] ?? null]));
    const byP = new Map(missingP.map((r, i) => [r, found.products[i] ?? null]));
    customers.forEach((r, i) => {
      if (c[i] !== null) return;
      const f = byC.get(r) ?? null;
      c[i] = f;
      if (f) this.remember(`${scope}c${r}`, f);
    });
    products.forEach((r, i) => {
      if (r === '' || p[i] !== null) return;
      const f = byP.get(r) ?? null;
      p[i] = f;
      if (f) this.remember(`${scope}p${r}`, f);
    });
    return { customers: c, products: p };
  }

  private remember(key: string, id: Identity): void {
    if (this.cache.has(key)) return;
    if (this.cache.size >= this.cacheMax) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(key, id);
  }
}

const json = JSON.stringify;

/** The two columns of a reference: [service id, externalId], the form sent always, the other from its identity or ''. */
function columns(ref: string, found: Identity | null): [string, string] {
  if (ref === '') return ['', ''];
  const text = ref.slice(2);
  return ref.startsWith(REF_ID_PREFIX) ? [text, found?.externalId ?? ''] : [found?.id ?? '', text];
}

/** The start of a row with these references: `{"customer_id":…,"external_customer_id":…,"product_id":…,"external_product_id":…,` (the row's own `{` is dropped). */
export function identityPrefix(customer: string, c: Identity | null, product: string, p: Identity | null): Uint8Array {
  const [cid, cx] = columns(customer, c);
  const [pid, px] = columns(product, p);
  return Buffer.from(`{"customer_id":${json(cid)},"external_customer_id":${json(cx)},"product_id":${json(pid)},"external_product_id":${json(px)},`);
}
