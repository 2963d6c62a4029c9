/**
 * Whether an exact decimal fits the stored decimal type (`STORED_DECIMAL`, src/store/stored.ts,
 * which explains the figures). The evaluator checks every value against `fitsStored` before it
 * writes a row: a value that does not fit would be refused by the engine and stall the rows
 * inserter, so the signal is not priced instead, with the reason recorded (fact_unpriced,
 * reason AMOUNT_OUT_OF_RANGE).
 */
import { type Dec, decimalPlaces, integerDigitsOf } from './decimal.js';
import { STORED_PRECISION, STORED_SCALE } from '../store/stored.js';

/** True when `d` is stored exactly in `STORED_DECIMAL` (no place cut, no overflow). */
export function fitsStored(d: Dec): boolean {
  return decimalPlaces(d) <= STORED_SCALE && integerDigitsOf(d) <= STORED_PRECISION - STORED_SCALE;
}
