/**
 * The fast path of `POST /api/v2/signals/bulk`: judges the raw body bytes in one pass, without
 * decoding them to a string and without building the object tree (`JSON.parse` of a 132 KB
 * batch and its UTF-8 decoding were ~40% of the ingress's CPU, and the ingress never needs the
 * objects: it forwards the body's bytes to JetStream as they came).
 *
 * It only ever says "accepted, N signals, all valid" or "not sure": it answers N only for a
 * body that `validateBulk(parseJson(body))` (src/ingress/validate.ts) certainly accepts with N
 * signals and no signal error, and null for everything else, which then goes through that slow
 * path and gets exactly the answer (and the errors) it always got. So the 202/400 contract is the slow path's by
 * construction; test/unit/fast-bulk.test.ts checks the agreement on generated bodies.
 *
 * "Not sure" (null), deliberately: a byte >= 0x80 outside a string or not part of well-formed
 * UTF-8 inside one (the slow path's decoder replaces bad sequences with U+FFFD), any \u escape
 * (surrogates), a signal field name with an escape, a `data` key with a dot (the path-collision
 * check), an unknown or repeated top-level field, a required field that is null, a `data` whose
 * size bound passes MAX_DATA_BYTES, an empty or oversized batch, and anything that is not JSON.
 * Conservative where the slow path is subtle:
 * - repeated keys in a signal (JSON.parse keeps the last): every occurrence must pass;
 * - depth: every object and array inside `data` counts one level (the slow path does not count
 *   an object that is an element of an array), so the level counted here is never lower;
 * - size: the bytes of `data`'s text plus 25 per number is at least the UTF-8 size of its
 *   JSON.stringify (a string without \u escapes never grows when re-serialized: well-formed
 *   UTF-8 comes back as the same bytes, a short escape as at most two; a number's shortest form
 *   is at most 24 characters).
 */
import { MAX_DATA_BYTES, MAX_DATA_DEPTH, MAX_FUTURE_MS, MAX_SIGNALS, MAX_STRING, MIN_TIMESTAMP_MS } from './validate.js';
import { Rfc3339Reader } from '../shared/time.js';
import { COMMA, F_ATTRIBUTION, F_CUSTOMER, F_DATA, F_EVENT, F_KEY, F_TIMESTAMP, F_UNIT, FIELD_NAME_END, JsonBytes, K_CUSTOMER_ID, K_EXTERNAL_CUSTOMER_ID, K_EXTERNAL_PRODUCT_ID, K_PRODUCT_ID, LBRACE, LBRACKET, MINUS, NO, QUOTE, RBRACE, RBRACKET } from '../shared/json-bytes.js';

/** The ingress's judge of a body (see the header), on the shared byte reader (src/shared/json-bytes.ts). */
class Scanner extends JsonBytes {
  /** Numbers seen in the current `data` (each adds to the size bound). */
  numbers = 0;
  /** Signals read so far. */
  count = 0;
  /** Per signal read, the range [start, end) of its idempotencyKey's string, quotes included (-1, -1: none). */
  keys = new Int32Array(2 * 64);
  constructor(
    b: Uint8Array,
    readonly receivedAtMs: number,
    readonly times: Rfc3339Reader,
  ) {
    super(b);
  }

  /** A string of 1 to MAX_STRING units at p (or null when `optional`). */
  limitedString(p: number, optional: boolean): number {
    if (this.b[p] !== QUOTE) return optional ? this.nul(p) : NO;
    p = this.str(p + 1, false);
    return p !== NO && this.units >= 1 && this.units <= MAX_STRING ? p : NO;
  }

  timestamp(p: number): number {
    const b = this.b;
    if (b[p] !== QUOTE) return this.nul(p);
    const start = p + 1;
    const after = this.str(start, false);
    if (after === NO) return NO;
    const end = after - 1;
    // An escape inside would make the text differ from the bytes.
    if (end - start !== this.units) return NO;
    const ms = this.times.parseBytes(b, start, end);
    return ms !== null && ms >= MIN_TIMESTAMP_MS && ms <= this.receivedAtMs + MAX_FUTURE_MS ? after : NO;
  }

  /** A reference object whose string is 1 to MAX_STRING units (`attribution`: or null when `optional`). */
  limitedReference(p: number, id: typeof K_CUSTOMER_ID, external: typeof K_CUSTOMER_ID, optional: boolean): number {
    if (this.b[p] !== LBRACE) return optional ? this.nul(p) : NO;
    p = this.reference(p, id, external);
    return p !== NO && this.units >= 1 && this.units <= MAX_STRING ? p : NO;
  }

  /** One signal object at p. */
  override signal(p: number): number {
    const b = this.b;
    if (b[p] !== LBRACE) return NO;
    let seen = 0;
    const i = this.count++;
    if (2 * i + 2 > this.keys.length) {
      const keys = new Int32Array(this.keys.length * 2);
      keys.set(this.keys);
      this.keys = keys;
    }
    this.keys[2 * i] = -1;
    this.keys[2 * i + 1] = -1;
    p = this.ws(p + 1);
    for (;;) {
      if (b[p] !== QUOTE) return NO;
      p++;
      const f = this.field(p);
      switch (f) {
        case F_EVENT:
          p = this.value1(p + FIELD_NAME_END[f]);
          if (p === NO) return NO;
          p = this.limitedString(p, false);
          seen |= f;
          break;
        case F_CUSTOMER:
          p = this.value1(p + FIELD_NAME_END[f]);
          if (p === NO) return NO;
          p = this.limitedReference(p, K_CUSTOMER_ID, K_EXTERNAL_CUSTOMER_ID, false);
          seen |= f;
          break;
        case F_ATTRIBUTION:
          p = this.value1(p + FIELD_NAME_END[f]);
          if (p === NO) return NO;
          p = this.limitedReference(p, K_PRODUCT_ID, K_EXTERNAL_PRODUCT_ID, true);
          break;
        case F_UNIT:
          p = this.value1(p + FIELD_NAME_END[f]);
          if (p === NO) return NO;
          p = this.limitedString(p, true);
          break;
        case F_KEY: {
          p = this.value1(p + FIELD_NAME_END[f]);
          if (p === NO) return NO;
          const start = p;
          p = this.limitedString(p, true);
          // JSON.parse keeps a repeated field's last value: so does this.
          const keyed = b[start] === QUOTE;
          this.keys[2 * i] = keyed ? start : -1;
          this.keys[2 * i + 1] = keyed ? p : -1;
          break;
        }
        case F_TIMESTAMP:
          p = this.value1(p + FIELD_NAME_END[f]);
          if (p === NO) return NO;
          p = this.timestamp(p);
          break;
        case F_DATA:
          p = this.value1(p + FIELD_NAME_END[f]);
          if (p === NO) return NO;
          p = this.data(p);
          break;
        default:
          return NO;
      }
      if (p === NO) return NO;
      p = this.ws(p);
      const c = b[p++];
      if (c === COMMA) {
        p = this.ws(p);
        continue;
      }
      if (c === RBRACE) return seen === (F_EVENT | F_CUSTOMER) ? p : NO;
      return NO;
    }
  }

  /** `data`: null, or an object whose nesting and size bound are within the limits. */
  data(p: number): number {
    if (this.b[p] !== LBRACE) return this.nul(p);
    this.numbers = 0;
    const end = this.container(p, 1);
    if (end === NO) return NO;
    return end - p + 25 * this.numbers <= MAX_DATA_BYTES ? end : NO;
  }

  /** An object or array at p (level counted from `data` = 1); keys of objects must have no dot. */
  container(p: number, level: number): number {
    if (level > MAX_DATA_DEPTH) return NO;
    const b = this.b;
    const obj = b[p] === LBRACE;
    const close = obj ? RBRACE : RBRACKET;
    p = this.ws(p + 1);
    if (b[p] === close) return p + 1;
    for (;;) {
      if (obj) {
        if (b[p] !== QUOTE) return NO;
        p = this.str(p + 1, true);
        if (p === NO) return NO;
        p = this.value1(p);
        if (p === NO) return NO;
      }
      p = this.value(p, level);
      if (p === NO) return NO;
      p = this.ws(p);
      const c = b[p++];
      if (c === COMMA) {
        p = this.ws(p);
        continue;
      }
      return c === close ? p : NO;
    }
  }

  /** Any JSON value inside `data`, at p. */
  value(p: number, level: number): number {
    const b = this.b;
    const c = b[p];
    if (c === QUOTE) return this.str(p + 1, false);
    if (c === LBRACE || c === LBRACKET) return this.container(p, level + 1);
    if (c === MINUS || (c !== undefined && c >= 48 && c <= 57)) {
      this.numbers++;
      return this.number(p);
    }
    if (c === 116 || c === 102) return this.bool(p);
    return this.nul(p);
  }
}

/** A body the fast path accepted: its signals, and per signal the range of its idempotencyKey's JSON string in the body (-1, -1: none). */
export interface FastBulk {
  count: number;
  keys: Int32Array;
}

/**
 * The number of signals (and their keys' ranges) when `body` is a bulk body whose every signal
 * the slow path (`validateBulk` of `parseJson(body)`) certainly accepts, received at
 * `receivedAtMs`; null when not sure.
 */
export function fastBulk(body: Uint8Array, receivedAtMs: number): FastBulk | null {
  const view = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  const scanner = new Scanner(view, receivedAtMs, new Rfc3339Reader());
  const n = scanner.signals(MAX_SIGNALS);
  return n === NO ? null : { count: n, keys: scanner.keys };
}

/** The number of signals of `fastBulk`, or null. */
export function fastBulkCount(body: Uint8Array, receivedAtMs: number): number | null {
  return fastBulk(body, receivedAtMs)?.count ?? null;
}
