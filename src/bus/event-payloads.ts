/**
 * The pieces the event list (events.ts) is built from: synthetic payloads for test
 * deliveries (spec 4.4, 6 note 6) and the checks of payloads published from outside.
 *
 * Samples have the exact shapes of the real events (2.5–2.8), test-prefixed identifiers
 * (`pay_test_`, `cus_test_`, `cu_test_`, `ola_test_`, `plan_test_`, `inv_test_`, `chk_test_`)
 * and fixed example values. The spec does not show `invoice` and `checkout` objects; this
 * service defines them:
 *   invoice  {id, number, customerId, customerName, status: "open" | "paid", currency,
 *            subtotal, total, amountDue, amountPaid (minor units, integers), periodStart,
 *            periodEnd, issuedAt, dueAt, paidAt (null until paid),
 *            lines: [{orderLineAttributeId, planId, description, quantity, unitPrice, amount}]}
 *   checkout {id, customerId, customerName, status: "open" | "complete" | "expired", currency,
 *            amount (minor units), url, createdAt, expiresAt, completedAt, expiredAt,
 *            paymentId (set when complete)}
 * From outside, `payment` is checked field by field (spec 2.5); `invoice` and `checkout` need
 * id, customerId, status and currency.
 */
import { randomBytes } from 'node:crypto';
import { ApiError } from '../errors.js';
import { parseRfc3339 } from '../shared/time.js';
import type { Checkout, Invoice } from '../../packages/receiver/src/events.js';

// ------------------------------------------------------------------ samples

/** What every sample of one test delivery shares: one time, one customer. */
export interface SampleKit {
  at: string;
  customerId: string;
  customerName: string;
  id(prefix: string): string;
  invoice(paid: boolean): Invoice;
  checkout(status: 'open' | 'complete' | 'expired'): Checkout;
}

export function sampleKit(now: Date): SampleKit {
  const at = now.toISOString().replace(/\.\d{3}Z$/, 'Z');
  const id = (prefix: string): string => `${prefix}${randomBytes(9).toString('base64url')}`;
  const customerId = id('cus_test_');
  const customerName = 'Test Customer';
  return {
    at,
    customerId,
    customerName,
    id,
    invoice: (paid) => ({
      id: id('inv_test_'),
      number: 'TEST-0001',
      customerId,
      customerName,
      status: paid ? 'paid' : 'open',
      currency: 'USD',
      subtotal: 12_500,
      total: 12_500,
      amountDue: paid ? 0 : 12_500,
      amountPaid: paid ? 12_500 : 0,
      periodStart: '2026-01-01T00:00:00Z',
      periodEnd: '2026-02-01T00:00:00Z',
      issuedAt: at,
      dueAt: '2026-02-15T00:00:00Z',
      paidAt: paid ? at : null,
      lines: [{ orderLineAttributeId: id('ola_test_'), planId: id('plan_test_'), description: 'API calls', quantity: '10000', unitPrice: '1.25', amount: 12_500 }],
    }),
    checkout: (status) => ({
      id: id('chk_test_'),
      customerId,
      customerName,
      status,
      currency: 'USD',
      amount: 5_000,
      url: 'https://checkout.example.com/test',
      createdAt: at,
      expiresAt: '2026-12-31T00:00:00Z',
      completedAt: status === 'complete' ? at : null,
      expiredAt: status === 'expired' ? at : null,
      paymentId: status === 'complete' ? id('pay_test_') : null,
    }),
  };
}

// ------------------------------------------------------------------ checks

export type Obj = Record<string, unknown>;
export const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
export const invalidEvent = (field: string, what: string): ApiError => new ApiError('INVALID_EVENT', `${field}: ${what}`);
const bad = invalidEvent;

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

const currency = (o: Obj, path: string): void => {
  if (typeof o.currency !== 'string' || !/^[A-Z]{3}$/.test(o.currency)) throw bad(`${path}.currency`, 'must be a three-letter currency code');
};

/** Spec 2.5. */
export function checkPayment(p: unknown, outcome: 'succeeded' | 'failed'): void {
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
  currency(p, path);
  str(p, path, 'paymentType');
  str(p, path, 'externalPaymentId', { nullable: true });
  if (outcome === 'succeeded') {
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

/** `invoice` and `checkout`: the fields this service always sends. */
export function checkObject(o: unknown, key: 'invoice' | 'checkout'): void {
  if (!isObj(o)) throw bad(`data.${key}`, 'must be an object');
  str(o, `data.${key}`, 'id');
  str(o, `data.${key}`, 'customerId');
  str(o, `data.${key}`, 'status');
  currency(o, `data.${key}`);
}

/**
 * The check of an event whose `data` is `{<key>: object}`: no other key, the object checked
 * by `check`. Returns the object's id (the default event id is `<event>:<object id>`).
 */
export function primaryKey(key: string, check: (o: unknown) => void): (data: Obj, event: string) => string {
  return (data, event) => {
    const extra = Object.keys(data).filter((k) => k !== key);
    if (extra.length > 0) throw bad(`data.${extra[0]}`, `the data of ${event} is {${key}}`);
    check(data[key]);
    return (data[key] as Obj).id as string;
  };
}
