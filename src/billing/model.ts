/**
 * The billing configuration of one organization and mode (live or test): customers and
 * their unit trees, plans, order line attributes (what prices which event), credit pools
 * and credit caps. Stored per entity in a JetStream KV bucket on disk (config/store.ts): one
 * document per customer (its units, attributes, pools and caps: everything one validation
 * needs), changed only by compare-and-set on its revision, so two concurrent changes cannot
 * both apply against the same base; plans, externalId claims and listing positions have keys
 * of their own. `BillingConfig` is the shape the evaluator works on: for one batch, the
 * documents of the customers the batch names and the plans they use (store.forBatch).
 * Decimal amounts are canonical decimal strings (src/billing/decimal.ts).
 *
 * The evaluator (src/billing/evaluator) reads these documents; the running state (what pools
 * have consumed, cumulative usage, cap spend per period) lives in a separate document that
 * only the evaluator writes.
 */
import type { Frequency } from './periods.js';

export interface Unit {
  /** The caller's own id of the unit, unique within the customer. */
  externalId: string;
  externalType: string | null;
  name: string | null;
  /** Parent unit's externalId; null for a root unit. The tree never has cycles. */
  parentExternalId: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface Customer {
  /** Service id, `cus_` + 20 base62 characters. */
  id: string;
  /** The caller's own id, unique within the organization and mode when present. */
  externalId: string | null;
  name: string | null;
  units: Record<string, Unit>;
  createdAt: string;
  updatedAt: string;
}

export interface Plan {
  /** `plan_` + 20 base62 characters. */
  id: string;
  name: string;
  createdAt: string;
}

export type QuantityRule = { kind: 'count' } | { kind: 'path'; path: string };

/** An attribute of a customer's order under a plan: prices one event name for that customer. */
export interface OrderLineAttribute {
  /** `ola_` + 20 base62 characters. */
  id: string;
  customerId: string;
  planId: string;
  eventName: string;
  /** Quantity per signal: 1, or a numeric path in the signal's data (dot-separated). */
  quantity: QuantityRule;
  /** Minor units per unit of quantity (fractional cents allowed), a decimal string. */
  unitPrice: string;
  /** ISO 4217 code, upper case. */
  currency: string;
  /** Overage threshold on cumulative quantity; null: no included quantity. */
  includedQuantity: string | null;
  /** Credits currency (UUID, lower case) consumed by this attribute; null: not credit-priced. */
  creditsCurrencyId: string | null;
  /** Credits consumed per unit of quantity; set exactly when creditsCurrencyId is. */
  creditsPerUnit: string | null;
  createdAt: string;
}

export interface TopUp {
  id: string;
  credits: string;
  at: string;
}

export interface CreditPool {
  /** `cp_` + 20 base62 characters. */
  id: string;
  customerId: string;
  orderLineAttributeId: string;
  /** The attribute's credits currency, or null for a pool not scoped to a currency. */
  creditsCurrencyId: string | null;
  /** Credits granted at creation (up to six decimal places). */
  granted: string;
  topUps: TopUp[];
  createdAt: string;
}

/** A cap has no id: it is addressed by customer, unit and credits currency. Advisory only. */
export interface CreditCap {
  customerId: string;
  unitExternalId: string;
  creditsCurrencyId: string;
  amount: string;
  frequency: Frequency;
  /** RFC 3339 UTC, the anchor of the periods. */
  effectiveFrom: string;
  updatedAt: string;
}

export interface BillingConfig {
  customers: Record<string, Customer>;
  plans: Record<string, Plan>;
  attributes: Record<string, OrderLineAttribute>;
  pools: Record<string, CreditPool>;
  /** Keyed by `capKey(customerId, unitExternalId, creditsCurrencyId)`. */
  caps: Record<string, CreditCap>;
}

export const emptyConfig = (): BillingConfig => ({ customers: {}, plans: {}, attributes: {}, pools: {}, caps: {} });

export const capKey = (customerId: string, unitExternalId: string, creditsCurrencyId: string): string =>
  JSON.stringify([customerId, unitExternalId, creditsCurrencyId.toLowerCase()]);
