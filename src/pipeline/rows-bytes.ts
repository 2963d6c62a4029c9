/**
 * The rows worker's fast path (workers/rows.ts `packed`): a batch's store rows and billable
 * lines written straight from the bytes of its body, without decoding the body to a string,
 * without JSON.parse and without JSON.stringify of every value. Each value's bytes are copied
 * from the body into the lines (JSON.parse followed by JSON.stringify of the value would give
 * those same bytes back, for the bodies this path takes).
 *
 * It answers only where that is certain, and otherwise answers null ("not sure") and the
 * slow path renders the batch as it always did. So its output is the slow path's, byte for
 * byte, by construction; test/unit/rows-bytes.test.ts checks the equality on generated
 * bodies. Not sure (null), deliberately, on anything where the slow path's
 * output would not be the input's bytes:
 * - whitespace inside `data` (JSON.stringify writes none);
 * - a `\/` or `\u` escape in any string value or key (written back as `/` or the character);
 * - a number whose text is not the shortest form of its double (`1.0`, `1e2`, `-0`, a digit
 *   beyond what a double keeps, which also means the exact texts of exact-numbers.ts), or
 *   of 19 characters or more (dataJson's big-integer path);
 * - an object key of digits only (V8 puts integer keys first) or repeated in its object
 *   (JSON.parse keeps the last value in the first one's place);
 * - bytes that are not well-formed UTF-8 in a string (the decoder's U+FFFD);
 * - a timestamp that is not an RFC 3339 date-time, any field the signals do not have, and
 *   anything that is not a `{"signals":[…]}` body.
 */
import { BACKSLASH, COMMA, F_ATTRIBUTION, F_CUSTOMER, F_DATA, F_EVENT, F_KEY, F_TIMESTAMP, F_UNIT, FIELD_NAME_END, JsonBytes, K_CUSTOMER_ID, K_EXTERNAL_CUSTOMER_ID, K_EXTERNAL_PRODUCT_ID, K_PRODUCT_ID, LBRACE, LBRACKET, MINUS, NO, QUOTE, RBRACE, RBRACKET, REF_ID } from '../shared/json-bytes.js';
import { Rfc3339Reader } from '../shared/time.js';
import { signalIdPrefix, type BatchMeta } from '../bus/batch.js';
import { distinctRefs, REF_EXTERNAL_PREFIX, REF_ID_PREFIX, type PackedRows } from './rows-task.js';

/** Per signal, in `spans`: the byte ranges [start, end) of its values (start −1: absent or null). */
const EVENT = 0;
const CUSTOMER = 2;
const UNIT = 4;
const KEY = 6;
const DATA = 8;
/** `attribution`'s string (start −1: none). */
const PRODUCT = 10;
/** The kinds of `customer` and `attribution` (REF_ID, REF_EXTERNAL). */
const CUSTOMER_KIND = 12;
const PRODUCT_KIND = 13;
const SPAN = 14;
/** Deepest nesting of `data` read here (the ingress allows 10 levels). */
const MAX_LEVEL = 16;
/** Most keys of one object of `data` read here (each is compared with the ones before it). */
const MAX_KEYS = 64;

class RowsScanner extends JsonBytes {
  /** Value ranges of every signal read so far, SPAN entries each. */
  spans = new Int32Array(SPAN * 512);
  /** Epoch ms of every signal read so far. */
  times = new Float64Array(512);
  count = 0;
  /** Key ranges of the objects being read (start, end pairs), a frame per object. */
  private readonly keys = new Int32Array(2 * MAX_KEYS * MAX_LEVEL);
  private readonly reader = new Rfc3339Reader();

  constructor(
    readonly text: Buffer,
    readonly receivedAtMs: number,
  ) {
    super(text);
  }

  /** One signal object at p: its spans and time recorded as signal `count`. */
  override signal(p: number): number {
    const b = this.b;
    if (b[p] !== LBRACE) return NO;
    const i = this.count;
    if (SPAN * (i + 1) > this.spans.length) this.grow();
    const s = this.spans;
    const o = SPAN * i;
    for (let k = 0; k < SPAN; k++) s[o + k] = -1;
    let time = this.receivedAtMs;
    p = this.ws(p + 1);
    this.slashEscape = false;
    for (;;) {
      if (b[p] !== QUOTE) return NO;
      p++;
      const f = this.field(p);
      if (f === NO) return NO;
      p = this.value1(p + FIELD_NAME_END[f]!);
      if (p === NO) return NO;
      const start = p;
      if (f === F_TIMESTAMP) {
        if (b[p] === QUOTE) {
          p = this.str(p + 1, false);
          // An escape inside would make the text differ from the bytes.
          if (p === NO || p - start - 2 !== this.units) return NO;
          const ms = this.reader.parseBytes(b, start + 1, p - 1);
          if (ms === null) return NO;
          time = ms;
        } else {
          p = this.nul(p);
          time = this.receivedAtMs;
        }
      } else if (f === F_DATA) {
        if (b[p] === LBRACE) {
          p = this.container(p, 1);
          s[o + DATA] = start;
          s[o + DATA + 1] = p;
        } else {
          p = this.nul(p);
          s[o + DATA] = -1;
        }
      } else if (f === F_CUSTOMER || f === F_ATTRIBUTION) {
        const at = f === F_CUSTOMER ? CUSTOMER : PRODUCT;
        if (b[p] === LBRACE) {
          p = f === F_CUSTOMER ? this.reference(p, K_CUSTOMER_ID, K_EXTERNAL_CUSTOMER_ID) : this.reference(p, K_PRODUCT_ID, K_EXTERNAL_PRODUCT_ID);
          s[o + at] = this.refStart;
          s[o + at + 1] = this.refEnd;
          s[o + (f === F_CUSTOMER ? CUSTOMER_KIND : PRODUCT_KIND)] = this.refKind;
        } else if (f === F_ATTRIBUTION) {
          p = this.nul(p);
          s[o + at] = -1;
        } else return NO;
      } else {
        const at = f === F_EVENT ? EVENT : f === F_UNIT ? UNIT : KEY;
        if (b[p] === QUOTE) {
          p = this.str(p + 1, false);
          s[o + at] = start;
          s[o + at + 1] = p;
        } else if (f === F_UNIT || f === F_KEY) {
          p = this.nul(p);
          s[o + at] = -1;
        } else return NO;
      }
      if (p === NO) return NO;
      p = this.ws(p);
      const c = b[p++];
      if (c === COMMA) {
        p = this.ws(p);
        continue;
      }
      if (c !== RBRACE || this.slashEscape || s[o + EVENT] === -1 || s[o + CUSTOMER] === -1) return NO;
      this.times[i] = time;
      this.count = i + 1;
      return p;
    }
  }

  private grow(): void {
    const spans = new Int32Array(this.spans.length * 2);
    spans.set(this.spans);
    this.spans = spans;
    const times = new Float64Array(this.times.length * 2);
    times.set(this.times);
    this.times = times;
  }

  /** An object or array of `data` at p, written compactly (no whitespace anywhere in it). */
  container(p: number, level: number): number {
    if (level > MAX_LEVEL) return NO;
    const b = this.b;
    const obj = b[p] === LBRACE;
    const close = obj ? RBRACE : RBRACKET;
    p++;
    if (b[p] === close) return p + 1;
    const frame = 2 * MAX_KEYS * (level - 1);
    let n = 0;
    for (;;) {
      if (obj) {
        if (b[p] !== QUOTE) return NO;
        const start = p + 1;
        p = this.str(start, false);
        if (p === NO || n === MAX_KEYS || !this.plainKey(start, p - 1, frame, n)) return NO;
        this.keys[frame + 2 * n] = start;
        this.keys[frame + 2 * n + 1] = p - 1;
        n++;
        if (b[p] !== 58) return NO; // ':' right after the key
        p++;
      }
      p = this.value(p, level);
      if (p === NO) return NO;
      const c = b[p++];
      if (c === COMMA) continue;
      return c === close ? p : NO;
    }
  }

  /**
   * Whether the key in [start, end) is written back as itself at its place: not digits only
   * (integer keys come first in V8's property order) and not one of the `n` keys before it in
   * the object (JSON.parse keeps a repeated key's last value in its first place).
   */
  plainKey(start: number, end: number, frame: number, n: number): boolean {
    const b = this.b;
    let digits = end > start;
    for (let k = start; digits && k < end; k++) {
      const c = b[k]!;
      if (c < 48 || c > 57) digits = false;
    }
    if (digits) return false;
    const len = end - start;
    const keys = this.keys;
    for (let j = 0; j < n; j++) {
      const a = keys[frame + 2 * j]!;
      if (keys[frame + 2 * j + 1]! - a !== len) continue;
      let k = 0;
      while (k < len && b[a + k] === b[start + k]) k++;
      if (k === len) return false;
    }
    return true;
  }

  /** Any JSON value inside `data`, at p. */
  value(p: number, level: number): number {
    const b = this.b;
    const c = b[p];
    if (c === QUOTE) return this.str(p + 1, false);
    if (c === LBRACE || c === LBRACKET) return this.container(p, level + 1);
    if (c === MINUS || (c !== undefined && c >= 48 && c <= 57)) {
      const end = this.number(p);
      return end !== NO && this.shortest(p, end) ? end : NO;
    }
    if (c === 116 || c === 102) return this.bool(p);
    return this.nul(p);
  }

  /**
   * Whether the number in [start, end) is the text JSON.stringify writes for its double, and
   * holds no run of 19 digits (workers/rows.ts dataJson rewrites integers from 2^63 up).
   */
  shortest(start: number, end: number): boolean {
    const b = this.b;
    // The common case without building a string: an integer of at most 15 digits, no leading zero, not -0.
    let k = start;
    if (b[k] === MINUS) k++;
    let plain = end - k <= 15 && (b[k] !== 48 || end - k === 1) && !(b[start] === MINUS && b[k] === 48);
    for (let j = k; plain && j < end; j++) {
      const c = b[j]!;
      if (c < 48 || c > 57) plain = false;
    }
    if (plain) return true;
    const text = this.text.toString('latin1', start, end);
    return String(Number(text)) === text && !DIGITS_19.test(text);
  }
}

const DIGITS_19 = /\d{19}/;

/** The fixed parts of the lines as UTF-8. */
const bytes = (s: string): Uint8Array => plain(Buffer.from(s, 'utf8'));

/**
 * TypedArray methods called through these, not looked up on the array: V8's optimized code for
 * packedFromBytes looked `set` up on every call through the generic LoadIC (its
 * --print-opt-code listing; ~4% of the rows worker's time), a known function's `call` it does
 * not.
 */
const setBytes = Uint8Array.prototype.set;
const subBytes = Uint8Array.prototype.subarray;

/** The bytes of `b` as a plain Uint8Array (the same memory). */
const plain = (b: Uint8Array): Uint8Array => new Uint8Array(b.buffer, b.byteOffset, b.byteLength);

/** The rows, billable lines, ids and claim keys of the batch, or null when not sure (see the header). */
export function packedFromBytes(body: Uint8Array, meta: BatchMeta, claimKeyOf: (meta: BatchMeta, key: Uint8Array | string) => string, skip: readonly number[] = []): PackedRows | null {
  // Refused signals (Billing-Skip) may be anything: such a batch is left to the slow path.
  if (skip.length > 0) return null;
  const src = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const scanner = new RowsScanner(src, meta.receivedAtMs);
  const n = scanner.signals(Number.MAX_SAFE_INTEGER);
  if (n === NO || n === 0) return null;
  const { spans, times } = scanner;
  const prefix = signalIdPrefix(meta.batchId);
  const r1 = bytes(`{"org_id":${JSON.stringify(meta.orgId)},"livemode":${meta.mode === 'live'},"signal_id":"${prefix}`);
  const r2 = bytes(`","batch_id":${JSON.stringify(meta.batchId)},"event_name":`);
  const r4 = bytes(`,"unit_id":`);
  const r5 = bytes(`,"idempotency_key":`);
  const r6 = bytes(`,"timestamp":`);
  const r7 = bytes(`,"received_at":${meta.receivedAtMs},"data":`);
  const b1 = bytes(`{"i":"${prefix}`);
  const b2 = bytes(`","e":`);
  const b3 = bytes(`,"c":"`);
  const b4 = bytes(`,"u":`);
  const b5 = bytes(`,"t":`);
  const b6 = bytes(`,"d":`);
  // Every value's bytes go once into each line; the rest is fixed parts, ids, times and defaults.
  const perRow = r1.length + r2.length + r4.length + r5.length + r6.length + r7.length + 64;
  const perBillable = b1.length + b2.length + b3.length + b4.length + b5.length + b6.length + 64;
  const rows = plain(Buffer.allocUnsafeSlow(src.length + n * perRow));
  const billable = plain(Buffer.allocUnsafeSlow(src.length + n * perBillable));
  const from = plain(src);
  let ro = 0;
  let bo = 0;
  const ids = new Array<string>(n);
  const claimKeys = new Array<string | null>(n);
  const customers = new Array<string>(n);
  const products = new Array<string>(n);
  const put = (out: Uint8Array, at: number, start: number, end: number): number => copy(from, start, end, out, at);
  const fixed = (out: Uint8Array, at: number, part: Uint8Array): number => {
    setBytes.call(out, part, at);
    return at + part.length;
  };
  const ascii = writeAscii;
  const valueOr = (out: Uint8Array, at: number, start: number, end: number, absent: string): number => (start === -1 ? ascii(out, at, absent) : put(out, at, start, end));
  for (let i = 0; i < n; i++) {
    const o = SPAN * i;
    const num = String(i);
    const ts = times[i]!;
    ids[i] = prefix + num;
    const kind = spans[o + CUSTOMER_KIND] === REF_ID ? REF_ID_PREFIX : REF_EXTERNAL_PREFIX;
    customers[i] = kind + textOf(src, spans[o + CUSTOMER]!, spans[o + CUSTOMER + 1]!);
    const productStart = spans[o + PRODUCT]!;
    products[i] = productStart === -1 ? '' : (spans[o + PRODUCT_KIND] === REF_ID ? REF_ID_PREFIX : REF_EXTERNAL_PREFIX) + textOf(src, productStart, spans[o + PRODUCT + 1]!);
    const keyStart = spans[o + KEY]!;
    const keyEnd = spans[o + KEY + 1]!;
    if (keyStart === -1) claimKeys[i] = null;
    else {
      // The key's UTF-8 bytes are the hash's input; with an escape inside, its parsed text is.
      claimKeys[i] = claimKeyOf(meta, hasEscape(src, keyStart, keyEnd) ? parsedText(src, keyStart, keyEnd) : src.subarray(keyStart + 1, keyEnd - 1));
    }
    ro = fixed(rows, ro, r1);
    ro = ascii(rows, ro, num);
    ro = fixed(rows, ro, r2);
    ro = put(rows, ro, spans[o + EVENT]!, spans[o + EVENT + 1]!);
    ro = fixed(rows, ro, r4);
    ro = valueOr(rows, ro, spans[o + UNIT]!, spans[o + UNIT + 1]!, 'null');
    ro = fixed(rows, ro, r5);
    ro = valueOr(rows, ro, keyStart, keyEnd, 'null');
    ro = fixed(rows, ro, r6);
    const tsAt = ro;
    ro = digits(rows, ro, ts);
    const tsEnd = ro;
    ro = fixed(rows, ro, r7);
    ro = valueOr(rows, ro, spans[o + DATA]!, spans[o + DATA + 1]!, '{}');
    ro = ascii(rows, ro, '}\n');

    bo = fixed(billable, bo, b1);
    bo = ascii(billable, bo, num);
    bo = fixed(billable, bo, b2);
    bo = put(billable, bo, spans[o + EVENT]!, spans[o + EVENT + 1]!);
    bo = fixed(billable, bo, b3);
    // The reference's kind, then its string from after the opening quote: `"c":"i:…"` / `"c":"x:…"`.
    bo = ascii(billable, bo, kind);
    bo = put(billable, bo, spans[o + CUSTOMER]! + 1, spans[o + CUSTOMER + 1]!);
    bo = fixed(billable, bo, b4);
    bo = valueOr(billable, bo, spans[o + UNIT]!, spans[o + UNIT + 1]!, 'null');
    bo = fixed(billable, bo, b5);
    bo = copy(rows, tsAt, tsEnd, billable, bo);
    bo = fixed(billable, bo, b6);
    bo = valueOr(billable, bo, spans[o + DATA]!, spans[o + DATA + 1]!, '{}');
    bo = ascii(billable, bo, '}\n');
  }
  const productRefs = distinctRefs(products);
  return { rows: rows.subarray(0, ro), billable: billable.subarray(0, bo), ids, claimKeys, ...distinctRefs(customers), products: productRefs.refs, productOf: productRefs.refOf };
}

/** Copies [from, to) of `src` into `out` at `at`; the position after it. Short runs byte by byte (a native copy costs more than it saves there). */
function copy(src: Uint8Array, from: number, to: number, out: Uint8Array, at: number): number {
  if (to - from < 32) {
    for (let k = from; k < to; k++) out[at++] = src[k]!;
    return at;
  }
  setBytes.call(out, subBytes.call(src, from, to), at);
  return at + (to - from);
}

/** An ASCII text's bytes into `out` at `at`; the position after it. */
function writeAscii(out: Uint8Array, at: number, text: string): number {
  for (let k = 0; k < text.length; k++) out[at++] = text.charCodeAt(k);
  return at;
}

/** `n` written as String(n) writes it (an epoch ms: a whole number, digits written directly); the position after it. */
function digits(out: Uint8Array, at: number, n: number): number {
  if (!(n >= 0 && n <= Number.MAX_SAFE_INTEGER && Math.floor(n) === n)) return writeAscii(out, at, String(n));
  let len = 1;
  for (let x = n; x >= 10; x = Math.floor(x / 10)) len++;
  let o = at + len;
  let x = n;
  do {
    const q = Math.floor(x / 10);
    out[--o] = 48 + (x - q * 10);
    x = q;
  } while (x > 0);
  return at + len;
}

/** Whether the JSON string in [start, end) (quotes included) holds an escape. */
function hasEscape(src: Buffer, start: number, end: number): boolean {
  for (let i = start + 1; i < end - 1; i++) if (src[i] === BACKSLASH) return true;
  return false;
}

/** The text of the JSON string in [start, end) (quotes included): its UTF-8 between the quotes, parsed when it holds an escape. */
function textOf(src: Buffer, start: number, end: number): string {
  return hasEscape(src, start, end) ? parsedText(src, start, end) : src.toString('utf8', start + 1, end - 1);
}

/** The JSON string in [start, end) (quotes included), parsed. */
const parsedText = (src: Buffer, start: number, end: number): string => JSON.parse(src.toString('utf8', start, end)) as string;
