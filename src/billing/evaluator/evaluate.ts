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
 *     decimal string; ≥ 0, ≤ 12 places, ≤ 15 integer digits). Otherwise → not priced: one
 *     fact_unpriced row with the reason. Cost = quantity × unitPrice (exact) → one fact_cost
 *     row. Every amount written fits the stored type exactly (src/billing/stored.ts); a
 *     signal whose amounts would not (in practice a pool balance beyond 10^52) is not priced
 *     either (AMOUNT_OUT_OF_RANGE), and changes no state.
 *  4. Included quantity: cumulative quantity of the attribute; the signal that takes it
 *     strictly above the included quantity fires OverageUsage (once per crossing).
 *  5. Credits (credit-priced attribute with a pool): consumption = quantity × creditsPerUnit
 *     from the pool → one consumption row; depletion (balance from > 0 to ≤ 0) fires
 *     billing-credits-depleted; going below zero fires OverageCredit (see credits.ts).
 *  6. Caps: the consumption counts for the caps on the signal's unit and every ancestor
 *     of it, in the cap's period containing the signal's time; reaching the amount fires
 *     billing-credit-cap-reached once per cap and period.
 * Times in events (depletedAt, occurredAt, detectedAt) are `evaluatedAt`: the time the
 * batch entered the billable stream, fixed for every replay.
 */
import { add, compare, decimalFromInteger, decimalPlaces, integerDigitsOf, mul, parseDecimal, sub, toCanonicalString, ZERO, type Dec } from '../decimal.js';
import { readQuantity, type QuantityResult, type UnpricedReason } from '../quantity.js';
import { fitsStored, STORED_DECIMAL } from '../stored.js';
import { consume } from '../credits.js';
import { addUsage } from '../overage.js';
import { spendAgainstCap } from '../caps.js';
import { periodContaining } from '../periods.js';
import { creditCapReachedEvent, creditsDepletedEvent, overageCreditEvent, overageUsageEvent } from '../events.js';
import { capKey, type BillingConfig, type Customer, type OrderLineAttribute } from '../model.js';

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
  /** Per cap key: spend per period start (the latest few periods), and whether it was reached. */
  caps: Record<string, Record<string, { used: string; reached: boolean }>>;
}

export const emptyState = (): BillingState => ({ lastSeq: 0, consumed: {}, usage: {}, caps: {} });

export interface CostRow {
  org_id: string;
  livemode: boolean;
  signal_id: string;
  created_at: number;
  event_name: string;
  customer_id: string;
  unit_id: string | null;
  plan_id: string;
  order_line_attribute_id: string;
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
export interface UnpricedRow {
  org_id: string;
  livemode: boolean;
  signal_id: string;
  created_at: number;
  event_name: string;
  customer_id: string;
  unit_id: string | null;
  plan_id: string;
  order_line_attribute_id: string;
  reason: UnpricedReason;
  detail: string;
}

export interface EmittedEvent {
  id: string;
  event: string;
  data: unknown;
}

export interface EvaluationInput {
  orgId: string;
  mode: 'live' | 'test';
  config: BillingConfig;
  state: BillingState;
  signals: BillableSignal[];
  /** Epoch ms the batch entered the billable stream (same on every replay). */
  evaluatedAt: number;
}

export interface EvaluationOutput {
  state: BillingState;
  costs: CostRow[];
  consumption: ConsumptionRow[];
  events: EmittedEvent[];
  unpriced: UnpricedRow[];
}

/** Periods of a cap kept in the state: the latest few, enough for signals that arrive late. */
const CAP_PERIODS_KEPT = 4;

export function evaluate(input: EvaluationInput): EvaluationOutput {
  const { config, orgId, mode } = input;
  const scope = `${orgId}:${mode}`;
  const live = mode === 'live';
  const state: BillingState = structuredClone(input.state);
  const out: EvaluationOutput = { state, costs: [], consumption: [], events: [], unpriced: [] };
  const at = input.evaluatedAt;

  const byExternalId = new Map<string, Customer>();
  for (const c of Object.values(config.customers)) if (c.externalId !== null) byExternalId.set(c.externalId, c);
  const attributeOf = new Map<string, OrderLineAttribute>();
  for (const a of Object.values(config.attributes)) attributeOf.set(`${a.customerId}\u0000${a.eventName}`, a);
  const poolOf = new Map<string, { id: string; total: Dec; creditsCurrencyId: string | null }>();
  for (const p of Object.values(config.pools)) {
    const total = p.topUps.reduce((s, t) => add(s, parseDecimal(t.credits, { maxDecimalPlaces: 6 })), parseDecimal(p.granted, { maxDecimalPlaces: 6 }));
    poolOf.set(`${p.customerId}\u0000${p.orderLineAttributeId}`, { id: p.id, total, creditsCurrencyId: p.creditsCurrencyId });
  }

  for (const s of input.signals) {
    const customer = own(config.customers, s.customerId) ?? byExternalId.get(s.customerId);
    if (!customer) continue;
    const attr = attributeOf.get(`${customer.id}\u0000${s.eventName}`);
    if (!attr) continue;
    const unit = s.unitId !== null ? own(customer.units, s.unitId) ?? null : null;
    const notPriced = (reason: UnpricedReason, detail: string): void => {
      out.unpriced.push({
        org_id: orgId,
        livemode: live,
        signal_id: s.id,
        created_at: s.ts,
        event_name: s.eventName,
        customer_id: customer.id,
        unit_id: unit ? unit.externalId : s.unitId,
        plan_id: attr.planId,
        order_line_attribute_id: attr.id,
        reason,
        detail,
      });
    };
    const q = quantityOf(attr, s.data, s.exact);
    if (!q.ok) {
      notPriced(q.reason, q.detail);
      continue;
    }
    const quantity = q.quantity;
    const plan = own(config.plans, attr.planId);
    const unitPrice = parseDecimal(attr.unitPrice, { maxDecimalPlaces: 12 });
    const cost = mul(quantity, unitPrice);

    // The credits drawn, worked out before anything is recorded (see 3. above).
    const pool = attr.creditsCurrencyId !== null && attr.creditsPerUnit !== null ? poolOf.get(`${customer.id}\u0000${attr.id}`) : undefined;
    let draw: { credits: Dec; consumedBefore: Dec; c: ReturnType<typeof consume> } | null = null;
    if (pool) {
      const credits = mul(quantity, parseDecimal(attr.creditsPerUnit!, { maxDecimalPlaces: 12 }));
      const consumedBefore = state.consumed[pool.id] !== undefined ? big(state.consumed[pool.id]!) : ZERO;
      draw = { credits, consumedBefore, c: consume({ total: pool.total, balance: sub(pool.total, consumedBefore) }, credits) };
    }
    const amounts: [string, Dec | undefined][] = [['cost', cost], ['credits', draw?.credits], [`balance of pool ${pool?.id} after the draw`, draw?.c.after.balance]];
    const unstorable = amounts.find(([, v]) => v !== undefined && !fitsStored(v));
    if (unstorable) {
      const [what, v] = unstorable as [string, Dec];
      notPriced('AMOUNT_OUT_OF_RANGE', `the ${what} (${integerDigitsOf(v)} integer digits, ${decimalPlaces(v)} decimal places) would not fit the stored ${STORED_DECIMAL}`);
      continue;
    }
    out.costs.push({
      org_id: orgId,
      livemode: live,
      signal_id: s.id,
      created_at: s.ts,
      event_name: s.eventName,
      customer_id: customer.id,
      unit_id: unit ? unit.externalId : s.unitId,
      plan_id: attr.planId,
      order_line_attribute_id: attr.id,
      quantity: toCanonicalString(quantity),
      unit_price: toCanonicalString(unitPrice),
      cost_amount: toCanonicalString(cost),
      currency: attr.currency,
    });

    const common = {
      organizationId: scope,
      customerId: customer.id,
      customerName: customer.name,
      planId: attr.planId,
      planName: plan?.name ?? null,
      orderLineAttributeId: attr.id,
      signalId: s.id,
      at,
    };

    // Included quantity.
    const usageBefore = state.usage[attr.id] !== undefined ? big(state.usage[attr.id]!) : ZERO;
    const included = attr.includedQuantity === null ? null : parseDecimal(attr.includedQuantity, { maxDecimalPlaces: 12 });
    const usage = addUsage(usageBefore, quantity, included);
    state.usage[attr.id] = toCanonicalString(usage.after);
    if (usage.crossed) out.events.push(overageUsageEvent({ ...common, usage }));

    // Credits.
    if (!pool || !draw || attr.creditsCurrencyId === null) continue;
    const { credits, consumedBefore, c } = draw;
    state.consumed[pool.id] = toCanonicalString(add(consumedBefore, credits));
    out.consumption.push({
      org_id: orgId,
      livemode: live,
      signal_id: s.id,
      created_at: s.ts,
      customer_id: customer.id,
      unit_id: unit ? unit.externalId : s.unitId,
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
    if (c.creditOverage) out.events.push(overageCreditEvent({ ...common, creditsCurrencyId: pool.creditsCurrencyId, consumption: c }));

    // Caps on the unit and its ancestors, in the attribute's credits currency.
    if (!unit || compare(credits, ZERO) <= 0) continue;
    const currency = attr.creditsCurrencyId;
    const seen = new Set<string>();
    for (let u: typeof unit | null = unit; u && !seen.has(u.externalId); u = u.parentExternalId !== null ? own(customer.units, u.parentExternalId) ?? null : null) {
      seen.add(u.externalId);
      const key = capKey(customer.id, u.externalId, currency);
      const cap = own(config.caps, key);
      if (!cap) continue;
      const period = periodContaining(cap.effectiveFrom, cap.frequency, s.ts);
      if (!period) continue;
      const periods = (state.caps[key] ??= {});
      const slot = periods[period.start] ?? { used: '0', reached: false };
      const amount = parseDecimal(cap.amount, { maxDecimalPlaces: 6 });
      const step = spendAgainstCap({ amount, usedBefore: big(slot.used), spend: credits, alreadyReached: slot.reached });
      periods[period.start] = { used: toCanonicalString(step.usedAfter), reached: slot.reached || step.reached };
      const starts = Object.keys(periods).sort();
      for (const old of starts.slice(0, Math.max(0, starts.length - CAP_PERIODS_KEPT))) delete periods[old];
      if (step.reached) {
        out.events.push(
          creditCapReachedEvent({
            organizationId: scope,
            customer: { id: customer.id, externalId: customer.externalId },
            cap: { creditsCurrencyId: cap.creditsCurrencyId, amount, frequency: cap.frequency, effectiveFrom: cap.effectiveFrom },
            breachedUnit: { externalId: u.externalId, externalType: u.externalType },
            period,
            step,
            at,
          }),
        );
      }
    }
  }
  return out;
}

/** A record's own entry: ids are the caller's (a unit may be called "constructor" or "__proto__"). */
function own<T>(record: Record<string, T>, key: string): T | undefined {
  return Object.hasOwn(record, key) ? record[key] : undefined;
}

/** A stored running total: exact, any number of places. */
function big(s: string): Dec {
  return parseDecimal(s, { maxDecimalPlaces: 1000, maxIntegerDigits: 1000, allowNegative: true });
}

/**
 * The signal's quantity under the attribute's rule (src/billing/quantity.ts), or why it has
 * none. `exact`: texts of numbers a double does not keep, by path.
 */
export function quantityOf(attr: OrderLineAttribute, data: Record<string, unknown>, exact?: Record<string, string> | false): QuantityResult {
  if (attr.quantity.kind === 'count') return { ok: true, quantity: decimalFromInteger(1) };
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
