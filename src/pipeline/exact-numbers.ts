/**
 * The texts of JSON numbers in signal data that a double does not keep.
 *
 * `JSON.parse` reads every number into a double, so `0.10000000000000000001` becomes 0.1 and
 * `1e-400` becomes 0. A quantity must be priced at the value the sender wrote
 * (src/billing/quantity.ts), so the pipeline finds such numbers in the raw batch text and
 * passes their texts next to the data, keyed by the dot-joined path of object keys (the path
 * an attribute names; numbers inside arrays are never quantities and are skipped).
 *
 * A number beyond the double's range (`1e400`: JSON.parse gives Infinity, which JSON.stringify
 * writes as null and the engine then drops with its key) is also stored as the string of its
 * text (exactNumbers' `data`), since the engine's JSON type holds no number that large.
 *
 * A number's text is kept exactly when the double's shortest form (`String(n)`) states the
 * same value. That always holds for 15 or fewer significant digits with an exponent of two
 * digits at most, so a batch text without a run of 16 digits-or-points and without a
 * three-digit exponent (the common case) is answered at once; otherwise every number token
 * is checked with exact decimals.
 *
 * The texts travel in the billable message, which must fit one NATS message like the batch it
 * comes from, so a batch carries at most EXACT_TEXTS_MAX_BYTES of them (a 500-signal batch
 * with one 22-digit quantity per signal needs about 23 KiB). A signal whose texts would pass
 * that budget carries `false` instead ("texts withheld"): the evaluator then refuses a
 * JSON-number quantity of that signal with a reason (QUANTITY_DIGITS_NOT_KEPT) rather than
 * price a double; a decimal-string quantity is unaffected.
 */
import { randomBytes } from 'node:crypto';
import { Decimal } from 'decimal.js';
import { isZeroValue, magnitudeOf, readJsonNumberText } from '../shared/json-number.js';

/**
 * A necessary condition for a number that a double does not keep (see the header): 16
 * significant digits need a run of 16 digits-or-points, which in turn has 8 digits in a row
 * (the cheap test, run first), or a digit followed by an exponent of three digits. Measured
 * on a 500-signal, 83 KB batch on this machine (noisy, 2 shared cores): ≈0.1–0.2 ms when it
 * finds nothing (JSON.parse of the batch: ≈0.25–0.5 ms), ≈2–4 ms for the full check when a
 * batch holds such a number.
 */
function mayLose(text: string): boolean {
  return (/\d{8}/.test(text) && /[\d.]{16}/.test(text)) || /\d[eE][-+]?\d{3}/.test(text);
}
/** Strings first, so that digits inside strings and keys are never taken for numbers. */
const TOKEN = /"(?:[^"\\]|\\[\s\S])*"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?/g;

export type { ExactTexts } from '../bus/batch.js';
import type { ExactTexts } from '../bus/batch.js';

/** Most bytes of exact texts (as JSON) one batch carries; beyond, a signal's are withheld. */
export const EXACT_TEXTS_MAX_BYTES = 32 * 1024;

/** Beyond these powers of ten a non-zero value has no finite, non-zero double (10^308 < MAX_VALUE < 10^309; 5·10^-324 is the least). */
const DOUBLE_TOP = 308n;
const DOUBLE_BOTTOM = -324n;

/**
 * True when the double read from `token` states exactly the value `token` states. The value
 * is read at its own exponent first (src/shared/json-number.ts): decimal.js, like the double,
 * makes 0 of `1e-99999999999999999999`, and the two would agree on a value the text does not
 * state. A zero (`-0`, `0e999999`) is kept by the double's zero.
 */
export function doubleKeeps(token: string): boolean {
  const v = readJsonNumberText(token);
  if (v === null) return false;
  if (isZeroValue(v)) return true;
  const top = magnitudeOf(v);
  if (top > DOUBLE_TOP || top < DOUBLE_BOTTOM) return false;
  const n = Number(token);
  return Number.isFinite(n) && new Decimal(token).eq(new Decimal(String(n)));
}

/**
 * For a batch text `{"signals":[…]}` already accepted as JSON: per signal, the texts of the
 * numbers in its `data` that a double does not keep (null: none; false: withheld, see the
 * header), or null for all signals when there are none (the common case).
 */
export function exactNumberTexts(text: string, maxBytes = EXACT_TEXTS_MAX_BYTES): (ExactTexts | null | false)[] | null {
  return exactNumbers(text, maxBytes)?.texts ?? null;
}

/** What exactNumbers finds in a batch text. */
export interface ExactNumbers {
  /** Per signal, as exactNumberTexts answers. */
  texts: (ExactTexts | null | false)[];
  /**
   * Per signal, its `data` to store when it holds a number beyond the double's range
   * (`1e400`, `-1e400`, a 400-digit integer), else null (JSON.parse's data is right). JSON.parse
   * makes ±Infinity of such a number, which JSON.stringify writes as null, and the engine's
   * JSON type holds no number that large (it refuses `1e400`): here the number is the string
   * of its text, so the stored data keeps its value and its key. Every other number is the
   * double JSON.parse gives, as in any data. Never withheld.
   */
  data: (Record<string, unknown> | null)[];
}

/** exactNumberTexts, and the data to store for signals holding numbers beyond the double's range (see ExactNumbers). */
export function exactNumbers(text: string, maxBytes = EXACT_TEXTS_MAX_BYTES): ExactNumbers | null {
  if (!mayLose(text)) return null;
  // Each lossy number becomes a string carrying a marker that cannot occur in the text by
  // chance; parsing the marked text then says where each one is.
  const marker = `\u0000exact-${randomBytes(12).toString('hex')}:`;
  let found = false;
  // Whether any number is beyond the double's range: only then is any signal's data rebuilt.
  let beyond = false;
  const marked = text.replace(TOKEN, (token) => {
    if (token.charCodeAt(0) === 34 || doubleKeeps(token)) return token;
    found = true;
    if (!beyond && !Number.isFinite(Number(token))) beyond = true;
    return JSON.stringify(marker + token);
  });
  if (!found) return null;
  const parsed = JSON.parse(marked) as { signals?: unknown };
  if (!Array.isArray(parsed.signals)) return null;
  let budget = maxBytes;
  const stored: (Record<string, unknown> | null)[] = [];
  const texts = parsed.signals.map((s, i) => {
    stored[i] = null;
    const data = isObject(s) ? s.data : undefined;
    if (!isObject(data)) return null;
    if (beyond) {
      const infinite = { found: false };
      const restored = restore(data, marker, infinite) as Record<string, unknown>;
      if (infinite.found) stored[i] = restored;
    }
    const out = new Map<string, string>();
    collect(data, '', marker, out);
    if (out.size === 0) return null;
    // fromEntries makes own properties, also for a key such as "__proto__".
    const texts = Object.fromEntries(out);
    budget -= Buffer.byteLength(JSON.stringify(texts));
    return budget >= 0 ? texts : false;
  });
  return { texts, data: stored };
}

/**
 * `v` of the marked text with every marked number back: the double JSON.parse gives it, or,
 * beyond the double's range, the string of its text (`infinite.found` then set). Objects are
 * made with own properties, also for a key such as "__proto__".
 */
function restore(v: unknown, marker: string, infinite: { found: boolean }): unknown {
  if (typeof v === 'string') {
    if (!v.startsWith(marker)) return v;
    const token = v.slice(marker.length);
    const n = Number(token);
    if (Number.isFinite(n)) return n;
    infinite.found = true;
    return token;
  }
  if (Array.isArray(v)) return v.map((x) => restore(x, marker, infinite));
  if (isObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, restore(x, marker, infinite)]));
  return v;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function collect(o: Record<string, unknown>, prefix: string, marker: string, out: Map<string, string>): void {
  for (const [k, v] of Object.entries(o)) {
    const path = prefix === '' ? k : `${prefix}.${k}`;
    if (typeof v === 'string' && v.startsWith(marker)) out.set(path, v.slice(marker.length));
    else if (isObject(v)) collect(v, path, marker, out);
  }
}
