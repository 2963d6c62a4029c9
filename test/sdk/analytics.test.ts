/**
 * The SDK's analytics helper against the real service: 64-bit and wider integers come back
 * as BigInt and decimals exactly (string, or the caller's decimal type), through Nullable,
 * Array, Tuple and Map, chosen by the `columns[].type` the API returns; refusals surface
 * with the API's {error, code, details}; the concurrency 429 is retried after the client's
 * own running query ends.
 */
import t from 'tap';
import { Decimal } from 'decimal.js';
import { SignalClient, SignalApiError } from '../../packages/sdk/src/index.js';
import { HttpProxy } from '../helpers/http-proxy.js';
import { createOrg, drained, startService, useService, type TestOrg } from '../helpers/service.js';

const { iso, svc } = useService(t, 'sdkanalytics');
let org: TestOrg;
let client: SignalClient;

t.before(async () => {
  org = await createOrg(svc.url);
  client = new SignalClient({ baseUrl: svc.url, apiKey: org.live });
  for (let i = 0; i < 30; i++) await client.send({ eventName: 'sdk_analytics', customer: { externalCustomerId: `cus_${i % 3}` }, data: { n: i, price: '0.1' } });
  await client.flush();
  await drained(iso);
});
t.teardown(() => client.close());

t.test('wide integers are BigInt, decimals exact strings; small numbers stay numbers', async (t) => {
  const r = await client.analyticsQuery(
    `SELECT count() AS n, toInt64(9223372036854775807) AS i64, toUInt64(18446744073709551615) AS u64,
            toInt128('-170141183460469231731687303715884105728') AS i128, toUInt256('115792089237316195423570985008687907853269984665640564039457584007913129639935') AS u256,
            toDecimal128('12345678901234567890.123456789', 9) AS d, sum(toDecimal64('0.1', 2)) AS total,
            toInt32(-7) AS i32, 1.5 AS f, 'x' AS s
     FROM fact_signal`,
  );
  t.same(r.columns.map((c) => c.name), ['n', 'i64', 'u64', 'i128', 'u256', 'd', 'total', 'i32', 'f', 's']);
  t.same(r.columns.map((c) => c.type).slice(0, 3), ['UInt64', 'Int64', 'UInt64']);
  const row = r.rows[0]!;
  t.equal(row[0], 30n, 'count() is UInt64 → BigInt');
  t.equal(row[1], 9223372036854775807n);
  t.equal(row[2], 18446744073709551615n);
  t.equal(row[3], -170141183460469231731687303715884105728n);
  t.equal(row[4], 115792089237316195423570985008687907853269984665640564039457584007913129639935n);
  t.equal(row[5], '12345678901234567890.123456789', 'decimal digits all kept');
  t.equal(row[6], '3', 'a decimal sum: thirty times 0.1 is exactly 3 (printed as ClickHouse prints it)');
  t.equal(row[7], -7);
  t.equal(row[8], 1.5);
  t.equal(row[9], 'x');
  t.same(r.meta, { truncated: false, rowCount: 1, elapsedMs: r.meta.elapsedMs });
});

t.test('a decimal factory gives exact decimal objects', async (t) => {
  const r = await client.analyticsQuery("SELECT toDecimal256('0.1', 30) + toDecimal256('0.2', 30) AS x", { decimal: (s) => new Decimal(s) });
  const x = r.rows[0]![0] as Decimal;
  t.type(x, Decimal);
  t.ok(x.equals('0.3'), `0.1 + 0.2 = ${x.toString()} exactly`);
});

t.test('conversion reaches inside Nullable, Array, Tuple and Map', async (t) => {
  const r = await client.analyticsQuery(
    `SELECT CAST(NULL AS Nullable(Int64)) AS none, toNullable(toInt64(-5)) AS some,
            [toUInt64(1), toUInt64(18446744073709551615)] AS arr,
            (toInt64(9007199254740993), toDecimal32('1.25', 2), 'a') AS tup,
            map('k', toInt128('170141183460469231731687303715884105727')) AS m,
            [[toDecimal64('1.10', 2)]] AS nested`,
  );
  const row = r.rows[0]!;
  t.equal(row[0], null);
  t.equal(row[1], -5n);
  t.same(row[2], [1n, 18446744073709551615n]);
  t.same(row[3], [9007199254740993n, '1.25', 'a']);
  t.same(row[4], { k: 170141183460469231731687303715884105727n });
  t.same(row[5], [['1.1']], `nested decimals exact (types: ${r.columns.map((c) => c.type).join(' | ')})`);
});

t.test('a refused query surfaces the API error; it is not retried', async (t) => {
  const proxy = await new HttpProxy(svc.url).start();
  t.teardown(() => proxy.stop());
  const viaProxy = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, initialBackoffMs: 20 });
  const e = await viaProxy.analyticsQuery('SELECT nope FROM fact_signal').catch((x: unknown) => x);
  t.type(e, SignalApiError);
  t.match(e, { status: 400, error: 'Bad Request', code: 'INVALID_QUERY', details: /nope/ });
  const f = await viaProxy.analyticsQuery('SELECT * FROM system.tables').catch((x: unknown) => x);
  t.match(f, { status: 403, code: 'FORBIDDEN' });
  t.same(proxy.seen.map((s) => s.status), [400, 403], 'one request each');
  // A 500 (the engine failing on this query) is not asked again either; a 503 is.
  proxy.decide = () => ({ kind: 'answer', status: 500, body: { error: 'Internal Server Error', code: 'INTERNAL', details: 'the analytics engine failed (X)' } });
  const g = await viaProxy.analyticsQuery('SELECT 1').catch((x: unknown) => x);
  t.match(g, { status: 500, code: 'INTERNAL', details: 'the analytics engine failed (X)' });
  t.equal(proxy.seen.length, 3, 'one request');
  let n = 0;
  proxy.decide = () => (n++ < 2 ? { kind: 'answer', status: 503, body: { error: 'Service Unavailable', code: 'STORE_UNAVAILABLE', details: 'retry later' } } : { kind: 'forward' });
  t.same((await viaProxy.analyticsQuery('SELECT 7 AS x')).rows, [[7]], 'two 503s, then the answer');
  t.same(proxy.seen.slice(3).map((s) => s.status), [503, 503, 200]);
});

t.test('CONCURRENCY_LIMIT_EXCEEDED (no Retry-After): retried once the client\'s own query ends', async (t) => {
  const { svc: svc2 } = await startService(t, 'sdkanalytics2', { ANALYTICS_TIMEOUT_MS: '1000' });
  const o = await createOrg(svc2.url, { analyticsConcurrency: 1 });
  const proxy = await new HttpProxy(svc2.url).start();
  t.teardown(() => proxy.stop());
  // A backoff of 2.5–5 s: a retry within 1 s of the slow query's end was made because it ended.
  const c = new SignalClient({ baseUrl: proxy.url, apiKey: o.live, initialBackoffMs: 5_000, maxBackoffMs: 5_000 });
  const slow = c.analyticsQuery('SELECT count() FROM numbers(1000000000) WHERE sipHash64(toString(number)) = 0').catch((x: unknown) => x);
  await new Promise((r) => setTimeout(r, 300));
  const quick = await c.analyticsQuery('SELECT 42 AS x');
  t.same(quick.rows, [[42]], 'the second query got its answer');
  const s = await slow;
  t.match(s, { status: 408, code: 'QUERY_TIMEOUT' }, 'the slow one timed out (408 is not retried)');
  const seen = proxy.seen.filter((r) => r.path.startsWith('/api/v2/analytics/query'));
  const slowAnswer = seen.find((r) => r.status === 408)!;
  const limited = seen.filter((r) => r.status === 429);
  t.ok(limited.length >= 1, 'the second query met the limit while the first ran');
  const firstAfter = seen.find((r) => r.receivedAt >= slowAnswer.answeredAt! && r !== slowAnswer);
  t.ok(firstAfter, 'retried after the slow query ended');
  // (The service keeps the slot until the stopped engine call has ended, so that first retry may
  // meet the limit once more on a loaded machine; then the client backs off and tries again.)
  t.ok(firstAfter!.receivedAt - slowAnswer.answeredAt! < 1_000, `the first retry came ${firstAfter!.receivedAt - slowAnswer.answeredAt!} ms after the slow query's 408, not after the 2.5–5 s backoff`);
  await c.close();
});
