/**
 * Builders of the three billing events of spec section 6, from the outcomes of the rules in
 * credits.ts, overage.ts and caps.ts. Each returns `{ id, event, data }`: `data` is exactly
 * the envelope's `data` of spec 2.4 (keys and field sets of sections 2.6, 2.7 and 2.8,
 * nothing more), `id` the deterministic id (event-id.ts) under which it is published.
 * The delivery envelope (`timestamp`, `isTest`) is the dispatcher's business, not this one's.
 *
 * - Numbers and their `*Decimal` twins come from one exact decimal: the string is the
 *   canonical decimal (exact at any magnitude), the number the nearest double to it
 *   (decimal.ts). Section 2.7 has no decimal twins, so `threshold`/`currentUsage` are
 *   numbers only (nearest doubles).
 * - Times (`depletedAt`, `occurredAt`, `detectedAt`) are the `at` the caller passes, in
 *   canonical RFC 3339 UTC. Pass a time fixed by the signal (its timestamp, or the time it
 *   was accepted) rather than the clock at evaluation, so a re-evaluation after a crash
 *   builds the same payload as well as the same id. `cap.effectiveFrom` is canonicalized
 *   the same way.
 * - A builder refuses (`Error`) an outcome whose rule did not fire, and a cap period that
 *   is not a period of the cap, so an event can only be built for a real crossing.
 *
 * Ids (the parts that identify the crossing, in this order; a credits currency id, a UUID,
 * enters in lower case so that its spelling does not change the id):
 * - credits depleted: organization, event, customer, order line attribute, credits currency
 *   (or null), signal. A pool depletes at most once per signal; it can deplete again only
 *   after a top-up, on another signal, which gives another id.
 * - overage: organization, event, eventType, customer (or null), order line attribute, credits
 *   currency (OverageCredit only; null for OverageUsage), signal.
 * - cap reached: organization, event, customer, unit externalType (or null), unit externalId,
 *   credits currency, period start, period end. No signal: whichever signal reaches the cap,
 *   there is one id per cap and period, so "once per cap and period" survives even a
 *   re-evaluation in another order.
 */
import { type Dec, compare, toCanonicalString, toJsonNumber } from './decimal.js';
import { type Instant, formatUtcInstant, toEpochMs } from './instant.js';
import { type Frequency, type Period, isFrequency, nthPeriod } from './periods.js';
import { type Consumption, consumedCredits } from './credits.js';
import type { UsageStep } from './overage.js';
import type { CapStep } from './caps.js';
import { deterministicEventId } from './event-id.js';
import type { CreditCapReached, CreditsDepleted, OverageIncurred } from '../../packages/receiver/src/events.js';

export const CREDITS_DEPLETED = 'billing-credits-depleted';
export const OVERAGE_INCURRED = 'billing-overage-incurred';
export const CREDIT_CAP_REACHED = 'billing-credit-cap-reached';

export interface BillingEvent<E extends string, D> {
  /** Deterministic id: publish under it (e.g. as Nats-Msg-Id) so a duplicate is dropped. */
  readonly id: string;
  readonly event: E;
  /** The envelope's `data`. */
  readonly data: D;
}

// ------------------------------------------------------------------ 2.6 credits depleted

/** Spec 2.6 (the receiver package's type: what the service builds is what receivers read). */
export type CreditsPayload = CreditsDepleted;

export interface CreditsDepletedInput {
  organizationId: string;
  customerId: string;
  customerName: string | null;
  orderLineAttributeId: string;
  creditsCurrencyId: string | null;
  /** The event name of the signal that consumed the final credits. */
  eventName: string;
  signalId: string;
  /** From `consume()`; must have `depleted`. */
  consumption: Consumption;
  /** The `depletedAt` time (see the header). */
  at: Instant;
}

/** Both the exact string and the nearest double of one decimal. */
function twin(d: Dec): { n: number; s: string } {
  return { n: toJsonNumber(d), s: toCanonicalString(d) };
}

export function creditsDepletedEvent(input: CreditsDepletedInput): BillingEvent<typeof CREDITS_DEPLETED, { credits: CreditsPayload }> {
  const { consumption: c } = input;
  if (!c.depleted) throw new Error('creditsDepletedEvent: this consumption did not deplete the pool');
  const total = twin(c.after.total);
  const remaining = twin(c.after.balance);
  const used = twin(c.used);
  const credits: CreditsPayload = {
    customerId: input.customerId,
    customerName: input.customerName,
    orderLineAttributeId: input.orderLineAttributeId,
    creditsCurrencyId: input.creditsCurrencyId,
    totalCredits: total.n,
    remainingCredits: remaining.n,
    usedCredits: used.n,
    totalCreditsDecimal: total.s,
    remainingCreditsDecimal: remaining.s,
    usedCreditsDecimal: used.s,
    eventName: input.eventName,
    signalId: input.signalId,
    depletedAt: formatUtcInstant(toEpochMs(input.at, 'depletedAt')),
  };
  const id = deterministicEventId([
    input.organizationId,
    CREDITS_DEPLETED,
    input.customerId,
    input.orderLineAttributeId,
    input.creditsCurrencyId?.toLowerCase() ?? null,
    input.signalId,
  ]);
  return { id, event: CREDITS_DEPLETED, data: { credits } };
}

// ------------------------------------------------------------------ 2.7 overage incurred

export type OverageEventType = OverageIncurred['eventType'];

/** Spec 2.7 (the receiver package's type). */
export type OveragePayload = OverageIncurred;

export interface OverageInputCommon {
  organizationId: string;
  customerId: string | null;
  customerName: string | null;
  planId: string;
  planName: string | null;
  orderLineAttributeId: string;
  signalId: string;
  /** The `occurredAt` time (see the header). */
  at: Instant;
}

type OverageEvent = BillingEvent<typeof OVERAGE_INCURRED, { overage: OveragePayload }>;

function overageEvent(
  input: OverageInputCommon,
  eventType: OverageEventType,
  threshold: Dec,
  currentUsage: Dec,
  creditsCurrencyId: string | null,
): OverageEvent {
  const overage: OveragePayload = {
    customerId: input.customerId,
    customerName: input.customerName,
    planId: input.planId,
    planName: input.planName,
    orderLineAttributeId: input.orderLineAttributeId,
    eventType,
    threshold: toJsonNumber(threshold),
    currentUsage: toJsonNumber(currentUsage),
    occurredAt: formatUtcInstant(toEpochMs(input.at, 'occurredAt')),
  };
  const id = deterministicEventId([
    input.organizationId,
    OVERAGE_INCURRED,
    eventType,
    input.customerId,
    input.orderLineAttributeId,
    creditsCurrencyId?.toLowerCase() ?? null,
    input.signalId,
  ]);
  return { id, event: OVERAGE_INCURRED, data: { overage } };
}

/** OverageUsage: threshold = included quantity, currentUsage = cumulative usage after the signal. */
export function overageUsageEvent(input: OverageInputCommon & { usage: UsageStep }): OverageEvent {
  const { usage } = input;
  if (!usage.crossed || usage.included === null) throw new Error('overageUsageEvent: this usage did not cross the included quantity');
  return overageEvent(input, 'OverageUsage', usage.included, usage.after, null);
}

/** OverageCredit: threshold = pool total, currentUsage = credits consumed from the pool so far. */
export function overageCreditEvent(
  input: OverageInputCommon & { creditsCurrencyId: string | null; consumption: Consumption },
): OverageEvent {
  const { consumption: c } = input;
  if (!c.creditOverage) throw new Error('overageCreditEvent: this consumption did not go past the pool');
  return overageEvent(input, 'OverageCredit', c.after.total, consumedCredits(c.after), input.creditsCurrencyId);
}

// ------------------------------------------------------------------ 2.8 credit cap reached

/** Spec 2.8: the whole `data` (the receiver package's type, with this service's frequencies). */
export type CreditCapReachedData = CreditCapReached & { cap: { frequency: Frequency } };

export interface CapConfig {
  creditsCurrencyId: string;
  amount: Dec;
  frequency: Frequency;
  effectiveFrom: Instant;
}

export interface CreditCapReachedInput {
  organizationId: string;
  customer: { id: string; externalId: string | null };
  /** The cap that was reached (its amount must be the one `step` was evaluated with). */
  cap: CapConfig;
  /** The unit the cap is set on. */
  breachedUnit: { externalId: string; externalType: string | null };
  /** The cap period the spend counted in (from `periodContaining`). */
  period: Period;
  /** From `spendAgainstCap()`; must have `reached`. */
  step: CapStep;
  /** The `detectedAt` time (see the header). */
  at: Instant;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function creditCapReachedEvent(input: CreditCapReachedInput): BillingEvent<typeof CREDIT_CAP_REACHED, CreditCapReachedData> {
  const { cap, step, period } = input;
  if (!step.reached) throw new Error('creditCapReachedEvent: this spend did not reach the cap');
  if (!UUID.test(cap.creditsCurrencyId)) throw new Error(`creditCapReachedEvent: creditsCurrencyId is not a UUID: ${cap.creditsCurrencyId}`);
  if (!isFrequency(cap.frequency)) throw new Error(`creditCapReachedEvent: unknown frequency ${String(cap.frequency)}`);
  if (compare(step.amount, cap.amount) !== 0) throw new Error('creditCapReachedEvent: the step was evaluated against another amount');
  const expected = nthPeriod(cap.effectiveFrom, cap.frequency, period.index);
  if (expected.startMs !== period.startMs || expected.endMs !== period.endMs) {
    throw new Error(`creditCapReachedEvent: [${period.start}, ${period.end}) is not a period of this cap`);
  }
  const amount = twin(cap.amount);
  const used = twin(step.usedAfter);
  const data: CreditCapReachedData = {
    customer: { id: input.customer.id, externalId: input.customer.externalId },
    cap: {
      creditsCurrencyId: cap.creditsCurrencyId,
      amount: amount.n,
      amountDecimal: amount.s,
      frequency: cap.frequency,
      effectiveFrom: formatUtcInstant(toEpochMs(cap.effectiveFrom, 'effectiveFrom')),
    },
    breachedUnit: { externalId: input.breachedUnit.externalId, externalType: input.breachedUnit.externalType },
    used: used.n,
    usedDecimal: used.s,
    period: { start: expected.start, end: expected.end },
    detectedAt: formatUtcInstant(toEpochMs(input.at, 'detectedAt')),
  };
  const id = deterministicEventId([
    input.organizationId,
    CREDIT_CAP_REACHED,
    input.customer.id,
    input.breachedUnit.externalType,
    input.breachedUnit.externalId,
    cap.creditsCurrencyId.toLowerCase(),
    expected.start,
    expected.end,
  ]);
  return { id, event: CREDIT_CAP_REACHED, data };
}
