/**
 * The billing configuration (src/billing/model.ts) in the JetStream KV bucket
 * `<NATS_PREFIX>_billing` (file storage, history 1), one key per entity, so no
 * organization has a size ceiling and every operation touches O(1) keys. For organization O
 * and mode M (live | test):
 *
 *   cus.O.M.<customerId>        the customer document: the customer and its units, order
 *                               line attributes, credit pools (with top-ups) and credit caps,
 *                               plus `seq`, its place in the listing order. Everything one
 *                               validation needs together (attribute per customer+eventName,
 *                               pool per attribute of the same customer, unit tree cycles,
 *                               caps on the customer's units) is in this one key, changed with
 *                               compare-and-set on its revision.
 *                               The document also holds the customer's profile (the official
 *                               client's fields: email, billing address, …) and `deletedAt`
 *                               (a deleted customer's document stays, so its externalId stays
 *                               reserved; reads and lists skip it, changes answer 404).
 *   xid.O.M.<b64url(externalId)> {customerId}: the claim of an externalId, written with KV
 *                               `create` (create-only) before the customer has it, so two
 *                               concurrent creations (or changes) with one externalId cannot
 *                               both win. A claim holds while its customer's document carries
 *                               that externalId; otherwise (a crash between claim and
 *                               document) it is taken over once older than STALE_CLAIM_MS.
 *   prod.O.M.<productId>        a product document {id, name, description, active,
 *                               productCode, externalId, archivedAt, metadata, createdAt,
 *                               updatedAt, seq} (compare-and-set on its revision).
 *   pxid.O.M.<b64url(externalId)> {productId}: the claim of a product's externalId (as xid).
 *   plan.O.M.<planId>           a plan (immutable once created, never deleted).
 *   seq.O.M.customers|plans|products  {n}: the last listing position handed out (compare-and-set).
 *   ord.O.M.customers|plans|products.<n> {id} (a plan: the plan itself, plans never change):
 *                               position n of the listing order (creation order);
 *                               written before the entity, so a crash between the two leaves a
 *                               dangling position that lists skip.
 *
 * Changes to one key made in this process are queued one after another, so concurrent
 * requests to one process never conflict; compare-and-set is what keeps several processes
 * exact (read → fn → write is rerun on a conflict, at most MAX_ATTEMPTS times; `fn` may run
 * more than once and must only change its private copy). One key is one NATS message: a
 * customer document that would exceed max_payload (e.g. tens of thousands of top-ups on one
 * customer) is refused with BILLING_CONFIG_TOO_LARGE and nothing changes.
 */
import type { KV, KvEntry } from '@nats-io/kv';
import { JetStreamApiCodes, JetStreamApiError, StorageType } from '@nats-io/jetstream';
import type { Nats } from '../../bus/connection.js';
import { kvReader, kvStream, type KvReader } from '../../bus/kv-read.js';
import { FencedKvCache, streamState, type FencedView } from '../../bus/kv-fenced.js';
import { ensure } from '../../bus/topology.js';
import { ApiError } from '../../errors.js';
import { billingLog as log } from '../../log.js';
import type { Mode } from '../../shared/mode.js';
import type { BillingConfig, CreditCap, CreditPool, Customer, OrderLineAttribute, Plan } from '../model.js';

/** Read → fn → compare-and-set attempts before a change gives up with 409 CONFLICT. */
export const MAX_ATTEMPTS = 25;
/** Room kept in a NATS message for the subject and headers of a KV put. */
const MESSAGE_OVERHEAD_BYTES = 4 * 1024;
/** A claimed externalId whose customer was never written (a crash between the two) is taken over after this. */
export const STALE_CLAIM_MS = 30_000;

/** The profile of a customer created without one. */
export const defaultProfile = (): CustomerProfile => ({
  legalName: null,
  email: '',
  phone: '',
  website: '',
  billingAddress: null,
  creationState: 'active',
  churnDate: null,
  vatNumber: null,
  metadata: null,
  defaultCurrency: DEFAULT_CURRENCY,
});

/** A customer's `defaultCurrency` when none is given (informational: prices carry their own currency). */
export const DEFAULT_CURRENCY = 'USD';

/** A customer's postal address (every line optional). */
export interface BillingAddress {
  line1?: string;
  line2?: string;
  city?: string;
  state?: string;
  zipCode?: string;
  country?: string;
}

/** What a customer carries beyond what pricing reads (the official client's customer fields). */
export interface CustomerProfile {
  legalName: string | null;
  /** "" when unset (the client's type is a non-null string). */
  email: string;
  phone: string;
  website: string;
  billingAddress: BillingAddress | null;
  creationState: 'draft' | 'active';
  churnDate: string | null;
  vatNumber: string | null;
  metadata: Record<string, unknown> | null;
  defaultCurrency: string;
}

/** One customer and everything that belongs to it. */
export interface CustomerDoc {
  /** Position in the listing order of customers (creation order). */
  seq: number;
  customer: Customer;
  profile: CustomerProfile;
  /** When the customer was deleted (null: it is not). A deleted customer is kept, as read-only history. */
  deletedAt: string | null;
  attributes: Record<string, OrderLineAttribute>;
  pools: Record<string, CreditPool>;
  /** Keyed by `capKey(customerId, unitExternalId, creditsCurrencyId)`. */
  caps: Record<string, CreditCap>;
}

export interface VersionedCustomer {
  doc: CustomerDoc;
  /** The KV revision the document was read at. */
  revision: number;
}

export type Listing = 'customers' | 'plans' | 'products';

/** A product (signals' attribution names one by id or externalId). */
export interface ProductDoc {
  /** `prod_` + 20 base62 characters. */
  id: string;
  name: string;
  description: string | null;
  active: boolean;
  productCode: string | null;
  externalId: string | null;
  /** When `active` last became false (null while active). */
  archivedAt: string | null;
  metadata: Record<string, unknown> | null;
  createdAt: string;
  updatedAt: string;
  /** Position in the listing order of products (creation order). */
  seq: number;
}

export interface VersionedProduct {
  doc: ProductDoc;
  revision: number;
}

/** The entities whose externalId is claimed by a create-only key (`xid.` for customers, `pxid.` for products). */
export type Claimed = 'customer' | 'product';

export interface Page<T> {
  items: T[];
  /** The listing position of the last item read, to continue after; null when there is nothing more. */
  next: number | null;
}

/** The part of the configuration one batch needs: its customers (and the plans they use), with the revisions read. */
export interface BatchConfig {
  config: BillingConfig;
  /** KV key → revision of every document in `config`. */
  revisions: Record<string, number>;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

export const customerKey = (orgId: string, mode: Mode, customerId: string): string => `cus.${orgId}.${mode}.${customerId}`;
export const externalIdKey = (orgId: string, mode: Mode, externalId: string): string => `xid.${orgId}.${mode}.${Buffer.from(externalId, 'utf8').toString('base64url') || '_'}`;
export const planKey = (orgId: string, mode: Mode, planId: string): string => `plan.${orgId}.${mode}.${planId}`;
export const productKey = (orgId: string, mode: Mode, productId: string): string => `prod.${orgId}.${mode}.${productId}`;
export const productExternalIdKey = (orgId: string, mode: Mode, externalId: string): string =>
  `pxid.${orgId}.${mode}.${Buffer.from(externalId, 'utf8').toString('base64url') || '_'}`;
const claimKey = (kind: Claimed, orgId: string, mode: Mode, externalId: string): string =>
  kind === 'customer' ? externalIdKey(orgId, mode, externalId) : productExternalIdKey(orgId, mode, externalId);
const counterKey = (orgId: string, mode: Mode, l: Listing): string => `seq.${orgId}.${mode}.${l}`;
const orderKey = (orgId: string, mode: Mode, l: Listing, n: number): string => `ord.${orgId}.${mode}.${l}.${n}`;

/** Service ids of customers (externalIds never have this form: the API refuses it). */
const CUSTOMER_ID = /^cus_[0-9A-Za-z]{20}$/;
const PLAN_ID = /^plan_[0-9A-Za-z]{20}$/;
const PRODUCT_ID = /^prod_[0-9A-Za-z]{20}$/;
const ID_OF: Record<Listing, RegExp> = { customers: CUSTOMER_ID, plans: PLAN_ID, products: PRODUCT_ID };

/** What a reference names: the customer's (product's) service id and its externalId ('' when it has none). */
export interface Identity {
  id: string;
  externalId: string;
}

function isConflict(err: unknown): boolean {
  return (
    err instanceof JetStreamApiError &&
    (err.code === JetStreamApiCodes.StreamWrongLastSequence || err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

function unavailable(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  log.error('billing configuration store unavailable', { err });
  return new ApiError('BILLING_UNAVAILABLE', 'the billing configuration store (JetStream) is unreachable; nothing changed, retry later');
}

function deepFreeze<T>(v: T): T {
  if (v && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const present = (e: KvEntry | null): e is KvEntry => e !== null && e.operation === 'PUT' && e.length > 0;
const parse = <T>(e: KvEntry): T => JSON.parse(dec.decode(e.value)) as T;
const tooManyConflicts = (): ApiError =>
  new ApiError('CONFLICT', `configuration: changed concurrently ${MAX_ATTEMPTS} times in a row by other processes; nothing changed, retry`);
const backoff = (attempt: number): Promise<void> => sleep(Math.random() * Math.min(100, 2 ** attempt));

/**
 * Billing configuration documents, one per organization and mode: on disk, only the latest
 * revision kept (changes are compare-and-set on it).
 */
export function billingConfigBucket(nats: Nats): Promise<KV> {
  return ensure(nats, { bucket: nats.topology.buckets.billingConfig, options: { history: 1, storage: StorageType.File } });
}

/** Configuration entries the evaluator keeps (documents of about 2 KB, and externalId claims). */
const EVALUATION_CACHE_MAX = 20_000;
/** Entries (externalId claims and the documents confirming them, absent ones included) kept for resolving references. */
const RESOLUTION_CACHE_MAX = 50_000;

/** Plans kept in memory by forBatch (about 200 bytes each). */
const PLANS_SEEN_MAX = 100_000;

export class BillingConfigStore {
  /** Largest document in bytes (UTF-8 JSON). */
  readonly maxDocumentBytes: number;
  private readonly queues = new Map<string, Promise<unknown>>();
  /** Reads: JetStream direct gets, many keys per call (bus/kv-read.ts). */
  private readonly reader: KvReader;

  /**
   * @param kv the `<prefix>_billing` bucket (`billingConfigBucket`)
   * @param maxPayload the NATS server's max_payload (`Nats.maxPayload`)
   * @param staleClaimMs age after which an externalId claim without its customer is taken over
   * @param replicated the bucket has replicas (NATS_REPLICAS > 1): what the caches keep is read from the stream's leader
   */
  constructor(
    private readonly kv: KV,
    maxPayload: number,
    private readonly staleClaimMs = STALE_CLAIM_MS,
    replicated = false,
  ) {
    this.maxDocumentBytes = maxPayload - MESSAGE_OVERHEAD_BYTES;
    this.reader = kvReader(kv);
    const s = kvStream(kv);
    const state = s ? () => streamState(s.nc, s.apiPrefix, s.stream, s.timeoutMs) : null;
    // A cache keeps an answer as long as the leader's stream state stays the one asked before
    // reading it. A direct get may be answered by a follower that has not applied the last
    // writes yet (kv-read.ts LeaderKvReader): kept, such an answer (a customer created just
    // before, read as absent) would stand until the next configuration change. So with
    // replicas the caches read from the leader (dearer per key; they read a key once per change).
    const cacheReader = replicated ? kvReader(kv, undefined, { leader: true }) : this.reader;
    this.evaluation = state ? new FencedKvCache(cacheReader, state, EVALUATION_CACHE_MAX) : null;
    this.resolution = state ? new FencedKvCache(cacheReader, state, RESOLUTION_CACHE_MAX) : null;
  }

  /**
   * The pipeline's reads resolving customer references (resolveIdentities), kept as the
   * evaluation's are but apart from them: references that name no customer can be many (an
   * organization metering customers it never configured for billing), and they must not push
   * the documents the evaluator reads out of its cache.
   */
  private readonly resolution: FencedKvCache | null;

  /**
   * The evaluator's reads (forBatch): documents kept while the bucket is unchanged
   * (bus/kv-fenced.ts), so a busy evaluator reads each customer's document once per
   * configuration change anywhere in the deployment, not once per group. Null for a bucket
   * without direct gets (read every time).
   */
  private readonly evaluation: FencedKvCache | null;
  /** Each document entry the evaluation cache holds, parsed once (entries kept are the same objects on every hit). */
  private readonly parsed = new WeakMap<KvEntry, VersionedCustomer>();
  /** Each kept document's key (forBatch: made once, not once per group that pins it). */
  private readonly keysOf = new WeakMap<VersionedCustomer, string>();
  /** Each kept entry's identity (a customer or product document: identitiesOf), read once. */
  private readonly identities = new WeakMap<KvEntry, Identity | null>();
  /** Each kept externalId claim's value, read once. */
  private readonly claims = new WeakMap<KvEntry, { customerId?: string; productId?: string }>();

  /** An externalId claim's value (the entries are kept while the bucket is unchanged: parsed once each). */
  private claimOf(e: KvEntry): { customerId?: string; productId?: string } {
    let c = this.claims.get(e);
    if (!c) this.claims.set(e, (c = parse<{ customerId?: string; productId?: string }>(e)));
    return c;
  }

  private async raw(key: string): Promise<KvEntry | null> {
    try {
      return await this.reader.get(key);
    } catch (err) {
      throw unavailable(err);
    }
  }

  /** Many keys in one round (one publish each, one timer): null where a key has no value. */
  private async rawMany(keys: readonly string[], reader: KvReader = this.reader): Promise<(KvEntry | null)[]> {
    if (keys.length === 0) return [];
    try {
      return await reader.getMany(keys);
    } catch (err) {
      throw unavailable(err);
    }
  }

  private encode(value: unknown, what: string): Uint8Array {
    const bytes = enc.encode(JSON.stringify(value));
    if (bytes.length > this.maxDocumentBytes) {
      throw new ApiError(
        'BILLING_CONFIG_TOO_LARGE',
        `configuration: the change would make ${what} ${bytes.length} bytes; at most ${this.maxDocumentBytes} bytes fit in one NATS message (max_payload); nothing changed`,
      );
    }
    return bytes;
  }

  /** Runs `task` after the earlier tasks of `key` in this process. */
  private queued<T>(key: string, task: () => Promise<T>): Promise<T> {
    const previous = this.queues.get(key) ?? Promise.resolve();
    const run = previous.then(task, task);
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    this.queues.set(key, settled);
    void settled.then(() => {
      if (this.queues.get(key) === settled) this.queues.delete(key);
    });
    return run;
  }

  // --- customers ---

  /** A customer document by service id (deleted ones included: `deletedAt`), or null. One KV get. */
  async getCustomer(orgId: string, mode: Mode, customerId: string): Promise<VersionedCustomer | null> {
    if (!CUSTOMER_ID.test(customerId)) return null;
    const e = await this.raw(customerKey(orgId, mode, customerId));
    return present(e) ? { doc: parse<CustomerDoc>(e), revision: e.revision } : null;
  }

  /** The customer whose externalId this is (deleted ones included), or null. Two KV gets. */
  async customerByExternalId(orgId: string, mode: Mode, externalId: string): Promise<VersionedCustomer | null> {
    const owner = await this.claimOwner('customer', orgId, mode, externalId);
    if (!owner) return null;
    const c = await this.getCustomer(orgId, mode, owner.id);
    return c && c.doc.customer.externalId === externalId ? c : null;
  }

  /** The id an externalId is claimed by (the entity may not carry it: a dangling claim), or null. One KV get. */
  async claimOwner(kind: Claimed, orgId: string, mode: Mode, externalId: string): Promise<{ id: string; revision: number; created: Date } | null> {
    const e = await this.raw(claimKey(kind, orgId, mode, externalId));
    if (!present(e)) return null;
    const v = parse<{ customerId?: string; productId?: string }>(e);
    const id = kind === 'customer' ? v.customerId : v.productId;
    return typeof id === 'string' ? { id, revision: e.revision, created: e.created } : null;
  }

  /** The customer id an externalId is claimed by (the customer may not exist: a dangling claim). One KV get. */
  async externalIdOwner(orgId: string, mode: Mode, externalId: string): Promise<{ customerId: string; revision: number; created: Date } | null> {
    const o = await this.claimOwner('customer', orgId, mode, externalId);
    return o && { customerId: o.id, revision: o.revision, created: o.created };
  }

  /** Whether the entity `id` carries `externalId` (then its claim holds). */
  private async holds(kind: Claimed, orgId: string, mode: Mode, id: string, externalId: string): Promise<boolean> {
    if (kind === 'customer') return (await this.getCustomer(orgId, mode, id))?.doc.customer.externalId === externalId;
    return (await this.getProduct(orgId, mode, id))?.doc.externalId === externalId;
  }

  /**
   * Creates a customer: claims its externalId (create-only key; a claim whose customer does
   * not carry it and is older than STALE_CLAIM_MS is taken over), takes the next listing
   * position, writes the position and then the document. `onTaken` builds the error when
   * the externalId belongs to another customer.
   */
  async createCustomer(orgId: string, mode: Mode, customer: Customer, profile: CustomerProfile, onTaken: (ownerId: string) => ApiError): Promise<CustomerDoc> {
    return this.withClaim('customer', orgId, mode, customer.externalId, customer.id, onTaken, async () => {
      const seq = await this.nextPosition(orgId, mode, 'customers');
      const doc: CustomerDoc = { seq, customer, profile, deletedAt: null, attributes: {}, pools: {}, caps: {} };
      await this.kv.create(orderKey(orgId, mode, 'customers', seq), JSON.stringify({ id: customer.id }));
      await this.kv.create(customerKey(orgId, mode, customer.id), this.encode(doc, `customer ${customer.id}`));
      return doc;
    });
  }

  /**
   * Runs `write` (which makes entity `id` carry `externalId`) holding the claim of
   * `externalId` (none when null): claimed first; released again when `write` fails (only if
   * still ours; a crash leaves it to go stale).
   */
  private async withClaim<T>(kind: Claimed, orgId: string, mode: Mode, externalId: string | null, id: string, onTaken: (ownerId: string) => ApiError, write: () => Promise<T>): Promise<T> {
    const claim = externalId !== null ? await this.claimExternalId(kind, orgId, mode, externalId, id, onTaken) : null;
    try {
      return await write();
    } catch (err) {
      if (claim !== null) await this.release(kind, orgId, mode, externalId!, id, claim);
      throw unavailable(err);
    }
  }

  /** Deletes the claim of `externalId` if it is still the one at `revision` naming `id` (best effort: a claim left behind goes stale). */
  private async release(kind: Claimed, orgId: string, mode: Mode, externalId: string, id: string, revision?: number): Promise<void> {
    try {
      const owner = await this.claimOwner(kind, orgId, mode, externalId);
      if (!owner || owner.id !== id || (revision !== undefined && owner.revision !== revision)) return;
      await this.kv.delete(claimKey(kind, orgId, mode, externalId), { previousSeq: owner.revision });
    } catch {
      // left to go stale
    }
  }

  /** Claims an externalId for `id`; the claim key's revision. A claim already naming `id` is kept. */
  private async claimExternalId(kind: Claimed, orgId: string, mode: Mode, externalId: string, id: string, onTaken: (ownerId: string) => ApiError): Promise<number> {
    const key = claimKey(kind, orgId, mode, externalId);
    const value = JSON.stringify(kind === 'customer' ? { customerId: id } : { productId: id });
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
      try {
        return await this.kv.create(key, value);
      } catch (err) {
        if (!isConflict(err)) throw unavailable(err);
      }
      const owner = await this.claimOwner(kind, orgId, mode, externalId);
      if (!owner) continue; // released meanwhile: try again
      if (owner.id === id) return owner.revision;
      if (await this.holds(kind, orgId, mode, owner.id, externalId)) throw onTaken(owner.id);
      // Claimed, but its entity does not carry it (yet, or never: a crash in between).
      if (Date.now() - owner.created.getTime() < this.staleClaimMs) throw onTaken(owner.id);
      try {
        return await this.kv.update(key, value, owner.revision);
      } catch (err) {
        if (!isConflict(err)) throw unavailable(err);
      }
      await backoff(attempt);
    }
    throw tooManyConflicts();
  }

  /** The next position of a listing (compare-and-set on its counter). */
  private nextPosition(orgId: string, mode: Mode, l: Listing): Promise<number> {
    const key = counterKey(orgId, mode, l);
    return this.queued(key, async () => {
      for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
        const e = await this.raw(key);
        const n = (present(e) ? parse<{ n: number }>(e).n : 0) + 1;
        try {
          if (present(e)) await this.kv.update(key, JSON.stringify({ n }), e.revision);
          else await this.kv.create(key, JSON.stringify({ n }));
          return n;
        } catch (err) {
          if (!isConflict(err)) throw unavailable(err);
        }
        await backoff(attempt);
      }
      throw tooManyConflicts();
    });
  }

  /**
   * Applies `fn` to a copy of a customer's document and stores the result with
   * compare-and-set. `missing` builds the error when there is no such customer (or it is
   * deleted). `fn` throws (an ApiError) to refuse: nothing changes. Nothing is written when
   * `fn` changes nothing.
   */
  changeCustomer<T>(orgId: string, mode: Mode, customerId: string, missing: () => ApiError, fn: (doc: CustomerDoc) => T): Promise<T> {
    return this.changeDoc(customerKey(orgId, mode, customerId), `customer ${customerId}`, async () => {
      const c = await this.getCustomer(orgId, mode, customerId);
      return c && c.doc.deletedAt === null ? c : null;
    }, missing, fn);
  }

  /**
   * `changeCustomer` where `fn` may give the customer another externalId (`next`; undefined:
   * unchanged): the new one is claimed first (409 through `onTaken` when another customer
   * has it), the one it had released after the document is written.
   */
  changeCustomerClaiming<T>(orgId: string, mode: Mode, customerId: string, next: string | null | undefined, missing: () => ApiError, onTaken: (ownerId: string) => ApiError, fn: (doc: CustomerDoc) => T): Promise<T> {
    return this.changeClaiming('customer', orgId, mode, customerId, next, async () => {
      const c = await this.getCustomer(orgId, mode, customerId);
      if (!c || c.doc.deletedAt !== null) throw missing();
      return c.doc.customer.externalId;
    }, onTaken, () => this.changeCustomer(orgId, mode, customerId, missing, fn));
  }

  private async changeClaiming<T>(
    kind: Claimed, orgId: string, mode: Mode, id: string, next: string | null | undefined,
    current: () => Promise<string | null>, onTaken: (ownerId: string) => ApiError,
    change: () => Promise<T>,
  ): Promise<T> {
    const was = await current();
    if (next === undefined || next === was) return change();
    const r = await this.withClaim(kind, orgId, mode, next, id, onTaken, change);
    if (was !== null) await this.release(kind, orgId, mode, was, id);
    return r;
  }

  /** Read (null: missing) → fn on a copy → compare-and-set, queued per key in this process and rerun on a conflict. */
  private changeDoc<D, T>(key: string, what: string, read: () => Promise<{ doc: D; revision: number } | null>, missing: () => ApiError, fn: (doc: D) => T): Promise<T> {
    return this.queued(key, async () => {
      for (let attempt = 1; ; attempt++) {
        const current = await read();
        if (!current) throw missing();
        const before = JSON.stringify(current.doc);
        const doc = structuredClone(current.doc);
        const result = fn(doc);
        if (JSON.stringify(doc) === before) return result;
        const bytes = this.encode(doc, what);
        try {
          await this.kv.update(key, bytes, current.revision);
          return result;
        } catch (err) {
          if (!isConflict(err)) throw unavailable(err);
          if (attempt >= MAX_ATTEMPTS) throw tooManyConflicts();
          await backoff(attempt);
        }
      }
    });
  }

  // --- products ---

  /** A product by id, or null. One KV get. */
  async getProduct(orgId: string, mode: Mode, productId: string): Promise<VersionedProduct | null> {
    if (!PRODUCT_ID.test(productId)) return null;
    const e = await this.raw(productKey(orgId, mode, productId));
    return present(e) ? { doc: parse<ProductDoc>(e), revision: e.revision } : null;
  }

  /** The product whose externalId this is, or null. Two KV gets. */
  async productByExternalId(orgId: string, mode: Mode, externalId: string): Promise<VersionedProduct | null> {
    const owner = await this.claimOwner('product', orgId, mode, externalId);
    if (!owner) return null;
    const p = await this.getProduct(orgId, mode, owner.id);
    return p && p.doc.externalId === externalId ? p : null;
  }

  /** Creates a product (externalId claimed first, as a customer's); `seq` is set here. */
  async createProduct(orgId: string, mode: Mode, product: Omit<ProductDoc, 'seq'>, onTaken: (ownerId: string) => ApiError): Promise<ProductDoc> {
    return this.withClaim('product', orgId, mode, product.externalId, product.id, onTaken, async () => {
      const seq = await this.nextPosition(orgId, mode, 'products');
      const doc: ProductDoc = { ...product, seq };
      await this.kv.create(orderKey(orgId, mode, 'products', seq), JSON.stringify({ id: product.id }));
      await this.kv.create(productKey(orgId, mode, product.id), this.encode(doc, `product ${product.id}`));
      return doc;
    });
  }

  /** Changes a product with compare-and-set; `next` as in changeCustomerClaiming. */
  changeProduct<T>(orgId: string, mode: Mode, productId: string, next: string | null | undefined, missing: () => ApiError, onTaken: (ownerId: string) => ApiError, fn: (doc: ProductDoc) => T): Promise<T> {
    const key = productKey(orgId, mode, productId);
    return this.changeClaiming('product', orgId, mode, productId, next, async () => {
      const p = await this.getProduct(orgId, mode, productId);
      if (!p) throw missing();
      return p.doc.externalId;
    }, onTaken, () => this.changeDoc(key, `product ${productId}`, () => this.getProduct(orgId, mode, productId), missing, fn));
  }

  // --- plans ---

  async getPlan(orgId: string, mode: Mode, planId: string): Promise<Plan | null> {
    if (!PLAN_ID.test(planId)) return null;
    const e = await this.raw(planKey(orgId, mode, planId));
    return present(e) ? parse<Plan>(e) : null;
  }

  async createPlan(orgId: string, mode: Mode, plan: Plan): Promise<void> {
    const seq = await this.nextPosition(orgId, mode, 'plans');
    try {
      // Plans never change: the position holds the plan itself, so a page of plans is one round of gets.
      await this.kv.create(orderKey(orgId, mode, 'plans', seq), this.encode(plan, `plan ${plan.id}`));
      await this.kv.create(planKey(orgId, mode, plan.id), this.encode(plan, `plan ${plan.id}`));
    } catch (err) {
      throw unavailable(err);
    }
  }

  // --- listings ---

  /**
   * Up to `limit` entities of a listing after position `after`, in creation order. Positions
   * are read `limit` at a time in one batched round, then their entities in another (a plan's
   * position holds the plan itself); dangling ones (a crash between position and entity) are
   * skipped, and so are entities `keep` refuses (deleted customers). With `window`, only the
   * positions after+1 … after+limit are read (offset paging: a page may hold fewer than `limit`
   * entities); without it, reading goes on until `limit` entities are found or the listing ends.
   * `total` is the number of positions handed out.
   */
  async list<T>(orgId: string, mode: Mode, l: Listing, after: number, limit: number, opts: { window?: boolean; keep?: (item: T) => boolean } = {}): Promise<Page<T> & { total: number }> {
    const counter = await this.raw(counterKey(orgId, mode, l));
    const last = present(counter) ? parse<{ n: number }>(counter).n : 0;
    const items: T[] = [];
    let pos = after;
    const end = opts.window ? Math.min(last, after + limit) : last;
    while (items.length < limit && pos < end) {
      const want = Math.min(limit - items.length, end - pos);
      const positions = await this.rawMany(Array.from({ length: want }, (_, i) => orderKey(orgId, mode, l, pos + 1 + i)));
      const named = positions.map((e) => {
        const p = present(e) ? parse<{ id: string; name?: string }>(e) : null;
        return p !== null && ID_OF[l].test(p.id) ? p : null;
      });
      // Entities not held by their position: customers, products, and plans of positions that name only the id.
      const entityKey = (id: string): string => (l === 'customers' ? customerKey(orgId, mode, id) : l === 'products' ? productKey(orgId, mode, id) : planKey(orgId, mode, id));
      const fetch = named.map((p) => (p === null ? null : l !== 'plans' || p.name === undefined ? entityKey(p.id) : null));
      const keys = fetch.filter((k): k is string => k !== null);
      const entities = new Map<string, KvEntry | null>();
      (await this.rawMany(keys)).forEach((e, i) => entities.set(keys[i]!, e));
      named.forEach((p, i) => {
        if (p === null) return;
        const key = fetch[i];
        if (key === null || key === undefined) {
          items.push(p as T);
          return;
        }
        const e = entities.get(key) ?? null;
        if (!present(e)) return;
        const item = parse<T>(e);
        if (!opts.keep || opts.keep(item)) items.push(item);
      });
      pos += want;
    }
    return { items, next: pos < last ? pos : null, total: last };
  }

  // --- evaluation ---

  /**
   * The customer each reference names (a service id, or else an externalId through its
   * claim), in order, null where none: two rounds of batched reads — the service ids' documents
   * with the externalIds' claims, then the claimed customers' documents.
   */
  private async customersByRefs(orgId: string, mode: Mode, refs: readonly string[], reader?: KvReader): Promise<(VersionedCustomer | null)[]> {
    const rawMany = reader ? (keys: readonly string[]) => this.rawMany(keys, reader) : (keys: readonly string[]) => this.rawMany(keys);
    const asDoc = (e: KvEntry | null): VersionedCustomer | null => {
      if (!present(e)) return null;
      let v = this.parsed.get(e);
      // Frozen: a kept document is shared by every group that reads it until the next change.
      if (!v) this.parsed.set(e, (v = deepFreeze({ doc: parse<CustomerDoc>(e), revision: e.revision })));
      return v;
    };
    const first = await rawMany(refs.map((ref) => (CUSTOMER_ID.test(ref) ? customerKey(orgId, mode, ref) : externalIdKey(orgId, mode, ref))));
    const out: (VersionedCustomer | null)[] = refs.map((ref, i) => (CUSTOMER_ID.test(ref) ? asDoc(first[i]!) : null));
    const claimed: { i: number; id: string }[] = [];
    refs.forEach((ref, i) => {
      const e = first[i]!;
      if (CUSTOMER_ID.test(ref) || !present(e)) return;
      const id = this.claimOf(e).customerId;
      if (typeof id === 'string' && CUSTOMER_ID.test(id)) claimed.push({ i, id });
    });
    // A document the first round read (the refs name it by service id too) is not read again.
    const docs = new Map<string, VersionedCustomer | null>();
    refs.forEach((ref, i) => {
      if (CUSTOMER_ID.test(ref)) docs.set(ref, out[i]!);
    });
    const ids = [...new Set(claimed.map((c) => c.id))].filter((id) => !docs.has(id));
    const second = await rawMany(ids.map((id) => customerKey(orgId, mode, id)));
    ids.forEach((id, j) => docs.set(id, asDoc(second[j]!)));
    for (const { i, id } of claimed) {
      const c = docs.get(id) ?? null;
      out[i] = c && c.doc.customer.externalId === refs[i] ? c : null;
    }
    return out;
  }

  /**
   * The customer or product each reference names, with both its ids (the pipeline: fact_signal's
   * identity columns, src/pipeline/identities.ts, and the billing partitions). A reference is
   * kind-prefixed (src/pipeline/rows-task.ts) and read by its kind only: `i:<id>` names a
   * customer (product) by its service id, `x:<externalId>` by its externalId, through its
   * create-only claim (`xid.` / `pxid.`) confirmed by the document. Null where none exists.
   * Read through a fenced cache, as forBatch's documents (its own: `resolution`): a reference
   * that names none (an organization metering customers it has not configured for billing) is
   * answered from memory while the bucket is unchanged, instead of reads per batch naming it;
   * the answer is as of a bucket state asked after the call started (bus/kv-fenced.ts; from
   * the stream's leader when the bucket is replicated), as a read of every key.
   */
  async resolveIdentities(orgId: string, mode: Mode, customers: readonly string[], products: readonly string[]): Promise<{ customers: (Identity | null)[]; products: (Identity | null)[] }> {
    const view = await this.view(this.resolution);
    // The answers of the last resolutions under this very state of the bucket: the same answers
    // a read of the keys would give, without reading them again.
    const scope = `${orgId}.${mode}`;
    let memo = view ? this.resolved.get(scope) : undefined;
    if (memo && memo.label !== view!.label) memo = undefined;
    const answers = new Map<string, Identity | null>();
    const unknown: string[] = [];
    // 'c'/'p' + the reference: customers and products apart.
    for (const r of customers) if (!answers.has(`c${r}`)) unknown.push(`c${r}`), answers.set(`c${r}`, null);
    for (const r of products) if (r !== '' && !answers.has(`p${r}`)) unknown.push(`p${r}`), answers.set(`p${r}`, null);
    const named = unknown.filter((k) => {
      const known = memo?.ids.get(k);
      if (known === undefined) return true;
      answers.set(k, known);
      return false;
    });
    if (named.length > 0) {
      const found = await this.identitiesOf(orgId, mode, named, view);
      named.forEach((k, i) => answers.set(k, found[i]!));
    }
    if (view?.current()) this.remember(scope, view.label, answers);
    return {
      customers: customers.map((r) => answers.get(`c${r}`) ?? null),
      products: products.map((r) => (r === '' ? null : (answers.get(`p${r}`) ?? null))),
    };
  }

  /** The identities of memo keys (`c`/`p` + a kind-prefixed reference): two rounds of batched reads — documents by id with the externalIds' claims, then the claimed documents. */
  private async identitiesOf(orgId: string, mode: Mode, keys: readonly string[], reader?: KvReader): Promise<(Identity | null)[]> {
    const rawMany = (k: readonly string[]) => (reader ? this.rawMany(k, reader) : this.rawMany(k));
    const docKey = (product: boolean, id: string): string | null =>
      product ? (PRODUCT_ID.test(id) ? productKey(orgId, mode, id) : null) : CUSTOMER_ID.test(id) ? customerKey(orgId, mode, id) : null;
    const parts = keys.map((k) => ({ product: k[0] === 'p', byId: k.startsWith('i:', 1), text: k.slice(3) }));
    const firstKeys = parts.map((x) => (x.byId ? docKey(x.product, x.text) : x.product ? productExternalIdKey(orgId, mode, x.text) : externalIdKey(orgId, mode, x.text)));
    const wanted = firstKeys.filter((k): k is string => k !== null);
    const first = new Map<string, KvEntry | null>();
    (await rawMany(wanted)).forEach((e, i) => first.set(wanted[i]!, e));
    const identityOf = (product: boolean, e: KvEntry | null | undefined): Identity | null => {
      if (!e || !present(e)) return null;
      // An entry is of one kind (its key says which): its identity is read once while it is kept.
      const known = this.identities.get(e);
      if (known !== undefined) return known;
      const doc = parse<{ customer?: { id: string; externalId?: string | null }; id?: string; externalId?: string | null }>(e);
      const d = product ? doc : doc.customer;
      const identity = d && typeof d.id === 'string' ? Object.freeze({ id: d.id, externalId: typeof d.externalId === 'string' ? d.externalId : '' }) : null;
      this.identities.set(e, identity);
      return identity;
    };
    const out: (Identity | null)[] = parts.map((x, i) => (x.byId ? identityOf(x.product, firstKeys[i] === null ? null : first.get(firstKeys[i]!)) : null));
    // The externalIds' claims name a document: read those (once each), confirm the externalId.
    const claimed = new Map<string, string>();
    parts.forEach((x, i) => {
      if (x.byId) return;
      const e = first.get(firstKeys[i]!);
      if (!e || !present(e)) return;
      const c = this.claimOf(e);
      const id = x.product ? c.productId : c.customerId;
      const k = typeof id === 'string' ? docKey(x.product, id) : null;
      if (k) claimed.set(k, k);
    });
    const second = [...claimed.keys()];
    const docs = new Map<string, KvEntry | null>();
    (await rawMany(second)).forEach((e, i) => docs.set(second[i]!, e));
    parts.forEach((x, i) => {
      if (x.byId) return;
      const e = first.get(firstKeys[i]!);
      if (!e || !present(e)) return;
      const c = this.claimOf(e);
      const id = x.product ? c.productId : c.customerId;
      const k = typeof id === 'string' ? docKey(x.product, id) : null;
      const found = k ? identityOf(x.product, docs.get(k)) : null;
      out[i] = found && found.externalId === x.text ? found : null;
    });
    return out;
  }

  /** Resolutions kept (`resolveIdentities`), per organization and mode, with the bucket state they hold for. */
  private readonly resolved = new Map<string, { label: string; ids: Map<string, Identity | null> }>();
  private resolvedCount = 0;

  private remember(scope: string, label: string, answers: Map<string, Identity | null>): void {
    // The memo as it is now (not as the call found it: another call may have replaced or dropped it meanwhile).
    let m = this.resolved.get(scope);
    this.resolved.delete(scope);
    if (m && m.label !== label) {
      this.resolvedCount -= m.ids.size;
      m = undefined;
    }
    m ??= { label, ids: new Map() };
    // Most recently used last (the order organizations are dropped in).
    this.resolved.set(scope, m);
    for (const [r, id] of answers) {
      if (m.ids.size >= RESOLUTION_CACHE_MAX) break;
      if (m.ids.has(r)) continue;
      m.ids.set(r, id);
      this.resolvedCount++;
    }
    // Bounded as the fenced caches are: past it, the least recently used organizations go first.
    for (const [other, o] of this.resolved) {
      if (this.resolvedCount <= RESOLUTION_CACHE_MAX || other === scope) break;
      this.resolvedCount -= o.ids.size;
      this.resolved.delete(other);
    }
  }


  /** A fenced cache's reader as of now (bus/kv-fenced.ts), or undefined (no cache): read every key. */
  private async view(cache: FencedKvCache | null): Promise<FencedView | undefined> {
    try {
      return cache ? await cache.view() : undefined;
    } catch (err) {
      throw unavailable(err);
    }
  }

  /**
   * The configuration restricted to the customers `refs` name (service ids or externalIds,
   * as signals do) and the plans their attributes use: one read per customer (two for an
   * externalId) and one per plan, whatever the organization's size, in three batched rounds.
   */
  async forBatch(orgId: string, mode: Mode, refs: Iterable<string>): Promise<BatchConfig> {
    const config: BillingConfig = { customers: {}, plans: {}, attributes: {}, pools: {}, caps: {} };
    const revisions: Record<string, number> = {};
    const view = await this.view(this.evaluation);
    const found = await this.customersByRefs(orgId, mode, [...new Set(refs)], view);
    const planIds = new Set<string>();
    for (const f of found) {
      // A deleted customer prices nothing from its deletion on: its signals are as a stranger's.
      if (!f || f.doc.deletedAt) continue;
      const { doc } = f;
      const id = doc.customer.id;
      if (Object.hasOwn(config.customers, id)) continue;
      let key = this.keysOf.get(f);
      if (key === undefined) this.keysOf.set(f, (key = customerKey(orgId, mode, id)));
      revisions[key] = f.revision;
      config.customers[id] = doc.customer;
      for (const a of Object.values(doc.attributes)) {
        config.attributes[a.id] = a;
        planIds.add(a.planId);
      }
      for (const p of Object.values(doc.pools)) config.pools[p.id] = p;
      for (const [k, cap] of Object.entries(doc.caps)) config.caps[k] = cap;
    }
    const plans = await this.plansForBatch([...planIds].map((id) => planKey(orgId, mode, id)));
    for (const [key, found] of plans) {
      if (!found) continue;
      config.plans[found.plan.id] = found.plan;
      revisions[key] = found.revision;
    }
    return { config, revisions };
  }

  /** Plans found, by key: a plan never changes and is never deleted, so one read serves every later batch. */
  private readonly plansSeen = new Map<string, { plan: Plan; revision: number }>();

  /** The plans of these keys: those seen before from memory, the others in one batched read (then kept). */
  private async plansForBatch(keys: string[]): Promise<[string, { plan: Plan; revision: number } | null][]> {
    const unseen = keys.filter((k) => !this.plansSeen.has(k));
    const read = await this.rawMany(unseen);
    unseen.forEach((key, i) => {
      const e = read[i] ?? null;
      if (!present(e)) return;
      if (this.plansSeen.size >= PLANS_SEEN_MAX) this.plansSeen.delete(this.plansSeen.keys().next().value!);
      this.plansSeen.set(key, { plan: parse<Plan>(e), revision: e.revision });
    });
    return keys.map((k) => [k, this.plansSeen.get(k) ?? null]);
  }
}
