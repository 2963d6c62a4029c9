/**
 * The exact value a JSON number's text states, at any exponent.
 *
 * JSON's grammar puts no bound on a number's digits or its exponent, so `1e-99999999999999999999`
 * is a valid number and states a value of 10^-(10^20): neither zero nor anything a double,
 * a safe integer or decimal.js (whose exponents stop at ±9·10^15) can hold. The value is
 * read here as its significant digits and a power of ten kept as a bigint, so the digits
 * before and after the point are counted exactly, however large, without building the
 * number.
 *
 * An exponent written with more than EXPONENT_DIGITS significant digits is not read (a bigint
 * of a megabyte of digits takes a tenth of a second, and a count that long could be no part of
 * a message): the value is then marked inexact and carries ±10^EXPONENT_DIGITS as its exponent,
 * which is past every bound below 10^(EXPONENT_DIGITS − 1) in the same direction, as the written
 * one is (the significand's own digits, fewer than 10^10, cannot bring it back).
 */

/** Most significant digits of a written exponent that are read exactly. */
export const EXPONENT_DIGITS = 40;
/** What an inexact value's counts are known to exceed: 10^(EXPONENT_DIGITS − 1). */
export const INEXACT_LOWER_BOUND = 10n ** BigInt(EXPONENT_DIGITS - 1);
const STAND_IN = 10n ** BigInt(EXPONENT_DIGITS);

/** A JSON number's value: `(negative ? −1 : 1) × digits × 10^exponent`; zero has `digits` ''. */
export interface JsonNumberValue {
  /** The text's sign (`-0` is negative and zero). */
  readonly negative: boolean;
  /** The significand: no leading and no trailing zeros; '' for zero. */
  readonly digits: string;
  /** The power of ten of the significand's last digit (0n for zero). */
  readonly exponent: bigint;
  /** False when the written exponent was too long to read: `exponent` is then a stand-in (see the header). */
  readonly exact: boolean;
}

const JSON_NUMBER = /^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([-+]?[0-9]+))?$/;

/** The value of a JSON number's text, or null when the text is not one (JSON's grammar exactly). */
export function readJsonNumberText(text: string): JsonNumberValue | null {
  const m = JSON_NUMBER.exec(text);
  if (m === null) return null;
  const [, minus = '', intPart = '', frac = '', exp = '0'] = m;
  const all = intPart + frac;
  let start = 0;
  while (start < all.length && all.charCodeAt(start) === 48) start++;
  if (start === all.length) return { negative: minus !== '', digits: '', exponent: 0n, exact: true };
  let end = all.length;
  while (all.charCodeAt(end - 1) === 48) end--;
  const digits = all.slice(start, end);
  const expNegative = exp.charCodeAt(0) === 45;
  let expStart = expNegative || exp.charCodeAt(0) === 43 ? 1 : 0;
  while (expStart < exp.length - 1 && exp.charCodeAt(expStart) === 48) expStart++;
  if (exp.length - expStart > EXPONENT_DIGITS) return { negative: minus !== '', digits, exponent: expNegative ? -STAND_IN : STAND_IN, exact: false };
  // The last written digit is worth 10^(exp − frac.length); each trailing zero dropped raises it by one.
  const exponent = BigInt(exp) - BigInt(frac.length) + BigInt(all.length - end);
  return { negative: minus !== '', digits, exponent, exact: true };
}

/** True when the value is zero (`0`, `-0.000`, `0e999999999999`). */
export const isZeroValue = (v: JsonNumberValue): boolean => v.digits === '';

/** Digits after the point of the value (trailing zeros of a fraction are not places): 0 for an integer and for zero. */
export function placesOf(v: JsonNumberValue): bigint {
  return v.digits !== '' && v.exponent < 0n ? -v.exponent : 0n;
}

/** Digits before the point of |value|: 0 when |value| < 1. */
export function integerDigitsOfValue(v: JsonNumberValue): bigint {
  const n = BigInt(v.digits.length) + v.exponent;
  return v.digits !== '' && n > 0n ? n : 0n;
}

/** The power of ten of the most significant digit (the value is in [10^m, 10^(m+1))); meaningless for zero. */
export function magnitudeOf(v: JsonNumberValue): bigint {
  return BigInt(v.digits.length) - 1n + v.exponent;
}
