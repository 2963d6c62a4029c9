/** Random identifiers: letters and digits, every character equally likely. */
import { randomFillSync } from 'node:crypto';

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

// Bytes of the CSPRNG drawn 4 KiB at a time and each used once (what crypto.randomUUID does):
// a batch id per ingested batch made a randomBytes call per request.
const pool = Buffer.alloc(4096);
let next = pool.length;

function randomByte(): number {
  if (next === pool.length) {
    randomFillSync(pool);
    next = 0;
  }
  return pool[next++]!;
}

export function randomToken(length: number): string {
  // 62 * 4 = 248: bytes >= 248 are dropped so every character is equally likely.
  let out = '';
  while (out.length < length) {
    const b = randomByte();
    if (b < 248) out += ALPHABET[b % 62];
  }
  return out;
}
