/**
 * The billing configuration API (organization API key; everything is scoped to the key's
 * organization and mode: live and test keys see two separate configurations).
 *
 *   POST   /api/v2/customers                                      {externalId?, name?}            → 201 customer
 *   GET    /api/v2/customers                                                                      → 200 {customers}
 *   GET    /api/v2/customers/:customerId                                                          → 200 customer
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
 * Every change is validated against the whole document and applied with compare-and-set
 * (store.ts); on any error nothing changes. Unknown customer, plan, attribute, pool, unit or
 * parent → 404 NOT_FOUND; a duplicate (customer externalId, attribute per eventName, pool
 * per attribute) → 409 CONFLICT; a bad value or a cycle in the unit tree → 400
 * INVALID_BILLING_CONFIG. Every `details` starts with the name of the field.
 *
 * Record keys chosen by callers (unit external ids) are read with Object.hasOwn and written
 * as own data properties, so ids such as "__proto__" or "constructor" are plain ids.
 */
import { ApiError } from '../../errors.js';
import type { Reply, Request } from '../../ingress/http.js';
import { randomToken } from '../../orgs/keys.js';
import type { Principal } from '../../orgs/registry.js';
import { parseDecimal, sub, sum, toCanonicalString } from '../decimal.js';
import { capKey, type BillingConfig, type CreditCap, type CreditPool, type Customer, type OrderLineAttribute, type Plan, type Unit } from '../model.js';
import type { BillingConfigStore } from './store.js';
import {
  CREDIT_PLACES,
  PRICE_PLACES,
  bad,
  currency,
  decimalString,
  frequency,
  optionalText,
  pathParams,
  quantityRule,
  readObject,
  required,
  text,
  utcInstant,
  uuid,
} from './validate.js';

export type BillingMethod = 'get' | 'post' | 'put' | 'delete';

export interface BillingRoute {
  method: BillingMethod;
  pattern: string;
  /** The route reads a JSON body. */
  body: boolean;
  handler: (req: Request) => Promise<Reply>;
}

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

export const customerView = (c: Customer) => ({ id: c.id, externalId: c.externalId, name: c.name, createdAt: c.createdAt, updatedAt: c.updatedAt });
export const unitView = (customerId: string, u: Unit) => ({ customerId, ...u });
export const poolView = (p: CreditPool) => ({
  ...p,
  totalCredits: toCanonicalString(sum([p.granted, ...p.topUps.map((t) => t.credits)].map((c) => parseDecimal(c)))),
});

function customerIn(cfg: BillingConfig, id: string): Customer {
  const c = ID_PATTERNS.customer.test(id) ? own(cfg.customers, id) : undefined;
  if (!c) throw notFound('customerId', `no customer ${JSON.stringify(id)} (use the service id cus_…)`);
  return c;
}

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

/** Credits consumed per pool id so far, as the billing evaluator recorded them (decimal strings). */
export type ConsumedSource = (orgId: string, mode: Principal['mode']) => Promise<Record<string, string>>;

export class BillingConfigApi {
  constructor(
    private readonly store: BillingConfigStore,
    private readonly consumed: ConsumedSource = async () => ({}),
  ) {}

  /** The routes, for Server.addBilling (which authenticates them with the API key). */
  routes(): BillingRoute[] {
    const C = '/api/v2/customers';
    const customer = `${C}/:customerId`;
    const unit = `${customer}/units/:unitExternalId`;
    const cap = `${unit}/credit-caps/:creditsCurrencyId`;
    const topUps = `${customer}/credit-pools/:poolId/top-ups`;
    const r = (method: BillingMethod, pattern: string, fn: (req: Request, p: (name: string) => string, who: Principal) => Promise<Reply>): BillingRoute => {
      const param = pathParams(pattern);
      return { method, pattern, body: method === 'post' || method === 'put', handler: (req) => fn(req, (name) => param(req, name), req.principal!) };
    };
    return [
      r('post', C, (req, _p, who) => this.createCustomer(req, who)),
      r('get', C, async (_req, _p, who) => ({ status: 200, body: { customers: Object.values((await this.read(who)).customers).map(customerView) } })),
      r('get', customer, async (_req, p, who) => ({ status: 200, body: customerView(customerIn(await this.read(who), p('customerId'))) })),
      r('get', `${customer}/units`, async (_req, p, who) => {
        const c = customerIn(await this.read(who), p('customerId'));
        return { status: 200, body: { units: Object.values(c.units).map((u) => unitView(c.id, u)) } };
      }),
      r('put', unit, (req, p, who) => this.putUnit(req, p, who)),
      r('get', unit, async (_req, p, who) => {
        const c = customerIn(await this.read(who), p('customerId'));
        return { status: 200, body: unitView(c.id, unitIn(c, p('unitExternalId'))) };
      }),
      r('post', '/api/v2/plans', (req, _p, who) => this.createPlan(req, who)),
      r('get', '/api/v2/plans', async (_req, _p, who) => ({ status: 200, body: { plans: Object.values((await this.read(who)).plans) } })),
      r('post', `${customer}/order-line-attributes`, (req, p, who) => this.createAttribute(req, p, who)),
      r('get', `${customer}/order-line-attributes`, async (_req, p, who) => {
        const cfg = await this.read(who);
        const c = customerIn(cfg, p('customerId'));
        return { status: 200, body: { orderLineAttributes: Object.values(cfg.attributes).filter((a) => a.customerId === c.id) } };
      }),
      r('post', `${customer}/credit-pools`, (req, p, who) => this.createPool(req, p, who)),
      r('get', `${customer}/credit-pools`, async (_req, p, who) => {
        const cfg = await this.read(who);
        const c = customerIn(cfg, p('customerId'));
        const used = await this.consumed(who.org.id, who.mode);
        const pools = Object.values(cfg.pools)
          .filter((x) => x.customerId === c.id)
          .map((x) => {
            const view = poolView(x);
            const consumed = Object.hasOwn(used, x.id) ? used[x.id]! : '0';
            const balance = sub(parseDecimal(view.totalCredits), parseDecimal(consumed, { maxDecimalPlaces: 1000, maxIntegerDigits: 1000 }));
            return { ...view, consumedCredits: consumed, balance: toCanonicalString(balance) };
          });
        return { status: 200, body: { creditPools: pools } };
      }),
      r('post', topUps, (req, p, who) => this.topUp(req, p, who)),
      r('put', cap, (req, p, who) => this.putCap(req, p, who)),
      r('get', cap, async (_req, p, who) => {
        const cfg = await this.read(who);
        const { key } = capAddress(cfg, p);
        const found = own(cfg.caps, key);
        if (!found) throw notFound('creditsCurrencyId', `no credit cap of credits currency ${p('creditsCurrencyId')} on unit ${JSON.stringify(p('unitExternalId'))}`);
        return { status: 200, body: found };
      }),
      r('delete', cap, (req, p, who) => this.deleteCap(p, who)),
      r('get', `${customer}/credit-caps`, async (_req, p, who) => {
        const cfg = await this.read(who);
        const c = customerIn(cfg, p('customerId'));
        return { status: 200, body: { creditCaps: Object.values(cfg.caps).filter((x) => x.customerId === c.id) } };
      }),
    ];
  }

  private async read(who: Principal): Promise<BillingConfig> {
    return (await this.store.get(who.org.id, who.mode)).config;
  }

  private change<T>(who: Principal, fn: (cfg: BillingConfig) => T): Promise<T> {
    return this.store.change(who.org.id, who.mode, fn).then((c) => c.result);
  }

  private async createCustomer(req: Request, who: Principal): Promise<Reply> {
    const body = readObject(req, ['externalId', 'name'], true);
    const externalId = optionalText(body.externalId, 'externalId');
    if (externalId !== null && ID_PATTERNS.customer.test(externalId)) {
      throw bad('externalId', 'must not have the form of a service id (cus_ and 20 characters): signals name customers by either, so it would be ambiguous');
    }
    const name = optionalText(body.name, 'name');
    const id = newId('cus');
    const now = new Date().toISOString();
    const created = await this.change(who, (cfg) => {
      if (externalId !== null) {
        const taken = Object.values(cfg.customers).find((c) => c.externalId === externalId);
        if (taken) throw conflict('externalId', `customer ${taken.id} already has the externalId ${JSON.stringify(externalId)}`);
      }
      const c: Customer = { id, externalId, name, units: {}, createdAt: now, updatedAt: now };
      cfg.customers[id] = c;
      return c;
    });
    return { status: 201, body: customerView(created) };
  }

  private async putUnit(req: Request, p: (name: string) => string, who: Principal): Promise<Reply> {
    const customerId = p('customerId');
    const externalId = text(p('unitExternalId'), 'unitExternalId');
    const body = readObject(req, ['externalType', 'name', 'parentExternalId'], true);
    const externalType = optionalText(body.externalType, 'externalType');
    const name = optionalText(body.name, 'name');
    const parentExternalId = optionalText(body.parentExternalId, 'parentExternalId');
    const now = new Date().toISOString();
    const { unit, created } = await this.change(who, (cfg) => {
      const c = customerIn(cfg, customerId);
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
    await this.change(who, (cfg) => {
      cfg.plans[plan.id] = plan;
    });
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
    const attribute = await this.change(who, (cfg) => {
      const c = customerIn(cfg, customerId);
      if (!ID_PATTERNS.plan.test(planId) || !own(cfg.plans, planId)) throw notFound('planId', `no plan ${JSON.stringify(planId)}`);
      const taken = Object.values(cfg.attributes).find((a) => a.customerId === c.id && a.eventName === eventName);
      if (taken) throw conflict('eventName', `customer ${c.id} already prices ${JSON.stringify(eventName)} with order line attribute ${taken.id}`);
      const a: OrderLineAttribute = {
        id, customerId: c.id, planId, eventName, quantity, unitPrice, currency: cur, includedQuantity, creditsCurrencyId, creditsPerUnit, createdAt: now,
      };
      cfg.attributes[id] = a;
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
    const pool = await this.change(who, (cfg) => {
      const c = customerIn(cfg, customerId);
      const a = ID_PATTERNS.attribute.test(attributeId) ? own(cfg.attributes, attributeId) : undefined;
      if (!a || a.customerId !== c.id) throw notFound('orderLineAttributeId', `no order line attribute ${JSON.stringify(attributeId)} of customer ${c.id}`);
      if (a.creditsCurrencyId === null) throw bad('orderLineAttributeId', `order line attribute ${a.id} is not credit-priced (no creditsCurrencyId); a credit pool needs one`);
      const taken = Object.values(cfg.pools).find((x) => x.customerId === c.id && x.orderLineAttributeId === a.id);
      if (taken) throw conflict('orderLineAttributeId', `customer ${c.id} already has credit pool ${taken.id} for ${a.id}; top it up instead`);
      const pl: CreditPool = { id, customerId: c.id, orderLineAttributeId: a.id, creditsCurrencyId: a.creditsCurrencyId, granted: credits, topUps: [], createdAt: now };
      cfg.pools[id] = pl;
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
    const pool = await this.change(who, (cfg) => {
      const c = customerIn(cfg, customerId);
      const pl = ID_PATTERNS.pool.test(poolId) ? own(cfg.pools, poolId) : undefined;
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
    const { cap, created } = await this.change(who, (cfg) => {
      const c = customerIn(cfg, p('customerId'));
      unitIn(c, unitExternalId);
      const key = capKey(c.id, unitExternalId, creditsCurrencyId);
      const old = own(cfg.caps, key);
      if (old && old.amount === amount && old.frequency === freq && old.effectiveFrom === effectiveFrom) return { cap: old, created: false };
      const next: CreditCap = { customerId: c.id, unitExternalId, creditsCurrencyId, amount, frequency: freq, effectiveFrom, updatedAt: now };
      setOwn(cfg.caps, key, next);
      return { cap: next, created: old === undefined };
    });
    return { status: created ? 201 : 200, body: cap };
  }

  private async deleteCap(p: (name: string) => string, who: Principal): Promise<Reply> {
    await this.change(who, (cfg) => {
      const { key } = capAddress(cfg, p);
      if (!own(cfg.caps, key)) throw notFound('creditsCurrencyId', `no credit cap of credits currency ${p('creditsCurrencyId')} on unit ${JSON.stringify(p('unitExternalId'))}`);
      delete cfg.caps[key];
    });
    return { status: 204 };
  }
}

/** Customer, unit and credits currency of a cap path, checked; and the cap's key. */
function capAddress(cfg: BillingConfig, p: (name: string) => string): { key: string } {
  const creditsCurrencyId = uuid(p('creditsCurrencyId'), 'creditsCurrencyId');
  const c = customerIn(cfg, p('customerId'));
  const unitExternalId = p('unitExternalId');
  unitIn(c, unitExternalId);
  return { key: capKey(c.id, unitExternalId, creditsCurrencyId) };
}
