/**
 * Included-quantity overage (`billing-overage-incurred`, `eventType: "OverageUsage"`), as a
 * pure function over exact decimals. An order line attribute may have an included quantity;
 * the caller keeps the attribute's cumulative usage (over whatever window its billing uses,
 * e.g. the order's current billing period) and applies signals to it one at a time in one
 * agreed order.
 *
 * Rule: the event fires on the signal whose cumulative usage first goes strictly above the
 * included quantity: usage before ≤ included < usage after. Reaching the included quantity
 * exactly is not an overage (it is what was included); the signal that goes past it is.
 * Quantities are ≥ 0 (a `RangeError` otherwise), so cumulative usage never goes down and
 * the event fires at most once per window; a window that starts again from zero can fire
 * again. An attribute without an included quantity (null) never fires. For the payload,
 * `threshold` is the included quantity and `currentUsage` the cumulative usage after the
 * signal (so currentUsage > threshold).
 */
import { type Dec, add, compare, sign } from './decimal.js';

/** The outcome of adding one signal's quantity to an attribute's cumulative usage. */
export interface UsageStep {
  /** The included quantity (null: none, never an overage). */
  readonly included: Dec | null;
  /** Cumulative usage before the signal. */
  readonly before: Dec;
  /** Cumulative usage after the signal. */
  readonly after: Dec;
  /** `billing-overage-incurred` (OverageUsage) fires for this signal. */
  readonly crossed: boolean;
}

/** True when usage goes from at most `included` to strictly above it. */
export function crossesIncluded(before: Dec, after: Dec, included: Dec | null): boolean {
  return included !== null && compare(before, included) <= 0 && compare(after, included) > 0;
}

/** Adds one signal's quantity (≥ 0) and says whether it crosses the included quantity. */
export function addUsage(usageBefore: Dec, quantity: Dec, included: Dec | null): UsageStep {
  if (sign(quantity) < 0) throw new RangeError('a quantity must be non-negative');
  if (included !== null && sign(included) < 0) throw new RangeError('an included quantity must be non-negative');
  const after = add(usageBefore, quantity);
  return { included, before: usageBefore, after, crossed: crossesIncluded(usageBefore, after, included) };
}
