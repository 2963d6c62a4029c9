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

/**
 * Builds a request body from key ranges of `src`: per signal, [start, end) of its key's JSON
 * string (quotes included) at `ranges[2i]`, `ranges[2i + 1]`, or -1 for none. Copied byte by
 * byte (no view per key: 500 subarrays cost more than the copying).
 */
export function lookupBodyOf(src: Uint8Array, ranges: Int32Array, count: number): Buffer {
  let size = count;
  for (let i = 0; i < count; i++) if (ranges[2 * i]! !== -1) size += ranges[2 * i + 1]! - ranges[2 * i]!;
  const out = Buffer.allocUnsafe(size);
  let o = 0;
  for (let i = 0; i < count; i++) {
    const start = ranges[2 * i]!;
    if (start !== -1) {
      const end = ranges[2 * i + 1]!;
      for (let k = start; k < end; k++) out[o++] = src[k]!;
    }
    out[o++] = NL;
  }
  return out;
}

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

/**
 * The indexes of keys repeating an earlier key of the same request (the first occurrence is
 * not a repeat), from a request body (`lookupBody`).
 */
export function repeatsInside(body: Uint8Array): number[] {
  let lines = 0;
  for (let k = 0; k < body.length; k++) if (body[k] === NL) lines++;
  const ranges = new Int32Array(2 * lines);
  let start = 0;
  for (let i = 0; i < lines; i++) {
    const end = body.indexOf(NL, start);
    ranges[2 * i] = end === start ? -1 : start;
    ranges[2 * i + 1] = end;
    start = end + 1;
  }
  return repeatsInRanges(body, ranges, lines);
}

/**
 * `repeatsInside` of keys given as ranges of `src` (`lookupBodyOf`'s form: the ingress's scan
 * of a body). Keys are compared by their bytes through a hash table of 32-bit FNV-1a digests
 * (no string per key: this runs on the ingress for every keyed batch no pipeline answered for);
 * with an escaped key anywhere, parsed texts are compared instead.
 */
export function repeatsInRanges(src: Uint8Array, ranges: Int32Array, count: number): number[] {
  let slots = 8;
  while (slots < 2 * count) slots *= 2;
  const mask = slots - 1;
  // Per slot: the key's start + 1 (0: empty) and its end.
  const starts = new Int32Array(slots);
  const ends = new Int32Array(slots);
  const out: number[] = [];
  for (let i = 0; i < count; i++) {
    const start = ranges[2 * i]!;
    if (start === -1) continue;
    const end = ranges[2 * i + 1]!;
    let h = 0x811c9dc5;
    for (let k = start; k < end; k++) {
      const c = src[k]!;
      if (c === BACKSLASH) return repeatsOfTexts(textsOf(src, ranges, count));
      h = Math.imul(h ^ c, 0x01000193);
    }
    for (let j = (h >>> 0) & mask; ; j = (j + 1) & mask) {
      const s = starts[j]!;
      if (s === 0) {
        starts[j] = start + 1;
        ends[j] = end;
        break;
      }
      if (ends[j]! - (s - 1) === end - start && sameBytes(src, s - 1, start, end - start)) {
        out.push(i);
        break;
      }
    }
  }
  return out;
}

/** The parsed keys of ranges of `src`. */
function textsOf(src: Uint8Array, ranges: Int32Array, count: number): (string | null)[] {
  const b = Buffer.from(src.buffer, src.byteOffset, src.byteLength);
  const out: (string | null)[] = [];
  for (let i = 0; i < count; i++) out.push(ranges[2 * i] === -1 ? null : (JSON.parse(b.toString('utf8', ranges[2 * i], ranges[2 * i + 1])) as string));
  return out;
}

function sameBytes(b: Uint8Array, a: number, c: number, n: number): boolean {
  for (let k = 0; k < n; k++) if (b[a + k] !== b[c + k]) return false;
  return true;
}

/** `repeatsInside` of parsed keys. */
export function repeatsOfTexts(keys: readonly (Uint8Array | string | null)[]): number[] {
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
