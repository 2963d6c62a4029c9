/**
 * UTC instants for billing: strict RFC 3339 parsing, one canonical output format, and the
 * proleptic Gregorian calendar arithmetic the cap periods need (pure integer arithmetic,
 * no `Date` quirks such as `Date.UTC` mapping years 0–99 to 1900–1999).
 *
 * An instant is held as integer milliseconds since 1970-01-01T00:00:00Z ("epoch ms").
 * Leap seconds do not exist here (as in JavaScript and POSIX): every day has 86 400 000 ms.
 *
 * Input (`parseUtcInstant`): `YYYY-MM-DDTHH:MM:SS[.fraction]Z` with a four-digit year
 * (0000–9999), a real calendar date, hour 00–23, minute and second 00–59 (a leap second
 * `60` is refused), `T`/`t` and `Z`/`z` in either case, and `+00:00` accepted as `Z`. Any
 * other offset is refused (`NOT_UTC`): the billing API takes UTC only. The fraction may
 * have 1–9 digits, but digits past the millisecond must be zeros (`PRECISION`), so nothing
 * is ever truncated silently.
 *
 * Output (`formatUtcInstant`): `YYYY-MM-DDTHH:MM:SSZ`, with `.sss` (exactly three digits)
 * only when the millisecond part is not zero. Years outside 0000–9999 use the ±YYYYYY
 * extended form of `Date.prototype.toISOString` (only reachable by a period end after the
 * year 9999). One instant always gives one string, so strings can be used in keys.
 */

export const MS_PER_DAY = 86_400_000;
/** The range of a JavaScript `Date`, ±100 000 000 days around the epoch. */
export const MAX_EPOCH_MS = 8.64e15;

/** An instant: RFC 3339 UTC string, epoch milliseconds (integer) or a valid `Date`. */
export type Instant = string | number | Date;

export type InstantErrorCode = 'WRONG_TYPE' | 'SYNTAX' | 'NOT_UTC' | 'INVALID_DATE' | 'PRECISION' | 'OUT_OF_RANGE';

export class InstantError extends Error {
  override readonly name = 'InstantError';
  constructor(
    readonly code: InstantErrorCode,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$/;

function fail(code: InstantErrorCode, what: string, field: string | undefined): never {
  throw new InstantError(code, `${field ?? 'instant'} ${what}`, field);
}

/** Parses an RFC 3339 UTC timestamp strictly (see the header) into epoch ms. */
export function parseUtcInstant(input: unknown, field?: string): number {
  if (typeof input !== 'string') fail('WRONG_TYPE', `must be an RFC 3339 string, got ${typeof input}`, field);
  const m = RFC3339.exec(input);
  if (m === null) fail('SYNTAX', `must be an RFC 3339 UTC timestamp like "2024-01-31T00:00:00Z", got "${input}"`, field);
  const [, ys = '', mos = '', ds = '', hs = '', mis = '', ss = '', frac = '', offset = ''] = m;
  if (offset !== 'Z' && offset !== 'z' && offset !== '+00:00') {
    fail('NOT_UTC', `must be in UTC ("Z"), got offset ${offset}`, field);
  }
  const y = Number(ys);
  const mo = Number(mos);
  const d = Number(ds);
  const h = Number(hs);
  const mi = Number(mis);
  const s = Number(ss);
  if (mo < 1 || mo > 12) fail('INVALID_DATE', `has month ${mos}`, field);
  if (d < 1 || d > daysInMonth(y, mo)) fail('INVALID_DATE', `has day ${ds}, but ${ys}-${mos} has ${daysInMonth(y, mo)} days`, field);
  if (h > 23) fail('INVALID_DATE', `has hour ${hs}`, field);
  if (mi > 59) fail('INVALID_DATE', `has minute ${mis}`, field);
  if (s > 59) fail('INVALID_DATE', `has second ${ss} (leap seconds are not supported)`, field);
  if (frac.length > 3 && /[1-9]/.test(frac.slice(3))) {
    fail('PRECISION', `has sub-millisecond digits (".${frac}"); at most millisecond precision is kept`, field);
  }
  const ms = frac === '' ? 0 : Number(frac.slice(0, 3).padEnd(3, '0'));
  return daysFromCivil(y, mo, d) * MS_PER_DAY + ((h * 60 + mi) * 60 + s) * 1000 + ms;
}

/** Epoch ms of any `Instant`, checked (integer, within the `Date` range). */
export function toEpochMs(instant: Instant, field?: string): number {
  if (typeof instant === 'string') return parseUtcInstant(instant, field);
  const ms = instant instanceof Date ? instant.getTime() : instant;
  if (typeof ms !== 'number') fail('WRONG_TYPE', `must be a string, number or Date, got ${typeof instant}`, field);
  if (!Number.isInteger(ms) || Math.abs(ms) > MAX_EPOCH_MS) {
    fail('OUT_OF_RANGE', `must be an integer number of milliseconds within ±${MAX_EPOCH_MS}, got ${ms}`, field);
  }
  return ms;
}

/** The canonical RFC 3339 form of an instant (see the header). */
export function formatUtcInstant(instant: Instant): string {
  const ms = toEpochMs(instant);
  const days = Math.floor(ms / MS_PER_DAY);
  const tod = ms - days * MS_PER_DAY;
  const { year, month, day } = civilFromDays(days);
  const p2 = (n: number): string => String(n).padStart(2, '0');
  const yearText =
    year >= 0 && year <= 9999 ? String(year).padStart(4, '0') : (year < 0 ? '-' : '+') + String(Math.abs(year)).padStart(6, '0');
  const secs = Math.floor(tod / 1000);
  const milli = tod % 1000;
  const time = `${p2(Math.floor(secs / 3600))}:${p2(Math.floor(secs / 60) % 60)}:${p2(secs % 60)}`;
  return `${yearText}-${p2(month)}-${p2(day)}T${time}${milli === 0 ? '' : '.' + String(milli).padStart(3, '0')}Z`;
}

/** True for Gregorian leap years (divisible by 4, except centuries not divisible by 400). */
export function isLeapYear(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}

const DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** Days in `month` (1–12) of `year`. */
export function daysInMonth(year: number, month: number): number {
  return month === 2 && isLeapYear(year) ? 29 : (DAYS[month - 1] ?? NaN);
}

/** Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
export function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month + (month > 2 ? -3 : 9)) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146_097 + doe - 719_468;
}

/** The date of a day number (inverse of `daysFromCivil`). */
export function civilFromDays(days: number): { year: number; month: number; day: number } {
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const doe = z - era * 146_097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36_524) - Math.floor(doe / 146_096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const day = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const month = mp < 10 ? mp + 3 : mp - 9;
  return { year: yoe + era * 400 + (month <= 2 ? 1 : 0), month, day };
}
