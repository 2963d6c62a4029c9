/**
 * The SDK's pure parts: ClickHouse type names parsed and values converted exactly (shapes the
 * engine prints that a single query cannot easily produce: named tuples, enums, time zones,
 * LowCardinality), the backoff schedule, and Retry-After parsing.
 */
import t from 'tap';
import { backoffMs, convertResult, convertValue, parseRetryAfter, parseType, rateLimitWaitMs } from '../../packages/sdk/src/index.js';

const id = (s: string): string => s;

t.test('parseType', async (t) => {
  t.same(parseType('UInt64'), { name: 'UInt64' });
  t.same(parseType('Nullable(Decimal(76, 24))'), { name: 'Nullable', args: [{ type: { name: 'Decimal', args: [{ literal: '76' }, { literal: '24' }] } }] });
  t.same(parseType("DateTime64(3, 'Europe/Paris')"), { name: 'DateTime64', args: [{ literal: '3' }, { literal: "'Europe/Paris'" }] });
  t.same(parseType("Enum8('a, (b)' = 1, 'c' = 2)").args?.length, 2, 'commas and parentheses inside quotes do not split');
  t.same(parseType('Tuple(a Int64, `b c` Decimal(10, 2), String)'), {
    name: 'Tuple',
    args: [
      { field: 'a', type: { name: 'Int64' } },
      { field: 'b c', type: { name: 'Decimal', args: [{ literal: '10' }, { literal: '2' }] } },
      { type: { name: 'String' } },
    ],
  });
  t.same(parseType('Map(LowCardinality(String), Array(UInt128))').args?.map((a) => ('type' in a ? a.type.name : a.literal)), ['LowCardinality', 'Array']);
});

t.test('convertValue: wide integers to BigInt, decimals exact, recursively; the rest untouched', async (t) => {
  const c = (type: string, v: unknown): unknown => convertValue(v, parseType(type), id);
  t.equal(c('Int64', '-9223372036854775808'), -9223372036854775808n);
  t.equal(c('UInt256', '115792089237316195423570985008687907853269984665640564039457584007913129639935'), 2n ** 256n - 1n);
  t.equal(c('Int64', 42), 42n, 'a safe integer sent as a number');
  t.equal(c('Int64', 1.5), 1.5, 'never invents digits: a non-integer is left as sent');
  t.equal(c('Int32', 7), 7, 'narrow integers stay numbers');
  t.equal(c('Decimal(76, 24)', '0.000000000000000000000001'), '0.000000000000000000000001');
  t.equal(c('Decimal64(4)', '12.5'), '12.5');
  t.equal(c('Nullable(Int64)', null), null);
  t.equal(c('LowCardinality(Nullable(UInt64))', '5'), 5n);
  t.same(c('Array(Nullable(Int128))', ['1', null]), [1n, null]);
  t.same(c('Tuple(a Int64, b String)', ['1', 'x']), [1n, 'x']);
  t.same(c('Tuple(a Int64, b String)', { a: '1', b: 'x' }), { a: 1n, b: 'x' }, 'a named tuple printed as an object');
  t.same(c('Map(String, Decimal(10, 2))', { k: '1.10' }), { k: '1.10' });
  t.same(c('Map(String, Array(UInt64))', { k: ['18446744073709551615'] }), { k: [18446744073709551615n] });
  t.equal(c('Float64', 0.1), 0.1);
  t.equal(c("DateTime64(3, 'UTC')", '2026-01-01 00:00:00.000'), '2026-01-01 00:00:00.000');
  t.equal(c("Enum8('a' = 1)", 'a'), 'a');
  t.equal(c('JSON', '{"a":1}'), '{"a":1}', 'unknown types pass through');
});

t.test('convertResult: only columns that need it are touched; the decimal factory is applied', async (t) => {
  const raw = {
    columns: [{ name: 's', type: 'String' }, { name: 'n', type: 'UInt64' }, { name: 'd', type: 'Decimal(76, 24)' }],
    rows: [['12', '12', '0.1'], ['x', '18446744073709551615', '-3']],
    meta: { truncated: false, rowCount: 2, elapsedMs: 1 },
  };
  const r = convertResult(raw, (s) => ({ exact: s }));
  t.same(r.rows, [['12', 12n, { exact: '0.1' }], ['x', 18446744073709551615n, { exact: '-3' }]]);
  const plain = { columns: [{ name: 'x', type: 'Float64' }], rows: [[1.5]], meta: raw.meta };
  t.equal(convertResult(plain).rows, plain.rows, 'nothing to convert: the rows are returned as they came');
});

t.test('backoff: equal jitter, exponential, capped; Retry-After first', async (t) => {
  const o = { initialBackoffMs: 100, maxBackoffMs: 1_000 };
  t.same([1, 2, 3, 4, 5, 6].map((n) => backoffMs(n, o, () => 0)), [50, 100, 200, 400, 500, 500], 'lower bounds double, up to half the cap');
  t.same([1, 2, 3, 4, 5].map((n) => backoffMs(n, o, () => 1)), [100, 200, 400, 800, 1000], 'upper bounds');
  t.equal(rateLimitWaitMs(3, 1, o, () => 0), 3_050, 'at least Retry-After, plus jitter');
  t.equal(rateLimitWaitMs(3, 3, o, () => 1), 3_400, 'repeats add a growing term');
  t.equal(rateLimitWaitMs(undefined, 1, o, () => 0), 1_050, 'no usable Retry-After: at least a second');
});

t.test('parseRetryAfter', async (t) => {
  t.equal(parseRetryAfter('3'), 3);
  t.equal(parseRetryAfter(' 0 '), 0);
  t.equal(parseRetryAfter(null), undefined);
  t.equal(parseRetryAfter('soon'), undefined);
  t.equal(parseRetryAfter('-1'), undefined);
  const now = Date.parse('2026-01-01T00:00:00Z');
  t.equal(parseRetryAfter('Thu, 01 Jan 2026 00:00:05 GMT', now), 5, 'an HTTP-date');
});
