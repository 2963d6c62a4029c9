/**
 * The quantity rule: which values at an attribute's `data` path are priced, and why the
 * others are not.
 *
 * A quantity is a JSON number or a decimal string (`"12.5"`, the syntax of
 * src/billing/decimal.ts), ≥ 0, with at most QUANTITY_MAX_DECIMAL_PLACES (24) places and at
 * most QUANTITY_MAX_INTEGER_DIGITS (52) digits before the point: the bounds of the stored
 * decimal type (src/store/stored.ts), since the quantity is stored as it is. Whether its
 * cost and credit draw fit the type too is judged on their actual values when the signal is
 * priced (src/billing/evaluator/evaluate.ts, AMOUNT_OUT_OF_RANGE). A JSON number is taken at
 * the value its text states: the pipeline passes the text of every number a double would not
 * keep (more than 15 significant digits, or out of the double's range) next to the data
 * (src/pipeline/exact-numbers.ts), so `0.10000000000000000001` is 20 places, not the double's
 * 0.1.
 *
 * A value outside the rule is never rounded or cut: the signal is not priced, and the reason
 * is stored in fact_unpriced (one row per signal, with `reason` and a `detail` naming the
 * path and the problem). Reasons:
 *   QUANTITY_MISSING                  nothing (or null) at the path
 *   QUANTITY_NOT_A_NUMBER             neither a JSON number nor a decimal string
 *   QUANTITY_NEGATIVE                 below zero
 *   QUANTITY_TOO_MANY_DECIMAL_PLACES  more than 24 places (the stored type's scale)
 *   QUANTITY_TOO_LARGE                more than 52 integer digits (the stored type's)
 *   QUANTITY_DIGITS_NOT_KEPT          a JSON number in a batch too full of long numbers for
 *                                     their texts to be kept (src/pipeline/exact-numbers.ts);
 *                                     a decimal string is never affected
 *   AMOUNT_OUT_OF_RANGE               (not a quantity problem) an amount to store — the cost,
 *                                     the credits drawn or the pool balance after the draw —
 *                                     would not fit the stored type exactly (more than 52
 *                                     integer digits, or more than 24 places: a quantity of
 *                                     20 places at a price of 12)
 */
import { DecimalError, decimalFromJsonNumberText, decimalFromNumber, decimalPlaces, integerDigitsOf, parseDecimal, sign, type Dec, type ParseOptions } from './decimal.js';
import { QUANTITY_MAX_DECIMAL_PLACES, QUANTITY_MAX_INTEGER_DIGITS, UNPRICED_REASONS } from '../store/stored.js';

export type UnpricedReason = (typeof UNPRICED_REASONS)[number];

export type QuantityResult = { ok: true; quantity: Dec } | { ok: false; reason: UnpricedReason; detail: string };

/** Longest piece of a refused value quoted in a detail. */
const QUOTE_MAX = 64;

const refused = (reason: UnpricedReason, detail: string): QuantityResult => ({ ok: false, reason, detail });

/**
 * The quantity in `value` (what the data holds at the path `field`, e.g. `data.usage.tokens`),
 * or why it is not priced. `exactText` is the number's text as sent when a double would not
 * keep it (or that is beyond the double's range); when given it is what is judged, whatever
 * `value` holds. `false`: the texts of
 * this signal's numbers were withheld, so a number's written digits are unknown. The bounds apply to the
 * value, whatever its form: `"1.50"`, `1.50` and `1.5` are the same quantity (trailing zeros
 * of a fraction are not places).
 */
export function readQuantity(value: unknown, exactText: string | false | undefined, field: string): QuantityResult {
  // The text of a JSON number at the path decides, whatever `value` holds: a number beyond the
  // double's range is in the data as a string of its text (src/pipeline/exact-numbers.ts).
  if (typeof exactText === 'string') return readText(exactText, field);
  if (value === undefined || value === null) return refused('QUANTITY_MISSING', `${field} is missing`);
  if (typeof value !== 'number' && typeof value !== 'string') {
    return refused('QUANTITY_NOT_A_NUMBER', `${field} must be a JSON number or a decimal string, got ${Array.isArray(value) ? 'array' : typeof value}`);
  }
  if (typeof value === 'number' && exactText === false) {
    return refused('QUANTITY_DIGITS_NOT_KEPT', `${field} is a JSON number in a batch with more long numbers than the service keeps the digits of; send it as a decimal string`);
  }
  // Read without limits (the data is at most 16 KiB), then judge the value.
  const loose: ParseOptions = { maxDecimalPlaces: Number.MAX_SAFE_INTEGER, maxIntegerDigits: Number.MAX_SAFE_INTEGER, allowNegative: true, field };
  let q: Dec;
  try {
    q = typeof value === 'string' ? parseDecimal(value, loose) : decimalFromNumber(value, loose);
  } catch (err) {
    if (!(err instanceof DecimalError)) throw err;
    if (err.code === 'TOO_MANY_DECIMAL_PLACES') return refused('QUANTITY_TOO_MANY_DECIMAL_PLACES', err.message);
    if (err.code === 'TOO_MANY_INTEGER_DIGITS') return refused('QUANTITY_TOO_LARGE', err.message);
    return refused('QUANTITY_NOT_A_NUMBER', clip(err.message));
  }
  if (sign(q) < 0) return refused('QUANTITY_NEGATIVE', `${field} must not be negative`);
  if (decimalPlaces(q) > QUANTITY_MAX_DECIMAL_PLACES) {
    return refused('QUANTITY_TOO_MANY_DECIMAL_PLACES', `${field} has ${decimalPlaces(q)} decimal places; at most ${QUANTITY_MAX_DECIMAL_PLACES} are allowed`);
  }
  if (integerDigitsOf(q) > QUANTITY_MAX_INTEGER_DIGITS) {
    return refused('QUANTITY_TOO_LARGE', `${field} has ${integerDigitsOf(q)} integer digits; at most ${QUANTITY_MAX_INTEGER_DIGITS} are allowed`);
  }
  return { ok: true, quantity: q };
}

/**
 * A JSON number's text, judged on the value it states at any exponent: the bounds are given to
 * the reading itself, which counts places and integer digits without building a value past
 * them (`1e-99999999999999999999` has 10^20 places), in the order of readQuantity: sign,
 * places, integer digits. A zero is a quantity of 0 whatever its exponent.
 */
function readText(text: string, field: string): QuantityResult {
  try {
    const q = decimalFromJsonNumberText(text, { maxDecimalPlaces: QUANTITY_MAX_DECIMAL_PLACES, maxIntegerDigits: QUANTITY_MAX_INTEGER_DIGITS, allowNegative: false, field });
    return { ok: true, quantity: q };
  } catch (err) {
    if (!(err instanceof DecimalError)) throw err;
    if (err.code === 'NEGATIVE') return refused('QUANTITY_NEGATIVE', `${field} must not be negative`);
    if (err.code === 'TOO_MANY_DECIMAL_PLACES') return refused('QUANTITY_TOO_MANY_DECIMAL_PLACES', err.message);
    if (err.code === 'TOO_MANY_INTEGER_DIGITS') return refused('QUANTITY_TOO_LARGE', err.message);
    return refused('QUANTITY_NOT_A_NUMBER', clip(err.message));
  }
}

function clip(s: string): string {
  return s.length <= QUOTE_MAX * 2 ? s : `${s.slice(0, QUOTE_MAX * 2)}…`;
}
