/**
 * Evaluation of one billable batch against an organization's billing configuration and
 * running state. Pure and deterministic: the same configuration, state and signals always
 * give the same new state, rows and events (event ids included), which is what makes a
 * replay after a crash emit nothing new (src/billing/evaluator/consumer.ts).
 *
 * Per signal, in batch order:
 *  1. Customer: the signal's customerId is the service id (`cus_…`) or, failing that, the
 *     customer's externalId. Unknown customer → not priced.
 *  2. Attribute: the customer's order line attribute for the signal's eventName (at most
 *     one). None → not priced.
 *  3. Quantity: 1, or the number at the attribute's path in the signal's data under the
 *     quantity rule (src/billing/quantity.ts: a JSON number at the value its text states, or a
 *     decimal string; ≥ 0, within the stored type: ≤ 24 places, ≤ 52 integer digits).
 *     Otherwise → not priced: one fact_unpriced row with the reason. Cost = quantity ×
 *     unitPrice (exact) → one fact_cost row. Every amount written fits the stored type
 *     exactly (src/store/stored.ts), checked on the actual values: a signal whose cost,
 *     credits or pool balance after the draw would not is not priced either
 *     (AMOUNT_OUT_OF_RANGE), and changes no state.
 *  4. Included quantity: cumulative quantity of the attribute; the signal that takes it
 *     strictly above the included quantity fires OverageUsage (once per crossing).
 *  5. Credits (credit-priced attribute with a pool): consumption = quantity × creditsPerUnit
 *     from the pool → one consumption row; depletion (balance from > 0 to ≤ 0) fires
 *     billing-credits-depleted; going below zero fires OverageCredit (see credits.ts).
 *  6. Caps: the consumption counts for the caps on the signal's unit and every ancestor
 *     of it, in the cap's period containing the signal's time; reaching the amount fires
 *     billing-credit-cap-reached once per cap and period. Period totals are not part of the
 *     running state: each cap period has its own KV key (`periodKey`), any number of periods
 *     back. `capPeriods` lists the periods a batch touches; the caller reads those keys and
 *     passes their totals in `periods`, and gets the new totals back in `periods`.
 * Times in events (depletedAt, occurredAt, detectedAt) are `evaluatedAt`: the time the
 * batch entered the billable stream, fixed for every replay.
 */
import { add, compare, decimalFromInteger, decimalPlaces, integerDigitsOf, mul, parseDecimal, sub, toCanonicalString, ZERO, type Dec } from '../decimal.js';
import { readQuantity, type QuantityResult, type UnpricedReason } from '../quantity.js';
import { fitsStored } from '../stored.js';
import { STORED_DECIMAL } from '../../store/stored.js';
import { consume } from '../credits.js';
import { addUsage } from '../overage.js';
import { spendAgainstCap } from '../caps.js';
import { periodContaining } from '../periods.js';
import { creditCapReachedEvent, creditsDepletedEvent, overageCreditEvent, overageUsageEvent } from '../events.js';
import { capKey, type BillingConfig, type CreditCap, type Customer, type OrderLineAttribute, type Unit } from '../model.js';
import { createHash } from 'node:crypto';
import type { Period } from '../periods.js';
import type { Mode } from '../../shared/mode.js';
import type { Emitted } from '../../bus/events.js';

export interface BillableSignal {
  id: string;
  eventName: string;
  customerId: string;
  unitId: string | null;
  /** Usage time, epoch ms. */
  ts: number;
  data: Record<string, unknown>;
  /** Texts of numbers in `data` that a double does not keep, by path, or false when withheld (src/pipeline/exact-numbers.ts). */
  exact?: Record<string, string> | false;
}

/** Running state of one organization and mode; only the evaluator writes it. Decimals as strings. */
export interface BillingState {
  /** Stream sequence of the last billable message applied. */
  lastSeq: number;
  /** Credits consumed per pool id. */
  consumed: Record<string, string>;
  /** Cumulative quantity per order line attribute id. */
  usage: Record<string, string>;
}

export const emptyState = (): BillingState => ({ lastSeq: 0, consumed: {}, usage: {} });

/** Spend of one cap period so far, and whether billing-credit-cap-reached has fired for it. */
export interface PeriodTotal {
  used: string;
  reached: boolean;
}

export const ZERO_PERIOD: PeriodTotal = Object.freeze({ used: '0', reached: false });

/** The value of a period key (consumer.ts): the batch that last changed it, its totals before and after. */
export interface PeriodEntry {
  /** Stream sequence of the batch that last changed the period. */
  seq: number;
  before: PeriodTotal;
  after: PeriodTotal;
}

/**
 * A period's total before batch `seq`: the key's `before` when `seq` itself wrote it (a replay
 * after a crash between that write and the commit), its `after` when an earlier batch did
 * (committed: batches commit in stream order); no key: zero.
 */
export function startingTotal(stored: PeriodEntry | null, seq: number): PeriodTotal {
  if (stored) return stored.seq === seq ? stored.before : stored.after;
  return ZERO_PERIOD;
}

/** A cap period a batch touches. */
export interface CapPeriodRef {
  /** Its key in the state bucket (`periodKey`). */
  key: string;
  /** The cap (`capKey`) and the period start (canonical RFC 3339). */
  capKey: string;
  start: string;
}

/** What a cost row and an unpriced row both say of their signal and its attribute. */
export interface PricedSignalRow {
  org_id: string;
  livemode: boolean;
  signal_id: string;
  created_at: number;
  event_name: string;
  customer_id: string;
  unit_id: string | null;
  plan_id: string;
  order_line_attribute_id: string;
}

export interface CostRow extends PricedSignalRow {
  quantity: string;
  unit_price: string;
  cost_amount: string;
  currency: string;
}

export interface ConsumptionRow {
  org_id: string;
  livemode: boolean;
  signal_id: string;
  created_at: number;
  customer_id: string;
  unit_id: string | null;
  order_line_attribute_id: string;
  pool_id: string;
  credits_currency_id: string | null;
  credits: string;
  balance_after: string;
}

/** A signal an attribute applies to that was not priced, and why (quantity.ts). */
export interface UnpricedRow extends PricedSignalRow {
  reason: UnpricedReason;
  detail: string;
}

/** An event of the batch, published on the bus under its deterministic id. */
export type EmittedEvent = Emitted;

export interface EvaluationInput {
  orgId: string;
  mode: Mode;
  config: BillingConfig;
  state: BillingState;
  signals: BillableSignal[];
  /** Epoch ms the batch entered the billable stream (same on every replay). */
  evaluatedAt: number;
  /**
   * The total so far of every cap period the batch touches (`capPeriods`), by period key
   * (`ZERO_PERIOD` for a period never spent in). A touched period missing here is an error.
   */
  periods: Record<string, PeriodTotal>;
}

export type CapPeriodsInput = Pick<EvaluationInput, 'orgId' | 'mode' | 'config' | 'signals'>;

export interface EvaluationOutput {
  state: BillingState;
  costs: CostRow[];
  consumption: ConsumptionRow[];
  events: EmittedEvent[];
  unpriced: UnpricedRow[];
  /** The new totals of the cap periods the batch touched, by period key. */
  periods: Record<string, PeriodTotal>;
}

/**
 * The KV key of one cap period: organization, mode, the cap (a hash of `capKey`: unit ids
 * may hold any character, KV keys may not) and the period's start and end in epoch ms, the
 * same parts as the event id of `billing-credit-cap-reached` (events.ts), so one key holds
 * the total and the "fired" flag of exactly one possible event.
 */
export function periodKey(orgId: string, mode: Mode, cap: string, period: Pick<Period, 'startMs' | 'endMs'>): string {
  return keyOfPeriod(orgId, mode, capHash(cap), period);
}

const capHash = (cap: string): string => createHash('sha256').update(cap).digest('base64url');

/**
 * Memos of pure functions of text, kept for the thread's life across evaluations (each group
 * builds its own `Lookups`, so a per-configuration memo starts empty every group): a cap's
 * hash, and the last period found for an anchor and frequency. Bounded: emptied when full.
 */
const MEMO_MAX = 65_536;
const hashMemo = new Map<string, string>();
const periodMemo = new Map<string, Period>();

/** Keeps `value` under `key` in a thread-level memo, emptying it first when full. */
function remember<K, V>(memo: Map<K, V>, key: K, value: V): V {
  if (memo.size >= MEMO_MAX) memo.clear();
  memo.set(key, value);
  return value;
}

function memoCapHash(cap: string): string {
  return hashMemo.get(cap) ?? remember(hashMemo, cap, capHash(cap));
}

const capKeyParts = new Map<string, readonly [string, string, string] | null>();

/** The customer, unit and currency `capKey` made `key` from, or null for a key capKey never makes (memoized for the thread's life). */
function partsOfCapKey(key: string): readonly [string, string, string] | null {
  const known = capKeyParts.get(key);
  if (known !== undefined) return known;
  let parts: readonly [string, string, string] | null = null;
  try {
    const v = JSON.parse(key) as unknown;
    if (Array.isArray(v) && v.length === 3 && v.every((x) => typeof x === 'string')) {
      const [c, u, cur] = v as [string, string, string];
      if (capKey(c, u, cur) === key) parts = [c, u, cur];
    }
  } catch {
    /* not JSON: not a cap key */
  }
  return remember(capKeyParts, key, parts);
}

/** periodContaining(effectiveFrom, frequency, ts), from the last period found for this anchor and frequency when it holds `ts` (periods are consecutive half-open ranges: the one holding `ts` is the one). */
function memoPeriod(effectiveFrom: string, frequency: CreditCap['frequency'], ts: number): Period | null {
  const key = `${frequency} ${effectiveFrom}`;
  const last = periodMemo.get(key);
  if (last && ts >= last.startMs && ts < last.endMs) return last;
  const period = periodContaining(effectiveFrom, frequency, ts);
  return period && remember(periodMemo, key, period);
}
const keyOfPeriod = (orgId: string, mode: Mode, hash: string, period: Pick<Period, 'startMs' | 'endMs'>): string => `cp.${orgId}.${mode}.${hash}.${period.startMs}.${period.endMs}`;

/** The lookups of one configuration (built once per configuration: `evaluate` takes them when its caller evaluates several batches against one). */
export interface Lookups {
  byExternalId: Map<string, Customer>;
  /** Each customer's attributes by event name (by customer id). */
  attributesOf: Map<string, Map<string, OrderLineAttribute>>;
  /** Each attribute's pool (`poolFor`): looked up by the attribute itself, no key made per signal. */
  poolOf: WeakMap<OrderLineAttribute, Pool | null>;
  /** The pools by customer id and attribute id. */
  pools: Map<string, Map<string, Pool>>;
  /** Memo of capsHit, per configuration: the caps on a unit and its ancestors, by the unit (an object of one customer's document) and currency, each with the last period found for it (a cap's hash is memoized per thread: memoCapHash). */
  capChains: WeakMap<Unit, Map<string, CapOnChain[]>>;
  /** The configuration's caps by customer, unit and lowercased currency (the parts of their `capKey`), with their keys. */
  capsAt: Map<string, Map<string, Map<string, { key: string; cap: CreditCap }>>>;
  /** The configuration's decimals (prices, credits per unit, included quantities, cap amounts), parsed once: by places and text. */
  decimals: Map<string, Dec>;
  /** The same decimals in canonical form. */
  decimalTexts: Map<string, string>;
  /** Each attribute's decimals, parsed once per configuration. */
  attrNumbers: WeakMap<OrderLineAttribute, AttrNumbers>;
  /** Each signal's resolution (`resolve`), once: capPeriods and evaluate of one group share their lookups (group.ts). */
  resolved: WeakMap<BillableSignal, Resolved | null>;
  /** Per cap (its key): the last period found and its period key (`periodKeyOf`). */
  periodKeys: Map<string, { period: Period; key: string }>;
}

/** An attribute's decimals: unit price (and its canonical text), credits per unit, included quantity. */
interface AttrNumbers {
  unitPrice: Dec;
  unitPriceText: string;
  creditsPerUnit: Dec | null;
  included: Dec | null;
}

/** A signal's customer, attribute, quantity (or why it is not priced) and unit. */
interface Resolved {
  customer: Customer;
  attr: OrderLineAttribute;
  quantity: QuantityResult;
  unit: Unit | null;
}

function attrNumbers(l: Lookups, attr: OrderLineAttribute): AttrNumbers {
  let n = l.attrNumbers.get(attr);
  if (!n) {
    n = {
      unitPrice: configDecimal(l, attr.unitPrice, 12),
      unitPriceText: configText(l, attr.unitPrice, 12),
      creditsPerUnit: attr.creditsPerUnit === null ? null : configDecimal(l, attr.creditsPerUnit, 12),
      included: attr.includedQuantity === null ? null : configDecimal(l, attr.includedQuantity, 12),
    };
    l.attrNumbers.set(attr, n);
  }
  return n;
}

/** A decimal of the configuration in canonical form (`toCanonicalString(configDecimal(…))`), once per configuration. */
function configText(l: Lookups, text: string, maxDecimalPlaces: number): string {
  const key = `${maxDecimalPlaces}\u0000${text}`;
  let t = l.decimalTexts.get(key);
  if (t === undefined) l.decimalTexts.set(key, (t = toCanonicalString(configDecimal(l, text, maxDecimalPlaces))));
  return t;
}

/** A decimal of the configuration, parsed once per configuration. */
function configDecimal(l: Lookups, text: string, maxDecimalPlaces: number): Dec {
  const key = `${maxDecimalPlaces}\u0000${text}`;
  let d = l.decimals.get(key);
  if (d === undefined) l.decimals.set(key, (d = parseDecimal(text, { maxDecimalPlaces })));
  return d;
}

interface CapOnChain {
  key: string;
  cap: CreditCap;
  unit: Unit;
  /** The period of the cap holding the time capsHit was last asked about (null: none); the next signal's, most often (periods are consecutive half-open ranges). */
  last: Period | null;
}

/** A credit pool as evaluation uses it: its granted credits and top-ups summed. */
interface Pool {
  id: string;
  total: Dec;
  creditsCurrencyId: string | null;
}

/** The pool of a customer's attribute, if any (once per attribute and configuration). */
function poolFor(l: Lookups, attr: OrderLineAttribute): Pool | null {
  let p = l.poolOf.get(attr);
  if (p === undefined) l.poolOf.set(attr, (p = l.pools.get(attr.customerId)?.get(attr.id) ?? null));
  return p;
}

export function lookups(config: BillingConfig): Lookups {
  const byExternalId = new Map<string, Customer>();
  for (const c of Object.values(config.customers)) if (c.externalId !== null) byExternalId.set(c.externalId, c);
  const attributesOf = new Map<string, Map<string, OrderLineAttribute>>();
  for (const a of Object.values(config.attributes)) {
    let byEvent = attributesOf.get(a.customerId);
    if (!byEvent) attributesOf.set(a.customerId, (byEvent = new Map()));
    byEvent.set(a.eventName, a);
  }
  const pools = new Map<string, Map<string, Pool>>();
  for (const p of Object.values(config.pools)) {
    const total = p.topUps.reduce((s, t) => add(s, parseDecimal(t.credits, { maxDecimalPlaces: 6 })), parseDecimal(p.granted, { maxDecimalPlaces: 6 }));
    let byAttr = pools.get(p.customerId);
    if (!byAttr) pools.set(p.customerId, (byAttr = new Map()));
    byAttr.set(p.orderLineAttributeId, { id: p.id, total, creditsCurrencyId: p.creditsCurrencyId });
  }
  const capsAt: Lookups['capsAt'] = new Map();
  for (const [key, cap] of Object.entries(config.caps)) {
    const parts = partsOfCapKey(key);
    if (!parts) continue; // not a key capKey makes: never looked up
    const [customerId, unitId, currency] = parts;
    let units = capsAt.get(customerId);
    if (!units) capsAt.set(customerId, (units = new Map()));
    let currencies = units.get(unitId);
    if (!currencies) units.set(unitId, (currencies = new Map()));
    currencies.set(currency, { key, cap });
  }
  return {
    byExternalId,
    attributesOf,
    poolOf: new WeakMap(),
    pools,
    capChains: new WeakMap(),
    capsAt,
    decimals: new Map(),
    decimalTexts: new Map(),
    attrNumbers: new WeakMap(),
    resolved: new WeakMap(),
    periodKeys: new Map(),
  };
}

/** A signal's customer, attribute, quantity (or why it is not priced) and unit; null when it names no customer or attribute. */
function resolve(config: BillingConfig, l: Lookups, s: BillableSignal): Resolved | null {
  let r = l.resolved.get(s);
  if (r !== undefined) return r;
  r = null;
  const customer = own(config.customers, s.customerId) ?? l.byExternalId.get(s.customerId);
  const attr = customer ? l.attributesOf.get(customer.id)?.get(s.eventName) : undefined;
  if (customer && attr) {
    const unit = s.unitId !== null ? own(customer.units, s.unitId) ?? null : null;
    r = { customer, attr, quantity: quantityOf(attr, s.data, s.exact), unit };
  }
  l.resolved.set(s, r);
  return r;
}

/**
 * The caps (of `currency`) on `unit` and its ancestors, each with its period containing `ts` as
 * its `last` (null: the cap has none there), until the next call for the same unit: the chain
 * itself, so that a signal allocates nothing here.
 */
function capsHit(l: Lookups, customer: Customer, unit: Unit, currency: string, ts: number): readonly CapOnChain[] {
  let byCurrency = l.capChains.get(unit);
  if (!byCurrency) l.capChains.set(unit, (byCurrency = new Map()));
  let chain = byCurrency.get(currency);
  if (!chain) {
    chain = [];
    const seen = new Set<string>();
    // The cap of key capKey(customer.id, u.externalId, currency) of each unit up the tree (capsAt: the same lookup by the key's parts).
    const units = l.capsAt.get(customer.id);
    const lower = currency.toLowerCase();
    for (let u: Unit | null = unit; u && !seen.has(u.externalId); u = u.parentExternalId !== null ? own(customer.units, u.parentExternalId) ?? null : null) {
      seen.add(u.externalId);
      const found = units?.get(u.externalId)?.get(lower);
      if (found) chain.push({ key: found.key, cap: found.cap, unit: u, last: null });
    }
    byCurrency.set(currency, chain);
  }
  for (const c of chain) {
    // Periods are consecutive half-open ranges: the last one found for this cap holds `ts`, or another is computed.
    const last = c.last;
    if (!last || ts < last.startMs || ts >= last.endMs) c.last = memoPeriod(c.cap.effectiveFrom, c.cap.frequency, ts);
  }
  return chain;
}

/** periodKey with the cap's hash computed once per thread (memoCapHash), and the key of the cap's last period found kept (lookups are of one organization and mode). */
function periodKeyOf(l: Lookups, orgId: string, mode: Mode, cap: string, period: Period): string {
  const last = l.periodKeys.get(cap);
  if (last && last.period === period) return last.key;
  const key = keyOfPeriod(orgId, mode, memoCapHash(cap), period);
  l.periodKeys.set(cap, { period, key });
  return key;
}

/**
 * The cap periods a batch touches (each once, in first-touch order): those `evaluate` needs
 * in `periods`. Same resolution as `evaluate`: a priced, credit-priced signal with a pool, a
 * known unit and a positive draw touches the period containing its time of every cap on its
 * unit and the unit's ancestors.
 */
export function capPeriods(input: CapPeriodsInput, l: Lookups = lookups(input.config)): CapPeriodRef[] {
  const { config } = input;
  const out = new Map<string, CapPeriodRef>();
  if (Object.keys(config.caps).length === 0) return [];
  for (const s of input.signals) {
    const r = resolve(config, l, s);
    if (!r || !r.quantity.ok || !r.unit || r.attr.creditsCurrencyId === null || r.attr.creditsPerUnit === null) continue;
    if (!poolFor(l, r.attr) || compare(r.quantity.quantity, ZERO) <= 0) continue;
    for (const h of capsHit(l, r.customer, r.unit, r.attr.creditsCurrencyId, s.ts)) {
      const period = h.last;
      if (!period) continue;
      const key = periodKeyOf(l, input.orgId, input.mode, h.key, period);
      if (!out.has(key)) out.set(key, { key, capKey: h.key, start: period.start });
    }
  }
  return [...out.values()];
}

export function evaluate(input: EvaluationInput, l: Lookups = lookups(input.config)): EvaluationOutput {
  const { config, orgId, mode } = input;
  const scope = `${orgId}:${mode}`;
  const live = mode === 'live';
  // A copy: only `consumed` and `usage` are written below.
  const state: BillingState = { ...input.state, consumed: { ...input.state.consumed }, usage: { ...input.state.usage } };
  const out: EvaluationOutput = { state, costs: [], consumption: [], events: [], unpriced: [], periods: {} };
  const at = input.evaluatedAt;
  // Running totals as exact decimals while the batch is evaluated; written back as text at the end.
  const consumed = new Map<string, Dec>();
  const usages = new Map<string, Dec>();
  const spent = new Map<string, { used: Dec; reached: boolean }>();
  const consumedOf = (poolId: string): Dec => consumed.get(poolId) ?? (state.consumed[poolId] !== undefined ? big(state.consumed[poolId]!) : ZERO);
  const usageOf = (attrId: string): Dec => usages.get(attrId) ?? (state.usage[attrId] !== undefined ? big(state.usage[attrId]!) : ZERO);
  /** What the events of a signal share (built only for a signal that fires one). */
  const commonOf = (s: BillableSignal, customer: Customer, attr: OrderLineAttribute) => ({
    organizationId: scope,
    customerId: customer.id,
    customerName: customer.name,
    planId: attr.planId,
    planName: own(config.plans, attr.planId)?.name ?? null,
    orderLineAttributeId: attr.id,
    signalId: s.id,
    at,
  });

  for (const s of input.signals) {
    const r = resolve(config, l, s);
    if (!r) continue;
    const { customer, attr, unit } = r;
    const unitId = unit ? unit.externalId : s.unitId;
    if (!r.quantity.ok) {
      out.unpriced.push(unpricedRow(orgId, live, s, customer, unitId, attr, r.quantity.reason, r.quantity.detail));
      continue;
    }
    const quantity = r.quantity.quantity;
    const n = attrNumbers(l, attr);
    const cost = mul(quantity, n.unitPrice);

    // The credits drawn, worked out before anything is recorded (see 3. above).
    const pool = attr.creditsCurrencyId !== null && n.creditsPerUnit !== null ? poolFor(l, attr) : null;
    let credits: Dec | null = null;
    let consumedBefore: Dec = ZERO;
    let c: ReturnType<typeof consume> | null = null;
    if (pool) {
      credits = mul(quantity, n.creditsPerUnit!);
      consumedBefore = consumedOf(pool.id);
      c = consume({ total: pool.total, balance: sub(pool.total, consumedBefore) }, credits);
    }
    const unstorable = !fitsStored(cost) ? (['cost', cost] as const) : credits && !fitsStored(credits) ? (['credits', credits] as const) : c && !fitsStored(c.after.balance) ? ([`balance of pool ${pool!.id} after the draw`, c.after.balance] as const) : null;
    if (unstorable) {
      const [what, v] = unstorable;
      out.unpriced.push(unpricedRow(orgId, live, s, customer, unitId, attr, 'AMOUNT_OUT_OF_RANGE', `the ${what} (${integerDigitsOf(v)} integer digits, ${decimalPlaces(v)} decimal places) would not fit the stored ${STORED_DECIMAL}`));
      continue;
    }
    // The row's own fields set on the shared part (no copy of it, as a spread would make).
    const costRow = pricedRow(orgId, live, s, customer, unitId, attr) as CostRow;
    costRow.quantity = quantity === ONE ? '1' : toCanonicalString(quantity);
    costRow.unit_price = n.unitPriceText;
    costRow.cost_amount = toCanonicalString(cost);
    costRow.currency = attr.currency;
    out.costs.push(costRow);

    // Included quantity.
    const usageBefore = usageOf(attr.id);
    const usage = addUsage(usageBefore, quantity, n.included);
    usages.set(attr.id, usage.after);
    if (usage.crossed) out.events.push(overageUsageEvent({ ...commonOf(s, customer, attr), usage }));

    // Credits.
    if (!pool || !credits || !c || attr.creditsCurrencyId === null) continue;
    consumed.set(pool.id, add(consumedBefore, credits));
    out.consumption.push({
      org_id: orgId,
      livemode: live,
      signal_id: s.id,
      created_at: s.ts,
      customer_id: customer.id,
      unit_id: unitId,
      order_line_attribute_id: attr.id,
      pool_id: pool.id,
      credits_currency_id: pool.creditsCurrencyId,
      credits: toCanonicalString(credits),
      balance_after: toCanonicalString(c.after.balance),
    });
    if (c.depleted) {
      out.events.push(
        creditsDepletedEvent({
          organizationId: scope,
          customerId: customer.id,
          customerName: customer.name,
          orderLineAttributeId: attr.id,
          creditsCurrencyId: pool.creditsCurrencyId,
          eventName: s.eventName,
          signalId: s.id,
          consumption: c,
          at,
        }),
      );
    }
    if (c.creditOverage) out.events.push(overageCreditEvent({ ...commonOf(s, customer, attr), creditsCurrencyId: pool.creditsCurrencyId, consumption: c }));

    // Caps on the unit and its ancestors, in the attribute's credits currency.
    if (!unit || compare(credits, ZERO) <= 0) continue;
    for (const h of capsHit(l, customer, unit, attr.creditsCurrencyId, s.ts)) {
      const period = h.last;
      if (!period) continue;
      const pk = periodKeyOf(l, orgId, mode, h.key, period);
      let slot = spent.get(pk);
      if (!slot) {
        const given = Object.hasOwn(input.periods, pk) ? input.periods[pk]! : null;
        if (given === null) throw new Error(`cap period ${pk} was not supplied (capPeriods lists every period a batch touches)`);
        slot = { used: big(given.used), reached: given.reached };
        spent.set(pk, slot);
      }
      const amount = configDecimal(l, h.cap.amount, 6);
      const step = spendAgainstCap({ amount, usedBefore: slot.used, spend: credits, alreadyReached: slot.reached });
      slot.used = step.usedAfter;
      if (step.reached) {
        slot.reached = true;
        out.events.push(
          creditCapReachedEvent({
            organizationId: scope,
            customer: { id: customer.id, externalId: customer.externalId },
            cap: { creditsCurrencyId: h.cap.creditsCurrencyId, amount, frequency: h.cap.frequency, effectiveFrom: h.cap.effectiveFrom },
            breachedUnit: { externalId: h.unit.externalId, externalType: h.unit.externalType },
            period,
            step,
            at,
          }),
        );
      }
    }
  }
  for (const [id, v] of consumed) state.consumed[id] = toCanonicalString(v);
  for (const [id, v] of usages) state.usage[id] = toCanonicalString(v);
  for (const [pk, v] of spent) out.periods[pk] = { used: toCanonicalString(v.used), reached: v.reached };
  return out;
}

/** What a cost row and an unpriced row both say of their signal and its attribute. */
function pricedRow(orgId: string, live: boolean, s: BillableSignal, customer: Customer, unitId: string | null, attr: OrderLineAttribute): PricedSignalRow {
  return {
    org_id: orgId,
    livemode: live,
    signal_id: s.id,
    created_at: s.ts,
    event_name: s.eventName,
    customer_id: customer.id,
    unit_id: unitId,
    plan_id: attr.planId,
    order_line_attribute_id: attr.id,
  };
}

/** A signal an attribute applies to that is not priced, and why. */
function unpricedRow(orgId: string, live: boolean, s: BillableSignal, customer: Customer, unitId: string | null, attr: OrderLineAttribute, reason: UnpricedReason, detail: string): UnpricedRow {
  const row = pricedRow(orgId, live, s, customer, unitId, attr) as UnpricedRow;
  row.reason = reason;
  row.detail = detail;
  return row;
}

/** A record's own entry: ids are the caller's (a unit may be called "constructor" or "__proto__"). */
function own<T>(record: Record<string, T>, key: string): T | undefined {
  return Object.hasOwn(record, key) ? record[key] : undefined;
}

/** The quantity of a counted signal (decimals are immutable: one for all). */
const ONE: Dec = decimalFromInteger(1);
const COUNT: QuantityResult = Object.freeze({ ok: true as const, quantity: ONE });

/** A stored running total: exact, any number of places. */
function big(s: string): Dec {
  return parseDecimal(s, { maxDecimalPlaces: 1000, maxIntegerDigits: 1000, allowNegative: true });
}

/**
 * The signal's quantity under the attribute's rule (src/billing/quantity.ts), or why it has
 * none. `exact`: texts of numbers a double does not keep, by path.
 */
export function quantityOf(attr: OrderLineAttribute, data: Record<string, unknown>, exact?: Record<string, string> | false): QuantityResult {
  if (attr.quantity.kind === 'count') return COUNT;
  const path = attr.quantity.path;
  let v: unknown = data;
  for (const part of path.split('.')) {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) {
      v = undefined;
      break;
    }
    v = own(v as Record<string, unknown>, part);
  }
  // ClickHouse's JSON also reads a dotted key as a path: {"a.b": 1} is data.a.b.
  if (v === undefined) v = own(data, path);
  return readQuantity(v, exact === false ? false : exact !== undefined ? own(exact, path) : undefined, `data.${path}`);
}
