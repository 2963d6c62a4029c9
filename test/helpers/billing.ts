/**
 * Helpers for the billing-core unit tests: an exact reference model in BigInt millionths
 * (all amounts in these tests have at most six decimal places) and fast-check arbitraries.
 */
import fc from 'fast-check';
import { type Dec, parseDecimal } from '../../src/billing/decimal.js';

/** A decimal string (≤ 6 places) as an integer number of millionths. */
export function millionths(s: string): bigint {
  const negative = s.startsWith('-');
  const [i = '0', f = ''] = s.replace('-', '').split('.');
  const v = BigInt(i) * 1_000_000n + BigInt(f.padEnd(6, '0'));
  return negative ? -v : v;
}

/** The canonical decimal string of `v` × 10^-scaleDigits. */
export function fromMillionths(v: bigint, scaleDigits = 6): string {
  const negative = v < 0n;
  const text = (negative ? -v : v).toString().padStart(scaleDigits + 1, '0');
  const frac = text.slice(text.length - scaleDigits).replace(/0+$/, '');
  const int = text.slice(0, text.length - scaleDigits);
  const body = frac === '' ? int : `${int}.${frac}`;
  return negative && body !== '0' ? '-' + body : body;
}

/** Any decimal (negative allowed, up to 60 integer digits and 6 places). */
export function dec(s: string): Dec {
  return parseDecimal(s, { allowNegative: true, maxIntegerDigits: 60, maxDecimalPlaces: 6 });
}

/** The exact decimal of a number of millionths. */
export function decM(v: bigint): Dec {
  return dec(fromMillionths(v));
}

/**
 * Non-negative amounts in millionths: mostly small (up to 5 credits, often whole or with
 * few places, sometimes 0), sometimes far beyond 2^53 credits.
 */
export const amountM: fc.Arbitrary<bigint> = fc.oneof(
  { weight: 6, arbitrary: fc.bigInt({ min: 0n, max: 5_000_000n }) },
  { weight: 2, arbitrary: fc.integer({ min: 0, max: 5 }).map((n) => BigInt(n) * 1_000_000n) },
  { weight: 1, arbitrary: fc.constant(0n) },
  { weight: 1, arbitrary: fc.bigInt({ min: 0n, max: 10n ** 30n }) },
);
