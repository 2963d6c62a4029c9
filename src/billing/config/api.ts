/**
 * The billing configuration API (organization API key; everything is scoped to the key's
 * organization and mode: live and test keys see two separate configurations).
 *
 *   POST   /api/v2/customers                                      {name, externalId?, legalName?, email?, phone?, website?,
 *                                                                  billingAddress?, creationState?, vatNumber?, metadata?,
 *                                                                  defaultCurrency?}               → 201 customer
 *   GET    /api/v2/customers                      ?limit&offset                                   → 200 {data, pagination}
 *   GET    /api/v2/customers/:customerId, /api/v2/customers/external/:externalId                  → 200 customer
 *   PUT    (the same two paths)                                   (any of the create fields, churnDate) → 200 customer
 *   DELETE (the same two paths)                                                                   → 200 {}
 *   GET    /api/v2/customers/:customerId/credits/balances (and by external id)                    → 200 {data: CreditBalance[]}
 *   GET    /api/v2/customers/:customerId/units                                                    → 200 {units}
 *   PUT    /api/v2/customers/:customerId/units/:unitExternalId    {externalType?, name?, parentExternalId?} → 201 | 200 unit
 *   GET    /api/v2/customers/:customerId/units/:unitExternalId                                    → 200 unit
 *   POST   /api/v2/plans                                          {name}                          → 201 plan
 *   GET    /api/v2/plans                                                                          → 200 {plans}
 *   POST   /api/v2/customers/:customerId/order-line-attributes    {planId, eventName, quantity?, unitPrice, currency, includedQuantity?, creditsCurrencyId?, creditsPerUnit?} → 201
 *   GET    /api/v2/customers/:customerId/order-line-attributes                                    → 200 {orderLineAttributes}
 *   POST   /api/v2/customers/:customerId/credit-pools             {orderLineAttributeId, credits} → 201 pool
 *   GET    /api/v2/customers/:customerId/credit-pools                                             → 200 {creditPools}
 *   POST   /api/v2/customers/:customerId/credit-pools/:poolId/top-ups  {credits}                  → 201 pool
 *   PUT    /api/v2/customers/:customerId/units/:unitExternalId/credit-caps/:creditsCurrencyId  {amount, frequency, effectiveFrom} → 201 | 200 cap
 *   GET    (same path)                                                                            → 200 cap
 *   DELETE (same path)                                                                            → 204
 *   GET    /api/v2/customers/:customerId/credit-caps                                              → 200 {creditCaps}
 *
 * Customers are the official client's (`@paid-ai/paid-node`) customers: `customerView` answers
 * its `Customer` fields. The customers list pages by offset (paging.ts). The other lists answer
 * a page: `?limit=` (default DEFAULT_LIMIT 100, at most MAX_LIMIT 1000) and `?cursor=` (the
 * opaque `nextCursor` of the previous page; none: the first page), in creation order, as
 * `{<list>: […], nextCursor}` (null on the last page). Products: products.ts.
 *
 * A deleted customer stays stored, marked `deletedAt`: reads and changes answer 404, the list
 * skips it, its externalId stays reserved (a new customer cannot take it), and from the deletion
 * on the billing evaluator prices none of its signals (store.ts forBatch: as a stranger's).
 * An externalId is set once (validate.ts settableOnce): given at creation or to a customer
 * without one, never changed or removed.
 *
 * Every change is validated against the customer's document (or reads the plan it names,
 * which never changes) and applied with compare-and-set on that one key (store.ts); on any
 * error nothing changes. Unknown customer, plan, attribute, pool, unit or
 * parent → 404 NOT_FOUND; a duplicate (customer externalId, attribute per eventName, pool
 * per attribute) → 409 CONFLICT; a bad value or a cycle in the unit tree → 400
 * INVALID_BILLING_CONFIG. Every `details` starts with the name of the field.
 *
 * Record keys chosen by callers (unit external ids) are read with Object.hasOwn and written
 * as own data properties, so ids such as "__proto__" or "constructor" are plain ids.
 */
import { ApiError } from '../../errors.js';
import { pathParams, type Method, type Reply, type Request, type Route } from '../../http/route.js';
import { randomToken } from '../../orgs/keys.js';
import type { Principal } from '../../orgs/registry.js';
import { parseDecimal, sub, sum, toCanonicalString } from '../decimal.js';
import { capKey, type CreditCap, type CreditPool, type Customer, type OrderLineAttribute, type Plan, type Unit } from '../model.js';
import { defaultProfile, type BillingConfigStore, type CustomerDoc, type CustomerProfile } from './store.js';
import { creditBalances } from './balances.js';
import { DEFAULT_LIMIT, MAX_LIMIT, limitOf, offsetPage, pagination } from './paging.js';
import { ProductsApi } from './products.js';
import {
  CREDIT_PLACES,
  PRICE_PLACES,
  bad,
  billingAddress,
  currency,
  decimalString,
  email,
  frequency,
  metadata,
  oneOf,
  optionalText,
  plainText,
  quantityRule,
  readObject,
  required,
  settableOnce,
  text,
  utcInstant,
  uuid,
  type Obj,
} from './validate.js';

export { DEFAULT_LIMIT, MAX_LIMIT };

/** Bodies of the configuration API are small JSON documents. */
const BODY_LIMIT = 64 * 1024;

/** Service ids: a prefix and 20 base62 characters (crypto-random, like organization ids). */
export const ID_PATTERNS = {
  customer: /^cus_[0-9A-Za-z]{20}$/,
  plan: /^plan_[0-9A-Za-z]{20}$/,
  attribute: /^ola_[0-9A-Za-z]{20}$/,
  pool: /^cp_[0-9A-Za-z]{20}$/,
} as const;
const newId = (prefix: string): string => `${prefix}_${randomToken(20)}`;

const own = <T>(record: Record<string, T>, key: string): T | undefined => (Object.hasOwn(record, key) ? record[key] : undefined);
const setOwn = <T>(record: Record<string, T>, key: string, value: T): void => {
  Object.defineProperty(record, key, { value, enumerable: true, writable: true, configurable: true });
};

const notFound = (field: string, what: string): ApiError => new ApiError('NOT_FOUND', `${field}: ${what}`);
const conflict = (field: string, what: string): ApiError => new ApiError('CONFLICT', `${field}: ${what}`);

// --- Views: what the API answers (the stored objects, minus what is listed elsewhere). ---

/** The official client's `Customer`. */
export const customerView = ({ customer: c, profile: p }: Pick<CustomerDoc, 'customer' | 'profile'>) => ({
  id: c.id,
  name: c.name ?? '',
  legalName: p.legalName,
  email: p.email,
  phone: p.phone,
  website: p.website,
  externalId: c.externalId,
  billingAddress: p.billingAddress,
  creationState: p.creationState,
  churnDate: p.churnDate,
  vatNumber: p.vatNumber,
  metadata: p.metadata,
  defaultCurrency: p.defaultCurrency,
  createdAt: c.createdAt,
  updatedAt: c.updatedAt,
});

const CREATION_STATES = ['draft', 'active'] as const;
/** Fields of a customer's create body; an update also takes `churnDate`. */
const CREATE_FIELDS = ['name', 'externalId', 'legalName', 'email', 'phone', 'website', 'billingAddress', 'creationState', 'vatNumber', 'metadata', 'defaultCurrency'] as const;
const UPDATE_FIELDS = [...CREATE_FIELDS, 'churnDate'] as const;

/** The profile fields present in `body`, checked (absent ones: undefined). */
function profileFields(body: Obj): Partial<CustomerProfile> {
  const out: Partial<CustomerProfile> = {};
  const has = (k: string): boolean => body[k] !== undefined;
  if (has('legalName')) out.legalName = optionalText(body.legalName, 'legalName');
  if (has('email')) out.email = email(body.email, 'email');
  if (has('phone')) out.phone = plainText(body.phone, 'phone');
  if (has('website')) out.website = plainText(body.website, 'website');
  if (has('billingAddress')) out.billingAddress = billingAddress(body.billingAddress, 'billingAddress');
  if (has('creationState')) out.creationState = oneOf(body.creationState, 'creationState', CREATION_STATES);
  if (has('churnDate')) out.churnDate = body.churnDate === null ? null : utcInstant(body.churnDate, 'churnDate');
  if (has('vatNumber')) out.vatNumber = optionalText(body.vatNumber, 'vatNumber');
  if (has('metadata')) out.metadata = metadata(body.metadata, 'metadata');
  if (has('defaultCurrency')) out.defaultCurrency = currency(body.defaultCurrency, 'defaultCurrency');
  return out;
}

export const unitView = (customerId: string, u: Unit) => ({ customerId, ...u });
export const poolView = (p: CreditPool) => ({
  ...p,
  totalCredits: toCanonicalString(sum([p.granted, ...p.topUps.map((t) => t.credits)].map((c) => parseDecimal(c)))),
});

const noCustomer = (id: string) => (): ApiError => notFound('customerId', `no customer ${JSON.stringify(id)} (use the service id cus_…)`);

function unitIn(c: Customer, externalId: string, field = 'unitExternalId'): Unit {
  const u = own(c.units, externalId);
  if (!u) throw notFound(field, `no unit ${JSON.stringify(externalId)} under customer ${c.id}`);
  return u;
}

/** Refuses making `parent` the parent of `unit` when `parent` is `unit` or lies beneath it. */
function checkNoCycle(c: Customer, unit: string, parent: string): void {
  const chain = [parent];
  const seen = new Set<string>();
  for (let cur: string | null = parent; cur !== null; cur = own(c.units, cur)?.parentExternalId ?? null) {
    if (cur === unit) {
      const path = chain.length <= 6 ? chain.join(' → ') : `${chain.slice(0, 3).join(' → ')} → … → ${chain.slice(-2).join(' → ')}`;
      throw bad('parentExternalId', unit === parent
        ? `a unit cannot be its own parent (${JSON.stringify(unit)})`
        : `${JSON.stringify(parent)} lies beneath ${JSON.stringify(unit)} (${path}); making it the parent would create a cycle`);
    }
    if (seen.has(cur)) break; // a stored cycle cannot exist; guard the walk anyway
    seen.add(cur);
    if (cur !== parent) chain.push(cur);
  }
}

/** Credits consumed per pool id of one customer so far, as the billing evaluator recorded them (decimal strings). */
export type ConsumedSource = (orgId: string, mode: Principal['mode'], customerId: string) => Promise<Record<string, string>>;

interface PageRequest {
  limit: number;
  /** Decoded cursor: the position (organization lists) or the last key and index (per-customer lists). */
  cursor: { p?: number; k?: string; i?: number } | null;
}

/** `limit` and `cursor` of a list request's query string, checked. */
export function pageRequest(query: string): PageRequest {
  const q = new URLSearchParams(query);
  const limit = limitOf(q);
  const c = q.get('cursor');
  if (c === null || c === '') return { limit, cursor: null };
  let cursor: unknown;
  try {
    cursor = JSON.parse(Buffer.from(c, 'base64url').toString('utf8'));
  } catch {
    cursor = null;
  }
  const ok =
    typeof cursor === 'object' &&
    cursor !== null &&
    !Array.isArray(cursor) &&
    ((Number.isSafeInteger((cursor as { p?: unknown }).p) && (cursor as { p: number }).p >= 0) ||
      (typeof (cursor as { k?: unknown }).k === 'string' && Number.isSafeInteger((cursor as { i?: unknown }).i) && (cursor as { i: number }).i >= 0));
  if (!ok) throw bad('cursor', 'is not a cursor this API returned (pass nextCursor of the previous page unchanged)');
  return { limit, cursor: cursor as PageRequest['cursor'] };
}

const encodeCursor = (c: { p: number } | { k: string; i: number }): string => Buffer.from(JSON.stringify(c), 'utf8').toString('base64url');

/** A page of an in-document list (creation order), continuing after the cursor's key (or at its index when that key is gone). */
function pageOf<T>(entries: [string, T][], page: PageRequest): { items: T[]; nextCursor: string | null } {
  let start = 0;
  if (page.cursor) {
    if (page.cursor.k === undefined) throw bad('cursor', 'belongs to another list');
    const at = entries.findIndex(([k]) => k === page.cursor!.k);
    start = at >= 0 ? at + 1 : Math.min(page.cursor.i ?? 0, entries.length);
  }
  const slice = entries.slice(start, start + page.limit);
  const end = start + slice.length;
  return { items: slice.map(([, v]) => v), nextCursor: end < entries.length && slice.length > 0 ? encodeCursor({ k: entries[end - 1]![0], i: end }) : null };
}

function position(page: PageRequest): number {
  if (!page.cursor) return 0;
  if (page.cursor.p === undefined) throw bad('cursor', 'belongs to another list');
  return page.cursor.p;
}

export class BillingConfigApi {
  private readonly products: ProductsApi;

  constructor(
    private readonly store: BillingConfigStore,
    private readonly consumed: ConsumedSource = async () => ({}),
  ) {
    this.products = new ProductsApi(store);
  }

  /** The routes, relative to `/api/v2` (src/routes.ts), authenticated with the API key. */
  routes(): Route<Principal>[] {
    const C = '/customers';
    const customer = `${C}/:customerId`;
    const unit = `${customer}/units/:unitExternalId`;
    const cap = `${unit}/credit-caps/:creditsCurrencyId`;
    const topUps = `${customer}/credit-pools/:poolId/top-ups`;
    const r = (method: Method, path: string, fn: (req: Request<Principal>, p: (name: string) => string, who: Principal) => Promise<Reply>): Route<Principal> => {
      const param = pathParams(path);
      const body = method === 'post' || method === 'put' ? { bodyLimit: BODY_LIMIT } : {};
      return { method, path, auth: 'api-key', ...body, handler: (req) => fn(req, (name) => param(req, name), req.principal!) };
    };
    const byExternal = `${C}/external/:externalId`;
    const external = async (who: Principal, p: (name: string) => string): Promise<string> => (await this.docByExternalId(who, p('externalId'))).customer.id;
    return [
      r('post', C, (req, _p, who) => this.createCustomer(req, who)),
      r('get', C, async (req, _p, who) => {
        const page = offsetPage(req.query);
        const got = await this.store.list<CustomerDoc>(who.org.id, who.mode, 'customers', page.offset, page.limit, { window: true, keep: (d) => d.deletedAt === null });
        return { status: 200, body: { data: got.items.map(customerView), pagination: pagination(page, got.total) } };
      }),
      r('get', byExternal, async (_req, p, who) => ({ status: 200, body: customerView(await this.docByExternalId(who, p('externalId'))) })),
      r('put', byExternal, async (req, p, who) => this.updateCustomer(req, who, await external(who, p))),
      r('delete', byExternal, async (_req, p, who) => this.deleteCustomer(who, await external(who, p))),
      r('get', `${byExternal}/credits/balances`, async (_req, p, who) => this.balances(who, await this.docByExternalId(who, p('externalId')))),
      r('get', customer, async (_req, p, who) => ({ status: 200, body: customerView(await this.doc(who, p('customerId'))) })),
      r('put', customer, (req, p, who) => this.updateCustomer(req, who, p('customerId'))),
      r('delete', customer, (_req, p, who) => this.deleteCustomer(who, p('customerId'))),
      r('get', `${customer}/credits/balances`, async (_req, p, who) => this.balances(who, await this.doc(who, p('customerId')))),
      r('get', `${customer}/units`, async (req, p, who) => {
        const page = pageRequest(req.query);
        const c = (await this.doc(who, p('customerId'))).customer;
        const { items, nextCursor } = pageOf(Object.entries(c.units), page);
        return { status: 200, body: { units: items.map((u) => unitView(c.id, u)), nextCursor } };
      }),
      r('put', unit, (req, p, who) => this.putUnit(req, p, who)),
      r('get', unit, async (_req, p, who) => {
        const c = (await this.doc(who, p('customerId'))).customer;
        return { status: 200, body: unitView(c.id, unitIn(c, p('unitExternalId'))) };
      }),
      r('post', '/plans', (req, _p, who) => this.createPlan(req, who)),
      r('get', '/plans', async (req, _p, who) => {
        const page = pageRequest(req.query);
        const got = await this.store.list<Plan>(who.org.id, who.mode, 'plans', position(page), page.limit);
        return { status: 200, body: { plans: got.items, nextCursor: got.next === null ? null : encodeCursor({ p: got.next }) } };
      }),
      r('post', `${customer}/order-line-attributes`, (req, p, who) => this.createAttribute(req, p, who)),
      r('get', `${customer}/order-line-attributes`, async (req, p, who) => {
        const page = pageRequest(req.query);
        const d = await this.doc(who, p('customerId'));
        const { items, nextCursor } = pageOf(Object.entries(d.attributes), page);
        return { status: 200, body: { orderLineAttributes: items, nextCursor } };
      }),
      r('post', `${customer}/credit-pools`, (req, p, who) => this.createPool(req, p, who)),
      r('get', `${customer}/credit-pools`, async (req, p, who) => {
        const page = pageRequest(req.query);
        const [d, used] = await Promise.all([this.doc(who, p('customerId')), this.consumed(who.org.id, who.mode, p('customerId'))]);
        const { items, nextCursor } = pageOf(Object.entries(d.pools), page);
        const pools = items.map((x) => {
          const view = poolView(x);
          const consumed = Object.hasOwn(used, x.id) ? used[x.id]! : '0';
          const balance = sub(parseDecimal(view.totalCredits), parseDecimal(consumed, { maxDecimalPlaces: 1000, maxIntegerDigits: 1000 }));
          return { ...view, consumedCredits: consumed, balance: toCanonicalString(balance) };
        });
        return { status: 200, body: { creditPools: pools, nextCursor } };
      }),
      r('post', topUps, (req, p, who) => this.topUp(req, p, who)),
      r('put', cap, (req, p, who) => this.putCap(req, p, who)),
      r('get', cap, async (_req, p, who) => {
        const creditsCurrencyId = uuid(p('creditsCurrencyId'), 'creditsCurrencyId');
        const d = await this.doc(who, p('customerId'));
        const key = capAddress(d, p('unitExternalId'), creditsCurrencyId);
        const found = own(d.caps, key);
        if (!found) throw notFound('creditsCurrencyId', `no credit cap of credits currency ${p('creditsCurrencyId')} on unit ${JSON.stringify(p('unitExternalId'))}`);
        return { status: 200, body: found };
      }),
      r('delete', cap, (req, p, who) => this.deleteCap(p, who)),
      r('get', `${customer}/credit-caps`, async (req, p, who) => {
        const page = pageRequest(req.query);
        const d = await this.doc(who, p('customerId'));
        const { items, nextCursor } = pageOf(Object.entries(d.caps), page);
        return { status: 200, body: { creditCaps: items, nextCursor } };
      }),
      ...this.products.routes(),
    ];
  }

  /** A customer's document (404 when there is none, or it is deleted). One KV get. */
  private async doc(who: Principal, customerId: string): Promise<CustomerDoc> {
    const found = await this.store.getCustomer(who.org.id, who.mode, customerId);
    if (!found || found.doc.deletedAt !== null) throw noCustomer(customerId)();
    return found.doc;
  }

  /** The document of the customer with this externalId (404 when there is none, or it is deleted). Two KV gets. */
  private async docByExternalId(who: Principal, externalId: string): Promise<CustomerDoc> {
    const found = await this.store.customerByExternalId(who.org.id, who.mode, text(externalId, 'externalId'));
    if (!found || found.doc.deletedAt !== null) throw notFound('externalId', `no customer has the externalId ${JSON.stringify(externalId)}`);
    return found.doc;
  }

  private async balances(who: Principal, d: CustomerDoc): Promise<Reply> {
    const used = await this.consumed(who.org.id, who.mode, d.customer.id);
    return { status: 200, body: { data: creditBalances(Object.values(d.pools), used) } };
  }

  private async updateCustomer(req: Request, who: Principal, customerId: string): Promise<Reply> {
    const body = readObject(req, UPDATE_FIELDS, true);
    const name = body.name !== undefined ? text(body.name, 'name') : undefined;
    const externalId = body.externalId !== undefined ? optionalText(body.externalId, 'externalId') : undefined;
    const profile = profileFields(body);
    const now = new Date().toISOString();
    // Checked again inside the change; first here, so that a refused move claims nothing.
    if (externalId !== undefined) settableOnce((await this.doc(who, customerId)).customer.externalId, externalId, 'customer');
    const onTaken = (owner: string) => conflict('externalId', `customer ${owner} already has the externalId ${JSON.stringify(externalId)}`);
    const doc = await this.store.changeCustomerClaiming(who.org.id, who.mode, customerId, externalId, noCustomer(customerId), onTaken, (d) => {
      if (externalId !== undefined) settableOnce(d.customer.externalId, externalId, 'customer');
      const before = JSON.stringify(d);
      if (name !== undefined) d.customer.name = name;
      if (externalId !== undefined) d.customer.externalId = externalId;
      Object.assign(d.profile, profile);
      if (JSON.stringify(d) !== before) d.customer.updatedAt = now;
      return d;
    });
    return { status: 200, body: customerView(doc) };
  }

  private async deleteCustomer(who: Principal, customerId: string): Promise<Reply> {
    const now = new Date().toISOString();
    await this.change(who, customerId, (d) => {
      d.deletedAt = now;
      d.customer.updatedAt = now;
    });
    return { status: 200, body: {} };
  }

  /** Changes one customer's document with compare-and-set (store.ts). */
  private change<T>(who: Principal, customerId: string, fn: (doc: CustomerDoc) => T): Promise<T> {
    return this.store.changeCustomer(who.org.id, who.mode, customerId, noCustomer(customerId), fn);
  }

  private async createCustomer(req: Request, who: Principal): Promise<Reply> {
    const body = readObject(req, CREATE_FIELDS, true);
    const name = text(required(body, 'name'), 'name');
    const externalId = optionalText(body.externalId, 'externalId');
    const profile: CustomerProfile = { ...defaultProfile(), ...profileFields(body) };
    const id = newId('cus');
    const now = new Date().toISOString();
    const c: Customer = { id, externalId, name, units: {}, createdAt: now, updatedAt: now };
    const doc = await this.store.createCustomer(who.org.id, who.mode, c, profile, (owner) => conflict('externalId', `customer ${owner} already has the externalId ${JSON.stringify(externalId)}`));
    return { status: 201, body: customerView(doc) };
  }

  private async putUnit(req: Request, p: (name: string) => string, who: Principal): Promise<Reply> {
    const customerId = p('customerId');
    const externalId = text(p('unitExternalId'), 'unitExternalId');
    const body = readObject(req, ['externalType', 'name', 'parentExternalId'], true);
    const externalType = optionalText(body.externalType, 'externalType');
    const name = optionalText(body.name, 'name');
    const parentExternalId = optionalText(body.parentExternalId, 'parentExternalId');
    const now = new Date().toISOString();
    const { unit, created } = await this.change(who, customerId, (d) => {
      const c = d.customer;
      if (parentExternalId !== null) {
        if (parentExternalId !== externalId) unitIn(c, parentExternalId, 'parentExternalId');
        checkNoCycle(c, externalId, parentExternalId);
      }
      const old = own(c.units, externalId);
      if (old && old.externalType === externalType && old.name === name && old.parentExternalId === parentExternalId) {
        return { unit: old, created: false };
      }
      const u: Unit = { externalId, externalType, name, parentExternalId, createdAt: old?.createdAt ?? now, updatedAt: now };
      setOwn(c.units, externalId, u);
      c.updatedAt = now;
      return { unit: u, created: old === undefined };
    });
    return { status: created ? 201 : 200, body: unitView(customerId, unit) };
  }

  private async createPlan(req: Request, who: Principal): Promise<Reply> {
    const body = readObject(req, ['name']);
    const name = text(required(body, 'name'), 'name');
    const plan: Plan = { id: newId('plan'), name, createdAt: new Date().toISOString() };
    await this.store.createPlan(who.org.id, who.mode, plan);
    return { status: 201, body: plan };
  }

  private async createAttribute(req: Request, p: (name: string) => string, who: Principal): Promise<Reply> {
    const customerId = p('customerId');
    const body = readObject(req, ['planId', 'eventName', 'quantity', 'unitPrice', 'currency', 'includedQuantity', 'creditsCurrencyId', 'creditsPerUnit']);
    const planId = text(required(body, 'planId'), 'planId');
    const eventName = text(required(body, 'eventName'), 'eventName');
    const quantity = quantityRule(body.quantity, 'quantity');
    const unitPrice = decimalString(required(body, 'unitPrice'), 'unitPrice', PRICE_PLACES);
    const cur = currency(required(body, 'currency'), 'currency');
    const includedQuantity = body.includedQuantity === undefined || body.includedQuantity === null ? null : decimalString(body.includedQuantity, 'includedQuantity', PRICE_PLACES);
    const creditsCurrencyId = body.creditsCurrencyId === undefined || body.creditsCurrencyId === null ? null : uuid(body.creditsCurrencyId, 'creditsCurrencyId');
    const creditsPerUnit = body.creditsPerUnit === undefined || body.creditsPerUnit === null ? null : decimalString(body.creditsPerUnit, 'creditsPerUnit', CREDIT_PLACES, true);
    if (creditsCurrencyId !== null && creditsPerUnit === null) throw bad('creditsPerUnit', 'is required when creditsCurrencyId is set');
    if (creditsCurrencyId === null && creditsPerUnit !== null) throw bad('creditsCurrencyId', 'is required when creditsPerUnit is set');
    const id = newId('ola');
    const now = new Date().toISOString();
    // The customer is checked first (404 customerId before 404 planId, as before). Plans are
    // never changed or deleted, so reading the plan outside the customer's compare-and-set is exact.
    await this.doc(who, customerId);
    if (!(await this.store.getPlan(who.org.id, who.mode, planId))) throw notFound('planId', `no plan ${JSON.stringify(planId)}`);
    const attribute = await this.change(who, customerId, (d) => {
      const c = d.customer;
      const taken = Object.values(d.attributes).find((a) => a.eventName === eventName);
      if (taken) throw conflict('eventName', `customer ${c.id} already prices ${JSON.stringify(eventName)} with order line attribute ${taken.id}`);
      const a: OrderLineAttribute = {
        id, customerId: c.id, planId, eventName, quantity, unitPrice, currency: cur, includedQuantity, creditsCurrencyId, creditsPerUnit, createdAt: now,
      };
      d.attributes[id] = a;
      return a;
    });
    return { status: 201, body: attribute };
  }

  private async createPool(req: Request, p: (name: string) => string, who: Principal): Promise<Reply> {
    const customerId = p('customerId');
    const body = readObject(req, ['orderLineAttributeId', 'credits']);
    const attributeId = text(required(body, 'orderLineAttributeId'), 'orderLineAttributeId');
    const credits = decimalString(required(body, 'credits'), 'credits', CREDIT_PLACES);
    const id = newId('cp');
    const now = new Date().toISOString();
    const pool = await this.change(who, customerId, (d) => {
      const c = d.customer;
      const a = ID_PATTERNS.attribute.test(attributeId) ? own(d.attributes, attributeId) : undefined;
      if (!a || a.customerId !== c.id) throw notFound('orderLineAttributeId', `no order line attribute ${JSON.stringify(attributeId)} of customer ${c.id}`);
      if (a.creditsCurrencyId === null) throw bad('orderLineAttributeId', `order line attribute ${a.id} is not credit-priced (no creditsCurrencyId); a credit pool needs one`);
      const taken = Object.values(d.pools).find((x) => x.orderLineAttributeId === a.id);
      if (taken) throw conflict('orderLineAttributeId', `customer ${c.id} already has credit pool ${taken.id} for ${a.id}; top it up instead`);
      const pl: CreditPool = { id, customerId: c.id, orderLineAttributeId: a.id, creditsCurrencyId: a.creditsCurrencyId, granted: credits, topUps: [], createdAt: now };
      d.pools[id] = pl;
      return pl;
    });
    return { status: 201, body: poolView(pool) };
  }

  private async topUp(req: Request, p: (name: string) => string, who: Principal): Promise<Reply> {
    const customerId = p('customerId');
    const poolId = p('poolId');
    const body = readObject(req, ['credits']);
    const credits = decimalString(required(body, 'credits'), 'credits', CREDIT_PLACES, true);
    const id = newId('tu');
    const now = new Date().toISOString();
    const pool = await this.change(who, customerId, (d) => {
      const c = d.customer;
      const pl = ID_PATTERNS.pool.test(poolId) ? own(d.pools, poolId) : undefined;
      if (!pl || pl.customerId !== c.id) throw notFound('poolId', `no credit pool ${JSON.stringify(poolId)} of customer ${c.id}`);
      pl.topUps.push({ id, credits, at: now });
      return pl;
    });
    return { status: 201, body: poolView(pool) };
  }

  private async putCap(req: Request, p: (name: string) => string, who: Principal): Promise<Reply> {
    const creditsCurrencyId = uuid(p('creditsCurrencyId'), 'creditsCurrencyId');
    const unitExternalId = text(p('unitExternalId'), 'unitExternalId');
    const body = readObject(req, ['amount', 'frequency', 'effectiveFrom']);
    const amount = decimalString(required(body, 'amount'), 'amount', CREDIT_PLACES);
    const freq = frequency(required(body, 'frequency'), 'frequency');
    const effectiveFrom = utcInstant(required(body, 'effectiveFrom'), 'effectiveFrom');
    const now = new Date().toISOString();
    const { cap, created } = await this.change(who, p('customerId'), (d) => {
      const c = d.customer;
      unitIn(c, unitExternalId);
      const key = capKey(c.id, unitExternalId, creditsCurrencyId);
      const old = own(d.caps, key);
      if (old && old.amount === amount && old.frequency === freq && old.effectiveFrom === effectiveFrom) return { cap: old, created: false };
      const next: CreditCap = { customerId: c.id, unitExternalId, creditsCurrencyId, amount, frequency: freq, effectiveFrom, updatedAt: now };
      setOwn(d.caps, key, next);
      return { cap: next, created: old === undefined };
    });
    return { status: created ? 201 : 200, body: cap };
  }

  private async deleteCap(p: (name: string) => string, who: Principal): Promise<Reply> {
    const creditsCurrencyId = uuid(p('creditsCurrencyId'), 'creditsCurrencyId');
    await this.change(who, p('customerId'), (d) => {
      const key = capAddress(d, p('unitExternalId'), creditsCurrencyId);
      if (!own(d.caps, key)) throw notFound('creditsCurrencyId', `no credit cap of credits currency ${p('creditsCurrencyId')} on unit ${JSON.stringify(p('unitExternalId'))}`);
      delete d.caps[key];
    });
    return { status: 204 };
  }
}

/** The unit of a cap path, checked; and the cap's key. */
function capAddress(d: CustomerDoc, unitExternalId: string, creditsCurrencyId: string): string {
  unitIn(d.customer, unitExternalId);
  return capKey(d.customer.id, unitExternalId, creditsCurrencyId);
}
