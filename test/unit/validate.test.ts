/**
 * Batch validation (src/ingress/validate.ts): RFC 3339 parsing, every error path of
 * validateBulk / validateV1 / parseJson, with the code and the `details` naming index and field
 * (a signal's problem is read as the request's 400 reports a request whose every signal
 * failed: its first error, `allRefused`; the per-signal lists themselves are checked apart);
 * `data` keys naming the same path (dots separate path segments, as in ClickHouse's JSON type);
 * lone UTF-16 surrogates, and mayHaveSurrogates (the ingress's cheap pre-check on the raw body).
 */
import t from 'tap';
import fc from 'fast-check';
import { ApiError, type ErrorCode } from '../../src/errors.js';
import { MAX_DATA_BYTES, allRefused, mayHaveSurrogates, signalProblem, validateBulk as judgeBulk, validateV1 as judgeV1 } from '../../src/ingress/validate.js';
import { parseJson } from '../../src/http/json.js';
import { Rfc3339Reader, parseRfc3339 } from '../../src/shared/time.js';

const NOW = Date.UTC(2026, 0, 31, 12, 0, 0); // receivedAtMs used throughout

/** Runs fn, which must throw an ApiError; returns it. */
function apiError(fn: () => unknown): ApiError {
  try {
    fn();
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw new Error(`expected an ApiError, got ${String(err)}`);
  }
  throw new Error('expected an ApiError, nothing was thrown');
}

interface T {
  equal(found: unknown, wanted: unknown, message: string): unknown;
  match(found: unknown, wanted: RegExp, message: string): unknown;
}

function expectError(t: T, fn: () => unknown, code: ErrorCode, details: string | RegExp, msg?: string): void {
  const e = apiError(fn);
  const label = msg ?? String(details);
  t.equal(e.code, code, `${label}: code`);
  t.equal(e.status, 400, `${label}: status`);
  if (typeof details === 'string') t.equal(e.details, details, label);
  else t.match(e.details, details, label);
}

/**
 * validateBulk as a whole-request verdict: the number of signals when every one is valid; else
 * the ApiError the ingress answers for a request whose every signal failed (the first error).
 */
function validateBulk(body: unknown, receivedAtMs: number, strings = false): number {
  const j = judgeBulk(body, receivedAtMs, strings);
  if (j.errors.length > 0) throw allRefused(j.errors, (i) => `signals[${i}]`);
  return j.count;
}

/** validateV1 as a whole-request verdict, as validateBulk above: the signals (in the v2 shape), or the first error. */
function validateV1(body: unknown, receivedAtMs: number, strings = false): unknown[] {
  const j = judgeV1(body, receivedAtMs, strings);
  if (j.errors.length > 0) throw allRefused(j.errors, (i) => (j.array ? `[${i}]` : 'signal'));
  return j.signals;
}

/** One signal's problem as an ApiError whose details are `<path>.<field>: <problem>`. */
function validateSignal(s: unknown, path: string, receivedAtMs: number, strings = false): void {
  const p = signalProblem(s, receivedAtMs, strings);
  if (p) throw new ApiError('INVALID_SIGNAL', `${path}${p.field ? `.${p.field}` : ''}: ${p.problem}`);
}

const sig = (over: Record<string, unknown> = {}): Record<string, unknown> => ({ eventName: 'api_call', customer: { externalCustomerId: 'acct_1' }, ...over });
/** sig() with the field at the dotted path `f` (`eventName`, `customer.externalCustomerId`, …) set to `v`. */
function withField(f: string, v: unknown): Record<string, unknown> {
  const [top, inner] = f.split('.') as [string, string | undefined];
  return sig({ [top]: inner === undefined ? v : { [inner]: v } });
}
const without = (k: string): Record<string, unknown> => {
  const s = sig();
  delete s[k];
  return s;
};
/** A bulk body of 5 good signals whose index 3 is replaced. */
const bulkWith = (bad: unknown): unknown => ({ signals: [sig(), sig(), sig(), bad, sig()] });
/** n levels of nested objects, data itself being level 1. */
function nest(levels: number, leaf: unknown = 1): Record<string, unknown> {
  let v: Record<string, unknown> = { leaf };
  for (let i = 1; i < levels; i++) v = { a: v };
  return v;
}
/** n levels of nesting where every level below the first is an array. */
function nestArrays(levels: number): Record<string, unknown> {
  let v: unknown = [1];
  for (let i = 2; i < levels; i++) v = [v];
  return { a: v };
}

t.test('parseRfc3339: valid date-times', async (t) => {
  const cases: [string, number][] = [
    ['2026-01-31T12:00:00Z', Date.UTC(2026, 0, 31, 12)],
    ['2026-01-31T12:00:00+05:30', Date.UTC(2026, 0, 31, 6, 30)],
    ['2026-01-31T12:00:00-08:00', Date.UTC(2026, 0, 31, 20)],
    ['2026-01-31T12:00:00+00:00', Date.UTC(2026, 0, 31, 12)],
    ['2026-01-31T12:00:00-00:00', Date.UTC(2026, 0, 31, 12)],
    ['2026-01-31T00:30:00+23:59', Date.UTC(2026, 0, 30, 0, 31)],
    ['2026-01-31T12:00:00.5Z', Date.UTC(2026, 0, 31, 12, 0, 0, 500)],
    ['2026-01-31T12:00:00.123Z', Date.UTC(2026, 0, 31, 12, 0, 0, 123)],
    ['2026-01-31T12:00:00.123456Z', Date.UTC(2026, 0, 31, 12, 0, 0, 123)],
    ['2026-01-31T12:00:00.123456789Z', Date.UTC(2026, 0, 31, 12, 0, 0, 123)],
    ['2026-01-31T12:00:00.999+01:00', Date.UTC(2026, 0, 31, 11, 0, 0, 999)],
    ['2026-01-31T12:00:00.9999999+01:00', Date.UTC(2026, 0, 31, 11, 0, 0, 999)],
    ['2026-01-31T12:00:00.0009Z', Date.UTC(2026, 0, 31, 12, 0, 0, 0)],
    ['2026-01-31T12:00:00.57Z', Date.UTC(2026, 0, 31, 12, 0, 0, 570)],
    ['2026-01-31T12:00:00.29Z', Date.UTC(2026, 0, 31, 12, 0, 0, 290)],
    ['2026-01-31t12:00:00z', Date.UTC(2026, 0, 31, 12)],
    ['2026-01-31 12:00:00Z', Date.UTC(2026, 0, 31, 12)],
    ['2026-01-31 12:00:00.25-01:00', Date.UTC(2026, 0, 31, 13, 0, 0, 250)],
    ['2024-02-29T00:00:00Z', Date.UTC(2024, 1, 29)],
    ['2000-02-29T00:00:00Z', Date.UTC(2000, 1, 29)],
    ['2026-12-31T23:59:59Z', Date.UTC(2026, 11, 31, 23, 59, 59)],
    ['2000-01-01T00:00:00Z', Date.UTC(2000, 0, 1)],
  ];
  for (const [s, ms] of cases) t.equal(parseRfc3339(s), ms, s);
});

t.test('parseRfc3339: fractions beyond milliseconds are truncated, never rounded up', async (t) => {
  t.equal(parseRfc3339('2026-01-31T12:00:00.999999999+01:00'), Date.UTC(2026, 0, 31, 11, 0, 0, 999), '.999999999 is 999 ms, not the next second');
  t.equal(parseRfc3339('2026-12-31T23:59:59.999999999Z'), Date.UTC(2026, 11, 31, 23, 59, 59, 999), '.999999999 at the end of a year stays in that year');
  t.equal(parseRfc3339('2026-01-31T12:00:00.123999999Z'), Date.UTC(2026, 0, 31, 12, 0, 0, 123), '.123999999 is 123 ms');
  t.equal(parseRfc3339('2026-01-31T12:00:00.123999998Z'), Date.UTC(2026, 0, 31, 12, 0, 0, 123), '.123999998 is 123 ms');
  // the one-hour limit is exact to the millisecond: a sub-millisecond tail must not push it over
  const received = NOW + 123;
  const limit = new Date(received + 3_600_000).toISOString().slice(0, 23); // ….123
  const outcome = (ts: string): string => {
    try {
      validateBulk({ signals: [sig({ timestamp: ts })] }, received);
      return 'accepted';
    } catch (err) {
      return (err as ApiError).details;
    }
  };
  t.equal(outcome(`${limit}999999Z`), 'accepted', 'one hour ahead plus 0.999999 ms is still within the hour');
  t.equal(outcome(`${limit}9Z`), 'accepted', 'one hour ahead plus 0.9 ms is within the hour');
  t.equal(outcome(`${new Date(received + 3_600_001).toISOString().slice(0, 23)}Z`), 'signals[0].timestamp: must not be more than one hour in the future', 'one hour and 1 ms ahead is refused');
});

t.test('Rfc3339Reader (remembers the last date and hour) answers as parseRfc3339, whatever came before', async (t) => {
  // Sequences sharing prefixes: valid and invalid rests after a remembered date-hour, and
  // invalid date-hours (never remembered) followed by valid ones.
  const prefixes = ['2026-01-31T12', '2026-01-31t12', '2026-01-31 12', '2026-02-29T12', '2024-02-29T23', '2026-13-01T00', '2026-01-31T24', '0099-12-31T23', '2026-01-31X12'];
  const rests = [':00:00Z', ':59:59.999999999+01:00', ':60:00Z', ':00:60Z', ':00:00', ':00:00.Z', ':00:00.1234567890Z', ':00:00-23:59', ':00:00+24:00', ':00:00z', ':00:00ZZ', ':0a:00Z', '-00:00Z', ''];
  const text = fc.oneof(
    fc.tuple(fc.constantFrom(...prefixes), fc.constantFrom(...rests)).map(([p, r]) => p + r),
    fc.date({ min: new Date(Date.UTC(1990, 0, 1)), max: new Date(Date.UTC(2040, 0, 1)), noInvalidDate: true }).map((d) => d.toISOString()),
    fc.string({ maxLength: 30 }),
  );
  fc.assert(
    fc.property(fc.array(text, { maxLength: 20 }), (list) => {
      const reader = new Rfc3339Reader();
      for (const s of list) if (reader.parse(s) !== parseRfc3339(s)) return false;
      return true;
    }),
    { numRuns: 2000 },
  );
  const reader = new Rfc3339Reader();
  t.equal(reader.parse('2026-01-31T12:00:00Z'), Date.UTC(2026, 0, 31, 12), 'a first date-time');
  t.equal(reader.parse('2026-01-31T12:61:00Z'), null, 'the same date and hour, minutes out of range: refused');
  t.equal(reader.parse('2026-01-31T12:30:15.5-02:00'), Date.UTC(2026, 0, 31, 14, 30, 15, 500), 'the same date and hour with an offset');
  t.equal(reader.parse('2026-01-31T12'), null, 'the remembered prefix alone is not a date-time');
});

t.test('parseRfc3339: years below 100 are not read as 19xx', async (t) => {
  // Date.UTC maps years 0-99 to 1900-1999; the old Date.parse did not. Validation refuses
  // these as before 2000 either way, so this only matters to other callers.
  t.equal(parseRfc3339('0099-12-31T23:59:59Z'), Date.parse('0099-12-31T23:59:59Z'), 'year 99');
  t.equal(parseRfc3339('0000-01-01T00:00:00Z'), Date.parse('0000-01-01T00:00:00Z'), 'year 0');
  t.equal(parseRfc3339('0100-01-01T00:00:00Z'), Date.parse('0100-01-01T00:00:00Z'), 'year 100');
  t.equal(parseRfc3339('9999-12-31T23:59:59.999Z'), Date.parse('9999-12-31T23:59:59.999Z'), 'year 9999');
  expectError(t, () => validateBulk({ signals: [sig({ timestamp: '0099-12-31T23:59:59Z' })] }, NOW), 'INVALID_SIGNAL', 'signals[0].timestamp: must not be before 2000-01-01T00:00:00Z', 'year 99 is refused by validation');
});

t.test('property: parseRfc3339 agrees with Date.parse of the same instant (fraction truncated to ms)', async (t) => {
  const pad = (n: number, w: number): string => String(n).padStart(w, '0');
  await fc.assert(
    fc.property(
      fc.integer({ min: 100, max: 9999 }),
      fc.integer({ min: 1, max: 12 }),
      fc.integer({ min: 1, max: 31 }),
      fc.tuple(fc.integer({ min: 0, max: 23 }), fc.integer({ min: 0, max: 59 }), fc.integer({ min: 0, max: 59 })),
      fc.option(fc.oneof(fc.stringMatching(/^[0-9]{1,9}$/), fc.stringMatching(/^[0-9]{1,3}9{1,6}$/)), { nil: undefined }),
      fc.oneof(fc.constantFrom('Z', 'z'), fc.tuple(fc.constantFrom('+', '-'), fc.integer({ min: 0, max: 23 }), fc.integer({ min: 0, max: 59 })).map(([sg, h, m]) => `${sg}${pad(h, 2)}:${pad(m, 2)}`)),
      fc.constantFrom('T', 't', ' '),
      (y, mo, d, [h, mi, se], frac, off, sep) => {
        const date = `${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)}`;
        const time = `${pad(h, 2)}:${pad(mi, 2)}:${pad(se, 2)}`;
        const s = `${date}${sep}${time}${frac === undefined ? '' : `.${frac}`}${off}`;
        const ms3 = frac === undefined ? '000' : frac.slice(0, 3).padEnd(3, '0');
        const reference = `${date}T${time}.${ms3}${off.toUpperCase()}`;
        const realDay = (() => {
          const dt = new Date(0);
          dt.setUTCFullYear(y, mo - 1, d);
          return dt.getUTCMonth() === mo - 1;
        })();
        const want = realDay ? Date.parse(reference) : null;
        const got = parseRfc3339(s);
        if (got !== want) throw new Error(`${s}: got ${got}, want ${want} (${reference})`);
        return true;
      },
    ),
    { numRuns: 1000 },
  );
  t.pass('agrees');
});

t.test('parseRfc3339: invalid date-times are null', async (t) => {
  const cases = [
    '2024-02-30T00:00:00Z', // Feb 30
    '2025-02-29T00:00:00Z', // not a leap year
    '2100-02-29T00:00:00Z', // century, not a leap year
    '2026-04-31T00:00:00Z', // April has 30 days
    '2026-13-01T00:00:00Z', // month 13
    '2026-00-10T00:00:00Z', // month 0
    '2026-01-00T00:00:00Z', // day 0
    '2026-01-32T00:00:00Z',
    '2026-01-31T24:00:00Z', // hour 24
    '2026-01-31T23:60:00Z',
    '2026-01-31T23:59:60Z',
    '2026-01-31T12:00:00', // no offset
    '2026-01-31T12:00:00+24:00', // offset hour 24
    '2026-01-31T12:00:00+23:60',
    '2026-01-31T12:00:00+0530', // offset without colon
    '2026-01-31T12:00:00+05', // short offset
    '2026-01-31T12:00:00.Z', // empty fraction
    '2026-01-31T12:00:00.1234567890Z', // 10 fraction digits
    '2026-01-31T12:00Z', // no seconds
    '2026-01-31', // date only
    '2026-1-31T12:00:00Z',
    '26-01-31T12:00:00Z',
    '2026-01-31X12:00:00Z',
    '2026-01-31T12:00:00Zjunk',
    '2026-01-31T12:00:00Z\n',
    ' 2026-01-31T12:00:00Z',
    '2026-01-31T12:00:00 Z',
    '2026-01-31T12:00:00UTC',
    '１２３４-01-31T12:00:00Z', // full-width digits
    '',
    'yesterday',
    'null',
    '1706702400',
  ];
  for (const s of cases) t.equal(parseRfc3339(s), null, JSON.stringify(s));
});

t.test('parseRfc3339 agrees with a calendar for every day of 2024 and 2025', async (t) => {
  let wrong = 0;
  for (const year of [2024, 2025]) {
    for (let m = 1; m <= 12; m++) {
      for (let d = 1; d <= 31; d++) {
        const s = `${year}-${String(m).padStart(2, '0')}-${String(d).padStart(2, '0')}T00:00:00Z`;
        const real = new Date(Date.UTC(year, m - 1, d));
        const exists = real.getUTCMonth() === m - 1;
        const got = parseRfc3339(s);
        if ((got !== null) !== exists || (exists && got !== real.getTime())) wrong++;
      }
    }
  }
  t.equal(wrong, 0, 'every real day parses, every impossible day is null');
});

t.test('property: formatted instants round-trip through parseRfc3339 with any offset', async (t) => {
  await fc.assert(
    fc.property(
      fc.integer({ min: Date.UTC(2000, 0, 1), max: Date.UTC(2099, 11, 31) }),
      fc.integer({ min: -23 * 60 - 59, max: 23 * 60 + 59 }),
      fc.constantFrom('T', 't', ' '),
      (ms, offMin, sep) => {
        const local = new Date(ms + offMin * 60_000).toISOString(); // yyyy-mm-ddThh:mm:ss.sssZ
        const sign = offMin < 0 ? '-' : '+';
        const a = Math.abs(offMin);
        const off = `${sign}${String(Math.floor(a / 60)).padStart(2, '0')}:${String(a % 60).padStart(2, '0')}`;
        const s = `${local.slice(0, 10)}${sep}${local.slice(11, 23)}${off}`;
        return parseRfc3339(s) === ms;
      },
    ),
    { numRuns: 300 },
  );
  t.pass('round-trips');
});

t.test('valid signals and batches are accepted', async (t) => {
  const full = sig({
    unitId: 'unit_1',
    timestamp: '2026-01-31T11:00:00Z',
    idempotencyKey: 'k1',
    data: { tokens: 12, model: 'x', nested: { a: [1, 2, { b: null }] } },
  });
  t.equal(validateBulk({ signals: [full] }, NOW), 1);
  t.equal(validateBulk({ signals: [sig({ unitId: null, idempotencyKey: null, timestamp: null, data: null })] }, NOW), 1, 'nulls are absent');
  t.equal(validateBulk({ signals: Array.from({ length: 500 }, () => sig()) }, NOW), 500, '500 signals');
  t.same(validateV1(full, NOW), [full], 'v1 single object');
  t.same(validateV1([full, sig()], NOW), [full, sig()], 'v1 array');
  t.equal(validateV1(Array.from({ length: 500 }, () => sig()), NOW).length, 500);
  t.equal(validateBulk({ signals: [sig({ data: {} })] }, NOW), 1, 'empty data object');
  t.equal(validateBulk({ signals: [sig({ customer: { customerId: 'cus_AAAAAAAAAAAAAAAAAAAA' } })] }, NOW), 1, 'a customer by its service id');
  t.equal(validateBulk({ signals: [sig({ attribution: { productId: 'prod_AAAAAAAAAAAAAAAAAAAA' } }), sig({ attribution: { externalProductId: 'chat' } }), sig({ attribution: null })] }, NOW), 3, 'attribution by either id, or null');
});

t.test('validateBulk judges each signal: the refused ones listed by index with their field, the others counted', async (t) => {
  const body = { signals: [sig(), sig({ eventName: '' }), sig(), sig({ customerId: 'c' }), sig({ customer: { externalCustomerId: 'c', customerId: 'cus_1' } }), sig({ data: [] })] };
  const j = judgeBulk(body, NOW);
  t.equal(j.count, 6);
  t.same(j.errors, [
    { index: 1, code: 'INVALID_SIGNAL', field: 'eventName', message: 'must not be empty' },
    { index: 3, code: 'INVALID_SIGNAL', field: 'customerId', message: 'unknown field' },
    { index: 4, code: 'INVALID_SIGNAL', field: 'customer', message: 'must have exactly one of customerId or externalCustomerId, got both' },
    { index: 5, code: 'INVALID_SIGNAL', field: 'data', message: 'must be a JSON object, got array' },
  ]);
  t.same(judgeBulk({ signals: [sig(), sig()] }, NOW).errors, [], 'none refused');
  t.same(judgeBulk({ signals: [7] }, NOW).errors, [{ index: 0, code: 'INVALID_SIGNAL', field: '', message: 'must be an object, got number' }], 'the signal itself: field ""');
  const all = apiError(() => validateBulk({ signals: [sig({ eventName: '' }), sig({ timestamp: 'x' })] }, NOW));
  t.equal(all.details, 'signals[0].eventName: must not be empty', 'every signal refused: the first error in details');
});

t.test('validateV1: the v1 field names map to the v2 shape; their errors name them as the caller wrote them', async (t) => {
  const v1 = { event_name: 'e', customer_id: 'acct_1', agent_id: 'agent-7', data: { n: 1 }, timestamp: '2026-01-31T11:00:00Z', idempotency_key: 'k' };
  const j = judgeV1(v1, NOW);
  t.same(j.errors, []);
  t.same(j.signals, [{ eventName: 'e', customer: { externalCustomerId: 'acct_1' }, attribution: { externalProductId: 'agent-7' }, timestamp: '2026-01-31T11:00:00Z', idempotencyKey: 'k', data: { n: 1 } }]);
  t.equal(j.array, false);
  const arr = judgeV1([v1, { event_name: 'e' }, { event_name: 'e', customer_id: '' }, { event_name: 'e', customer_id: 'c', agent_id: 5 }, { event_name: 'e', customer_id: 'c', foo: 1 }, { ...v1, idempotency_key: '' }, sig()], NOW);
  t.equal(arr.array, true);
  t.match(arr.errors, [
    { index: 1, field: 'customer_id', message: /^is required/ },
    { index: 2, field: 'customer_id', message: 'must not be empty' },
    { index: 3, field: 'agent_id', message: 'must be a string, got number' },
    { index: 4, field: 'foo', message: 'unknown field' },
    { index: 5, field: 'idempotency_key', message: 'must not be empty' },
  ]);
  t.equal(arr.errors.length, 5);
  t.same([arr.signals[1], arr.signals[6]], [null, sig()], 'a refused signal is null; a v2-shaped one is taken as it is');
});

t.test('validateBulk: body shape errors', async (t) => {
  expectError(t, () => validateBulk([], NOW), 'INVALID_BODY', 'body must be a JSON object {"signals": [...]}, got array');
  expectError(t, () => validateBulk(null, NOW), 'INVALID_BODY', 'body must be a JSON object {"signals": [...]}, got null');
  expectError(t, () => validateBulk('x', NOW), 'INVALID_BODY', /got string$/);
  expectError(t, () => validateBulk(5, NOW), 'INVALID_BODY', /got number$/);
  expectError(t, () => validateBulk({}, NOW), 'INVALID_BODY', 'signals: must be an array, got undefined');
  expectError(t, () => validateBulk({ signals: null }, NOW), 'INVALID_BODY', 'signals: must be an array, got null');
  expectError(t, () => validateBulk({ signals: {} }, NOW), 'INVALID_BODY', 'signals: must be an array, got object');
  expectError(t, () => validateBulk({ signals: 'a' }, NOW), 'INVALID_BODY', 'signals: must be an array, got string');
  expectError(t, () => validateBulk({ signals: [sig()], extra: 1 }, NOW), 'INVALID_BODY', /unknown top-level field "extra"/);
  expectError(t, () => validateBulk({ signals: [] }, NOW), 'BATCH_EMPTY', 'signals: at least one signal is required');
  expectError(t, () => validateBulk({ signals: Array.from({ length: 501 }, () => sig()) }, NOW), 'BATCH_TOO_LARGE', 'signals: at most 500 signals per request, got 501');
  // the count is checked before any signal: 501 bad signals still say BATCH_TOO_LARGE
  expectError(t, () => validateBulk({ signals: Array.from({ length: 501 }, () => null) }, NOW), 'BATCH_TOO_LARGE', /got 501/);
});

t.test('validateBulk: a signal that is not an object', async (t) => {
  expectError(t, () => validateBulk(bulkWith(null), NOW), 'INVALID_SIGNAL', 'signals[3]: must be an object, got null');
  expectError(t, () => validateBulk(bulkWith([]), NOW), 'INVALID_SIGNAL', 'signals[3]: must be an object, got array');
  expectError(t, () => validateBulk(bulkWith('s'), NOW), 'INVALID_SIGNAL', 'signals[3]: must be an object, got string');
  expectError(t, () => validateBulk(bulkWith(7), NOW), 'INVALID_SIGNAL', 'signals[3]: must be an object, got number');
});

t.test('validateBulk: required strings eventName, and the id inside customer and attribution', async (t) => {
  for (const f of ['eventName', 'customer.externalCustomerId', 'customer.customerId', 'attribution.externalProductId', 'attribution.productId']) {
    if (f === 'eventName') expectError(t, () => validateBulk(bulkWith(without(f)), NOW), 'INVALID_SIGNAL', `signals[3].${f}: is required`);
    expectError(t, () => validateBulk(bulkWith(withField(f, null)), NOW), 'INVALID_SIGNAL', `signals[3].${f}: is required`);
    expectError(t, () => validateBulk(bulkWith(withField(f, '')), NOW), 'INVALID_SIGNAL', `signals[3].${f}: must not be empty`);
    expectError(t, () => validateBulk(bulkWith(withField(f, 'x'.repeat(256))), NOW), 'INVALID_SIGNAL', `signals[3].${f}: must be at most 255 characters, got 256`);
    t.equal(validateBulk(bulkWith(withField(f, 'x'.repeat(255))), NOW), 5, `${f} of 255 characters accepted`);
    t.equal(validateBulk(bulkWith(withField(f, 'x')), NOW), 5, `${f} of 1 character accepted`);
    for (const [v, name] of [[1, 'number'], [true, 'boolean'], [{}, 'object'], [[], 'array'], [['a'], 'array']] as const) {
      expectError(t, () => validateBulk(bulkWith(withField(f, v)), NOW), 'INVALID_SIGNAL', `signals[3].${f}: must be a string, got ${name}`);
    }
  }
});

t.test('validateBulk: customer (required) and attribution (optional) hold exactly one of their two ids', async (t) => {
  expectError(t, () => validateBulk(bulkWith(without('customer')), NOW), 'INVALID_SIGNAL', /^signals\[3\]\.customer: is required/);
  expectError(t, () => validateBulk(bulkWith(sig({ customer: null })), NOW), 'INVALID_SIGNAL', /^signals\[3\]\.customer: is required/);
  t.equal(validateBulk(bulkWith(without('attribution')), NOW), 5, 'no attribution');
  t.equal(validateBulk(bulkWith(sig({ attribution: null })), NOW), 5, 'attribution null');
  for (const [f, id, external] of [['customer', 'customerId', 'externalCustomerId'], ['attribution', 'productId', 'externalProductId']] as const) {
    expectError(t, () => validateBulk(bulkWith(sig({ [f]: {} })), NOW), 'INVALID_SIGNAL', `signals[3].${f}: must have exactly one of ${id} or ${external}, got neither`);
    expectError(t, () => validateBulk(bulkWith(sig({ [f]: { [id]: 'a', [external]: 'b' } })), NOW), 'INVALID_SIGNAL', `signals[3].${f}: must have exactly one of ${id} or ${external}, got both`);
    expectError(t, () => validateBulk(bulkWith(sig({ [f]: { [external]: 'b', name: 'n' } })), NOW), 'INVALID_SIGNAL', `signals[3].${f}.name: unknown field`);
    for (const [v, name] of [['a', 'string'], [1, 'number'], [[{ [id]: 'a' }], 'array'], [true, 'boolean']] as const) {
      expectError(t, () => validateBulk(bulkWith(sig({ [f]: v })), NOW), 'INVALID_SIGNAL', new RegExp(`^signals\\[3\\]\\.${f}: must be an object .*, got ${name}$`));
    }
  }
  expectError(t, () => validateBulk(bulkWith(sig({ attribution: { externalCustomerId: 'c' } })), NOW), 'INVALID_SIGNAL', 'signals[3].attribution.externalCustomerId: unknown field', "a customer's key in attribution");
  expectError(t, () => validateBulk(bulkWith({ eventName: 'e', customerId: 'c' }), NOW), 'INVALID_SIGNAL', 'signals[3].customerId: unknown field', 'a flat customerId outside customer');
});

t.test('validateBulk: optional strings unitId and idempotencyKey', async (t) => {
  for (const f of ['unitId', 'idempotencyKey']) {
    t.equal(validateBulk(bulkWith(sig({ [f]: null })), NOW), 5, `${f} null accepted`);
    t.equal(validateBulk(bulkWith(sig({ [f]: 'x'.repeat(255) })), NOW), 5, `${f} of 255 characters accepted`);
    expectError(t, () => validateBulk(bulkWith(sig({ [f]: 'x'.repeat(256) })), NOW), 'INVALID_SIGNAL', `signals[3].${f}: must be at most 255 characters, got 256`);
    expectError(t, () => validateBulk(bulkWith(sig({ [f]: '' })), NOW), 'INVALID_SIGNAL', `signals[3].${f}: must not be empty`);
    for (const [v, name] of [[0, 'number'], [false, 'boolean'], [{}, 'object'], [[1], 'array']] as const) {
      expectError(t, () => validateBulk(bulkWith(sig({ [f]: v })), NOW), 'INVALID_SIGNAL', `signals[3].${f}: must be a string, got ${name}`);
    }
  }
});

t.test('validateBulk: unknown fields', async (t) => {
  expectError(t, () => validateBulk(bulkWith(sig({ foo: 1 })), NOW), 'INVALID_SIGNAL', 'signals[3].foo: unknown field');
  expectError(t, () => validateBulk(bulkWith(sig({ EventName: 'x' })), NOW), 'INVALID_SIGNAL', 'signals[3].EventName: unknown field');
  expectError(t, () => validateBulk(bulkWith(sig({ event_name: 'x' })), NOW), 'INVALID_SIGNAL', 'signals[3].event_name: unknown field');
  // an own "__proto__" key, as JSON.parse makes it
  expectError(t, () => validateBulk(bulkWith(JSON.parse('{"eventName":"e","customer":{"externalCustomerId":"c"},"__proto__":{}}')), NOW), 'INVALID_SIGNAL', 'signals[3].__proto__: unknown field');
  expectError(t, () => validateBulk(bulkWith(JSON.parse('{"eventName":"e","customer":{"externalCustomerId":"c","__proto__":{}}}')), NOW), 'INVALID_SIGNAL', 'signals[3].customer.__proto__: unknown field', 'inside customer');
  // unknown field is reported even when other fields are also bad (checked first)
  expectError(t, () => validateBulk(bulkWith({ zzz: 1 }), NOW), 'INVALID_SIGNAL', 'signals[3].zzz: unknown field');
});

t.test('validateBulk: timestamp', async (t) => {
  const p = 'signals[3].timestamp';
  for (const [v, name] of [[1706702400000, 'number'], [true, 'boolean'], [{}, 'object'], [[], 'array']] as const) {
    expectError(t, () => validateBulk(bulkWith(sig({ timestamp: v })), NOW), 'INVALID_SIGNAL', `${p}: must be an RFC 3339 date-time string, got ${name}`);
  }
  expectError(t, () => validateBulk(bulkWith(sig({ timestamp: '2026-02-30T00:00:00Z' })), NOW), 'INVALID_SIGNAL', `${p}: must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z, got "2026-02-30T00:00:00Z"`);
  expectError(t, () => validateBulk(bulkWith(sig({ timestamp: 'x'.repeat(100) })), NOW), 'INVALID_SIGNAL', `${p}: must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z, got "${'x'.repeat(40)}"`, 'long garbage is cut to 40 characters');
  expectError(t, () => validateBulk(bulkWith(sig({ timestamp: '' })), NOW), 'INVALID_SIGNAL', /^signals\[3\]\.timestamp: must be an RFC 3339 date-time/);
  // not before 2000-01-01T00:00:00Z
  t.equal(validateBulk(bulkWith(sig({ timestamp: '2000-01-01T00:00:00Z' })), NOW), 5, '2000-01-01T00:00:00Z accepted');
  t.equal(validateBulk(bulkWith(sig({ timestamp: '2000-01-01T01:00:00+01:00' })), NOW), 5, 'the same instant with an offset accepted');
  expectError(t, () => validateBulk(bulkWith(sig({ timestamp: '1999-12-31T23:59:59.999Z' })), NOW), 'INVALID_SIGNAL', `${p}: must not be before 2000-01-01T00:00:00Z`);
  expectError(t, () => validateBulk(bulkWith(sig({ timestamp: '2000-01-01T00:30:00+01:00' })), NOW), 'INVALID_SIGNAL', `${p}: must not be before 2000-01-01T00:00:00Z`, 'before 2000 by its offset');
  expectError(t, () => validateBulk(bulkWith(sig({ timestamp: '1970-01-01T00:00:00Z' })), NOW), 'INVALID_SIGNAL', `${p}: must not be before 2000-01-01T00:00:00Z`);
  // at most one hour after receipt
  const inOneHour = new Date(NOW + 3_600_000).toISOString();
  const tooLate = new Date(NOW + 3_600_001).toISOString();
  t.equal(validateBulk(bulkWith(sig({ timestamp: inOneHour })), NOW), 5, 'exactly one hour ahead accepted');
  expectError(t, () => validateBulk(bulkWith(sig({ timestamp: tooLate })), NOW), 'INVALID_SIGNAL', `${p}: must not be more than one hour in the future`);
  t.equal(validateBulk(bulkWith(sig({ timestamp: '2026-01-31T14:00:00+01:00' })), NOW), 5, '14:00+01:00 = 13:00Z = exactly one hour ahead: accepted');
  expectError(t, () => validateBulk(bulkWith(sig({ timestamp: '2026-01-31T14:00:00.001+01:00' })), NOW), 'INVALID_SIGNAL', `${p}: must not be more than one hour in the future`, 'one hour and 1 ms ahead through an offset');
  t.equal(validateBulk(bulkWith(sig({ timestamp: '2026-01-31T05:00:00-08:00' })), NOW), 5, 'in the past through a negative offset');
});

t.test('validateBulk: data', async (t) => {
  const p = 'signals[3].data';
  t.equal(validateBulk(bulkWith(sig({ data: null })), NOW), 5, 'data null accepted');
  for (const [v, name] of [[[], 'array'], [[{ a: 1 }], 'array'], ['{}', 'string'], [1, 'number'], [true, 'boolean']] as const) {
    expectError(t, () => validateBulk(bulkWith(sig({ data: v })), NOW), 'INVALID_SIGNAL', `${p}: must be a JSON object, got ${name}`);
  }
  // nesting: data is level 1
  t.equal(validateBulk(bulkWith(sig({ data: nest(10) })), NOW), 5, '10 levels accepted');
  expectError(t, () => validateBulk(bulkWith(sig({ data: nest(11) })), NOW), 'INVALID_SIGNAL', `${p}: must not nest deeper than 10 levels`);
});

t.test('validateBulk: data nesting counts arrays and objects alike', async (t) => {
  const p = 'signals[3].data';
  // nest(10, leaf) has the leaf inside the 10th object: a leaf object would be level 11
  expectError(t, () => validateBulk(bulkWith(sig({ data: nest(10, {}) })), NOW), 'INVALID_SIGNAL', `${p}: must not nest deeper than 10 levels`, 'an empty object at level 11');
  expectError(t, () => validateBulk(bulkWith(sig({ data: nest(10, []) })), NOW), 'INVALID_SIGNAL', `${p}: must not nest deeper than 10 levels`, 'an empty array at level 11');
  t.equal(validateBulk(bulkWith(sig({ data: nestArrays(10) })), NOW), 5, '1 object + 9 arrays = 10 levels accepted');
  expectError(t, () => validateBulk(bulkWith(sig({ data: nestArrays(11) })), NOW), 'INVALID_SIGNAL', `${p}: must not nest deeper than 10 levels`, '1 object + 10 arrays');
  // a deep branch after shallow siblings is found
  expectError(t, () => validateBulk(bulkWith(sig({ data: { x: 1, y: [1, 2], z: nest(10) } })), NOW), 'INVALID_SIGNAL', `${p}: must not nest deeper than 10 levels`);
  // a very deep value (deeper than the stack could stringify) is refused, not a crash
  expectError(t, () => validateBulk(bulkWith(sig({ data: nest(100_000) })), NOW), 'INVALID_SIGNAL', `${p}: must not nest deeper than 10 levels`);
});

t.test('validateBulk: data size in bytes of its JSON', async (t) => {
  const p = 'signals[3].data';
  const overhead = Buffer.byteLength(JSON.stringify({ a: '' })); // {"a":""} = 8
  const exact = { a: 'x'.repeat(MAX_DATA_BYTES - overhead) };
  t.equal(Buffer.byteLength(JSON.stringify(exact)), 16_384);
  t.equal(validateBulk(bulkWith(sig({ data: exact })), NOW), 5, 'exactly 16,384 bytes accepted');
  const over = { a: 'x'.repeat(MAX_DATA_BYTES - overhead + 1) };
  expectError(t, () => validateBulk(bulkWith(sig({ data: over })), NOW), 'INVALID_SIGNAL', `${p}: must be at most 16384 bytes as JSON, got 16385`);
  // bytes, not characters: 'é' is 2 bytes in UTF-8
  const accents = { a: 'é'.repeat((MAX_DATA_BYTES - overhead) / 2) };
  t.equal(validateBulk(bulkWith(sig({ data: accents })), NOW), 5, '8,188 × "é" = 16,384 bytes accepted');
  const accentsOver = { a: 'é'.repeat((MAX_DATA_BYTES - overhead) / 2 + 1) };
  t.ok(JSON.stringify(accentsOver).length < MAX_DATA_BYTES, 'fewer characters than the limit…');
  expectError(t, () => validateBulk(bulkWith(sig({ data: accentsOver })), NOW), 'INVALID_SIGNAL', `${p}: must be at most 16384 bytes as JSON, got 16386`, '…but more bytes: refused');
  // escapes count as written: a control character is 6 bytes (\u0001)
  const ctrl = { a: '\u0001'.repeat(Math.floor((MAX_DATA_BYTES - overhead) / 6) + 1) };
  expectError(t, () => validateBulk(bulkWith(sig({ data: ctrl })), NOW), 'INVALID_SIGNAL', /^signals\[3\]\.data: must be at most 16384 bytes as JSON, got \d+$/);
});

t.test('the first bad signal is reported; field order within a signal', async (t) => {
  const body = { signals: [sig(), sig({ eventName: '' }), sig(), sig({ customer: { externalCustomerId: 1 } })] };
  expectError(t, () => validateBulk(body, NOW), 'INVALID_SIGNAL', 'signals[1].eventName: must not be empty');
  // eventName before customer before attribution before unitId before idempotencyKey before timestamp before data
  const allBad = { eventName: '', customer: { externalCustomerId: '' }, attribution: { productId: '' }, unitId: '', idempotencyKey: '', timestamp: 'x', data: [] };
  const order = ['eventName', 'customer', 'attribution', 'unitId', 'idempotencyKey', 'timestamp', 'data'];
  const s: Record<string, unknown> = { ...allBad };
  for (const f of order) {
    expectError(t, () => validateBulk(bulkWith(s), NOW), 'INVALID_SIGNAL', new RegExp(`^signals\\[3\\]\\.${f}[.:]`), `then ${f}`);
    s[f] = f === 'data' || f === 'timestamp' || f === 'attribution' ? null : f === 'customer' ? { customerId: 'ok' } : 'ok';
  }
  t.equal(validateBulk(bulkWith(s), NOW), 5);
});

t.test('validateV1: paths, codes and shapes', async (t) => {
  expectError(t, () => validateV1(null, NOW), 'INVALID_BODY', 'body must be a signal object or an array of signals, got null');
  expectError(t, () => validateV1('x', NOW), 'INVALID_BODY', /got string$/);
  expectError(t, () => validateV1(3, NOW), 'INVALID_BODY', /got number$/);
  expectError(t, () => validateV1([], NOW), 'BATCH_EMPTY', 'signals: at least one signal is required');
  expectError(t, () => validateV1(Array.from({ length: 501 }, () => sig()), NOW), 'BATCH_TOO_LARGE', 'signals: at most 500 signals per request, got 501');
  expectError(t, () => validateV1(without('eventName'), NOW), 'INVALID_SIGNAL', 'signal.eventName: is required');
  expectError(t, () => validateV1(sig({ data: 'x' }), NOW), 'INVALID_SIGNAL', 'signal.data: must be a JSON object, got string');
  expectError(t, () => validateV1(sig({ signals: [] }), NOW), 'INVALID_SIGNAL', 'signal.signals: unknown field', 'a v2 body sent to v1');
  expectError(t, () => validateV1([sig(), sig({ customer: { externalCustomerId: 'x'.repeat(256) } })], NOW), 'INVALID_SIGNAL', '[1].customer.externalCustomerId: must be at most 255 characters, got 256');
  expectError(t, () => validateV1([{ event_name: 'e', customer_id: 'c' }, { event_name: 'e', customer_id: 'x'.repeat(256) }], NOW), 'INVALID_SIGNAL', '[1].customer_id: must be at most 255 characters, got 256', 'v1 names');
  expectError(t, () => validateV1({ event_name: 'e' }, NOW), 'INVALID_SIGNAL', /^signal\.customer_id: is required/);
  expectError(t, () => validateV1([sig(), null], NOW), 'INVALID_SIGNAL', '[1]: must be an object, got null');
  expectError(t, () => validateV1([sig(), sig(), sig(), sig({ unitId: 5 })], NOW), 'INVALID_SIGNAL', '[3].unitId: must be a string, got number');
});

t.test('parseJson', async (t) => {
  expectError(t, () => parseJson(Buffer.alloc(0)), 'INVALID_JSON', 'request body is empty; expected JSON');
  expectError(t, () => parseJson(Buffer.from('{"signals": [')), 'INVALID_JSON', /^request body is not valid JSON: /);
  expectError(t, () => parseJson(Buffer.from('nope')), 'INVALID_JSON', /^request body is not valid JSON: /);
  expectError(t, () => parseJson(Buffer.from('   ')), 'INVALID_JSON', /^request body is not valid JSON: /, 'whitespace only');
  expectError(t, () => parseJson(Buffer.from("{'a':1}")), 'INVALID_JSON', /^request body is not valid JSON: /, 'single quotes');
  expectError(t, () => parseJson(Buffer.from('{"a":1}{"b":2}')), 'INVALID_JSON', /^request body is not valid JSON: /, 'two documents');
  t.same(parseJson(Buffer.from('{"signals":[]}')), { signals: [] });
  t.same(parseJson(Buffer.from(' [1, 2] \n')), [1, 2]);
  t.equal(parseJson(Buffer.from('null')), null);
});

t.test('property: one defect anywhere in a batch is reported with its index and field', async (t) => {
  const defects: [string, unknown, RegExp][] = [
    ['eventName', '', /must not be empty/],
    ['eventName', 42, /must be a string, got number/],
    ['customer', { externalCustomerId: 'y'.repeat(256) }, /^signals\[\d+\]\.customer\.externalCustomerId: .*at most 255 characters/],
    ['customer', { customerId: 'a', externalCustomerId: 'b' }, /exactly one of customerId or externalCustomerId, got both/],
    ['customerId', 'c', /unknown field/],
    ['attribution', { externalProductId: '' }, /must not be empty/],
    ['unitId', [], /must be a string, got array/],
    ['idempotencyKey', '', /must not be empty/],
    ['timestamp', '2025-02-29T00:00:00Z', /RFC 3339/],
    ['timestamp', '1999-01-01T00:00:00Z', /before 2000/],
    ['data', [], /must be a JSON object, got array/],
    ['data', nest(11), /deeper than 10 levels/],
    ['nope', 1, /unknown field/],
  ];
  await fc.assert(
    fc.property(fc.integer({ min: 1, max: 500 }), fc.nat(), fc.constantFrom(...defects), (n, k0, [field, value, re]) => {
      const k = k0 % n;
      const signals = Array.from({ length: n }, (_, i) => sig({ idempotencyKey: `k${i}` }));
      signals[k] = { ...signals[k], [field]: value };
      const e = apiError(() => validateBulk({ signals }, NOW));
      return e.code === 'INVALID_SIGNAL' && e.details.startsWith(`signals[${k}].${field}`) && re.test(e.details);
    }),
    { numRuns: 200 },
  );
  t.pass('every defect reported at its index');
});

t.test('signalProblem: the field within the signal and the problem, or null', async (t) => {
  t.match(signalProblem({}, NOW), { field: 'eventName', problem: 'is required' });
  t.match(signalProblem(sig({ customer: { customerId: '' } }), NOW), { field: 'customer.customerId', problem: 'must not be empty' });
  t.match(signalProblem(null, NOW), { field: '', problem: 'must be an object, got null' });
  t.equal(signalProblem(sig(), NOW), null);
});

// ---------------------------------------------------------------------------------------------
// Two keys naming the same path in `data`.

const dup = (path: string): string => `two keys name the same path "${path}" (dots in keys separate path segments)`;

t.test('validateBulk: data keys that name the same path are refused', async (t) => {
  const p = 'signals[3].data';
  const refused: [Record<string, unknown>, string, string][] = [
    [{ 'a.b': 1, a: { b: 2 } }, 'a.b', 'dotted key, then the nested key'],
    [{ a: { b: 2 }, 'a.b': 1 }, 'a.b', 'nested key, then the dotted key'],
    [{ 'a.b.c': 1, a: { 'b.c': 2 } }, 'a.b.c', 'dots on both sides'],
    [{ 'a.b': { c: 1 }, a: { 'b.c': 2 } }, 'a.b.c', 'a dotted key holding an object'],
    [{ 'a.b': { c: 1 }, 'a.b.c': 2 }, 'a.b.c', 'two dotted keys'],
    [{ x: { 'a.b': 1, a: { b: 2 } } }, 'x.a.b', 'below the top level'],
    [{ 'a.b': null, a: { b: 1 } }, 'a.b', 'null counts as a leaf'],
    [{ 'a.b': [], a: { b: [] } }, 'a.b', 'arrays count as leaves'],
    [{ 'a.b': [1], a: { b: 'x' } }, 'a.b', 'an array and a string'],
    [{ 'a.b': 1, a: { b: {}, c: 1 }, 'a.c': 2 }, 'a.c', 'an empty object is no leaf, the later pair is found'],
    [{ 'a.': 1, a: { '': 2 } }, 'a.', 'an empty key is a segment'],
    [{ 'a..b': 1, a: { '': { b: 2 } } }, 'a..b', 'an empty segment in the middle'],
    [{ x: [{ 'a.b': 1, a: { b: 2 } }] }, 'a.b', 'inside an object in an array (its own document)'],
    [{ x: [1, { ok: 1 }, { 'a.b': 1, a: { b: 2 } }] }, 'a.b', 'in a later array element'],
    [{ x: [[{ 'a.b': 1, a: { b: 2 } }]] }, 'a.b', 'in an object in an array in an array'],
    [{ y: { x: [{ q: [{ 'a.b': 1, a: { b: 2 } }] }] } }, 'a.b', 'in a document inside a document'],
  ];
  for (const [data, path, why] of refused) {
    expectError(t, () => validateBulk(bulkWith(sig({ data })), NOW), 'INVALID_SIGNAL', `${p}: ${dup(path)}`, `${why}: ${JSON.stringify(data)}`);
    // the same through JSON text, as the ingress sees it, and with the surrogate check on
    expectError(t, () => validateBulk(parseJson(Buffer.from(JSON.stringify(bulkWith(sig({ data }))))), NOW, true), 'INVALID_SIGNAL', `${p}: ${dup(path)}`, `${why}: through JSON, strings=true`);
  }
  expectError(t, () => validateV1(sig({ data: { 'a.b': 1, a: { b: 2 } } }), NOW), 'INVALID_SIGNAL', `signal.data: ${dup('a.b')}`, 'v1 single signal');
  expectError(t, () => validateV1([sig(), sig({ data: { 'a.b': 1, a: { b: 2 } } })], NOW), 'INVALID_SIGNAL', `[1].data: ${dup('a.b')}`, 'v1 array');
  expectError(t, () => validateSignal(sig({ data: { 'a.b': 1, a: { b: 2 } } }), 'x', NOW, true), 'INVALID_SIGNAL', `x.data: ${dup('a.b')}`, 'validateSignal');
});

t.test('validateBulk: overlapping but distinct paths in data are accepted', async (t) => {
  const accepted: [Record<string, unknown>, string][] = [
    [{ a: 1, 'a.b': 2 }, 'a leaf and a path below it'],
    [{ a: { b: 1 }, 'a.b.c': 2 }, 'a leaf and a dotted path below it'],
    [{ 'a.b': {}, a: { b: {} } }, 'two empty objects at one path'],
    [{ 'a.b': {}, a: { b: 1 } }, 'an empty object and a leaf'],
    [{ a: {}, 'a.b': 1 }, 'an empty object above a leaf'],
    [{ 'a.b': 1, a: { c: 2 } }, 'siblings'],
    [{ 'a.b': 1, b: { a: 1 }, 'b.a.c': 3 }, 'b.a and b.a.c'],
    [{ x: [{ 'a.b': 1 }, { a: { b: 2 } }] }, 'the same path in two array elements (separate documents)'],
    [{ 'a.b': 1, x: [{ a: { b: 2 } }] }, 'the same path outside and inside an array element'],
    [{ x: [{ a: 1 }, { a: { b: 1 } }] }, 'a leaf and an object in two array elements'],
    [{ 'a.b': [{ 'a.b': 1 }], a: { c: [{ a: { b: 2 } }] } }, 'documents in arrays do not share paths'],
    [{ '': 1, '.': 2 }, 'empty key and "." (paths "" and ".")'],
    [{ 'x.': 1, x: { a: 1 } }, '"x." and "x.a"'],
    [{ x: { '': { a: 1 } }, 'x.a': 2 }, '"x..a" and "x.a"'],
    [{ 'a.b.c.d.e.f.g.h.i.j.k.l': 1 }, 'many dots in one key do not count as nesting'],
  ];
  for (const [data, why] of accepted) {
    t.equal(validateBulk(bulkWith(sig({ data })), NOW, true), 5, `${why}: ${JSON.stringify(data)}`);
  }
});

t.test('data paths: an empty key is a path segment of its own, at a document root too', async (t) => {
  // {"": {"a": 1}} is the path ".a", not "a" (checked against chdb in rows.test.ts)
  const outcome = (data: Record<string, unknown>): string => {
    try {
      validateBulk(bulkWith(sig({ data })), NOW, true);
      return 'accepted';
    } catch (err) {
      return (err as ApiError).details;
    }
  };
  t.equal(outcome({ '.a': 1, '': { a: 2 } }), `signals[3].data: ${dup('.a')}`, '".a" and "" → "a" name the path ".a"');
  t.equal(outcome({ '': { '': 1 }, '.': 2 }), `signals[3].data: ${dup('.')}`, '"" → "" and "." name the path "."');
  t.equal(outcome({ '': { '': { a: 1 } }, '..a': 2 }), `signals[3].data: ${dup('..a')}`, '"" → "" → "a" and "..a"');
  t.equal(outcome({ k: [{ '': { a: 1 }, '.a': 2 }] }), `signals[3].data: ${dup('.a')}`, 'the same in an array element document');
  t.equal(outcome({ '': { a: 1 }, a: 2 }), 'accepted', '"" → "a" (path ".a") and "a" are distinct paths');
  t.equal(outcome({ k: [{ '': { a: 1 }, a: 2 }] }), 'accepted', 'the same in an array element document');
  t.equal(outcome({ '': 1, a: 2 }), 'accepted', 'a leaf under the empty key');
  // below the root
  t.equal(outcome({ x: { '': { a: 1 } }, 'x..a': 2 }), `signals[3].data: ${dup('x..a')}`, 'below the root: "x" → "" → "a" is "x..a"');
  t.equal(outcome({ x: { '': { a: 1 } }, 'x.a': 2 }), 'accepted', 'below the root: "x..a" and "x.a" are distinct');
});

/**
 * Reference for the path rule. ClickHouse's JSON type reads dots in keys as path separators.
 * Within one document (data, or an object that is an element of an array, at any depth of
 * arrays), every leaf (anything but a plain object: numbers, strings, booleans, null, arrays)
 * has the path of the keys leading to it, joined by "."; two leaves with the same path make
 * the engine refuse the insert.
 */
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The first path (in document order) that two leaves share, or null. */
function firstDuplicatePath(data: Record<string, unknown>): string | null {
  const inValue = (v: unknown): string | null => {
    if (!Array.isArray(v)) return null;
    for (const x of v) {
      const d = isObj(x) ? inDoc(x) : inValue(x);
      if (d !== null) return d;
    }
    return null;
  };
  const inDoc = (doc: Record<string, unknown>): string | null => {
    const seen = new Set<string>();
    const visit = (o: Record<string, unknown>, keys: string[]): string | null => {
      for (const [k, v] of Object.entries(o)) {
        const path = [...keys, k];
        if (isObj(v)) {
          const d = visit(v, path);
          if (d !== null) return d;
          continue;
        }
        const joined = path.join('.');
        if (seen.has(joined)) return joined;
        seen.add(joined);
        const d = inValue(v);
        if (d !== null) return d;
      }
      return null;
    };
    return visit(doc, []);
  };
  return inDoc(data);
}


t.test('property: data is refused for a duplicate path exactly when two leaves share a path', async (t) => {
  const key = fc.oneof(
    { weight: 8, arbitrary: fc.constantFrom('a', 'b', 'a.b', 'b.a', 'a.b.c') },
    { weight: 1, arbitrary: fc.constantFrom('', '.', 'a.', '.b', 'a..b', 'c') },
  );
  const leaf = fc.constantFrom(1, 'x', null, true, [], {});
  const { value } = fc.letrec<{ value: unknown; obj: Record<string, unknown> }>((tie) => ({
    value: fc.oneof({ depthSize: 'small', maxDepth: 5 }, leaf, tie('obj'), tie('obj'), fc.array(fc.oneof(leaf, tie('obj')), { maxLength: 3 })),
    obj: fc.dictionary(key, tie('value'), { maxKeys: 5 }),
  }));
  const data = fc.dictionary(key, value, { minKeys: 1, maxKeys: 6 });
  let dups = 0;
  let clean = 0;
  await fc.assert(
    fc.property(data, (d0) => {
      // through JSON, as the ingress sees it (own keys, plain prototypes)
      const d = JSON.parse(JSON.stringify(d0)) as Record<string, unknown>;
      const want = firstDuplicatePath(d);
      let got: string | null = null;
      try {
        validateSignal(sig({ data: d }), 'signal', NOW, true);
      } catch (err) {
        if (!(err instanceof ApiError)) throw err;
        got = err.details;
      }
      if (want === null) {
        clean++;
        if (got !== null) throw new Error(`refused ${JSON.stringify(d)}: ${got}`);
      } else {
        dups++;
        if (got !== `signal.data: ${dup(want)}`) throw new Error(`${JSON.stringify(d)}: want the duplicate "${want}", got ${String(got)}`);
      }
      return true;
    }),
    { numRuns: 2000 },
  );
  t.comment(`${dups} with a duplicate path, ${clean} without`);
  t.ok(dups > 200 && clean > 200, 'both outcomes were exercised');
});

// ---------------------------------------------------------------------------------------------
// Lone surrogates.

const LONE = ['\ud800', '\udbff', '\udc00', '\udfff', 'x\ud800', '\udc00x', 'a\ud83d', '\ude00b', '\ude00\ud83d'];

t.test('string fields with a lone surrogate are refused (whatever the strings flag)', async (t) => {
  for (const f of ['eventName', 'customer.externalCustomerId', 'customer.customerId', 'attribution.externalProductId', 'attribution.productId', 'unitId', 'idempotencyKey']) {
    for (const v of LONE) {
      for (const strings of [false, true]) {
        expectError(t, () => validateBulk(bulkWith(withField(f, v)), NOW, strings), 'INVALID_SIGNAL', `signals[3].${f}: must be well-formed Unicode (no lone surrogates)`, `${f}=${JSON.stringify(v)}, strings=${strings}`);
      }
    }
    t.equal(validateBulk(bulkWith(withField(f, '😀\ud83d\ude00')), NOW, true), 5, `${f}: surrogate pairs are fine`);
    t.equal(validateBulk(bulkWith(withField(f, '😀'.repeat(127))), NOW, true), 5, `${f}: 254 UTF-16 units of pairs accepted`);
  }
  expectError(t, () => validateV1(sig({ eventName: '\ud800' }), NOW), 'INVALID_SIGNAL', 'signal.eventName: must be well-formed Unicode (no lone surrogates)', 'v1');
  // length is checked before well-formedness
  expectError(t, () => validateBulk(bulkWith(withField('customer.externalCustomerId', '\ud800'.repeat(256))), NOW), 'INVALID_SIGNAL', 'signals[3].customer.externalCustomerId: must be at most 255 characters, got 256');
});

t.test('data with a lone surrogate is refused when strings=true', async (t) => {
  const p = 'signals[3].data';
  const inValue = `${p}: contains a string that is not well-formed Unicode (lone surrogate)`;
  for (const v of LONE) {
    expectError(t, () => validateBulk(bulkWith(sig({ data: { s: v } })), NOW, true), 'INVALID_SIGNAL', inValue, `value ${JSON.stringify(v)}`);
    expectError(t, () => validateBulk(bulkWith(sig({ data: { a: { b: [1, [v]] } } })), NOW, true), 'INVALID_SIGNAL', inValue, `deep in arrays ${JSON.stringify(v)}`);
    expectError(t, () => validateBulk(bulkWith(sig({ data: { x: [{ y: v }] } })), NOW, true), 'INVALID_SIGNAL', inValue, `in an array element object ${JSON.stringify(v)}`);
    expectError(t, () => validateBulk(bulkWith(sig({ data: { [v]: 1 } })), NOW, true), 'INVALID_SIGNAL', `${p}: key ${JSON.stringify(v)} is not well-formed Unicode (lone surrogate)`, `key ${JSON.stringify(v)}`);
    expectError(t, () => validateBulk(bulkWith(sig({ data: { a: [{ b: { [v]: null } }] } })), NOW, true), 'INVALID_SIGNAL', `${p}: key ${JSON.stringify(v)} is not well-formed Unicode (lone surrogate)`, `nested key ${JSON.stringify(v)}`);
  }
  t.equal(JSON.stringify('\ud800'), '"\\ud800"', 'the key in the message is written as an escape');
  expectError(t, () => validateV1([sig(), sig({ data: { s: '\udfff' } })], NOW, true), 'INVALID_SIGNAL', `[1].data: contains a string that is not well-formed Unicode (lone surrogate)`, 'v1');
  expectError(t, () => validateSignal(sig({ data: { s: '\udfff' } }), 'x', NOW, true), 'INVALID_SIGNAL', `x.data: contains a string that is not well-formed Unicode (lone surrogate)`, 'validateSignal');
  t.equal(validateBulk(bulkWith(sig({ data: { '😀': '😀', s: '\ud83d\ude00', a: ['\uffff', '\ufeff', '\u0000'] } })), NOW, true), 5, 'pairs and other odd but well-formed strings accepted');
  // strings=false (the raw body had no \ud escape, so no lone surrogate can be in it) skips the check
  t.equal(validateBulk(bulkWith(sig({ data: { s: '\ud800', '\udc00': 1 } })), NOW, false), 5, 'strings=false: the data check is skipped');
  t.equal(validateBulk(bulkWith(sig({ data: { s: '\ud800' } })), NOW), 5, 'strings defaults to false');
});

t.test('mayHaveSurrogates: true whenever the raw body can hold a lone surrogate', async (t) => {
  t.equal(mayHaveSurrogates(Buffer.from('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{"s":"\\ud800"}}]}')), true, 'lowercase escape');
  t.equal(mayHaveSurrogates(Buffer.from('{"s":"\\uDC00"}')), true, 'uppercase escape');
  t.equal(mayHaveSurrogates(Buffer.from('{"s":"\\uDbFf"}')), true, 'mixed case');
  t.equal(mayHaveSurrogates(Buffer.from('{"s":"\\ud83d\\ude00"}')), true, 'an escaped pair (checked, then accepted)');
  t.equal(mayHaveSurrogates(Buffer.from('{"s":"😀 é \\u00e9 \\u2028 \\uFFFF"}')), false, 'raw UTF-8 and other escapes');
  t.equal(mayHaveSurrogates(Buffer.from('{"s":"ud800 \\\\ d800"}')), false, 'no backslash-u-d');
  // invalid UTF-8 (an encoded surrogate) decodes to U+FFFD, never to a lone surrogate
  const raw = Buffer.concat([Buffer.from('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{"s":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}}]}')]);
  t.equal(mayHaveSurrogates(raw), false);
  t.equal(validateBulk(parseJson(raw), NOW, false), 1, 'decoded with U+FFFD: nothing to refuse');

  // property: the ingress's sequence (parse the raw body, validate with strings from the raw
  // body) refuses every body with a lone surrogate anywhere in data, however it is escaped
  const lone = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c));
  const text = fc.tuple(fc.string({ maxLength: 4 }), lone, fc.string({ maxLength: 4 }), fc.boolean()).map(([a, l, b, pair]) => (pair ? `${a}\ud83d\ude00${b}` : `${a}${l}${b}`));
  const upper = (json: string): string => json.replace(/\\ud([0-9a-f]{3})/g, (_m, h: string) => `\\uD${h.toUpperCase()}`);
  let refused = 0;
  await fc.assert(
    fc.property(text, fc.boolean(), fc.boolean(), (s, asKey, up) => {
      const body = { signals: [sig({ data: asKey ? { x: [{ [s]: 1 }] } : { x: { y: [s] } } })] };
      let json = JSON.stringify(body);
      if (up) json = upper(json);
      const raw = Buffer.from(json);
      const parsed = parseJson(raw);
      let ok = true;
      try {
        validateBulk(parsed, NOW, mayHaveSurrogates(raw));
      } catch (err) {
        if (!(err instanceof ApiError) || err.code !== 'INVALID_SIGNAL') throw err;
        ok = false;
      }
      if (!s.isWellFormed()) refused++;
      return ok === s.isWellFormed();
    }),
    { numRuns: 500 },
  );
  t.ok(refused > 100, `lone surrogates were exercised (${refused})`);
});
