/**
 * Reading a verified body into a typed delivery (spec 2.4). Only call this after
 * `verifyWebhook` said ok: the checks here catch a body that is not what the service sends,
 * they do not authenticate anything.
 *
 * For a known event the fields the package relies on are checked (the primary object(s) of
 * spec 6 and the business ids `dedupeKey` reads); other fields are passed through as sent.
 * An unknown `event` is returned as such, for the caller to ignore (spec 6: new events may be
 * added).
 */
import { type UnknownWebhookEnvelope, type WebhookEvent, isWebhookEventName } from './events.js';

export type ParsedEnvelope =
  | { ok: true; known: true; envelope: WebhookEvent }
  | { ok: true; known: false; envelope: UnknownWebhookEnvelope }
  | { ok: false; detail: string };

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Per event: [object under data (null: data itself), required string fields]; [name, 'nullable'] may also be null. */
const REQUIRED: Record<string, [string | null, (string | [string, 'nullable'])[]][]> = {
  'billing-invoice-created': [['invoice', ['id']]],
  'billing-invoice-paid': [['invoice', ['id']]],
  'billing-checkout-created': [['checkout', ['id']]],
  'billing-checkout-completed': [['checkout', ['id']]],
  'billing-checkout-expired': [['checkout', ['id']]],
  'billing-payment-succeeded': [['payment', ['id']]],
  'billing-payment-failed': [['payment', ['id', 'failureDate']]],
  'billing-credits-depleted': [['credits', ['customerId', 'orderLineAttributeId', 'signalId', ['creditsCurrencyId', 'nullable'], 'totalCreditsDecimal', 'remainingCreditsDecimal', 'usedCreditsDecimal']]],
  'billing-overage-incurred': [['overage', ['orderLineAttributeId', 'eventType', 'occurredAt', ['customerId', 'nullable']]]],
  'billing-credit-cap-reached': [
    ['customer', ['id']],
    ['cap', ['creditsCurrencyId', 'amountDecimal']],
    ['breachedUnit', ['externalId', ['externalType', 'nullable']]],
    ['period', ['start', 'end']],
    [null, ['usedDecimal']],
  ],
};

/** Parses and checks a (verified) raw body. Never throws on bad input. */
export function parseEnvelope(rawBody: Uint8Array | string): ParsedEnvelope {
  let value: unknown;
  try {
    value = JSON.parse(typeof rawBody === 'string' ? rawBody : Buffer.from(rawBody.buffer, rawBody.byteOffset, rawBody.byteLength).toString('utf8'));
  } catch (err) {
    return { ok: false, detail: `the body is not JSON: ${(err as Error).message}` };
  }
  if (!isObj(value)) return { ok: false, detail: 'the body must be a JSON object {event, timestamp, isTest, data}' };
  const { event, timestamp, isTest, data } = value;
  if (typeof event !== 'string' || event === '') return { ok: false, detail: 'event must be a non-empty string' };
  if (typeof timestamp !== 'string') return { ok: false, detail: 'timestamp must be a string' };
  if (typeof isTest !== 'boolean') return { ok: false, detail: 'isTest must be a boolean' };
  if (!isObj(data)) return { ok: false, detail: 'data must be an object' };
  if (!isWebhookEventName(event)) return { ok: true, known: false, envelope: { event, timestamp, isTest, data } };
  for (const [path, fields] of REQUIRED[event]!) {
    const o = path === null ? data : data[path];
    const where = path === null ? 'data' : `data.${path}`;
    if (!isObj(o)) return { ok: false, detail: `${where} must be an object for ${event}` };
    for (const f of fields) {
      const [name, nullable] = typeof f === 'string' ? [f, false] : [f[0], true];
      const v = o[name];
      if (!(typeof v === 'string' || (nullable && v === null))) return { ok: false, detail: `${where}.${name} must be a string${nullable ? ' or null' : ''} for ${event}` };
    }
  }
  return { ok: true, known: true, envelope: { event, timestamp, isTest, data } as WebhookEvent };
}
