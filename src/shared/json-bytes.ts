/**
 * Reading a signals batch body (`{"signals":[…]}`) as bytes, without decoding it to a string
 * and without building its object tree: the primitives both byte-level readers share, the
 * ingress's judge of a body (src/ingress/fast-bulk.ts) and the pipeline's renderer of its rows
 * (src/pipeline/rows-bytes.ts). Each reader answers only where it is certain and otherwise
 * says "not sure", leaving the body to the slow path (JSON.parse) that it stands in for.
 *
 * Every method takes the position to read from and returns the position after what it read,
 * or NO (positions are passed, not kept in a field: these loops run over every byte of every
 * batch). Reading past the end gives `undefined`, which matches no expected byte.
 */

export const QUOTE = 34;
export const BACKSLASH = 92;
export const COMMA = 44;
export const COLON = 58;
export const LBRACE = 123;
export const RBRACE = 125;
export const LBRACKET = 91;
export const RBRACKET = 93;
export const MINUS = 45;
const DOT = 46;
const SLASH = 47;

/** Field ids of a signal; the two required ones are bits for a "seen" mask. */
export const F_EVENT = 1;
export const F_CUSTOMER = 2;
export const F_UNIT = 3;
export const F_TIMESTAMP = 4;
export const F_KEY = 5;
export const F_DATA = 6;
export const F_ATTRIBUTION = 7;
/** Bytes from after a field name's opening quote to after its closing quote, by field id. */
export const FIELD_NAME_END = [0, 10, 9, 7, 10, 15, 5, 12] as const;

/** Kinds of a reference (`customer`, `attribution`): the service's id, or the producer's externalId. */
export const REF_ID = 0;
export const REF_EXTERNAL = 1;

/** A key to compare: little-endian 32-bit words at offsets covering all of it (the last may overlap). Keys are at least 4 bytes. */
export interface Literal {
  length: number;
  at: number[];
  words: number[];
}
export function literal(s: string): Literal {
  const b = Buffer.from(s, 'latin1');
  const at: number[] = [];
  for (let i = 0; i + 4 <= b.length; i += 4) at.push(i);
  if (b.length % 4 !== 0) at.push(b.length - 4);
  return { length: b.length, at, words: at.map((i) => b.readUInt32LE(i)) };
}
const K_SIGNALS = literal('signals');
const K_EVENT = literal('eventName');
const K_CUSTOMER = literal('customer');
const K_ATTRIBUTION = literal('attribution');
export const K_CUSTOMER_ID = literal('customerId');
export const K_EXTERNAL_CUSTOMER_ID = literal('externalCustomerId');
export const K_PRODUCT_ID = literal('productId');
export const K_EXTERNAL_PRODUCT_ID = literal('externalProductId');
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

/** Not sure: the reader stops and the slow path decides. */
export const NO = -1;

export abstract class JsonBytes {
  /** Length in UTF-16 units of the last string read by `str`. */
  units = 0;
  /**
   * Whether a string read by `str` since this was last cleared held `\/`: JSON.stringify of
   * the parsed text writes a plain `/` there, so its bytes are not what the slow path writes.
   * (Every other escape `str` takes is the one JSON.stringify writes for that character.)
   */
  slashEscape = false;
  readonly dv: DataView;

  /** The last reference read by `reference`: its kind (REF_ID, REF_EXTERNAL) and its string's range [refStart, refEnd), quotes included. */
  refKind = REF_ID;
  refStart = 0;
  refEnd = 0;

  constructor(readonly b: Uint8Array) {
    this.dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  }

  /** One signal object at p (each reader's own). */
  abstract signal(p: number): number;

  /** The whole body, `{"signals":[<signal>, ...]}`: the number of its signals (at most `max`), or NO. */
  signals(max: number): number {
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
      if (p === NO || ++count > max) return NO;
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
      if (e === QUOTE || e === BACKSLASH || e === 98 || e === 102 || e === 110 || e === 114 || e === 116) {
        p += 2;
        units++;
        continue;
      }
      if (e === SLASH) {
        this.slashEscape = true;
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
    if (c === 97) return this.key(p, K_ATTRIBUTION) ? F_ATTRIBUTION : NO; // a
    if (c === 116) return this.key(p, K_TIMESTAMP) ? F_TIMESTAMP : NO; // t
    if (c === 100) return this.key(p, K_DATA) ? F_DATA : NO; // d
    if (c === 105) return this.key(p, K_KEY) ? F_KEY : NO; // i
    if (c === 117) return this.key(p, K_UNIT) ? F_UNIT : NO; // u
    return NO;
  }

  /**
   * A reference object at p, `{"<id>": "…"}` or `{"<external>": "…"}` (exactly one key, a
   * string): the position after it, its kind and string in refKind/refStart/refEnd, the
   * string's length in `units`.
   */
  reference(p: number, id: Literal, external: Literal): number {
    const b = this.b;
    if (b[p] !== LBRACE) return NO;
    p = this.ws(p + 1);
    if (b[p] !== QUOTE) return NO;
    p++;
    let kind: number;
    if (this.key(p, id)) {
      kind = REF_ID;
      p += id.length + 1;
    } else if (this.key(p, external)) {
      kind = REF_EXTERNAL;
      p += external.length + 1;
    } else return NO;
    p = this.value1(p);
    if (p === NO || b[p] !== QUOTE) return NO;
    const start = p;
    p = this.str(p + 1, false);
    if (p === NO) return NO;
    this.refKind = kind;
    this.refStart = start;
    this.refEnd = p;
    p = this.ws(p);
    return b[p] === RBRACE ? p + 1 : NO;
  }

  /** `null` at p. */
  nul(p: number): number {
    const b = this.b;
    return b[p] === 110 && b[p + 1] === 117 && b[p + 2] === 108 && b[p + 3] === 108 ? p + 4 : NO;
  }

  /** `true` or `false` at p. */
  bool(p: number): number {
    const b = this.b;
    const c = b[p];
    if (c === 116) return b[p + 1] === 114 && b[p + 2] === 117 && b[p + 3] === 101 ? p + 4 : NO;
    if (c === 102) return b[p + 1] === 97 && b[p + 2] === 108 && b[p + 3] === 115 && b[p + 4] === 101 ? p + 5 : NO;
    return NO;
  }

  /** From after a key's closing quote: past the colon to the value. */
  value1(p: number): number {
    p = this.ws(p);
    if (this.b[p] !== COLON) return NO;
    return this.ws(p + 1);
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
    return p;
  }
}
