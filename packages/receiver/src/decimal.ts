/**
 * Exact decimals from a delivery, as strings (no floats for money).
 *
 * - Credit quantities (spec 2.6, 2.8) have `*Decimal` twins: exact at any magnitude. The
 *   accessors below return those strings, checked to be plain decimals; the JSON numbers
 *   beside them are only the nearest doubles.
 * - Numbers without a twin (`payment.amount`, `overage.threshold` and `currentUsage`, the
 *   invoice and checkout amounts): the service writes each as the shortest text that reads
 *   back as its double (JSON.stringify), so `numberToDecimal` gives back exactly the decimal
 *   that was on the wire, in plain notation (`1e21` → `1000000000000000000000`). No more
 *   precision was ever there to recover.
 *
 * To compute, hand the strings to a decimal library: `toDecimal(s, Decimal)` works with any
 * constructor taking a string (decimal.js, big.js, bignumber.js); this package depends on none.
 */
import type { CreditCapReached, CreditsDepleted, DecimalString } from './events.js';

/** A plain decimal: optional `-`, digits, optional fraction; no exponent, no `+`, no spaces. */
export const DECIMAL_PATTERN = /^-?[0-9]+(?:\.[0-9]+)?$/;

export class DecimalFormatError extends Error {
  override readonly name = 'DecimalFormatError';
}

/** `value` if it is a plain decimal string, else throws `DecimalFormatError` naming `field`. */
export function exactDecimal(value: unknown, field = 'value'): DecimalString {
  if (typeof value !== 'string' || !DECIMAL_PATTERN.test(value)) {
    throw new DecimalFormatError(`${field} must be a decimal string like "-12.5", got ${JSON.stringify(value)}`);
  }
  return value;
}

/** The exact amounts of a `billing-credits-depleted` payload (`data.credits`). */
export function creditsDecimals(credits: CreditsDepleted): { total: DecimalString; remaining: DecimalString; used: DecimalString } {
  return {
    total: exactDecimal(credits.totalCreditsDecimal, 'credits.totalCreditsDecimal'),
    remaining: exactDecimal(credits.remainingCreditsDecimal, 'credits.remainingCreditsDecimal'),
    used: exactDecimal(credits.usedCreditsDecimal, 'credits.usedCreditsDecimal'),
  };
}

/** The exact amounts of a `billing-credit-cap-reached` payload (its whole `data`). */
export function capDecimals(data: CreditCapReached): { capAmount: DecimalString; used: DecimalString } {
  return {
    capAmount: exactDecimal(data.cap.amountDecimal, 'cap.amountDecimal'),
    used: exactDecimal(data.usedDecimal, 'usedDecimal'),
  };
}

/**
 * The decimal a JSON number was written as, in plain notation: `0.1` → `"0.1"`,
 * `1.5e-7` → `"0.00000015"`, `-0` → `"0"`. Throws on NaN and ±Infinity (never valid JSON).
 */
export function numberToDecimal(n: number): DecimalString {
  if (!Number.isFinite(n)) throw new DecimalFormatError(`${String(n)} is not a finite number`);
  if (n === 0) return '0';
  const text = String(n); // the shortest round-trip text, as JSON.stringify wrote it
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(text);
  if (!m) throw new DecimalFormatError(`unexpected number text ${text}`);
  const [, sign = '', int = '', frac = '', exp] = m;
  if (exp === undefined) return text;
  const digits = int + frac;
  const point = int.length + Number(exp); // position of the decimal point within `digits`
  let out: string;
  if (point <= 0) out = `0.${'0'.repeat(-point)}${digits}`;
  else if (point >= digits.length) out = digits + '0'.repeat(point - digits.length);
  else out = `${digits.slice(0, point)}.${digits.slice(point)}`;
  out = out.replace(/^0+(?=\d)/, '');
  if (out.includes('.')) out = out.replace(/0+$/, '').replace(/\.$/, '');
  return sign + out;
}

/** Parses an exact decimal string with the decimal type of your choice: `toDecimal(s, Decimal)`. */
export function toDecimal<T>(value: DecimalString, ctor: new (value: string) => T): T {
  return new ctor(exactDecimal(value));
}
