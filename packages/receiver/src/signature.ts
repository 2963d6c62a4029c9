/**
 * The signature scheme of spec 5.2, both directions: the HMAC a receiver recomputes, and the
 * header a sender writes (the service signs every delivery with `signatureHeader`; receivers
 * can use it to sign fixtures in their own tests).
 *
 * Header (`x-webhook-signature`):
 *
 *     t=<unix ms>,s=<base64 of HMAC-SHA256(key, "<t>.<raw body>")>
 *
 * - `t` is the delivery time in whole milliseconds since the Unix epoch, written in plain
 *   decimal digits with no sign, no leading zeros, no fraction and no exponent
 *   (`1700000000000`). Each attempt of a delivery is signed afresh with its own `t`.
 * - The signed payload is the bytes of `t` as written in the header (ASCII digits), one `.`
 *   (0x2E), then the raw request body exactly as sent on the wire. A re-serialized or
 *   re-encoded body will not verify.
 * - `s` is the standard base64 alphabet (`+` and `/`, RFC 4648 section 4) WITH its `=`
 *   padding. A SHA-256 HMAC is 32 bytes, so `s` is always 44 characters ending in one `=`.
 *   `t` comes first and `s` second; there are no spaces.
 *
 * The HMAC key: the UTF-8 bytes of the WHOLE secret string exactly as it was shown by the
 * rotate operation, `whsec_` prefix included; the secret is not base64-decoded first. In
 * Python: `hmac.new(secret.encode('utf-8'), t.encode('ascii') + b'.' + body, 'sha256')`;
 * with openssl: `printf '%s.%s' "$t" "$body" | openssl dgst -sha256 -hmac "$secret" -binary | base64`.
 */
import { createHmac } from 'node:crypto';

/** The HTTP header that carries the signature (spec 4.5, 5.2). Lower-case, as Node reports it. */
export const SIGNATURE_HEADER = 'x-webhook-signature';

/**
 * The HMAC key for a secret: a string stands for its UTF-8 bytes (the whole string, prefix
 * included); a Buffer/Uint8Array is used as is. An empty key is refused: it would make
 * every signature computable by anyone, so it can only be a configuration mistake.
 */
export function signingKey(secret: string | Uint8Array): Buffer {
  if (typeof secret === 'string') {
    if (secret.length === 0) throw new TypeError('webhook signing secret must not be empty');
    return Buffer.from(secret, 'utf8');
  }
  if (!(secret instanceof Uint8Array)) throw new TypeError('webhook signing secret must be a string or bytes');
  if (secret.byteLength === 0) throw new TypeError('webhook signing secret must not be empty');
  return Buffer.from(secret.buffer, secret.byteOffset, secret.byteLength);
}

/** Body bytes: a string stands for its UTF-8 encoding; bytes are used as is. */
export function bodyBytes(rawBody: Uint8Array | string): Buffer {
  if (typeof rawBody === 'string') return Buffer.from(rawBody, 'utf8');
  if (!(rawBody instanceof Uint8Array)) throw new TypeError('webhook body must be a string or bytes');
  return Buffer.from(rawBody.buffer, rawBody.byteOffset, rawBody.byteLength);
}

/** `t` as it is written in the header: plain decimal digits of a non-negative safe integer. */
export function formatTimestamp(timestampMs: number): string {
  if (!Number.isSafeInteger(timestampMs) || timestampMs < 0) {
    throw new RangeError(`webhook timestamp must be a non-negative integer number of milliseconds, got ${String(timestampMs)}`);
  }
  return String(timestampMs);
}

/**
 * The raw 32-byte HMAC-SHA256 of `<t>.<body>`. `t` is the header's digits exactly (the
 * receiver passes the string it read, the sender the one it writes).
 */
export function signatureDigest(secret: string | Uint8Array, t: string, rawBody: Uint8Array | string): Buffer {
  return createHmac('sha256', signingKey(secret)).update(t, 'ascii').update('.', 'ascii').update(bodyBytes(rawBody)).digest();
}

/** The `s` value: base64 (standard alphabet, padding kept) of the HMAC. */
export function computeSignature(secret: string | Uint8Array, rawBody: Uint8Array | string, timestampMs: number): string {
  return signatureDigest(secret, formatTimestamp(timestampMs), rawBody).toString('base64');
}

/**
 * The whole `x-webhook-signature` value for one delivery attempt:
 * `t=<timestampMs>,s=<base64 HMAC-SHA256 of "<t>.<rawBody>">`.
 */
export function signatureHeader(secret: string | Uint8Array, rawBody: Uint8Array | string, timestampMs: number): string {
  const t = formatTimestamp(timestampMs);
  return `t=${t},s=${signatureDigest(secret, t, rawBody).toString('base64')}`;
}
