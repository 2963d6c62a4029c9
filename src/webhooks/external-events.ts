/**
 * Events of other billing components (payments, invoices, checkouts) onto the bus the
 * dispatcher reads. Two ways in:
 *   - the operator API: `POST /admin/v1/organizations/:id/events` with
 *     `{mode: "live"|"test", event, id?, data}` (OPERATOR_TOKEN), validated here;
 *   - publishing directly to JetStream subject `<NATS_PREFIX>.events.<orgId>.<mode>.<event>`
 *     with a `Nats-Msg-Id` and the body `{id, event, organizationId, livemode, occurredAt,
 *     data}` (what the billing evaluator publishes); such producers validate themselves.
 * `data` must have the event's primary key: `payment` (spec 2.5, checked field by field),
 * `invoice` or `checkout` (the shapes documented in samples.ts: id, customerId, status and
 * currency required). The event id defaults to `<event>:<object id>`, so the same payment
 * reported twice within a day is delivered once.
 */
import { headers as natsHeaders } from '@nats-io/transport-node';
import { ApiError } from '../errors.js';
import { parseRfc3339 } from '../shared/time.js';
import { publishDurable } from '../nats/publish.js';
import type { Nats } from '../nats/connection.js';
import { H_MODE, H_ORG } from '../pipeline/message.js';
import { isWebhookEvent } from './event-names.js';
import type { Mode } from '../shared/mode.js';

const bad = (field: string, what: string): ApiError => new ApiError('INVALID_EVENT', `${field}: ${what}`);
type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function str(o: Obj, path: string, key: string, opts: { nullable?: boolean; optional?: boolean } = {}): void {
  const v = o[key];
  if (v === undefined && opts.optional) return;
  if (v === null && (opts.nullable || opts.optional)) return;
  if (typeof v !== 'string' || v.length === 0 || v.length > 255) throw bad(`${path}.${key}`, `must be a string of 1 to 255 characters${opts.nullable ? ' or null' : ''}`);
}

function time(o: Obj, path: string, key: string): void {
  const v = o[key];
  if (typeof v !== 'string' || parseRfc3339(v) === null) throw bad(`${path}.${key}`, 'must be an RFC 3339 time');
}

/** Spec 2.5. */
export function validatePayment(p: unknown, event: 'billing-payment-succeeded' | 'billing-payment-failed'): void {
  if (!isObj(p)) throw bad('data.payment', 'must be an object');
  const path = 'data.payment';
  const allowed = new Set(['id', 'invoiceId', 'invoiceNumber', 'customerId', 'customerName', 'amount', 'currency', 'status', 'paymentDate', 'failureReason', 'failureDate', 'paymentType', 'externalPaymentId']);
  for (const k of Object.keys(p)) if (!allowed.has(k)) throw bad(`${path}.${k}`, 'is not a field of a payment (spec 2.5)');
  str(p, path, 'id');
  str(p, path, 'invoiceId', { nullable: true });
  str(p, path, 'invoiceNumber', { nullable: true });
  str(p, path, 'customerId');
  str(p, path, 'customerName', { nullable: true });
  if (typeof p.amount !== 'number' || !Number.isFinite(p.amount)) throw bad(`${path}.amount`, 'must be a number');
  if (typeof p.currency !== 'string' || !/^[A-Z]{3}$/.test(p.currency)) throw bad(`${path}.currency`, 'must be a three-letter currency code');
  str(p, path, 'paymentType');
  str(p, path, 'externalPaymentId', { nullable: true });
  if (event === 'billing-payment-succeeded') {
    if (p.status !== 'posted') throw bad(`${path}.status`, 'must be "posted" for billing-payment-succeeded');
    time(p, path, 'paymentDate');
    if (p.failureReason !== undefined || p.failureDate !== undefined) throw bad(`${path}.failureDate`, 'only failed payments have failure fields');
  } else {
    if (p.status !== 'failed') throw bad(`${path}.status`, 'must be "failed" for billing-payment-failed');
    time(p, path, 'failureDate');
    if (p.failureReason !== undefined && typeof p.failureReason !== 'string') throw bad(`${path}.failureReason`, 'must be a string when present');
    if (p.paymentDate !== undefined) throw bad(`${path}.paymentDate`, 'only successful payments have a paymentDate');
  }
}

function validateObject(o: unknown, key: 'invoice' | 'checkout'): void {
  if (!isObj(o)) throw bad(`data.${key}`, 'must be an object');
  str(o, `data.${key}`, 'id');
  str(o, `data.${key}`, 'customerId');
  str(o, `data.${key}`, 'status');
  if (typeof o.currency !== 'string' || !/^[A-Z]{3}$/.test(o.currency)) throw bad(`data.${key}.currency`, 'must be a three-letter currency code');
}

const PRIMARY: Record<string, 'payment' | 'invoice' | 'checkout'> = {
  'billing-payment-succeeded': 'payment',
  'billing-payment-failed': 'payment',
  'billing-invoice-created': 'invoice',
  'billing-invoice-paid': 'invoice',
  'billing-checkout-created': 'checkout',
  'billing-checkout-completed': 'checkout',
  'billing-checkout-expired': 'checkout',
};

export interface ExternalEvent {
  id: string;
  event: string;
  mode: Mode;
  data: Obj;
}

export function validateExternalEvent(body: unknown): ExternalEvent {
  if (!isObj(body)) throw new ApiError('INVALID_BODY', 'the body must be a JSON object {mode, event, id?, data}');
  for (const k of Object.keys(body)) if (!['mode', 'event', 'id', 'data'].includes(k)) throw new ApiError('INVALID_BODY', `unknown field "${k}"`);
  if (body.mode !== 'live' && body.mode !== 'test') throw bad('mode', 'must be "live" or "test"');
  if (typeof body.event !== 'string' || !isWebhookEvent(body.event)) throw bad('event', 'must be one of the webhook event names');
  const key = PRIMARY[body.event];
  if (!key) throw bad('event', `${body.event} is produced by the billing engine itself, not published from outside`);
  if (!isObj(body.data)) throw bad('data', 'must be an object');
  const extra = Object.keys(body.data).filter((k) => k !== key);
  if (extra.length > 0) throw bad(`data.${extra[0]}`, `the data of ${body.event} is {${key}}`);
  if (key === 'payment') validatePayment(body.data.payment, body.event as 'billing-payment-succeeded' | 'billing-payment-failed');
  else validateObject(body.data[key], key);
  const objectId = (body.data[key] as Obj).id as string;
  if (body.id !== undefined && (typeof body.id !== 'string' || !/^[A-Za-z0-9._:-]{1,200}$/.test(body.id))) throw bad('id', 'letters, digits, ".", "_", ":" or "-", 1 to 200 characters');
  return { id: (body.id as string | undefined) ?? `${body.event}:${objectId}`, event: body.event, mode: body.mode, data: body.data };
}

export async function publishExternalEvent(nats: Nats, eventSubjectPrefix: string, orgId: string, e: ExternalEvent, timeoutMs: number): Promise<{ duplicate: boolean }> {
  const h = natsHeaders();
  h.set(H_ORG, orgId);
  h.set(H_MODE, e.mode);
  const body = Buffer.from(JSON.stringify({ id: e.id, event: e.event, organizationId: orgId, livemode: e.mode === 'live', occurredAt: new Date().toISOString(), data: e.data }));
  const ack = await publishDurable(nats.nc, `${eventSubjectPrefix}.${orgId}.${e.mode}.${e.event}`, body, h, e.id, timeoutMs);
  return { duplicate: ack.duplicate === true };
}
