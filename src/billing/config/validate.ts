/**
 * Strict validation of billing configuration requests. Every refusal is an ApiError whose
 * `details` start with the name of the field (`unitPrice: has 13 decimal places; …`):
 *   INVALID_JSON            body empty (where one is required) or not JSON
 *   INVALID_BODY            body not a JSON object, or a field the operation does not know
 *   INVALID_BILLING_CONFIG  a missing or bad field value, or a bad path parameter
 *
 * Amounts are decimal strings, never JSON numbers (a number such as 0.1 is not exact once
 * parsed); they are stored in canonical form (src/billing/decimal.ts: "1.50" → "1.5").
 */
import { ApiError } from '../../errors.js';
import type { Request } from '../../http/route.js';
import { parseJson } from '../../http/json.js';
import { DecimalError, parseDecimal, sign, toCanonicalString } from '../decimal.js';
import { InstantError, formatUtcInstant, parseUtcInstant } from '../instant.js';
import { FREQUENCIES, isFrequency, type Frequency } from '../periods.js';
import type { QuantityRule } from '../model.js';

export const MAX_TEXT = 255;
/** Decimal places of credit amounts (pools, top-ups, caps, credits per unit). */
export const CREDIT_PLACES = 6;
/** Decimal places of unit prices and included quantities. */
export const PRICE_PLACES = 12;
/** Segments of a quantity path (the depth limit of signal data). */
export const MAX_PATH_SEGMENTS = 10;

export type Obj = Record<string, unknown>;

export const bad = (field: string, what: string): ApiError => new ApiError('INVALID_BILLING_CONFIG', `${field}: ${what}`);

/**
 * The JSON object body of a request with only the `allowed` fields. An empty body is `{}`
 * when `emptyIsObject` (every field optional), else INVALID_JSON.
 */
export function readObject(req: Request, allowed: readonly string[], emptyIsObject = false): Obj {
  if (emptyIsObject && req.body.length === 0) return {};
  const body = parseJson(req.body);
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new ApiError('INVALID_BODY', `body: must be a JSON object${allowed.length ? ` with ${allowed.join(', ')}` : ''}`);
  }
  for (const k of Object.keys(body)) {
    if (!allowed.includes(k)) throw new ApiError('INVALID_BODY', `${k}: unknown field; allowed: ${allowed.join(', ')}`);
  }
  return body as Obj;
}

/** A string of 1 to 255 characters of well-formed Unicode. */
export function text(v: unknown, field: string): string {
  if (typeof v !== 'string') throw bad(field, `must be a string, got ${kind(v)}`);
  if (v.length === 0) throw bad(field, 'must not be empty');
  if (v.length > MAX_TEXT) throw bad(field, `must be at most ${MAX_TEXT} characters, got ${v.length}`);
  if (!v.isWellFormed()) throw bad(field, 'must be well-formed Unicode (no lone surrogates)');
  return v;
}

/** `text`, or null when absent or null. */
export function optionalText(v: unknown, field: string): string | null {
  return v === undefined || v === null ? null : text(v, field);
}

export function required(body: Obj, field: string): unknown {
  const v = body[field];
  if (v === undefined || v === null) throw bad(field, 'is required');
  return v;
}

const kind = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

/**
 * A decimal string ≥ 0 (or > 0 when `positive`) with at most `places` decimal places, in
 * canonical form.
 */
export function decimalString(v: unknown, field: string, places: number, positive = false): string {
  if (typeof v === 'number') {
    throw bad(field, `must be a decimal string such as "${String(v)}", not a JSON number (strings are exact)`);
  }
  let d;
  try {
    d = parseDecimal(v, { maxDecimalPlaces: places });
  } catch (err) {
    if (err instanceof DecimalError) throw bad(field, err.message.replace(/^value /, ''));
    throw err;
  }
  if (positive && sign(d) === 0) throw bad(field, 'must be greater than 0');
  return toCanonicalString(d);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A UUID (8-4-4-4-12 hex digits, any version), returned in lower case. */
export function uuid(v: unknown, field: string): string {
  if (typeof v !== 'string' || !UUID.test(v)) {
    throw bad(field, `must be a UUID such as "0b7e4f4e-6d5c-4c0e-9a53-5e1d3b2a1c00", got ${JSON.stringify(v)}`);
  }
  return v.toLowerCase();
}

export function currency(v: unknown, field: string): string {
  if (typeof v !== 'string' || !/^[A-Z]{3}$/.test(v)) throw bad(field, `must be an ISO 4217 code of three upper-case letters such as "USD", got ${JSON.stringify(v)}`);
  return v;
}

export function frequency(v: unknown, field: string): Frequency {
  if (!isFrequency(v)) throw bad(field, `must be one of ${FREQUENCIES.join(', ')}, got ${JSON.stringify(v)}`);
  return v;
}

/** An RFC 3339 UTC instant, returned in canonical form (src/billing/instant.ts). */
export function utcInstant(v: unknown, field: string): string {
  try {
    return formatUtcInstant(parseUtcInstant(v));
  } catch (err) {
    if (err instanceof InstantError) throw bad(field, err.message.replace(/^instant /, ''));
    throw err;
  }
}

/** `{"kind":"count"}` (the default) or `{"kind":"path","path":"a.b"}`. */
export function quantityRule(v: unknown, field: string): QuantityRule {
  if (v === undefined || v === null) return { kind: 'count' };
  if (typeof v !== 'object' || Array.isArray(v)) throw bad(field, 'must be {"kind":"count"} or {"kind":"path","path":"a.b"}');
  const o = v as Obj;
  if (o.kind === 'count') {
    for (const k of Object.keys(o)) if (k !== 'kind') throw new ApiError('INVALID_BODY', `${field}.${k}: unknown field; allowed: kind`);
    return { kind: 'count' };
  }
  if (o.kind === 'path') {
    for (const k of Object.keys(o)) if (k !== 'kind' && k !== 'path') throw new ApiError('INVALID_BODY', `${field}.${k}: unknown field; allowed: kind, path`);
    if (o.path === undefined || o.path === null) throw bad(`${field}.path`, 'is required');
    const path = text(o.path, `${field}.path`);
    const segments = path.split('.');
    if (segments.some((s) => s.length === 0)) throw bad(`${field}.path`, `must be dot-separated non-empty keys such as "usage.tokens", got ${JSON.stringify(path)}`);
    if (segments.length > MAX_PATH_SEGMENTS) throw bad(`${field}.path`, `must have at most ${MAX_PATH_SEGMENTS} segments (the nesting limit of signal data)`);
    return { kind: 'path', path };
  }
  throw bad(`${field}.kind`, `must be "count" or "path", got ${JSON.stringify(o.kind)}`);
}


/** A string of at most `max` characters of well-formed Unicode, "" allowed (null and absent: ""). */
export function plainText(v: unknown, field: string, max = MAX_TEXT): string {
  if (v === undefined || v === null) return '';
  if (typeof v !== 'string') throw bad(field, `must be a string, got ${kind(v)}`);
  if (v.length > max) throw bad(field, `must be at most ${max} characters, got ${v.length}`);
  if (!v.isWellFormed()) throw bad(field, 'must be well-formed Unicode (no lone surrogates)');
  return v;
}

/** An e-mail address (something@somewhere), or "" for none. */
export function email(v: unknown, field: string): string {
  const s = plainText(v, field);
  if (s !== '' && !/^[^\s@]+@[^\s@]+$/.test(s)) throw bad(field, `must be an e-mail address such as "billing@example.com" (or "" for none), got ${JSON.stringify(s)}`);
  return s;
}

/** Largest `metadata` object, as UTF-8 JSON. */
export const MAX_METADATA_BYTES = 16 * 1024;

/** A JSON object of at most MAX_METADATA_BYTES, or null. */
export function metadata(v: unknown, field: string): Record<string, unknown> | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'object' || Array.isArray(v)) throw bad(field, `must be a JSON object or null, got ${kind(v)}`);
  const bytes = Buffer.byteLength(JSON.stringify(v), 'utf8');
  if (bytes > MAX_METADATA_BYTES) throw bad(field, `must be at most ${MAX_METADATA_BYTES} bytes of JSON, got ${bytes}`);
  return v as Record<string, unknown>;
}

export const ADDRESS_FIELDS = ['line1', 'line2', 'city', 'state', 'zipCode', 'country'] as const;

/** A postal address: an object of the ADDRESS_FIELDS, each a string; or null. */
export function billingAddress(v: unknown, field: string): Partial<Record<(typeof ADDRESS_FIELDS)[number], string>> | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'object' || Array.isArray(v)) throw bad(field, `must be an object with ${ADDRESS_FIELDS.join(', ')} (each optional) or null, got ${kind(v)}`);
  const out: Partial<Record<(typeof ADDRESS_FIELDS)[number], string>> = {};
  for (const [k, x] of Object.entries(v as Obj)) {
    if (!(ADDRESS_FIELDS as readonly string[]).includes(k)) throw new ApiError('INVALID_BODY', `${field}.${k}: unknown field; allowed: ${ADDRESS_FIELDS.join(', ')}`);
    if (x === undefined || x === null) continue;
    out[k as (typeof ADDRESS_FIELDS)[number]] = plainText(x, `${field}.${k}`);
  }
  return out;
}

export function boolean(v: unknown, field: string): boolean {
  if (typeof v !== 'boolean') throw bad(field, `must be true or false, got ${kind(v)}`);
  return v;
}

/** One of `values`. */
export function oneOf<T extends string>(v: unknown, field: string, values: readonly T[]): T {
  if (typeof v !== 'string' || !(values as readonly string[]).includes(v)) throw bad(field, `must be one of ${values.join(', ')}, got ${JSON.stringify(v)}`);
  return v as T;
}

/**
 * Refuses changing or removing an externalId once set (setting one where there is none, or the
 * same again, is fine): the pipeline resolves an externalId to its service id once and keeps the
 * answer for the process's life (src/billing/evaluator/partition.ts), so a moved externalId
 * would keep billing the customer it named before.
 */
export function settableOnce(current: string | null, next: string | null, what: 'customer' | 'product'): void {
  if (current !== null && next !== current) {
    throw bad('externalId', `the ${what} already has the externalId ${JSON.stringify(current)}; an externalId cannot be changed or removed once set (signals are resolved by it)`);
  }
}
