/**
 * Credit pools: the balance rules and the two events they can raise, as pure functions
 * over exact decimals. A pool belongs to one customer and order line attribute (and
 * optionally one credits currency); the caller keeps its state and applies signals to it
 * one at a time in one agreed order (the rules below are functions of that ordered
 * history, so any replay of the same history gives the same answers).
 *
 * State: `total` = granted + every top-up; `balance` = total − every consumption. So at
 * any time, consumed so far = total − balance, exactly (the reconciliation invariant).
 * Granted credits must be ≥ 0, a top-up > 0 and a consumption ≥ 0 (a `RangeError`
 * otherwise); nothing is rounded, so a consumption may have more decimal places than the
 * six a configured amount may have.
 *
 * Rules, each decided from the balance just before and just after one signal:
 * - `billing-credits-depleted` fires on the signal that takes the balance from above zero
 *   to zero or below (before > 0 ≥ after). `usedCredits` is that signal's consumption
 *   alone; `remainingCredits` is the balance after it: 0 on exact depletion, negative on
 *   overshoot. A pool that was never above zero is never "depleted"; after a depletion it
 *   can fire again only once a top-up has brought the balance above zero again.
 * - `billing-overage-incurred` with `eventType: "OverageCredit"` fires on the signal that
 *   takes the balance from zero or above to below zero (before ≥ 0 > after): the first
 *   credits consumed that the pool does not cover. So an overshooting depletion fires both
 *   events on the same signal; an exact depletion fires only `depleted`, and the next
 *   credit-priced signal (the first consuming from the exhausted pool) fires the overage.
 *   Further signals while the balance stays below zero fire nothing: one event per
 *   crossing. A top-up that brings the balance back to zero or above re-arms it (one that
 *   leaves it below zero does not). For the payload, `threshold` is the pool total and
 *   `currentUsage` the credits consumed so far (total − balance after), which then
 *   exceeds the threshold.
 * - A consumption of zero changes nothing and fires nothing.
 */
import { type Dec, add, sign, sub } from './decimal.js';

export interface CreditPool {
  /** Granted credits plus every top-up. */
  readonly total: Dec;
  /** total − everything consumed; negative once usage has gone past the pool. */
  readonly balance: Dec;
}

/** The outcome of applying one signal's consumption to a pool. */
export interface Consumption {
  /** The pool before the signal. */
  readonly before: CreditPool;
  /** The pool after the signal (same total, balance reduced by `used`). */
  readonly after: CreditPool;
  /** This signal's consumption alone. */
  readonly used: Dec;
  /** `billing-credits-depleted` fires for this signal. */
  readonly depleted: boolean;
  /** `billing-overage-incurred` (OverageCredit) fires for this signal. */
  readonly creditOverage: boolean;
}

function requireSign(value: Dec, allowed: 'positive' | 'non-negative', what: string): void {
  const s = sign(value);
  if (s < 0 || (allowed === 'positive' && s === 0)) throw new RangeError(`${what} must be ${allowed}`);
}

/** A new pool holding `granted` (≥ 0) credits. */
export function openPool(granted: Dec): CreditPool {
  requireSign(granted, 'non-negative', 'granted credits');
  return { total: granted, balance: granted };
}

/** Adds `amount` (> 0) to both the total and the balance. */
export function topUp(pool: CreditPool, amount: Dec): CreditPool {
  requireSign(amount, 'positive', 'a top-up');
  return { total: add(pool.total, amount), balance: add(pool.balance, amount) };
}

/** True when a balance goes from above zero to zero or below (depletion rule). */
export function isDepletion(balanceBefore: Dec, balanceAfter: Dec): boolean {
  return sign(balanceBefore) > 0 && sign(balanceAfter) <= 0;
}

/** True when a balance goes from zero or above to below zero (credit overage rule). */
export function isCreditOverage(balanceBefore: Dec, balanceAfter: Dec): boolean {
  return sign(balanceBefore) >= 0 && sign(balanceAfter) < 0;
}

/** Applies one signal's consumption (≥ 0 credits) and says which events it fires. */
export function consume(pool: CreditPool, credits: Dec): Consumption {
  requireSign(credits, 'non-negative', 'a consumption');
  const after: CreditPool = { total: pool.total, balance: sub(pool.balance, credits) };
  return {
    before: pool,
    after,
    used: credits,
    depleted: isDepletion(pool.balance, after.balance),
    creditOverage: isCreditOverage(pool.balance, after.balance),
  };
}

/** Credits consumed from the pool so far (total − balance). */
export function consumedCredits(pool: CreditPool): Dec {
  return sub(pool.total, pool.balance);
}

