/**
 * The billing events (spec section 6): ONE list, `EVENTS`, in the spec's order. Each entry
 * names an event and gives when it fires (one sentence), its sample payload (test deliveries) and, for the events other
 * billing components publish (operator API), the check of its `data`. The compiler holds each
 * entry to its payload type (`EventData`: the receiver package's types, spec 2.5–2.8, what
 * receivers read) and demands one entry per event name: adding an event is one entry here
 * (after its payload type in packages/receiver/src/events.ts).
 * Derived from it: `EVENT_NAMES` (webhook settings, the dispatcher, openapi),
 * `EXTERNAL_EVENT_NAMES` (operator API), `samplePayload`, the external check.
 *
 * The bus envelope: `BusEvent`, published to `topology.events.subject(org, mode, event)` with
 * Nats-Msg-Id = the event id (one copy per id within the stream's duplicate window).
 */
import { headers as natsHeaders } from '@nats-io/transport-node';
import type { WebhookEventData, WebhookEventName } from '../../packages/receiver/src/events.js';
import type { Nats } from './connection.js';
import { publishDurable, type DurableMessage, type PubAck } from './publish.js';
import { H_MODE, H_ORG } from './batch.js';
import { checkObject, checkPayment, primaryKey, sampleKit, type Obj, type SampleKit } from './event-payloads.js';
import type { Mode } from '../shared/mode.js';

export type EventName = WebhookEventName;
/** The `data` of event `E`. */
export type EventData<E extends EventName = EventName> = WebhookEventData[E];

interface EventSpec<E extends EventName> {
  /** When the event fires, as one sentence (spec section 6's table); the webhook list shows it. */
  description: string;
  /** Synthetic payload of a test delivery: the exact shape of the real event. */
  sample(k: SampleKit): EventData<E>;
  /**
   * Present for events published from outside (operator API): checks `data`, returns the id
   * of its object. Absent: only the billing engine produces the event.
   */
  external?: (data: Obj, event: string) => string;
}

const invoice = primaryKey('invoice', (o) => checkObject(o, 'invoice'));
const checkout = primaryKey('checkout', (o) => checkObject(o, 'checkout'));

export const EVENTS = {
  'billing-invoice-created': { description: 'Fires when a new invoice is created.', sample: (k) => ({ invoice: k.invoice(false) }), external: invoice },
  'billing-invoice-paid': { description: 'Fires when an invoice becomes fully paid.', sample: (k) => ({ invoice: k.invoice(true) }), external: invoice },
  'billing-checkout-created': { description: 'Fires when a checkout session is created.', sample: (k) => ({ checkout: k.checkout('open') }), external: checkout },
  'billing-checkout-completed': { description: 'Fires when a checkout payment completes.', sample: (k) => ({ checkout: k.checkout('complete') }), external: checkout },
  'billing-checkout-expired': { description: 'Fires when a checkout session expires.', sample: (k) => ({ checkout: k.checkout('expired') }), external: checkout },
  'billing-payment-succeeded': {
    description: 'Fires when a payment succeeds.',
    sample: (k) => ({ payment: { id: k.id('pay_test_'), invoiceId: k.id('inv_test_'), invoiceNumber: 'TEST-0001', customerId: k.customerId, customerName: k.customerName, amount: 12_500, currency: 'USD', status: 'posted', paymentDate: k.at, paymentType: 'card', externalPaymentId: null } }),
    external: primaryKey('payment', (p) => checkPayment(p, 'succeeded')),
  },
  'billing-payment-failed': {
    description: 'Fires when a payment attempt fails.',
    sample: (k) => ({ payment: { id: k.id('pay_test_'), invoiceId: null, invoiceNumber: null, customerId: k.customerId, customerName: k.customerName, amount: 12_500, currency: 'USD', status: 'failed', failureReason: 'Card declined (test)', failureDate: k.at, paymentType: 'card', externalPaymentId: null } }),
    external: primaryKey('payment', (p) => checkPayment(p, 'failed')),
  },
  'billing-credits-depleted': {
    description: 'Fires when a customer runs out of prepaid credits.',
    sample: (k) => ({ credits: { customerId: k.customerId, customerName: k.customerName, orderLineAttributeId: k.id('ola_test_'), creditsCurrencyId: '00000000-0000-4000-8000-000000000000', totalCredits: 100, remainingCredits: -0.5, usedCredits: 1.5, totalCreditsDecimal: '100', remainingCreditsDecimal: '-0.5', usedCreditsDecimal: '1.5', eventName: 'api_call', signalId: k.id('sig_test_'), depletedAt: k.at } }),
  },
  'billing-overage-incurred': {
    description: 'Fires when usage exceeds the included threshold, creating an overage condition.',
    sample: (k) => ({ overage: { customerId: k.customerId, customerName: k.customerName, planId: k.id('plan_test_'), planName: 'Test Plan', orderLineAttributeId: k.id('ola_test_'), eventType: 'OverageUsage', threshold: 1000, currentUsage: 1001, occurredAt: k.at } }),
  },
  'billing-credit-cap-reached': {
    description: 'Fires when the credits of one currency spent by a customer unit and everything under it reach the cap set on that unit (once per cap and period).',
    sample: (k) => ({
      customer: { id: k.customerId, externalId: 'test-customer' },
      cap: { creditsCurrencyId: '00000000-0000-4000-8000-000000000000', amount: 500, amountDecimal: '500', frequency: 'MONTHLY', effectiveFrom: '2026-01-01T00:00:00Z' },
      breachedUnit: { externalId: k.id('cu_test_'), externalType: 'team' },
      used: 500.25,
      usedDecimal: '500.25',
      period: { start: '2026-01-01T00:00:00Z', end: '2026-02-01T00:00:00Z' },
      detectedAt: k.at,
    }),
  },
} satisfies { [E in EventName]: EventSpec<E> };

const SPECS: { readonly [E in EventName]: EventSpec<E> } = EVENTS;

/** Every event name, in the spec's order. */
export const EVENT_NAMES = Object.keys(EVENTS) as EventName[];

export const isEventName = (x: string): x is EventName => Object.hasOwn(EVENTS, x);

/** The events other billing components publish (operator API). */
export const EXTERNAL_EVENT_NAMES = EVENT_NAMES.filter((e) => SPECS[e].external !== undefined);

/** The external check of event `e`'s data (returns its object's id), or null when only the billing engine produces it. */
export function externalCheck(e: EventName): ((data: Obj, event: string) => string) | null {
  return SPECS[e].external ?? null;
}

/** When `event` fires, as one sentence (spec section 6). */
export const eventDescription = (event: EventName): string => SPECS[event].description;

/** Synthetic payload of a test delivery of `event` (spec 4.4, 6 note 6). */
export function samplePayload<E extends EventName>(event: E, now = new Date()): EventData<E> {
  return SPECS[event].sample(sampleKit(now));
}

// ------------------------------------------------------------------ the bus envelope

/** An event as a producer emits it: the compiler matches `data` to `event`. */
export type Emitted<E extends EventName = EventName> = { [K in E]: { id: string; event: K; data: EventData<K> } }[E];

/** An event on the bus (`<P>_EVENTS`): what the dispatcher reads. */
export type BusEvent<E extends EventName = EventName> = {
  [K in E]: { id: string; event: K; organizationId: string; livemode: boolean; occurredAt: string; data: EventData<K> };
}[E];

/** Header of a re-published event: the delivery it resends (webhooks API → dispatcher). */
export const H_RESEND_OF = 'Billing-Resend-Of';

export function busEvent(e: Emitted, organizationId: string, mode: Mode, occurredAt: Date): BusEvent {
  return { id: e.id, event: e.event, organizationId, livemode: mode === 'live', occurredAt: occurredAt.toISOString(), data: e.data } as BusEvent;
}

/** Publishes one event durably under its id (a second publish of the same id within a day is stored once). */
export function publishEvent(nats: Nats, e: BusEvent, timeoutMs: number): Promise<PubAck> {
  const m = eventMessage(nats, e);
  return publishDurable(nats.nc, m.subject, m.data, m.headers, m.msgId, timeoutMs);
}

/** The bus message of event `e` (its id as Nats-Msg-Id), for publishDurable or publishDurableMany. */
export function eventMessage(nats: Nats, e: BusEvent): DurableMessage {
  const mode: Mode = e.livemode ? 'live' : 'test';
  const h = natsHeaders();
  h.set(H_ORG, e.organizationId);
  h.set(H_MODE, mode);
  const data = Buffer.from(JSON.stringify({ id: e.id, event: e.event, organizationId: e.organizationId, livemode: e.livemode, occurredAt: e.occurredAt, data: e.data }));
  return { subject: nats.topology.events.subject(e.organizationId, mode, e.event), data, headers: h, msgId: e.id };
}
