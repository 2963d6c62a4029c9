/**
 * Verifies one webhook delivery from the raw body, the `x-webhook-signature` header and the
 * organization's signing secret, with exactly the rules of spec 5.2 (the scheme is documented
 * in ./signature.ts).
 *
 * Rules, in the order they are applied:
 *
 * 1. Header absent (`undefined`, `null`, an empty or blank string, an empty array) →
 *    `MISSING_HEADER`. Node gives a repeated header as one string joined with ", " (which
 *    then fails rule 3 on duplicate keys); an array of more than one value → `MALFORMED_HEADER`.
 * 2. The header is split into pairs on `,`; each pair is split on its FIRST `=` only, so the
 *    `=` padding at the end of `s` stays part of the value. Optional spaces/tabs around a pair
 *    are ignored (`t=1, s=…` is accepted; the sender never writes them); empty pairs
 *    (`,,` or a trailing `,`) are ignored; a non-empty pair without `=` → `MALFORMED_HEADER`.
 *    Keys are case-sensitive. Unknown keys are ignored (forward compatibility: a future
 *    scheme may add pairs), in any order relative to `t` and `s`.
 * 3. Exactly one `t` and exactly one `s` → otherwise `MALFORMED_HEADER`. A repeated `t` or
 *    `s` is refused even when both copies agree: two candidates are an ambiguity a forger
 *    could exploit against a lenient parser, and the sender (one secret per organization,
 *    rotation takes effect on the next delivery) never sends two.
 * 4. `t` must be a non-negative integer number of milliseconds in plain decimal: `0` or
 *    `[1-9][0-9]*`, at most 2^53 − 1. Signs, fractions, exponents, leading zeros, spaces
 *    inside → `MALFORMED_HEADER`. (Seconds instead of milliseconds parse, and then fail rule 7.)
 * 5. `s` must be strict standard base64 WITH padding that decodes to exactly 32 bytes (the
 *    length of an HMAC-SHA256) and re-encodes to the same text: 44 characters ending in one
 *    `=`. Unpadded, base64url, embedded whitespace, non-zero trailing bits or another length
 *    → `MALFORMED_HEADER`.
 * 6. The HMAC-SHA256 of `<t as written>.<raw body bytes>` keyed with the secret's UTF-8 bytes
 *    is recomputed and compared with `s` in constant time (`crypto.timingSafeEqual` on two
 *    32-byte buffers) → `BAD_SIGNATURE` when different.
 * 7. Only then the clock: |now − t| > tolerance (default five minutes, 300 000 ms) →
 *    `TIMESTAMP_OUT_OF_TOLERANCE`, in either direction. Exactly five minutes off is accepted.
 *    The signature is checked first so that this reason only ever describes an authentic
 *    delivery (a replay, or a clock that is off) and a forgery always reads `BAD_SIGNATURE`.
 *
 * Pass the raw body exactly as received (a Buffer from the request stream). A string is
 * taken as its UTF-8 encoding; a parsed and re-serialized body will not verify (5.2 rule 7).
 * An empty secret, or nonsensical options, throw (configuration mistakes, not deliveries).
 */
import { timingSafeEqual } from 'node:crypto';
import { signatureDigest, signingKey } from './signature.js';

/** Five minutes: the replay window of spec 5.2 rule 6. */
export const DEFAULT_TOLERANCE_MS = 5 * 60 * 1000;

export type WebhookRefusal = 'MISSING_HEADER' | 'MALFORMED_HEADER' | 'TIMESTAMP_OUT_OF_TOLERANCE' | 'BAD_SIGNATURE';

export interface VerifyOptions {
  /** The receiver's current time in ms since the epoch; defaults to `Date.now()`. */
  nowMs?: number;
  /** Largest accepted |now − t| in ms, inclusive; defaults to five minutes. */
  toleranceMs?: number;
}

export type VerifyResult =
  | { ok: true; timestampMs: number }
  | { ok: false; reason: WebhookRefusal; /** A human-readable explanation, for logs. */ detail: string };

/** What the header value may look like as read from a request (`req.headers[...]` in Node). */
export type SignatureHeaderValue = string | readonly string[] | undefined | null;

export interface ParsedSignatureHeader {
  ok: true;
  /** `t` exactly as written (the digits that were signed). */
  t: string;
  timestampMs: number;
  /** `s` exactly as written (base64 with padding). */
  s: string;
  /** `s` decoded: the 32 HMAC bytes. */
  signature: Buffer;
}

export type ParseResult = ParsedSignatureHeader | { ok: false; reason: 'MISSING_HEADER' | 'MALFORMED_HEADER'; detail: string };

const T_PATTERN = /^(?:0|[1-9][0-9]*)$/;
const BASE64_PADDED = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const HMAC_BYTES = 32;

const malformed = (detail: string): ParseResult => ({ ok: false, reason: 'MALFORMED_HEADER', detail });

/** Parses an `x-webhook-signature` value with rules 1–5 above (no cryptography, no clock). */
export function parseSignatureHeader(header: SignatureHeaderValue): ParseResult {
  let value: string;
  if (header === undefined || header === null) return { ok: false, reason: 'MISSING_HEADER', detail: 'no x-webhook-signature header' };
  if (typeof header === 'string') value = header;
  else if (Array.isArray(header)) {
    if (header.length === 0) return { ok: false, reason: 'MISSING_HEADER', detail: 'no x-webhook-signature header' };
    if (header.length > 1) return malformed('more than one x-webhook-signature header');
    value = String(header[0]);
  } else return malformed('header value is not a string');
  if (value.trim() === '') return { ok: false, reason: 'MISSING_HEADER', detail: 'empty x-webhook-signature header' };

  let t: string | undefined;
  let s: string | undefined;
  for (const raw of value.split(',')) {
    const pair = raw.replace(/^[ \t]+|[ \t]+$/g, '');
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    if (eq < 0) return malformed(`pair without "=": ${JSON.stringify(pair.slice(0, 40))}`);
    const key = pair.slice(0, eq);
    const val = pair.slice(eq + 1);
    if (key === 't') {
      if (t !== undefined) return malformed('more than one t');
      t = val;
    } else if (key === 's') {
      if (s !== undefined) return malformed('more than one s');
      s = val;
    }
    // any other key: ignored
  }
  if (t === undefined) return malformed('no t (timestamp) pair');
  if (s === undefined) return malformed('no s (signature) pair');
  if (!T_PATTERN.test(t)) return malformed('t must be an integer number of milliseconds in plain decimal digits');
  const timestampMs = Number(t);
  if (!Number.isSafeInteger(timestampMs)) return malformed('t is too large');
  if (!BASE64_PADDED.test(s)) return malformed('s must be standard base64 with its padding');
  const signature = Buffer.from(s, 'base64');
  if (signature.length !== HMAC_BYTES || signature.toString('base64') !== s) {
    return malformed('s must be the 44-character base64 of a 32-byte HMAC-SHA256');
  }
  return { ok: true, t, timestampMs, s, signature };
}

/**
 * Verifies one delivery (rules 1–7 above). `rawBody` is the request body exactly as
 * received; `secret` the organization's signing secret string (`whsec_…`).
 */
export function verifyWebhook(
  rawBody: Uint8Array | string,
  header: SignatureHeaderValue,
  secret: string | Uint8Array,
  opts: VerifyOptions = {},
): VerifyResult {
  const nowMs = opts.nowMs ?? Date.now();
  const toleranceMs = opts.toleranceMs ?? DEFAULT_TOLERANCE_MS;
  if (!Number.isFinite(nowMs)) throw new RangeError('nowMs must be a finite number of milliseconds');
  if (!Number.isFinite(toleranceMs) || toleranceMs < 0) throw new RangeError('toleranceMs must be a finite, non-negative number of milliseconds');

  // Throws on an empty secret before looking at the delivery: a misconfigured receiver must
  // fail loudly on every request, not only on those that carry a header.
  const key = signingKey(secret);

  const parsed = parseSignatureHeader(header);
  if (!parsed.ok) return parsed;
  const expected = signatureDigest(key, parsed.t, rawBody);
  if (!timingSafeEqual(expected, parsed.signature)) {
    return { ok: false, reason: 'BAD_SIGNATURE', detail: 'the signature does not match the body, timestamp and secret' };
  }
  const skew = nowMs - parsed.timestampMs;
  if (Math.abs(skew) > toleranceMs) {
    return {
      ok: false,
      reason: 'TIMESTAMP_OUT_OF_TOLERANCE',
      detail: `the delivery's timestamp is ${Math.abs(skew)} ms ${skew > 0 ? 'in the past' : 'in the future'} (tolerance ${toleranceMs} ms)`,
    };
  }
  return { ok: true, timestampMs: parsed.timestampMs };
}
