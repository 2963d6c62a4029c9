/**
 * The stored column types the billing engine writes: how exact decimals are stored in the
 * analytics engine and what fits, the bounds of a stored quantity and the values of
 * fact_unpriced.reason. The rules that produce these values are billing's
 * (src/billing/quantity.ts reads quantities; src/billing/stored.ts checks amounts with
 * `fitsStored`); the store and its views only need the types.
 *
 * Every decimal column the billing engine writes (fact_cost.quantity, unit_price,
 * cost_amount; fact_credit_consumption.credits, balance_after) is `Decimal(76, 24)`
 * (ClickHouse Decimal256): 52 digits before the point and 24 after. Why these figures:
 *
 *   unitPrice        ≤ 30 integer digits, ≤ 12 places   (configuration, src/billing/config)
 *   creditsPerUnit   ≤ 30 integer digits, ≤ 6 places    (configuration)
 *   quantity         ≤ 15 integer digits, ≤ 12 places   (the quantity rule, src/billing/quantity.ts)
 *   cost = quantity × unitPrice       < 10^45, ≤ 24 places
 *   credits = quantity × creditsPerUnit < 10^45, ≤ 18 places
 *
 * so every product is stored exactly, never cut to fewer places. `sum()` in ClickHouse
 * keeps the type and its 256-bit integer holds totals below ≈5.7·10^52 (beyond that the
 * engine wraps without an error), which is more than 5.7·10^7 rows each of the largest
 * possible cost, or 10^28 rows of a cost of 10^24 (a price of 10^9 cents × 10^15 units).
 *
 * One stored amount is not a product of bounded values: a pool's balance after a draw
 * (granted + top-ups − everything consumed) grows with the number of draws. The evaluator
 * checks every value against `fitsStored` before it writes a row: a value that does not fit
 * would be refused by the engine and stall the rows inserter, so the signal is not priced
 * instead, with the reason recorded (fact_unpriced, reason AMOUNT_OUT_OF_RANGE).
 */

/** Digits after the point of every stored decimal. */
export const STORED_SCALE = 24;
/** Total digits of every stored decimal. */
export const STORED_PRECISION = 76;
/** The ClickHouse type of every stored decimal, as the engine names it. */
export const STORED_DECIMAL = `Decimal(${STORED_PRECISION}, ${STORED_SCALE})`;

/** Bounds of a quantity the billing engine prices (src/billing/quantity.ts); others are unpriced. */
export const QUANTITY_MAX_DECIMAL_PLACES = 12;
export const QUANTITY_MAX_INTEGER_DIGITS = 15;

/** The values of fact_unpriced.reason (what each means: src/billing/quantity.ts). */
export const UNPRICED_REASONS = [
  'QUANTITY_MISSING',
  'QUANTITY_NOT_A_NUMBER',
  'QUANTITY_NEGATIVE',
  'QUANTITY_TOO_MANY_DECIMAL_PLACES',
  'QUANTITY_TOO_LARGE',
  'QUANTITY_DIGITS_NOT_KEPT',
  'AMOUNT_OUT_OF_RANGE',
] as const;
