/**
 * Credit-cap periods. A cap has an anchor `effectiveFrom` (an instant) and a `frequency`;
 * its periods are numbered 0, 1, 2, … from the anchor, period k being [start_k, start_k+1):
 * start inclusive, end exclusive, in UTC. Instants before the anchor are in no period.
 *
 * - DAILY, WEEKLY: start_k = anchor + k × 1 day / 7 days (days are 86 400 000 ms in UTC).
 * - MONTHLY, QUARTERLY, YEARLY (a step of s = 1, 3, 12 months): start_k is in the month
 *   `anchor month + k × s`, on the anchor's day of month clamped to that month's last day,
 *   at the anchor's time of day (milliseconds included). The clamp is always taken from the
 *   anchor's day, never from the previous period's start: an anchor on Jan 31 gives
 *   Feb 28 (Feb 29 in leap years), then Mar 31, Apr 30, May 31, …; an anchor on Feb 29
 *   (YEARLY) gives Feb 28 in years that are not leap years and Feb 29 again in leap years.
 *
 * The period of an instant is computed directly (from the difference in days or in
 * calendar months, then corrected by at most one step), so the cost does not grow with the
 * number of periods between the anchor and the instant.
 */
import { type Instant, MS_PER_DAY, civilFromDays, daysFromCivil, daysInMonth, formatUtcInstant, toEpochMs } from './instant.js';

export const FREQUENCIES = ['DAILY', 'WEEKLY', 'MONTHLY', 'QUARTERLY', 'YEARLY'] as const;
export type Frequency = (typeof FREQUENCIES)[number];

export function isFrequency(x: unknown): x is Frequency {
  return typeof x === 'string' && (FREQUENCIES as readonly string[]).includes(x);
}

/** One period: `index` counts from 0 (the period starting at the anchor). */
export interface Period {
  index: number;
  /** Inclusive start, epoch ms. */
  startMs: number;
  /** Exclusive end, epoch ms (= the next period's start). */
  endMs: number;
  /** `startMs` in canonical RFC 3339 form. */
  start: string;
  /** `endMs` in canonical RFC 3339 form. */
  end: string;
}

const FIXED_MS: Partial<Record<Frequency, number>> = { DAILY: MS_PER_DAY, WEEKLY: 7 * MS_PER_DAY };
const MONTHS: Partial<Record<Frequency, number>> = { MONTHLY: 1, QUARTERLY: 3, YEARLY: 12 };

interface Anchor {
  ms: number;
  /** Months since year 0 (year × 12 + month − 1). */
  monthIndex: number;
  day: number;
  timeOfDay: number;
}

function anchorOf(ms: number): Anchor {
  const days = Math.floor(ms / MS_PER_DAY);
  const { year, month, day } = civilFromDays(days);
  return { ms, monthIndex: year * 12 + month - 1, day, timeOfDay: ms - days * MS_PER_DAY };
}

function monthlyStart(a: Anchor, stepMonths: number, k: number): number {
  const mi = a.monthIndex + k * stepMonths;
  const year = Math.floor(mi / 12);
  const month = mi - year * 12 + 1;
  const day = Math.min(a.day, daysInMonth(year, month));
  return daysFromCivil(year, month, day) * MS_PER_DAY + a.timeOfDay;
}

function checkFrequency(frequency: unknown): asserts frequency is Frequency {
  if (!isFrequency(frequency)) {
    throw new RangeError(`frequency must be one of ${FREQUENCIES.join(', ')}, got ${String(frequency)}`);
  }
}

/** Inclusive start (epoch ms) of period `index` (≥ 0) of the given anchor and frequency. */
export function periodStartMs(effectiveFrom: Instant, frequency: Frequency, index: number): number {
  checkFrequency(frequency);
  if (!Number.isSafeInteger(index) || index < 0) throw new RangeError(`period index must be an integer ≥ 0, got ${index}`);
  const anchorMs = toEpochMs(effectiveFrom, 'effectiveFrom');
  const fixed = FIXED_MS[frequency];
  if (fixed !== undefined) return anchorMs + index * fixed;
  return monthlyStart(anchorOf(anchorMs), MONTHS[frequency] ?? 1, index);
}

/** Period number `index` (≥ 0). */
export function nthPeriod(effectiveFrom: Instant, frequency: Frequency, index: number): Period {
  const startMs = periodStartMs(effectiveFrom, frequency, index);
  const endMs = periodStartMs(effectiveFrom, frequency, index + 1);
  return { index, startMs, endMs, start: formatUtcInstant(startMs), end: formatUtcInstant(endMs) };
}

/** The period containing `t`, or null when `t` is before `effectiveFrom`. */
export function periodContaining(effectiveFrom: Instant, frequency: Frequency, t: Instant): Period | null {
  checkFrequency(frequency);
  const anchorMs = toEpochMs(effectiveFrom, 'effectiveFrom');
  const tMs = toEpochMs(t, 't');
  if (tMs < anchorMs) return null;
  const fixed = FIXED_MS[frequency];
  let index: number;
  if (fixed !== undefined) {
    index = Math.floor((tMs - anchorMs) / fixed);
  } else {
    const step = MONTHS[frequency] ?? 1;
    const a = anchorOf(anchorMs);
    // Every start_k lies in month a + k·step, so k = ⌊month difference / step⌋ is exact
    // except when t is earlier in its month than that period's start: then it is k − 1.
    index = Math.floor((anchorOf(tMs).monthIndex - a.monthIndex) / step);
    while (index > 0 && monthlyStart(a, step, index) > tMs) index--;
    while (monthlyStart(a, step, index + 1) <= tMs) index++;
  }
  return nthPeriod(anchorMs, frequency, index);
}
