/**
 * Webhook delivery signatures (spec 5.2) on the service's side: the signing secret.
 *
 * The scheme (`x-webhook-signature: t=<unix ms>,s=<base64 HMAC-SHA256 of "<t>.<raw body>">`,
 * keyed with the UTF-8 bytes of the whole `whsec_…` string) and its code are in the receiver
 * package (packages/receiver/src/signature.ts), re-exported below: the service signs with the
 * very code its receivers verify with (`verifyWebhook`, packages/receiver/src/verify.ts). The
 * dispatcher serializes a body once and those bytes are both signed and sent.
 *
 * Secret format (`newSigningSecret`): `whsec_` followed by 32 bytes from the operating
 * system's CSPRNG encoded as unpadded base64url (43 characters of `A-Z a-z 0-9 - _`), 49
 * ASCII characters in all: 256 bits of entropy, the strength of HMAC-SHA256 itself. Every
 * character is ASCII, so "UTF-8 bytes of the string" and "ASCII bytes of the string" are the
 * same thing. The prefix makes a leaked secret recognizable to secret scanners.
 * */
import { randomBytes } from 'node:crypto';

export {
  SIGNATURE_HEADER,
  bodyBytes,
  computeSignature,
  formatTimestamp,
  signatureDigest,
  signatureHeader,
  signingKey,
} from '../../packages/receiver/src/signature.js';

/** Prefix of every signing secret produced by `newSigningSecret`. */
export const SIGNING_SECRET_PREFIX = 'whsec_';

/** Random bytes in a signing secret (before encoding). */
export const SIGNING_SECRET_BYTES = 32;

/** Length in characters of a signing secret: prefix + 43 base64url characters. */
export const SIGNING_SECRET_LENGTH = SIGNING_SECRET_PREFIX.length + Math.ceil((SIGNING_SECRET_BYTES * 4) / 3);

/** Shape of a secret made by `newSigningSecret` (for validating a stored or pasted value). */
export const SIGNING_SECRET_PATTERN = /^whsec_[A-Za-z0-9_-]{43}$/;

/** A new signing secret: `whsec_` + 32 CSPRNG bytes as unpadded base64url (49 characters). */
export function newSigningSecret(): string {
  return SIGNING_SECRET_PREFIX + randomBytes(SIGNING_SECRET_BYTES).toString('base64url');
}
