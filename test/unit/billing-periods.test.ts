/**
 * src/billing/periods.ts (and the instants of src/billing/instant.ts it rests on): the
 * credit-cap period containing an instant, for every frequency, with month-end anchors,
 * leap years and year boundaries; property tests that periods tile time from the anchor.
 */
import t, { type Test } from 'tap';
import fc from 'fast-check';
import { FREQUENCIES, type Frequency, isFrequency, nthPeriod, periodContaining, periodStartMs } from '../../src/billing/periods.js';
import {
  InstantError,
  type InstantErrorCode,
  MS_PER_DAY,
  civilFromDays,
  daysFromCivil,
  daysInMonth,
  formatUtcInstant,
  isLeapYear,
  parseUtcInstant,
  toEpochMs,
} from '../../src/billing/instant.js';

/** [start, end) of the period containing t, as strings, or null. */
function span(anchor: string, f: Frequency, at: string): [string, string] | null {
  const p = periodContaining(anchor, f, at);
  return p === null ? null : [p.start, p.end];
}

/** The first n period starts. */
function starts(anchor: string, f: Frequency, n: number): string[] {
  return Array.from({ length: n }, (_, k) => nthPeriod(anchor, f, k).start);
}

// ---------------------------------------------------------------- instants

t.test('RFC 3339 UTC instants: strict parsing, one canonical output', async (t) => {
  t.equal(parseUtcInstant('1970-01-01T00:00:00Z'), 0);
  t.equal(parseUtcInstant('2024-02-29T12:34:56.789Z'), Date.UTC(2024, 1, 29, 12, 34, 56, 789));
  t.equal(parseUtcInstant('2024-02-29t12:34:56.7z'), Date.UTC(2024, 1, 29, 12, 34, 56, 700));
  t.equal(parseUtcInstant('2024-02-29T12:34:56.789000000+00:00'), Date.UTC(2024, 1, 29, 12, 34, 56, 789));
  t.equal(parseUtcInstant('0000-01-01T00:00:00Z'), -62167219200000);
  t.equal(parseUtcInstant('9999-12-31T23:59:59.999Z'), 253402300799999);
  t.equal(formatUtcInstant(0), '1970-01-01T00:00:00Z', 'no fraction when the milliseconds are zero');
  t.equal(formatUtcInstant(1), '1970-01-01T00:00:00.001Z');
  t.equal(formatUtcInstant(-1), '1969-12-31T23:59:59.999Z');
  t.equal(formatUtcInstant('2024-02-29T12:34:56.700Z'), '2024-02-29T12:34:56.700Z');
  t.equal(formatUtcInstant(-62167219200000), '0000-01-01T00:00:00Z');
  t.equal(formatUtcInstant(253402300800000), '+010000-01-01T00:00:00Z', 'extended year after 9999');
  t.equal(formatUtcInstant(new Date(Date.UTC(2001, 0, 1))), '2001-01-01T00:00:00Z');
  const bad: [unknown, InstantErrorCode][] = [
    [1.5, 'OUT_OF_RANGE'],
    [9e15, 'OUT_OF_RANGE'],
    [null, 'WRONG_TYPE'],
    ['2024-01-01', 'SYNTAX'],
    ['2024-01-01T00:00:00', 'SYNTAX'],
    ['2024-01-01 00:00:00Z', 'SYNTAX'],
    ['24-01-01T00:00:00Z', 'SYNTAX'],
    [' 2024-01-01T00:00:00Z', 'SYNTAX'],
    ['2024-01-01T00:00:00.Z', 'SYNTAX'],
    ['2024-01-01T00:00:00+01:00', 'NOT_UTC'],
    ['2024-01-01T00:00:00-00:00', 'NOT_UTC'],
    ['2023-02-29T00:00:00Z', 'INVALID_DATE'],
    ['2100-02-29T00:00:00Z', 'INVALID_DATE'],
    ['2024-04-31T00:00:00Z', 'INVALID_DATE'],
    ['2024-13-01T00:00:00Z', 'INVALID_DATE'],
    ['2024-00-01T00:00:00Z', 'INVALID_DATE'],
    ['2024-01-00T00:00:00Z', 'INVALID_DATE'],
    ['2024-01-01T24:00:00Z', 'INVALID_DATE'],
    ['2024-01-01T00:60:00Z', 'INVALID_DATE'],
    ['2016-12-31T23:59:60Z', 'INVALID_DATE'],
    ['2024-01-01T00:00:00.0001Z', 'PRECISION'],
  ];
  for (const [input, code] of bad) {
    try {
      toEpochMs(input as string, 'effectiveFrom');
      t.fail(`accepted ${JSON.stringify(input)}`);
    } catch (e) {
      t.type(e, InstantError);
      t.equal((e as InstantError).code, code, `${JSON.stringify(input)} → ${code}`);
      t.match((e as InstantError).message, /^effectiveFrom /, 'the message names the field');
    }
  }
});

t.test('calendar arithmetic agrees with Date over 1600–2400', async (t) => {
  t.ok(isLeapYear(2000) && isLeapYear(2024) && !isLeapYear(2100) && !isLeapYear(1900) && !isLeapYear(2023));
  t.equal(daysInMonth(2024, 2), 29);
  t.equal(daysInMonth(2100, 2), 28);
  t.equal(daysInMonth(2000, 2), 29);
  let mismatches = 0;
  for (let days = daysFromCivil(1600, 1, 1); days < daysFromCivil(2400, 1, 1); days += 1) {
    const c = civilFromDays(days);
    const date = new Date(days * MS_PER_DAY);
    if (c.year !== date.getUTCFullYear() || c.month !== date.getUTCMonth() + 1 || c.day !== date.getUTCDate()) mismatches++;
    if (daysFromCivil(c.year, c.month, c.day) !== days) mismatches++;
  }
  t.equal(mismatches, 0);
});

// ---------------------------------------------------------------- examples

t.test('frequencies: names and refusal of unknown ones', async (t) => {
  t.same([...FREQUENCIES], ['DAILY', 'WEEKLY', 'MONTHLY', 'QUARTERLY', 'YEARLY']);
  t.ok(isFrequency('MONTHLY'));
  t.notOk(isFrequency('monthly'));
  t.notOk(isFrequency('HOURLY'));
  t.throws(() => periodContaining('2024-01-01T00:00:00Z', 'HOURLY' as Frequency, '2024-01-01T00:00:00Z'), RangeError);
  t.throws(() => periodStartMs('2024-01-01T00:00:00Z', 'DAILY', -1), RangeError);
});

t.test('instants before effectiveFrom are in no period, for every frequency', async (t) => {
  for (const f of FREQUENCIES) {
    t.equal(periodContaining('2024-01-31T10:00:00Z', f, '2024-01-31T09:59:59.999Z'), null, f);
    t.equal(periodContaining('2024-01-31T10:00:00Z', f, '1999-01-01T00:00:00Z'), null, f);
    t.same(periodContaining('2024-01-31T10:00:00Z', f, '2024-01-31T10:00:00Z')?.index, 0, `${f}: the anchor starts period 0`);
  }
});

t.test('DAILY', async (t) => {
  const a = '2024-03-10T05:30:00Z';
  t.same(span(a, 'DAILY', a), [a, '2024-03-11T05:30:00Z']);
  t.same(span(a, 'DAILY', '2024-03-11T05:29:59.999Z'), [a, '2024-03-11T05:30:00Z'], 'end is exclusive');
  t.same(span(a, 'DAILY', '2024-03-11T05:30:00Z'), ['2024-03-11T05:30:00Z', '2024-03-12T05:30:00Z'], 'start is inclusive');
  t.same(span(a, 'DAILY', '2024-12-31T23:00:00Z'), ['2024-12-31T05:30:00Z', '2025-01-01T05:30:00Z'], 'year boundary');
  t.same(span(a, 'DAILY', '2025-01-01T05:00:00Z'), ['2024-12-31T05:30:00Z', '2025-01-01T05:30:00Z']);
  t.same(span('2024-02-28T00:00:00Z', 'DAILY', '2024-02-29T01:00:00Z'), ['2024-02-29T00:00:00Z', '2024-03-01T00:00:00Z'], 'leap day');
  t.same(span(a, 'DAILY', '9999-12-31T23:59:59.999Z'), ['9999-12-31T05:30:00Z', '+010000-01-01T05:30:00Z'], 'far future, direct');
  t.equal(periodContaining(a, 'DAILY', '2024-03-20T06:00:00Z')?.index, 10);
});

t.test('WEEKLY', async (t) => {
  const a = '2023-12-28T00:00:00.500Z';
  t.same(starts(a, 'WEEKLY', 3), ['2023-12-28T00:00:00.500Z', '2024-01-04T00:00:00.500Z', '2024-01-11T00:00:00.500Z']);
  t.same(span(a, 'WEEKLY', '2024-01-04T00:00:00.499Z'), ['2023-12-28T00:00:00.500Z', '2024-01-04T00:00:00.500Z'], 'year boundary');
  t.same(span(a, 'WEEKLY', '2024-01-04T00:00:00.500Z'), ['2024-01-04T00:00:00.500Z', '2024-01-11T00:00:00.500Z']);
  t.same(span(a, 'WEEKLY', '2024-02-29T12:00:00Z'), ['2024-02-29T00:00:00.500Z', '2024-03-07T00:00:00.500Z']);
});

t.test('MONTHLY anchored on the 31st clamps from the anchor day every time', async (t) => {
  t.same(starts('2024-01-31T00:00:00Z', 'MONTHLY', 14), [
    '2024-01-31T00:00:00Z',
    '2024-02-29T00:00:00Z',
    '2024-03-31T00:00:00Z',
    '2024-04-30T00:00:00Z',
    '2024-05-31T00:00:00Z',
    '2024-06-30T00:00:00Z',
    '2024-07-31T00:00:00Z',
    '2024-08-31T00:00:00Z',
    '2024-09-30T00:00:00Z',
    '2024-10-31T00:00:00Z',
    '2024-11-30T00:00:00Z',
    '2024-12-31T00:00:00Z',
    '2025-01-31T00:00:00Z',
    '2025-02-28T00:00:00Z',
  ]);
  const a = '2024-01-31T00:00:00Z';
  t.same(span(a, 'MONTHLY', '2024-02-15T00:00:00Z'), ['2024-01-31T00:00:00Z', '2024-02-29T00:00:00Z']);
  t.same(span(a, 'MONTHLY', '2024-02-29T00:00:00Z'), ['2024-02-29T00:00:00Z', '2024-03-31T00:00:00Z'], 'not Mar 29');
  t.same(span(a, 'MONTHLY', '2024-03-30T23:59:59.999Z'), ['2024-02-29T00:00:00Z', '2024-03-31T00:00:00Z']);
  t.same(span(a, 'MONTHLY', '2024-12-31T00:00:00Z'), ['2024-12-31T00:00:00Z', '2025-01-31T00:00:00Z'], 'year boundary');
  t.same(span(a, 'MONTHLY', '2025-01-01T00:00:00Z'), ['2024-12-31T00:00:00Z', '2025-01-31T00:00:00Z']);
  t.same(span(a, 'MONTHLY', '2025-03-01T00:00:00Z'), ['2025-02-28T00:00:00Z', '2025-03-31T00:00:00Z'], 'non-leap February');
  t.same(span('2099-12-31T00:00:00Z', 'MONTHLY', '2100-03-01T00:00:00Z'), ['2100-02-28T00:00:00Z', '2100-03-31T00:00:00Z'], '2100 is not leap');
  t.same(span('1999-12-31T00:00:00Z', 'MONTHLY', '2000-03-01T00:00:00Z'), ['2000-02-29T00:00:00Z', '2000-03-31T00:00:00Z'], '2000 is leap');
});

t.test('MONTHLY anchored on the 30th and 29th', async (t) => {
  t.same(starts('2023-01-30T08:15:00Z', 'MONTHLY', 4), ['2023-01-30T08:15:00Z', '2023-02-28T08:15:00Z', '2023-03-30T08:15:00Z', '2023-04-30T08:15:00Z']);
  t.same(starts('2024-01-30T08:15:00Z', 'MONTHLY', 3), ['2024-01-30T08:15:00Z', '2024-02-29T08:15:00Z', '2024-03-30T08:15:00Z']);
  t.same(starts('2023-01-29T00:00:00Z', 'MONTHLY', 3), ['2023-01-29T00:00:00Z', '2023-02-28T00:00:00Z', '2023-03-29T00:00:00Z']);
  t.same(starts('2024-01-29T00:00:00Z', 'MONTHLY', 3), ['2024-01-29T00:00:00Z', '2024-02-29T00:00:00Z', '2024-03-29T00:00:00Z']);
  t.same(span('2023-01-29T00:00:00Z', 'MONTHLY', '2023-02-28T00:00:00Z'), ['2023-02-28T00:00:00Z', '2023-03-29T00:00:00Z']);
  t.same(span('2023-01-29T00:00:00Z', 'MONTHLY', '2023-02-27T23:59:59.999Z'), ['2023-01-29T00:00:00Z', '2023-02-28T00:00:00Z']);
});

t.test('MONTHLY keeps the time of day and milliseconds of the anchor', async (t) => {
  const a = '2024-01-31T23:59:59.999Z';
  t.same(span(a, 'MONTHLY', '2024-02-29T23:59:59.998Z'), ['2024-01-31T23:59:59.999Z', '2024-02-29T23:59:59.999Z']);
  t.same(span(a, 'MONTHLY', '2024-02-29T23:59:59.999Z'), ['2024-02-29T23:59:59.999Z', '2024-03-31T23:59:59.999Z']);
  t.same(span('2023-11-15T12:00:00Z', 'MONTHLY', '2024-01-01T00:00:00Z'), ['2023-12-15T12:00:00Z', '2024-01-15T12:00:00Z'], 'year boundary');
  t.same(span('2023-11-15T12:00:00Z', 'MONTHLY', '2024-01-15T11:59:59Z'), ['2023-12-15T12:00:00Z', '2024-01-15T12:00:00Z']);
});

t.test('QUARTERLY', async (t) => {
  t.same(starts('2023-11-30T08:00:00.250Z', 'QUARTERLY', 6), [
    '2023-11-30T08:00:00.250Z',
    '2024-02-29T08:00:00.250Z',
    '2024-05-30T08:00:00.250Z',
    '2024-08-30T08:00:00.250Z',
    '2024-11-30T08:00:00.250Z',
    '2025-02-28T08:00:00.250Z',
  ]);
  t.same(starts('2024-08-31T00:00:00Z', 'QUARTERLY', 4), ['2024-08-31T00:00:00Z', '2024-11-30T00:00:00Z', '2025-02-28T00:00:00Z', '2025-05-31T00:00:00Z']);
  t.same(span('2024-01-01T00:00:00Z', 'QUARTERLY', '2024-12-31T23:59:59.999Z'), ['2024-10-01T00:00:00Z', '2025-01-01T00:00:00Z'], 'calendar quarters');
  t.same(span('2024-01-01T00:00:00Z', 'QUARTERLY', '2025-01-01T00:00:00Z'), ['2025-01-01T00:00:00Z', '2025-04-01T00:00:00Z']);
  t.same(span('2099-11-30T00:00:00Z', 'QUARTERLY', '2100-03-15T00:00:00Z'), ['2100-02-28T00:00:00Z', '2100-05-30T00:00:00Z'], '2100');
});

t.test('YEARLY, including Feb 29 anchors', async (t) => {
  t.same(starts('2096-02-29T06:00:00Z', 'YEARLY', 9), [
    '2096-02-29T06:00:00Z',
    '2097-02-28T06:00:00Z',
    '2098-02-28T06:00:00Z',
    '2099-02-28T06:00:00Z',
    '2100-02-28T06:00:00Z',
    '2101-02-28T06:00:00Z',
    '2102-02-28T06:00:00Z',
    '2103-02-28T06:00:00Z',
    '2104-02-29T06:00:00Z',
  ]);
  t.same(starts('1996-02-29T00:00:00Z', 'YEARLY', 5).slice(3), ['1999-02-28T00:00:00Z', '2000-02-29T00:00:00Z'], '2000 is leap');
  t.same(span('2024-02-29T00:00:00Z', 'YEARLY', '2025-02-28T00:00:00Z'), ['2025-02-28T00:00:00Z', '2026-02-28T00:00:00Z']);
  t.same(span('2024-02-29T00:00:00Z', 'YEARLY', '2025-02-27T23:59:59.999Z'), ['2024-02-29T00:00:00Z', '2025-02-28T00:00:00Z']);
  t.same(span('2024-02-29T00:00:00Z', 'YEARLY', '2028-02-28T12:00:00Z'), ['2027-02-28T00:00:00Z', '2028-02-29T00:00:00Z']);
  t.same(span('2023-12-31T23:00:00Z', 'YEARLY', '2024-12-31T22:59:59Z'), ['2023-12-31T23:00:00Z', '2024-12-31T23:00:00Z'], 'year boundary');
  t.same(span('0004-02-29T00:00:00Z', 'YEARLY', '0005-06-01T00:00:00Z'), ['0005-02-28T00:00:00Z', '0006-02-28T00:00:00Z'], 'years below 100');
  t.same(span('2000-01-01T00:00:00Z', 'YEARLY', '9999-12-31T23:59:59.999Z'), ['9999-01-01T00:00:00Z', '+010000-01-01T00:00:00Z']);
  t.equal(periodContaining('2000-01-01T00:00:00Z', 'YEARLY', '9999-06-01T00:00:00Z')?.index, 7999);
});

t.test('numbers and Dates are accepted as instants too', async (t) => {
  const p = periodContaining(Date.UTC(2024, 0, 31), 'MONTHLY', new Date(Date.UTC(2024, 1, 29, 1)));
  t.same(p, { index: 1, startMs: Date.UTC(2024, 1, 29), endMs: Date.UTC(2024, 2, 31), start: '2024-02-29T00:00:00Z', end: '2024-03-31T00:00:00Z' });
});

// ---------------------------------------------------------------- properties

const MIN_YEAR = 1600;
const MAX_YEAR = 2400;
/** Anchors anywhere in 1600–2400, with days 28–31 over-represented, any time of day. */
const anchorArb = fc
  .record({
    year: fc.integer({ min: MIN_YEAR, max: MAX_YEAR }),
    month: fc.integer({ min: 1, max: 12 }),
    dayPick: fc.oneof(fc.integer({ min: 1, max: 31 }), fc.constantFrom(28, 29, 30, 31)),
    tod: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: MS_PER_DAY - 1 })),
  })
  .map(({ year, month, dayPick, tod }) => daysFromCivil(year, month, Math.min(dayPick, daysInMonth(year, month))) * MS_PER_DAY + tod);
const frequencyArb = fc.constantFrom(...FREQUENCIES);
/** Offsets from the anchor: within a few periods, or up to ~500 years. */
const offsetArb = fc.oneof(fc.integer({ min: 0, max: 400 * MS_PER_DAY }), fc.integer({ min: 0, max: 500 * 366 * MS_PER_DAY }));
const STEP_MONTHS: Record<Frequency, number> = { DAILY: 0, WEEKLY: 0, MONTHLY: 1, QUARTERLY: 3, YEARLY: 12 };
const FIXED: Record<Frequency, number> = { DAILY: MS_PER_DAY, WEEKLY: 7 * MS_PER_DAY, MONTHLY: 0, QUARTERLY: 0, YEARLY: 0 };

function civil(ms: number): { year: number; month: number; day: number; tod: number } {
  const days = Math.floor(ms / MS_PER_DAY);
  return { ...civilFromDays(days), tod: ms - days * MS_PER_DAY };
}

/** Independent oracle for start_k of month-based periods, built on Date's own month arithmetic. */
function dateOracleStart(anchorMs: number, step: number, k: number): number {
  const a = new Date(anchorMs);
  const first = new Date(0);
  first.setUTCFullYear(a.getUTCFullYear(), a.getUTCMonth() + k * step, 1);
  const lastDay = new Date(0);
  lastDay.setUTCFullYear(first.getUTCFullYear(), first.getUTCMonth() + 1, 0);
  const x = new Date(0);
  x.setUTCFullYear(first.getUTCFullYear(), first.getUTCMonth(), Math.min(a.getUTCDate(), lastDay.getUTCDate()));
  x.setUTCHours(a.getUTCHours(), a.getUTCMinutes(), a.getUTCSeconds(), a.getUTCMilliseconds());
  return x.getTime();
}

/** Runs a property (300 runs) and reports it as one assertion with the counterexample. */
function check<Ts extends unknown[]>(t: Test, name: string, prop: fc.IProperty<Ts>): void {
  const r = fc.check(prop, { numRuns: 300 });
  t.equal(r.failed, false, name, r.failed ? { diagnostic: true, counterexample: r.counterexample, error: String(r.errorInstance) } : {});
}

t.test('property: t ∈ [start, end), start < end, and periods are contiguous', async (t) => {
  check(
    t,
    'contiguous',
    fc.property(anchorArb, frequencyArb, offsetArb, (anchor, f, offset) => {
      const tMs = anchor + offset;
      const p = periodContaining(anchor, f, tMs);
      if (p === null) return false;
      if (!(p.startMs <= tMs && tMs < p.endMs && p.startMs < p.endMs)) return false;
      if (p.start !== formatUtcInstant(p.startMs) || p.end !== formatUtcInstant(p.endMs)) return false;
      const next = periodContaining(anchor, f, p.endMs);
      if (next === null || next.startMs !== p.endMs || next.index !== p.index + 1 || !(next.endMs > next.startMs)) return false;
      if (p.index === 0) return p.startMs === anchor && periodContaining(anchor, f, anchor - 1) === null;
      const prev = periodContaining(anchor, f, p.startMs - 1);
      return prev !== null && prev.endMs === p.startMs && prev.index === p.index - 1 && prev.startMs < prev.endMs;
    }),
  );
});

t.test('property: starts follow the rules (fixed steps; month steps clamped from the anchor day)', async (t) => {
  check(
    t,
    'rules',
    fc.property(anchorArb, frequencyArb, offsetArb, (anchor, f, offset) => {
      const p = periodContaining(anchor, f, anchor + offset);
      if (p === null) return false;
      if (FIXED[f] > 0) return p.startMs - anchor === p.index * FIXED[f] && p.endMs - p.startMs === FIXED[f];
      const a = civil(anchor);
      const s = civil(p.startMs);
      const monthsApart = (s.year - a.year) * 12 + (s.month - a.month);
      return (
        monthsApart === p.index * STEP_MONTHS[f] &&
        s.day === Math.min(a.day, daysInMonth(s.year, s.month)) &&
        s.tod === a.tod &&
        p.startMs === dateOracleStart(anchor, STEP_MONTHS[f], p.index)
      );
    }),
  );
});

t.test('property: periodContaining(start_k) is period k, for any k (direct, no walk)', async (t) => {
  check(
    t,
    'index round trip',
    fc.property(anchorArb, frequencyArb, fc.integer({ min: 0, max: 3000 }), (anchor, f, k) => {
      const p = nthPeriod(anchor, f, k);
      const q = periodContaining(anchor, f, p.startMs);
      const r = periodContaining(anchor, f, p.endMs - 1);
      return q?.index === k && r?.index === k && q.endMs === p.endMs;
    }),
  );
});

t.test('property: RFC 3339 format and parse round-trip', async (t) => {
  const lo = parseUtcInstant('0000-01-01T00:00:00Z');
  const hi = parseUtcInstant('9999-12-31T23:59:59.999Z');
  check(
    t,
    'round trip',
    fc.property(fc.integer({ min: lo, max: hi }), (ms) => {
      const s = formatUtcInstant(ms);
      const iso = new Date(ms).toISOString();
      return parseUtcInstant(s) === ms && (ms % 1000 === 0 ? s === iso.replace('.000Z', 'Z') : s === iso);
    }),
  );
});
