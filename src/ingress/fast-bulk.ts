/**
 * The fast path of `POST /api/v2/signals/bulk`: judges the raw body bytes in one pass, without
 * decoding them to a string and without building the object tree (`JSON.parse` of a 132 KB
 * batch and its UTF-8 decoding were ~40% of the ingress's CPU, and the ingress never needs the
 * objects: it forwards the body's bytes to JetStream as they came).
 *
 * It only ever says "accepted, N signals" or "not sure": it answers N only for a body that
 * `validateBulk(parseJson(body))` (src/ingress/validate.ts) certainly accepts with N signals,
 * and null for everything else, which then goes through that slow path and gets exactly the
 * answer (and the error) it always got. So the 202/400 contract is the slow path's by
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

const QUOTE = 34;
const BACKSLASH = 92;
const COMMA = 44;
const COLON = 58;
const LBRACE = 123;
const RBRACE = 125;
const LBRACKET = 91;
const RBRACKET = 93;
const MINUS = 45;
const DOT = 46;

/** Field ids of a signal; the two required ones are bits for the "seen" mask. */
const F_EVENT = 1;
const F_CUSTOMER = 2;
const F_UNIT = 3;
const F_TIMESTAMP = 4;
const F_KEY = 5;
const F_DATA = 6;

/** A key to compare: little-endian 32-bit words at offsets covering all of it (the last may overlap). Keys are at least 4 bytes. */
interface Literal {
  length: number;
  at: number[];
  words: number[];
}
function literal(s: string): Literal {
  const b = Buffer.from(s, 'latin1');
  const at: number[] = [];
  for (let i = 0; i + 4 <= b.length; i += 4) at.push(i);
  if (b.length % 4 !== 0) at.push(b.length - 4);
  return { length: b.length, at, words: at.map((i) => b.readUInt32LE(i)) };
}
const K_SIGNALS = literal('signals');
const K_EVENT = literal('eventName');
const K_CUSTOMER = literal('customerId');
const K_UNIT = literal('unitId');
const K_TIMESTAMP = literal('timestamp');
const K_KEY = literal('idempotencyKey');
const K_DATA = literal('data');

/** Classes of the bytes inside a string: what `str` does with each. */
const PLAIN = 0;
const END = 1;
const ESCAPE = 2;
const DOTTED = 3;
const BAIL = 4;
const UTF8 = 5;
const STR_CLASS = new Uint8Array(256).map((_, c) => (c === QUOTE ? END : c === BACKSLASH ? ESCAPE : c === DOT ? DOTTED : c < 0x20 ? BAIL : c >= 0x80 ? UTF8 : PLAIN));

/** Bail-out: the scanner stops and the slow path decides. */
const NO = -1;

/**
 * Every method takes the position to read from and returns the position after what it read,
 * or NO (positions are passed, not kept in a field: this loop runs over every byte of every
 * batch). Reading past the end gives `undefined`, which matches no expected byte.
 */
class Scanner {
  /** Length in UTF-16 units of the last string read by `str`. */
  units = 0;
  readonly dv: DataView;
  /** Numbers seen in the current `data` (each adds to the size bound). */
  numbers = 0;
  constructor(
    readonly b: Uint8Array,
    readonly receivedAtMs: number,
    readonly times: Rfc3339Reader,
  ) {
    this.dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  }

  ws(p: number): number {
    const b = this.b;
    let c = b[p]!;
    // Most calls find a token at once (compact JSON): one comparison.
    if (c > 32) return p;
    while (c === 32 || c === 10 || c === 13 || c === 9) c = b[++p]!;
    return p;
  }

  /** From after an opening quote to after the closing one; its length in `units`. `dotted`: NO also on a '.'. */
  str(p: number, dotted: boolean): number {
    const b = this.b;
    let units = 0;
    for (;;) {
      // Plain characters in a tight loop (one table look-up each); past the end the look-up is undefined.
      const from = p;
      while (STR_CLASS[b[p]!] === PLAIN) p++;
      units += p - from;
      const k = STR_CLASS[b[p]!];
      if (k === END) break;
      if (k === DOTTED) {
        if (dotted) return NO;
        p++;
        units++;
        continue;
      }
      if (k === UTF8) {
        const n = this.utf8(p);
        if (n === NO) return NO;
        // 4-byte sequences are two UTF-16 units (a surrogate pair), the others one
        units += n === 4 ? 2 : 1;
        p += n;
        continue;
      }
      if (k !== ESCAPE) return NO;
      const e = b[p + 1];
      // \" \\ \/ \b \f \n \r \t: one unit each. \u: not handled here (surrogates).
      if (e === QUOTE || e === BACKSLASH || e === 47 || e === 98 || e === 102 || e === 110 || e === 114 || e === 116) {
        p += 2;
        units++;
        continue;
      }
      return NO;
    }
    this.units = units;
    return p + 1;
  }

  /**
   * The length of the well-formed UTF-8 sequence at p (2 to 4 bytes), or NO: an overlong form,
   * an encoded surrogate (U+D800-DFFF), a code point above U+10FFFF or a missing continuation
   * byte. Those are what the slow path's decoder turns into U+FFFD, changing the text (its
   * length and size): left to it. A well-formed sequence decodes to itself, well-formed
   * UTF-16 that JSON.stringify writes back as the same bytes.
   */
  utf8(p: number): number {
    const b = this.b;
    const c = b[p]!;
    const c1 = b[p + 1];
    if (c1 === undefined) return NO;
    if (c >= 0xc2 && c <= 0xdf) return c1 >= 0x80 && c1 <= 0xbf ? 2 : NO;
    const c2 = b[p + 2];
    if (c2 === undefined || c2 < 0x80 || c2 > 0xbf) return NO;
    if (c >= 0xe0 && c <= 0xef) {
      const lo = c === 0xe0 ? 0xa0 : 0x80;
      const hi = c === 0xed ? 0x9f : 0xbf;
      return c1 >= lo && c1 <= hi ? 3 : NO;
    }
    const c3 = b[p + 3];
    if (c3 === undefined || c3 < 0x80 || c3 > 0xbf) return NO;
    if (c >= 0xf0 && c <= 0xf4) {
      const lo = c === 0xf0 ? 0x90 : 0x80;
      const hi = c === 0xf4 ? 0x8f : 0xbf;
      return c1 >= lo && c1 <= hi ? 4 : NO;
    }
    return NO;
  }

  /** Whether the bytes at p (after an opening quote) are `lit` and a closing quote: compared four bytes at a time. */
  key(p: number, lit: Literal): boolean {
    const n = lit.length;
    // Also the bounds check of the reads below: p + n is inside the body.
    if (this.b[p + n] !== QUOTE) return false;
    const dv = this.dv;
    const words = lit.words;
    for (let k = 0; k < words.length; k++) if (dv.getUint32(p + lit.at[k]!, true) !== words[k]) return false;
    return true;
  }

  /** A signal field name at p (after the opening quote), or NO. */
  field(p: number): number {
    const c = this.b[p];
    if (c === 101) return this.key(p, K_EVENT) ? F_EVENT : NO; // e
    if (c === 99) return this.key(p, K_CUSTOMER) ? F_CUSTOMER : NO; // c
    if (c === 116) return this.key(p, K_TIMESTAMP) ? F_TIMESTAMP : NO; // t
    if (c === 100) return this.key(p, K_DATA) ? F_DATA : NO; // d
    if (c === 105) return this.key(p, K_KEY) ? F_KEY : NO; // i
    if (c === 117) return this.key(p, K_UNIT) ? F_UNIT : NO; // u
    return NO;
  }

  /** `null` at p. */
  nul(p: number): number {
    const b = this.b;
    return b[p] === 110 && b[p + 1] === 117 && b[p + 2] === 108 && b[p + 3] === 108 ? p + 4 : NO;
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

  /** One signal object at p. */
  signal(p: number): number {
    const b = this.b;
    if (b[p] !== LBRACE) return NO;
    let seen = 0;
    p = this.ws(p + 1);
    for (;;) {
      if (b[p] !== QUOTE) return NO;
      p++;
      const f = this.field(p);
      switch (f) {
        case F_EVENT:
        case F_CUSTOMER:
          p = this.value1(p + (f === F_EVENT ? 10 : 11));
          if (p === NO) return NO;
          p = this.limitedString(p, false);
          seen |= f;
          break;
        case F_UNIT:
        case F_KEY:
          p = this.value1(p + (f === F_UNIT ? 7 : 15));
          if (p === NO) return NO;
          p = this.limitedString(p, true);
          break;
        case F_TIMESTAMP:
          p = this.value1(p + 10);
          if (p === NO) return NO;
          p = this.timestamp(p);
          break;
        case F_DATA:
          p = this.value1(p + 5);
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

  /** From after a key's closing quote: past the colon to the value. */
  value1(p: number): number {
    p = this.ws(p);
    if (this.b[p] !== COLON) return NO;
    return this.ws(p + 1);
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
    if (c === MINUS || (c !== undefined && c >= 48 && c <= 57)) return this.number(p);
    if (c === 116) return b[p + 1] === 114 && b[p + 2] === 117 && b[p + 3] === 101 ? p + 4 : NO; // true
    if (c === 102) return b[p + 1] === 97 && b[p + 2] === 108 && b[p + 3] === 115 && b[p + 4] === 101 ? p + 5 : NO; // false
    return this.nul(p);
  }

  /** A number in JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
  number(p: number): number {
    const b = this.b;
    if (b[p] === MINUS) p++;
    let c = b[p];
    if (c === 48) p++;
    else if (c !== undefined && c >= 49 && c <= 57) {
      p++;
      while ((c = b[p]) !== undefined && c >= 48 && c <= 57) p++;
    } else return NO;
    if (b[p] === DOT) {
      const d = ++p;
      while ((c = b[p]) !== undefined && c >= 48 && c <= 57) p++;
      if (p === d) return NO;
    }
    c = b[p];
    if (c === 101 || c === 69) {
      c = b[++p];
      if (c === 43 || c === MINUS) p++;
      const d = p;
      while ((c = b[p]) !== undefined && c >= 48 && c <= 57) p++;
      if (p === d) return NO;
    }
    this.numbers++;
    return p;
  }

  /** The whole body: `{"signals":[<signal>, ...]}`; the number of signals or NO. */
  body(): number {
    const b = this.b;
    let p = this.ws(0);
    if (b[p] !== LBRACE) return NO;
    p = this.ws(p + 1);
    if (b[p] !== QUOTE || !this.key(p + 1, K_SIGNALS)) return NO;
    p = this.value1(p + 9);
    if (p === NO || b[p] !== LBRACKET) return NO;
    p = this.ws(p + 1);
    let count = 0;
    for (;;) {
      p = this.signal(p);
      if (p === NO || ++count > MAX_SIGNALS) return NO;
      p = this.ws(p);
      const c = b[p++];
      if (c === COMMA) {
        p = this.ws(p);
        continue;
      }
      if (c === RBRACKET) break;
      return NO;
    }
    p = this.ws(p);
    if (b[p] !== RBRACE) return NO;
    p = this.ws(p + 1);
    return p === b.length ? count : NO;
  }
}

/**
 * The number of signals when `body` is a bulk body that the slow path (`validateBulk` of
 * `parseJson(body)`) certainly accepts, received at `receivedAtMs`; null when not sure.
 */
export function fastBulkCount(body: Uint8Array, receivedAtMs: number): number | null {
  const view = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  const n = new Scanner(view, receivedAtMs, new Rfc3339Reader()).body();
  return n === NO ? null : n;
}
