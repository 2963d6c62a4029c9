/**
 * The ten webhook events of spec section 6 and the types of their deliveries: the envelope of
 * spec 2.4 as a discriminated union on `event`, with the `data` of each event (2.5–2.8).
 *
 * `invoice` and `checkout` objects are not shown by the spec (section 6 note 2): they are typed
 * as open records with the fields this service always sends (`id`, `customerId`, `status`,
 * `currency`, checked when another billing component publishes them); the service's own
 * shapes are listed in this package's README. Read anything else as `unknown` and check it.
 *
 * Numbers: JSON numbers arrive as doubles. Credit quantities have exact `*Decimal` twins;
 * read them with ./decimal.ts, never the doubles, for anything that adds up money.
 */

/** The ten event names of spec section 6, in the spec's order. */
export const WEBHOOK_EVENTS = [
  'billing-invoice-created',
  'billing-invoice-paid',
  'billing-checkout-created',
  'billing-checkout-completed',
  'billing-checkout-expired',
  'billing-payment-succeeded',
  'billing-payment-failed',
  'billing-credits-depleted',
  'billing-overage-incurred',
  'billing-credit-cap-reached',
] as const;

export type WebhookEventName = (typeof WEBHOOK_EVENTS)[number];

export const isWebhookEventName = (x: unknown): x is WebhookEventName => typeof x === 'string' && (WEBHOOK_EVENTS as readonly string[]).includes(x);

/** An RFC 3339 time, as sent (e.g. `2026-01-31T23:59:59Z`). */
export type Rfc3339 = string;

/** A decimal in plain notation (`-0.5`, `100`, `12345678901234567890.000001`): exact, never a double. */
export type DecimalString = string;

/** Spec 2.5, common to both payment events. */
interface PaymentCommon {
  id: string;
  /** null when the payment is not linked to an invoice. */
  invoiceId: string | null;
  invoiceNumber: string | null;
  customerId: string;
  customerName: string | null;
  /** Unit not stated by the spec (section 6 note 5). */
  amount: number;
  /** Currency code. */
  currency: string;
  /** Values beyond those named by the spec: not shown (section 6 note 4). */
  paymentType: string;
  /** null when there is no upstream processor reference. */
  externalPaymentId: string | null;
}

/** `data.payment` of `billing-payment-succeeded`. */
export interface SucceededPayment extends PaymentCommon {
  status: 'posted';
  paymentDate: Rfc3339;
}

/** `data.payment` of `billing-payment-failed`. */
export interface FailedPayment extends PaymentCommon {
  status: 'failed';
  /** Human-readable; when unavailable it may be absent or empty. */
  failureReason?: string;
  failureDate: Rfc3339;
}

/** Spec 2.6: `data.credits` of `billing-credits-depleted`. */
export interface CreditsDepleted {
  customerId: string;
  customerName: string | null;
  orderLineAttributeId: string;
  /** null if the depleted balance is not scoped to a credits currency. */
  creditsCurrencyId: string | null;
  /** Pool total (nearest double: use `totalCreditsDecimal`). */
  totalCredits: number;
  /** Remainder at depletion; 0 for exact depletion, negative when the depleting spend overshot. */
  remainingCredits: number;
  /** Consumed by the depleting signal alone, not cumulative. */
  usedCredits: number;
  totalCreditsDecimal: DecimalString;
  remainingCreditsDecimal: DecimalString;
  usedCreditsDecimal: DecimalString;
  /** Event name of the signal that consumed the final credits. */
  eventName: string;
  /** The signal that took the balance to zero or below. */
  signalId: string;
  depletedAt: Rfc3339;
}

/** Spec 2.7: `data.overage` of `billing-overage-incurred`. */
export interface OverageIncurred {
  customerId: string | null;
  customerName: string | null;
  planId: string;
  planName: string | null;
  orderLineAttributeId: string;
  eventType: 'OverageUsage' | 'OverageCredit';
  /** The included usage limit that was crossed (no decimal twin in the spec). */
  threshold: number | null;
  /** Usage observed when the overage was detected (no decimal twin in the spec). */
  currentUsage: number | null;
  occurredAt: Rfc3339;
}

/** Cap frequencies this service uses; the spec names only MONTHLY and lets others appear. */
export type CapFrequency = 'DAILY' | 'WEEKLY' | 'MONTHLY' | 'QUARTERLY' | 'YEARLY' | (string & {});

/** Spec 2.8: the whole `data` of `billing-credit-cap-reached`. Caps have no id of their own. */
export interface CreditCapReached {
  customer: { id: string; externalId: string | null };
  cap: {
    /** UUID. */
    creditsCurrencyId: string;
    amount: number;
    amountDecimal: DecimalString;
    frequency: CapFrequency;
    /** Anchor of the cap's periods. */
    effectiveFrom: Rfc3339;
  };
  breachedUnit: { externalId: string; externalType: string | null };
  /** Spend in `period` at detection; may exceed `cap.amount`. */
  used: number;
  usedDecimal: DecimalString;
  /** `start` inclusive, `end` exclusive. */
  period: { start: Rfc3339; end: Rfc3339 };
  detectedAt: Rfc3339;
}

/** `data.invoice` (fields not shown by the spec: an open record). */
export interface Invoice {
  id: string;
  customerId: string;
  status: string;
  currency: string;
  readonly [field: string]: unknown;
}

/** `data.checkout` (fields not shown by the spec: an open record). */
export interface Checkout {
  id: string;
  customerId: string;
  status: string;
  currency: string;
  readonly [field: string]: unknown;
}

/** The `data` of each event. */
export interface WebhookEventData {
  'billing-invoice-created': { invoice: Invoice };
  'billing-invoice-paid': { invoice: Invoice };
  'billing-checkout-created': { checkout: Checkout };
  'billing-checkout-completed': { checkout: Checkout };
  'billing-checkout-expired': { checkout: Checkout };
  'billing-payment-succeeded': { payment: SucceededPayment };
  'billing-payment-failed': { payment: FailedPayment };
  'billing-credits-depleted': { credits: CreditsDepleted };
  'billing-overage-incurred': { overage: OverageIncurred };
  'billing-credit-cap-reached': CreditCapReached;
}

/** Spec 2.4: one delivery of event `E`. */
export interface WebhookEnvelope<E extends WebhookEventName = WebhookEventName> {
  event: E;
  /** When the delivery was created (RFC 3339); the same on every attempt and resend. Not an identity: never deduplicate by it. */
  timestamp: Rfc3339;
  /** true for test deliveries (synthetic ids such as `pay_test_…`). */
  isTest: boolean;
  data: WebhookEventData[E];
}

/** Any known event: `switch (e.event)` narrows `e.data`. */
export type WebhookEvent = { [E in WebhookEventName]: WebhookEnvelope<E> }[WebhookEventName];

/** A delivery whose `event` this version of the package does not know (spec 6: ignore it). */
export interface UnknownWebhookEnvelope {
  event: string;
  timestamp: string;
  isTest: boolean;
  data: Record<string, unknown>;
}
