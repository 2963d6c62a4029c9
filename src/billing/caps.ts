/**
 * Credit caps (`billing-credit-cap-reached`), as a pure function over exact decimals. A cap
 * is set on a customer unit and a credits currency (it has no id of its own): `amount` per
 * period, periods from `effectiveFrom` and `frequency` (see periods.ts). Spend of that
 * currency by the unit and by every unit beneath it counts towards it; which period a
 * spend counts in is the period containing the signal's time. Caps are advisory: this
 * module never refuses spend.
 *
 * The caller keeps, per cap and period, the spend so far and whether the event has already
 * been emitted for that period (`alreadyReached`), and applies signals one at a time in one
 * agreed order.
 *
 * Rule: the event fires on the first signal in a period with a positive spend after which
 * the period's spend is at least the cap amount (used after ≥ amount), unless it has
 * already fired for that cap and period. So it fires at most once per cap and period;
 * `used` is the spend after that signal and may exceed `amount`. With the flag (rather than
 * "used before < amount") the rule also holds when the amount changes within a period: a
 * cap lowered below the spend fires on the next spend, and a cap raised after firing does
 * not fire again in that period. A cap of 0 fires on the first positive spend of each
 * period. A spend of zero fires nothing. The event id (events.ts) is derived from the cap
 * and the period alone, so a bus that deduplicates by id also holds the "once per period".
 */
import { type Dec, add, compare, sign } from './decimal.js';

/** The outcome of adding one signal's spend to a cap's period total. */
export interface CapStep {
  /** The cap amount per period. */
  readonly amount: Dec;
  /** The period's spend before the signal. */
  readonly usedBefore: Dec;
  /** The period's spend after the signal (the payload's `used`). */
  readonly usedAfter: Dec;
  /** `billing-credit-cap-reached` fires for this signal. */
  readonly reached: boolean;
}

export interface CapSpend {
  /** Cap amount per period (≥ 0). */
  amount: Dec;
  /** Spend of the currency by the unit and its subtree so far in this period (≥ 0). */
  usedBefore: Dec;
  /** This signal's spend (≥ 0). */
  spend: Dec;
  /** True once the event has been emitted for this cap and period. */
  alreadyReached: boolean;
}

/** Adds one signal's spend to a cap's period total and says whether the cap is reached. */
export function spendAgainstCap({ amount, usedBefore, spend, alreadyReached }: CapSpend): CapStep {
  if (sign(amount) < 0) throw new RangeError('a cap amount must be non-negative');
  if (sign(usedBefore) < 0) throw new RangeError('the spend so far must be non-negative');
  if (sign(spend) < 0) throw new RangeError('a spend must be non-negative');
  const usedAfter = add(usedBefore, spend);
  const reached = !alreadyReached && sign(spend) > 0 && compare(usedAfter, amount) >= 0;
  return { amount, usedBefore, usedAfter, reached };
}
