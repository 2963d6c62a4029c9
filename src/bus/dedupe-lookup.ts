/**
 * The dedupe lookup (ingress → pipeline, a NATS request to the queue group of the pipeline
 * processes on `topology.dedupeLookup`): which signals of an accepted batch are repeats of an
 * idempotency key of the same organization and mode, for the answer's `duplicates`.
 *
 * Request: headers Billing-Org, Billing-Mode, Billing-Batch; body one line per signal of the
 * batch, in order: its idempotencyKey as a JSON string (the body's own bytes of it), or an
 * empty line (no key, or a refused signal). JSON text holds no raw newline.
 * Answer: the indexes of the repeats, ascending, comma-separated (empty: none); `!` and a
 * reason when the pipeline could not tell (the ingress then counts only repeats inside the
 * request, `repeatsInside`).
 */
const NL = 0x0a;
const BACKSLASH = 0x5c;

/** Builds a request body from each signal's key text (a JSON string's bytes, or null). */
export function lookupBody(keys: readonly (Uint8Array | null)[]): Buffer {
  let size = keys.length;
  for (const k of keys) if (k) size += k.length;
  const out = Buffer.allocUnsafe(size);
  let o = 0;
  for (const k of keys) {
    if (k) {
      out.set(k, o);
      o += k.length;
    }
    out[o++] = NL;
  }
  return out;
}

/**
 * The keys of a request body, per signal: the key's UTF-8 bytes (when its JSON string holds
 * no escape: the text's own bytes) or its parsed text, or null.
 */
export function lookupKeys(body: Uint8Array): (Uint8Array | string | null)[] {
  const b = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const out: (Uint8Array | string | null)[] = [];
  let start = 0;
  while (start < b.length) {
    let end = b.indexOf(NL, start);
    if (end === -1) end = b.length;
    if (end === start) out.push(null);
    else if (b.subarray(start, end).includes(BACKSLASH)) out.push(JSON.parse(b.toString('utf8', start, end)) as string);
    else out.push(b.subarray(start + 1, end - 1));
    start = end + 1;
  }
  return out;
}

/** A key as text (for comparing keys: equal texts are the same key). */
export const keyText = (k: Uint8Array | string): string => (typeof k === 'string' ? k : Buffer.from(k.buffer, k.byteOffset, k.byteLength).toString('utf8'));

/** The indexes of keys repeating an earlier key of the same request (the first occurrence is not a repeat). */
export function repeatsInside(keys: readonly (Uint8Array | string | null)[]): number[] {
  const seen = new Set<string>();
  const out: number[] = [];
  keys.forEach((k, i) => {
    if (k === null) return;
    const t = keyText(k);
    if (seen.has(t)) out.push(i);
    else seen.add(t);
  });
  return out;
}

/** The answer's body from the repeats' indexes. */
export const answerBody = (repeats: readonly number[]): string => repeats.join(',');

/** The repeats an answer names, or null when the pipeline could not tell (`!…`) or the answer is not one. */
export function parseAnswer(body: Uint8Array, signals: number): number[] | null {
  const t = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('latin1');
  if (t === '') return [];
  if (!/^\d+(,\d+)*$/.test(t)) return null;
  const out = t.split(',').map(Number);
  return out.every((i) => i < signals) ? out : null;
}
