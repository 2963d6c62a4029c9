/**
 * Exact decimals for money and credits. Every amount the billing core handles is a `Dec`;
 * binary floating point is never used in arithmetic, only as the last step that derives a
 * JSON number for a payload (`toJsonNumber`).
 *
 * Library: decimal.js (maintained, ships its own TypeScript types, immutable values). It
 * rounds every result to a configured number of significant digits, so on its own it can
 * lose digits silently (1 + 1e-60 at precision 50 gives 1). Here it is used through a
 * private clone with a precision of PRECISION digits, and `add`, `sub` and `mul` first
 * bound the digits the exact result can need and throw `DecimalError('INEXACT')` when the
 * bound exceeds PRECISION. So a result is either exact or an error, never rounded.
 * (big.js would be exact for add/sub/mul without a precision setting, but has no bundled
 * types; the guard makes decimal.js just as safe.) Division is deliberately not offered.
 *
 * Rules:
 * - Input syntax (`parseDecimal`): an optional `-`, an integer part without leading zeros
 *   (`0` or `[1-9][0-9]*`), optionally `.` and at least one digit. Nothing else: no `+`,
 *   no exponent (`1e3`), no `NaN`/`Infinity`, no whitespace, no `.5` or `5.`, no `007`.
 *   Each refusal is a `DecimalError` whose `code` names the problem and whose message
 *   names the field when one is given. Limits on decimal places (default 6) and integer
 *   digits (default 30) are options; negative values are refused unless allowed.
 * - Canonical output (`toCanonicalString`): plain notation at every magnitude (never an
 *   exponent), no trailing zeros in the fraction and no trailing `.`, no leading `+`, `-`
 *   only before a non-zero value, zero is `0`. So "1.50" → "1.5", "-0.000" → "0",
 *   "100" → "100". Two equal values always give the same string.
 * - JSON numbers (`toJsonNumber`): the double nearest to the exact value (round half to
 *   even, as ECMAScript's string-to-number conversion does), exact within ±2^53 for
 *   integers; never -0; a value beyond the double range is an error (`OUT_OF_RANGE`),
 *   never Infinity.
 */
import { Decimal } from 'decimal.js';
import { INEXACT_LOWER_BOUND, integerDigitsOfValue, isZeroValue, magnitudeOf, placesOf, readJsonNumberText } from '../shared/json-number.js';

/** Significant digits an arithmetic result may have; beyond this `add`/`sub`/`mul` throw. */
export const PRECISION = 1000;

const D = Decimal.clone({
  precision: PRECISION,
  rounding: Decimal.ROUND_HALF_EVEN,
  toExpNeg: -9e15,
  toExpPos: 9e15,
});

declare const brand: unique symbol;
/** An exact decimal. Only the functions of this module create or combine them. */
export type Dec = Decimal & { readonly [brand]: 'Dec' };

export type DecimalErrorCode =
  | 'WRONG_TYPE'
  | 'EMPTY'
  | 'SYNTAX'
  | 'EXPONENT'
  | 'NOT_FINITE'
  | 'NEGATIVE'
  | 'TOO_MANY_DECIMAL_PLACES'
  | 'TOO_MANY_INTEGER_DIGITS'
  | 'INEXACT'
  | 'OUT_OF_RANGE';

/** A refused input or operation; `code` names the problem, `field` the input when known. */
export class DecimalError extends Error {
  override readonly name = 'DecimalError';
  constructor(
    readonly code: DecimalErrorCode,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

export interface ParseOptions {
  /** Most digits allowed after the point. Default 6 (credits have at most six places). */
  maxDecimalPlaces?: number;
  /** Most digits allowed before the point. Default 30. */
  maxIntegerDigits?: number;
  /** Accept values below zero. Default false ("-0" is zero and always accepted). */
  allowNegative?: boolean;
  /** Name used in error messages, e.g. "credits.granted". */
  field?: string;
}

const SYNTAX = /^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?$/;

function fail(code: DecimalErrorCode, what: string, field: string | undefined): never {
  throw new DecimalError(code, `${field ?? 'value'} ${what}`, field);
}

function syntaxProblem(s: string, field: string | undefined): never {
  const t = s.trim();
  if (t !== s) fail('SYNTAX', 'must not contain surrounding whitespace', field);
  if (/^[+-]?(nan|infinity|inf)$/i.test(t)) fail('NOT_FINITE', `must be a finite decimal, got "${s}"`, field);
  if (/^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$/.test(t)) {
    fail('EXPONENT', `must be written without an exponent, got "${s}"`, field);
  }
  if (t.startsWith('+')) fail('SYNTAX', 'must not have a leading "+"', field);
  if (/^-?0\d/.test(t)) fail('SYNTAX', `must not have leading zeros, got "${s}"`, field);
  fail('SYNTAX', `must be a decimal number like "12.5" or "-0.000001", got "${s}"`, field);
}

/** Parses a decimal string strictly (see the header for the grammar and the limits). */
export function parseDecimal(input: unknown, options: ParseOptions = {}): Dec {
  const { maxDecimalPlaces = 6, maxIntegerDigits = 30, allowNegative = false, field } = options;
  if (typeof input !== 'string') fail('WRONG_TYPE', `must be a string, got ${typeof input}`, field);
  if (input.length === 0) fail('EMPTY', 'must not be empty', field);
  const m = SYNTAX.exec(input);
  if (m === null) syntaxProblem(input, field);
  const [, minus = '', intPart = '', frac = ''] = m;
  if (intPart.length > maxIntegerDigits) {
    fail('TOO_MANY_INTEGER_DIGITS', `has ${intPart.length} integer digits; at most ${maxIntegerDigits} are allowed`, field);
  }
  if (frac.length > maxDecimalPlaces) {
    fail('TOO_MANY_DECIMAL_PLACES', `has ${frac.length} decimal places; at most ${maxDecimalPlaces} are allowed`, field);
  }
  const value = new D(input) as Dec;
  if (minus !== '' && !allowNegative && !value.isZero()) fail('NEGATIVE', 'must not be negative', field);
  return normalizeZero(value);
}

/**
 * An exact decimal from a JSON number (e.g. a quantity read from a signal's data). The
 * value taken is the shortest decimal that round-trips to the double (what
 * `String(n)` shows, i.e. what the sender most likely wrote), then checked against the
 * same limits as `parseDecimal`. NaN and ±Infinity are refused.
 */
export function decimalFromNumber(n: number, options: ParseOptions = {}): Dec {
  const { maxDecimalPlaces = 6, maxIntegerDigits = 30, allowNegative = false, field } = options;
  if (typeof n !== 'number') fail('WRONG_TYPE', `must be a number, got ${typeof n}`, field);
  if (!Number.isFinite(n)) fail('NOT_FINITE', `must be a finite number, got ${n}`, field);
  const value = normalizeZero(new D(String(n)) as Dec);
  if (value.isNeg() && !allowNegative) fail('NEGATIVE', 'must not be negative', field);
  checkLimits(value, maxDecimalPlaces, maxIntegerDigits, field);
  return value;
}

/**
 * Most distant power of ten a value built here may have: decimal.js's own exponents stop at
 * ±9·10^15 (beyond, it makes Infinity or 0 without an error).
 */
const MAX_BUILT_MAGNITUDE = 10n ** 15n;

/**
 * The exact value of a JSON number's text as written (`0.10000000000000000001`, `1.5e-7`,
 * `-0`), for numbers whose text a double would not keep (src/billing/quantity.ts). JSON's
 * grammar, exponents of any size included (src/shared/json-number.ts). Checked in this
 * order, each on the exact value (trailing zeros of the fraction are not places): the sign
 * (unless allowed; `-0` is zero), the decimal places, the integer digits, so `1e400` has 401
 * integer digits, `1e-400` 400 decimal places and `1e-99999999999999999999` 10^20 of them:
 * never Infinity, never 0. A zero is zero at any exponent (`0e99999999999999999999`). The
 * counts in a message are exact; a value within the limits but beyond decimal.js's exponents
 * (only with limits past 10^15) is `OUT_OF_RANGE`.
 */
export function decimalFromJsonNumberText(text: string, options: ParseOptions = {}): Dec {
  const { maxDecimalPlaces = 6, maxIntegerDigits = 30, allowNegative = false, field } = options;
  if (typeof text !== 'string') fail('WRONG_TYPE', `must be a string, got ${typeof text}`, field);
  const v = readJsonNumberText(text);
  if (v === null) fail('SYNTAX', `must be a JSON number, got ${JSON.stringify(text.slice(0, 64))}`, field);
  if (isZeroValue(v)) return ZERO;
  if (v.negative && !allowNegative) fail('NEGATIVE', 'must not be negative', field);
  // An exponent too long to read is stated by what its count is known to exceed.
  const count = (n: bigint): string => (v.exact ? String(n) : `more than ${INEXACT_LOWER_BOUND}`);
  const places = placesOf(v);
  if (places > BigInt(maxDecimalPlaces)) fail('TOO_MANY_DECIMAL_PLACES', `has ${count(places)} decimal places; at most ${maxDecimalPlaces} are allowed`, field);
  const integers = integerDigitsOfValue(v);
  if (integers > BigInt(maxIntegerDigits)) fail('TOO_MANY_INTEGER_DIGITS', `has ${count(integers)} integer digits; at most ${maxIntegerDigits} are allowed`, field);
  const top = magnitudeOf(v);
  if (!v.exact || top > MAX_BUILT_MAGNITUDE || v.exponent < -MAX_BUILT_MAGNITUDE) fail('OUT_OF_RANGE', 'is beyond the range of exact decimals', field);
  return new D(`${v.negative ? '-' : ''}${v.digits}e${v.exponent}`) as Dec;
}

function checkLimits(value: Dec, maxDecimalPlaces: number, maxIntegerDigits: number, field: string | undefined): void {
  if (value.dp() > maxDecimalPlaces) {
    fail('TOO_MANY_DECIMAL_PLACES', `has ${value.dp()} decimal places; at most ${maxDecimalPlaces} are allowed`, field);
  }
  if (integerDigits(value) > maxIntegerDigits) {
    fail('TOO_MANY_INTEGER_DIGITS', `has ${integerDigits(value)} integer digits; at most ${maxIntegerDigits} are allowed`, field);
  }
}

/** Digits after the point of `d` (0 for an integer). */
export function decimalPlaces(d: Dec): number {
  return d.dp();
}

/** Digits before the point of |d| (0 for |d| < 1). */
export function integerDigitsOf(d: Dec): number {
  return integerDigits(d);
}

/** Zero, one and any safe integer as exact decimals. */
export function decimalFromInteger(n: number): Dec {
  if (!Number.isSafeInteger(n)) throw new DecimalError('OUT_OF_RANGE', `${n} is not a safe integer`);
  return normalizeZero(new D(n) as Dec);
}
export const ZERO: Dec = decimalFromInteger(0);

/** Plain notation, no exponent, no trailing zeros, "0" for zero (see the header). */
export function toCanonicalString(d: Dec): string {
  return d.isZero() ? '0' : d.toFixed();
}

/** The double nearest to `d` (for the numeric twin of a `*Decimal` field); never -0. */
export function toJsonNumber(d: Dec): number {
  const n = Number(toCanonicalString(d));
  if (!Number.isFinite(n)) throw new DecimalError('OUT_OF_RANGE', `${toCanonicalString(d)} is beyond the range of a JSON number`);
  return n === 0 ? 0 : n;
}

function integerDigits(d: Dec): number {
  return d.e >= 0 ? d.e + 1 : 0;
}

/** Digits spanned from the most significant digit down to the last decimal place. */
function span(top: number, dp: number): number {
  return Math.max(top, 0) + 1 + dp;
}

function checked(op: string, bound: number, compute: () => Decimal): Dec {
  if (bound > PRECISION) {
    throw new DecimalError('INEXACT', `${op} would need up to ${bound} significant digits; at most ${PRECISION} are exact`);
  }
  return normalizeZero(compute() as Dec);
}

function normalizeZero(d: Dec): Dec {
  return d.isZero() && d.isNeg() ? (new D(0) as Dec) : d;
}

/** a + b, exact (or DecimalError INEXACT, never rounded). */
export function add(a: Dec, b: Dec): Dec {
  return checked('add', span(Math.max(a.e, b.e) + 1, Math.max(a.dp(), b.dp())) + 1, () => a.plus(b));
}

/** a − b, exact (or DecimalError INEXACT, never rounded). */
export function sub(a: Dec, b: Dec): Dec {
  return checked('sub', span(Math.max(a.e, b.e) + 1, Math.max(a.dp(), b.dp())) + 1, () => a.minus(b));
}

/** a × b, exact (or DecimalError INEXACT, never rounded). */
export function mul(a: Dec, b: Dec): Dec {
  return checked('mul', span(a.e + b.e + 1, a.dp() + b.dp()) + 1, () => a.times(b));
}

/** −a, exact. */
export function neg(a: Dec): Dec {
  return normalizeZero(a.negated() as Dec);
}

/** Sum of a list (0 for an empty list), exact. */
export function sum(values: Iterable<Dec>): Dec {
  let total = ZERO;
  for (const v of values) total = add(total, v);
  return total;
}

/** −1, 0 or 1 as a is below, equal to or above b. */
export function compare(a: Dec, b: Dec): -1 | 0 | 1 {
  const c = a.cmp(b);
  return c < 0 ? -1 : c > 0 ? 1 : 0;
}

/** −1, 0 or 1 as d is below, equal to or above zero. */
export function sign(d: Dec): -1 | 0 | 1 {
  return d.isZero() ? 0 : d.isNeg() ? -1 : 1;
}

/** True when `x` is a `Dec` made by this module. */
export function isDec(x: unknown): x is Dec {
  return x instanceof D;
}
