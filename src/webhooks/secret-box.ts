/**
 * Signing secrets at rest: AES-256-GCM with the key from WEBHOOK_ENCRYPTION_KEY (32 bytes,
 * given as 64 hex characters or base64). Each secret has its own random 12-byte nonce; the
 * organization and mode are bound as associated data, so a ciphertext copied to another
 * organization's record does not decrypt. The key is parsed by parseEncryptionKey
 * (src/shared/webhook-settings.ts).
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

export interface SealedSecret {
  /** base64 of nonce (12) ‖ ciphertext ‖ tag (16). */
  sealed: string;
  createdAt: string;
}

export function seal(key: Buffer, secret: string, context: string, now = new Date()): SealedSecret {
  const nonce = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', key, nonce);
  c.setAAD(Buffer.from(context));
  const body = Buffer.concat([c.update(secret, 'utf8'), c.final()]);
  return { sealed: Buffer.concat([nonce, body, c.getAuthTag()]).toString('base64'), createdAt: now.toISOString() };
}

export function open(key: Buffer, s: SealedSecret, context: string): string {
  const all = Buffer.from(s.sealed, 'base64');
  const d = createDecipheriv('aes-256-gcm', key, all.subarray(0, 12));
  d.setAAD(Buffer.from(context));
  d.setAuthTag(all.subarray(all.length - 16));
  return Buffer.concat([d.update(all.subarray(12, all.length - 16)), d.final()]).toString('utf8');
}
