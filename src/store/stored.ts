/**
 * The stored column types the billing engine writes: how exact decimals are stored in the
 * analytics engine and what fits, the bounds of a stored quantity and the values of
 * fact_unpriced.reason. The rules that produce these values are billing's
 * (src/billing/quantity.ts reads quantities; src/billing/stored.ts checks amounts with
 * `fitsStored`); the store and its views only need the types.
 *
 * Every decimal column the billing engine writes (fact_cost.quantity, unit_price,
 * cost_amount; fact_credit_consumption.credits, balance_after, stored in the same row) is `Decimal(76, 24)`
 * (ClickHouse Decimal256): 52 digits before the point and 24 after.
 *
 *   unitPrice        ≤ 30 integer digits, ≤ 12 places   (configuration, src/billing/config)
 *   creditsPerUnit   ≤ 30 integer digits, ≤ 6 places    (configuration)
 *   quantity         ≤ 52 integer digits, ≤ 24 places   (the stored type itself: the quantity is
 *                                                        stored; src/billing/quantity.ts)
 *
 * Nothing narrower is imposed: a signal is priced whenever the exact values written for it
 * fit the type: its quantity, its cost = quantity × unitPrice, its credits = quantity ×
 * creditsPerUnit and the pool's balance after the draw (granted + top-ups − everything
 * consumed, which grows with the number of draws). The evaluator checks each of these actual
 * values with `fitsStored` (src/billing/stored.ts) before it writes a row: a value that does
 * not fit would be refused by the engine and stall the rows inserter, so the signal is not
 * priced instead, with the reason recorded (fact_unpriced, reason AMOUNT_OUT_OF_RANGE). No
 * stored value is ever rounded or cut.
 *
 * `sum()` in ClickHouse keeps the type, and its 256-bit integer holds totals below
 * ≈5.7·10^52; beyond that the engine wraps without an error. Single amounts near the type's
 * limit (10^52) therefore sum correctly only a few at a time: a query that adds such amounts
 * should sum them as `toFloat64` or check against `max()` (README, "Billing engine").
 */

/** Digits after the point of every stored decimal. */
export const STORED_SCALE = 24;
/** Total digits of every stored decimal. */
export const STORED_PRECISION = 76;
/** The ClickHouse type of every stored decimal, as the engine names it. */
export const STORED_DECIMAL = `Decimal(${STORED_PRECISION}, ${STORED_SCALE})`;

/**
 * Bounds of a quantity the billing engine prices (src/billing/quantity.ts): the stored type's
 * own, since the quantity is stored (fact_cost.quantity). Its cost and draws are checked on
 * their actual values (src/billing/evaluator/evaluate.ts).
 */
export const QUANTITY_MAX_DECIMAL_PLACES = STORED_SCALE;
export const QUANTITY_MAX_INTEGER_DIGITS = STORED_PRECISION - STORED_SCALE;

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
