/**
 * The analytics query operation through the real HTTP API, over signals of two
 * organizations (and both modes) stored by the real pipeline in the embedded engine; run in
 * server mode too by test/server-store/analytics.test.ts.
 */
import t from 'tap';
import { createOrg, drained, embeddedOnly, serverOnly, http, logLines, sendBatch, ServiceProcess, startService, useService, type TestOrg } from '../helpers/service.js';

const { iso, svc } = useService(t, 'analytics');

const query = (key: string, q: string, base = svc.url) => http(base, 'POST', '/api/v2/analytics/query', { token: key, body: { query: q } });

// Org A: 30 live signals over 6 days, 4 test signals. Org B: 12 live signals.
const DAY = 86_400_000;
const T0 = Date.parse('2026-01-01T00:00:00Z');
interface Sent { day: number; region: string; n: number; customer: string }
const sentA: Sent[] = Array.from({ length: 30 }, (_, i) => ({ day: i % 6, region: i % 3 === 0 ? 'eu' : 'us', n: i + 1, customer: `cus_a${i % 4}` }));
let A: TestOrg;
let B: TestOrg;

t.before(async () => {
  A = await createOrg(svc.url);
  B = await createOrg(svc.url);
  const signalsA = sentA.map((s, i) => ({
    eventName: 'api_call',
    customer: { externalCustomerId: s.customer },
    timestamp: new Date(T0 + s.day * DAY + i * 1000).toISOString(),
    idempotencyKey: `a-${i}`,
    data: { region: s.region, n: s.n, big: '9007199254740993', nested: { tier: i % 2 ? 'gold' : 'free' } },
  }));
  const signalsB = Array.from({ length: 12 }, (_, i) => ({ eventName: 'b_only_event', customer: { externalCustomerId: 'cus_b' }, timestamp: new Date(T0 + i * 1000).toISOString(), data: { onlyInB: i } }));
  const signalsATest = Array.from({ length: 4 }, (_, i) => ({ eventName: 'test_event', customer: { externalCustomerId: 'cus_t' }, timestamp: new Date(T0 + i * 1000).toISOString(), data: { inTest: true } }));
  for (const [key, body] of [[A.live, signalsA], [B.live, signalsB], [A.test, signalsATest]] as const) {
    const r = await sendBatch(svc.url, key, { signals: body });
    if (r.status !== 202) throw new Error(`ingest: ${r.status} ${JSON.stringify(r.body)}`);
  }
  await drained(iso);
});

t.test('aggregates are scoped to the caller and its mode', async (t) => {
  const q = 'SELECT count() AS n, uniqExact(external_customer_id) AS customers FROM fact_signal';
  const a = await query(A.live, q);
  t.equal(a.status, 200, JSON.stringify(a.body));
  t.same(a.body.columns, [{ name: 'n', type: 'UInt64' }, { name: 'customers', type: 'UInt64' }]);
  t.same(a.body.rows, [['30', '4']], '64-bit counts are JSON strings');
  t.equal(a.body.meta.truncated, false);
  t.same((await query(B.live, q)).body.rows, [['12', '1']]);
  t.same((await query(A.test, q)).body.rows, [['4', '1']], 'test keys see the test data set only');
});

t.test('JSON paths with casts, GROUP BY and ORDER BY', async (t) => {
  const r = await query(A.live, "SELECT data.region::String AS region, sum(data.n::Int64) AS total, count() AS c FROM fact_signal WHERE data.nested.tier::String = 'gold' GROUP BY region ORDER BY region");
  t.equal(r.status, 200, JSON.stringify(r.body));
  const expected = new Map<string, [number, number]>();
  sentA.forEach((s, i) => {
    if (i % 2 === 0) return;
    const [sum, c] = expected.get(s.region) ?? [0, 0];
    expected.set(s.region, [sum + s.n, c + 1]);
  });
  t.same(r.body.rows, [...expected.entries()].sort().map(([region, [sum, c]]) => [region, String(sum), String(c)]));
  t.same(r.body.columns.map((c: { type: string }) => c.type), ['String', 'Int64', 'UInt64']);
});

t.test('WITH … SELECT, window functions and a date filter', async (t) => {
  const r = await query(
    A.live,
    `WITH daily AS (
       SELECT toDate(created_at) AS day, count() AS c FROM fact_signal
       WHERE created_at >= '2026-01-02 00:00:00' AND created_at < '2026-01-05 00:00:00'
       GROUP BY day
     )
     SELECT day, c, sum(c) OVER (ORDER BY day ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running,
            rank() OVER (ORDER BY c DESC, day) AS r
     FROM daily ORDER BY day -- a comment`,
  );
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.same(r.body.rows.map((row: unknown[]) => [row[0], row[1], row[2]]), [
    ['2026-01-02', '5', '5'],
    ['2026-01-03', '5', '10'],
    ['2026-01-04', '5', '15'],
  ]);
  t.same(r.body.columns.map((c: { name: string }) => c.name), ['day', 'c', 'running', 'r']);
});

t.test('JOIN, UNION and subqueries stay inside the caller’s rows', async (t) => {
  const r = await query(A.live, `SELECT count() FROM fact_signal a JOIN (SELECT id FROM fact_signal WHERE data.n::Int64 > 10) b ON a.id = b.id
    UNION ALL SELECT count() FROM fact_signal WHERE external_customer_id IN (SELECT external_customer_id FROM fact_signal) UNION ALL SELECT count() FROM fact_cost`);
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.same(r.body.rows.map((x: string[]) => x[0]).sort(), ['0', '20', '30']);
});

t.test('64-bit and wider integers are strings, decimals exact strings, other numbers natural', async (t) => {
  const r = await query(A.live, `SELECT toUInt64(18446744073709551615) AS u64, toInt64(-9223372036854775808) AS i64, toUInt128('340282366920938463463374607431768211455') AS u128,
    toDecimal128('12345678901234567890.123456789', 9) AS d, toDecimal32(1.25, 2) AS d32, 1.5 AS f, toInt32(-7) AS i32, true AS b, NULL AS nothing,
    (SELECT any(data.big::Int64) FROM fact_signal) AS big`);
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.same(r.body.rows, [['18446744073709551615', '-9223372036854775808', '340282366920938463463374607431768211455', '12345678901234567890.123456789', '1.25', 1.5, -7, true, null, '9007199254740993']]);
  t.same(r.body.columns.map((c: { type: string }) => c.type), ['UInt64', 'Int64', 'UInt128', 'Decimal(38, 9)', 'Decimal(9, 2)', 'Float64', 'Int32', 'Bool', 'Nullable(Nothing)', 'Nullable(Int64)']);
});

t.test('results are cut at exactly 10,000 rows, flagged by meta.truncated', async (t) => {
  const exact = await query(A.live, 'SELECT number FROM numbers(10000)');
  t.equal(exact.body.rows.length, 10_000);
  t.equal(exact.body.meta.truncated, false, '10,000 rows are not truncated');
  const over = await query(A.live, 'SELECT number FROM numbers(10001)');
  t.equal(over.body.rows.length, 10_000);
  t.equal(over.body.meta.truncated, true);
  t.same(over.body.rows[9_999], ['9999']);
  const big = await query(A.live, 'SELECT number, toString(number) AS s FROM numbers(1000000) ORDER BY number DESC');
  t.equal(big.body.rows.length, 10_000);
  t.equal(big.body.meta.truncated, true);
  t.same(big.body.rows[0], ['999999', '999999'], 'the cut keeps the query’s order');
  const union = await query(A.live, 'SELECT number FROM numbers(6000) UNION ALL SELECT number FROM numbers(6000)');
  t.equal(union.body.rows.length, 10_000, 'a UNION is cut in total, not per branch');
  t.equal(union.body.meta.truncated, true);
  const small = await query(A.live, 'SELECT id FROM fact_signal');
  t.equal(small.body.rows.length, 30);
  t.equal(small.body.meta.truncated, false);
});

t.test('no organization column, and the views the schema operation lists', async (t) => {
  const r = await query(A.live, 'SELECT org_id FROM fact_signal');
  t.equal(r.status, 400);
  t.equal(r.body.code, 'INVALID_QUERY');
  t.match(r.body.details, /unknown column "org_id" .*\(at 1:8\)/);
  const schema = await http(svc.url, 'GET', '/api/v2/analytics/schema', { token: A.live });
  t.equal(schema.status, 200);
  t.same(schema.body.views.map((v: { name: string }) => v.name), ['fact_signal', 'fact_cost', 'fact_credit_consumption', 'fact_unpriced']);
  const signalColumns = (schema.body.views[0].columns as { name: string }[]).map((c) => c.name);
  for (const c of ['customer_id', 'external_customer_id', 'product_id', 'external_product_id']) t.ok(signalColumns.includes(c), `fact_signal lists ${c}`);
  for (const view of schema.body.views as { name: string; description: string; columns: { name: string; type: string; description: string }[] }[]) {
    t.ok(view.description.length > 0);
    for (const c of view.columns) t.ok(c.description.length > 0, `${view.name}.${c.name} is described`);
    const live = await query(A.live, `SELECT * FROM ${view.name} LIMIT 0`);
    t.same(live.body.columns, view.columns.map(({ name, type }) => ({ name, type })), `${view.name}: the schema matches what the engine returns`);
  }
  const unauth = await http(svc.url, 'GET', '/api/v2/analytics/schema');
  t.equal(unauth.status, 401);
});

t.test('signals metadata lists the caller’s JSON paths only, with types and counts', async (t) => {
  const a = await http(svc.url, 'GET', '/api/v2/analytics/signals/metadata', { token: A.live });
  t.equal(a.status, 200, JSON.stringify(a.body));
  const paths = Object.fromEntries((a.body.paths as { path: string; type: string; signals: number; lastSeenAt: string }[]).map((p) => [p.path, p]));
  t.same(Object.keys(paths).sort(), ['big', 'n', 'nested.tier', 'region']);
  t.equal(paths.region!.type, 'String');
  t.equal(paths.n!.type, 'Int64');
  t.equal(paths.n!.signals, 30);
  t.match(paths.n!.lastSeenAt, /^2026-01-06T00:00:\d\d\.000Z$/);
  const b = await http(svc.url, 'GET', '/api/v2/analytics/signals/metadata', { token: B.live });
  t.same(b.body.paths.map((p: { path: string }) => p.path), ['onlyInB']);
  const test = await http(svc.url, 'GET', '/api/v2/analytics/signals/metadata', { token: A.test });
  t.same(test.body.paths.map((p: { path: string }) => p.path), ['inTest']);
});

t.test('refusals: status, code and a details text naming the problem', async (t) => {
  const cases: [string, number, string, RegExp][] = [
    ['SELECT 1; SELECT 2', 400, 'MULTIPLE_STATEMENTS', /one statement/],
    ['INSERT INTO fact_signal (id) VALUES (1)', 400, 'NOT_A_SELECT', /INSERT/],
    ['ALTER TABLE fact_signal DELETE WHERE 1', 400, 'NOT_A_SELECT', /ALTER/],
    ['CREATE TABLE x (a Int8) ENGINE = Memory', 400, 'NOT_A_SELECT', /CREATE/],
    ['DROP TABLE fact_signal', 400, 'NOT_A_SELECT', /DROP/],
    ['SYSTEM SHUTDOWN', 400, 'NOT_A_SELECT', /SYSTEM/],
    ['SET readonly = 0', 400, 'NOT_A_SELECT', /SET/],
    ['KILL QUERY WHERE 1', 400, 'NOT_A_SELECT', /KILL/],
    ['OPTIMIZE TABLE fact_signal', 400, 'NOT_A_SELECT', /OPTIMIZE/],
    ['EXPLAIN SELECT 1', 400, 'NOT_A_SELECT', /EXPLAIN/],
    ['SELECT * FROM fact_signal INTO OUTFILE \'/tmp/x\'', 400, 'CLAUSE_NOT_ALLOWED', /INTO OUTFILE/],
    ['SELECT 1 SETTINGS max_threads = 1', 400, 'CLAUSE_NOT_ALLOWED', /SETTINGS/],
    ['SELECT 1 FORMAT CSV', 400, 'CLAUSE_NOT_ALLOWED', /FORMAT/],
    ['SELEC 1', 400, 'INVALID_QUERY', /Syntax error.*\(at 1:1\)/],
    ['SELECT {p:String}', 400, 'INVALID_QUERY', /parameters/],
    ['-- only a comment', 400, 'INVALID_QUERY', /./],
    ['SELECT * FROM system.tables', 403, 'FORBIDDEN', /system\.tables.*\(at 1:15\)/],
    ['SELECT * FROM file(\'/etc/passwd\', \'LineAsString\')', 403, 'FORBIDDEN', /file/],
    ['SELECT file(\'/etc/passwd\')', 400, 'INVALID_QUERY', /function file\(\) is not allowed.*\(at 1:8\)/],
    ['SELECT * FROM signals', 403, 'FORBIDDEN', /fact_signal/],
    ['SELECT dictGet(\'d\', \'x\', 1)', 400, 'INVALID_QUERY', /dictGet\(\)/],
    ['SELECT * APPLY(x -> (SELECT groupArray(customer_id) FROM billing.signals)) FROM (SELECT 1 AS x)', 400, 'INVALID_QUERY', /APPLY.*\(at 1:10\)/],
    ['SELECT * FROM (SELECT 1 SETTINGS readonly = 0)', 400, 'CLAUSE_NOT_ALLOWED', /SETTINGS.*\(at 1:25\)/],
    ['SELECT inIgnoreSet(\'x\', billing.signals)', 400, 'INVALID_QUERY', /inIgnoreSet\(\)/],
    ['SELECT count() FROM numbers(100000000000000)', 400, 'INVALID_QUERY', /numbers\(\) generates at most/],
    ['SELECT toUInt64(concat(\'x\', toString(count()))) FROM fact_signal', 400, 'QUERY_FAILED', /CANNOT_PARSE/],
    // 30 nested IN sets, 650 characters: the engine's analysis doubles with each level.
    [`SELECT 1 WHERE 1 IN ${'(SELECT 1 WHERE 1 IN '.repeat(30)}(1)${')'.repeat(30)}`, 400, 'INVALID_QUERY', /the sets of IN nest more than 8 levels deep/],
  ];
  for (const [q, status, code, details] of cases) {
    const r = await query(A.live, q);
    t.equal(r.status, status, `${q} → ${JSON.stringify(r.body)}`);
    t.equal(r.body.code, code, q);
    t.equal(typeof r.body.error, 'string');
    t.match(r.body.details, details, q);
    t.notMatch(JSON.stringify(r.body), /billing\.|\/tmp\/billing|log_comment|scope:|Stack|\.cpp/, `${q}: no internals in the answer`);
  }
});

t.test('engine errors are classified by the engine\'s code, never by a class name the query quotes', async (t) => {
  // Each name would mean 408, 403 or 500 if the class were read from the message, which
  // quotes the caller's own literal; the engine's code is CANNOT_PARSE_TEXT (6) every time.
  const names = [
    'TIMEOUT_EXCEEDED', 'UNKNOWN_TABLE', 'UNKNOWN_DATABASE', 'UNKNOWN_DICTIONARY', 'READONLY', 'ACCESS_DENIED', 'UNKNOWN_STORAGE', 'UNKNOWN_TABLE_FUNCTION',
    'LOGICAL_ERROR', 'CANNOT_ALLOCATE_MEMORY', 'STD_EXCEPTION', 'POCO_EXCEPTION', 'UNKNOWN_EXCEPTION', 'ABORTED', 'NOT_ENOUGH_SPACE', 'CORRUPTED_DATA',
    'CHECKSUM_DOESNT_MATCH', 'CANNOT_READ_ALL_DATA', 'FILE_DOESNT_EXIST', 'TABLE_IS_DROPPED', 'TOO_MANY_SIMULTANEOUS_QUERIES', 'QUERY_WAS_CANCELLED',
    'SYSTEM_ERROR', 'SESSION_NOT_FOUND', 'AUTHENTICATION_FAILED', 'ALL_CONNECTION_TRIES_FAILED', 'SERVER_OVERLOADED', 'CANNOT_OPEN_FILE', 'NETWORK_ERROR',
    'SOCKET_TIMEOUT', 'KEEPER_EXCEPTION', 'MEMORY_LIMIT_EXCEEDED',
  ];
  const loggedBefore = logLines(svc, 'analytics engine error').length;
  for (const name of names) {
    for (const literal of [`(${name})`, `Code: 159. DB::Exception: x. (${name}) (version 26.7.1.1)`, `x\\0(${name})`]) {
      const q = `SELECT toUInt64('${literal}')`;
      const started = Date.now();
      const r = await query(A.live, q);
      t.same([r.status, r.body.code], [400, 'QUERY_FAILED'], `${q} → ${r.status} ${JSON.stringify(r.body)} after ${Date.now() - started} ms`);
      t.match(r.body.details, /^CANNOT_PARSE_TEXT: /, `${q}: the engine's class`);
    }
  }
  t.equal(logLines(svc, 'analytics engine error').length, loggedBefore, 'no engine error was logged as the service\'s failure');
});

t.test('body validation', async (t) => {
  const post = (raw: string) => http(svc.url, 'POST', '/api/v2/analytics/query', { token: A.live, raw });
  const cases: [string, number, string][] = [
    ['not json', 400, 'INVALID_JSON'],
    ['[]', 400, 'INVALID_BODY'],
    ['{}', 400, 'INVALID_BODY'],
    ['{"query": 1}', 400, 'INVALID_BODY'],
    ['{"query": "SELECT 1", "org": "x"}', 400, 'INVALID_BODY'],
    ['{"query": ""}', 400, 'INVALID_QUERY'],
    ['{"query": "   "}', 400, 'INVALID_QUERY'],
    [JSON.stringify({ query: `SELECT 1 /*${'x'.repeat(20_481 - 13)}*/` }), 400, 'INVALID_QUERY'],
  ];
  for (const [raw, status, code] of cases) {
    const r = await post(raw);
    t.equal(r.status, status, raw.slice(0, 40));
    t.equal(r.body.code, code, raw.slice(0, 40));
  }
  const max = `SELECT 1 /*${'é'.repeat(20_480 - 13)}*/`;
  t.equal([...max].length, 20_480);
  t.equal((await query(A.live, max)).status, 200, 'exactly 20,480 characters (not bytes) are accepted');
  t.equal((await http(svc.url, 'POST', '/api/v2/analytics/query', { body: { query: 'SELECT 1' } })).status, 401);
  t.equal((await http(svc.url, 'GET', '/api/v2/analytics/query', { token: A.live })).status, 405);
});

t.test('timeouts (408), the concurrency limit (429 without Retry-After) and the rate framework', async (t) => {
  const { svc: svc2 } = await startService(t, 'analytics408', { ANALYTICS_TIMEOUT_MS: '1000', ANALYTICS_RATE_LIMITED: 'true' });
  const org = await createOrg(svc2.url, { analyticsConcurrency: 1, burst: 500, refillPerSecond: 0.01 });
  const other = await createOrg(svc2.url, { analyticsConcurrency: 1 });
  const slow = 'SELECT count() FROM numbers(1000000000) WHERE sipHash64(toString(number)) = 0';

  const started = Date.now();
  const first = query(org.live, slow, svc2.url);
  await new Promise((r) => setTimeout(r, 300));
  const second = await query(org.live, 'SELECT 1', svc2.url);
  t.equal(second.status, 429);
  t.same(second.body, { error: 'Too Many Requests', code: 'CONCURRENCY_LIMIT_EXCEEDED', details: 'Too many requests. Retry after 1s.' });
  t.equal(second.headers.get('retry-after'), null, 'no Retry-After on the concurrency 429');
  const refused = await query(org.live, 'SELECT nope FROM fact_signal', svc2.url);
  t.equal(refused.status, 400, 'a query the compiler refuses needs no slot: 400, not 429');
  t.equal(refused.body.code, 'INVALID_QUERY');
  t.equal((await query(other.live, 'SELECT 1', svc2.url)).status, 200, 'another organization is not limited');
  t.equal((await query(org.test, 'SELECT 1', svc2.url)).status, 200, 'test mode has its own slots');

  const timedOut = await first;
  t.equal(timedOut.status, 408, JSON.stringify(timedOut.body));
  t.equal(timedOut.body.code, 'QUERY_TIMEOUT');
  t.equal(timedOut.body.error, 'Request Timeout');
  t.ok(Date.now() - started < 6_000, 'stopped near the time limit');
  const after = await query(org.live, 'SELECT 42 AS x', svc2.url);
  t.equal(after.status, 200, 'the slot is free again once the query stopped');
  t.same(after.body.rows, [[42]], 'and the next answer carries nothing of the stopped query');

  // The rate framework is on in this service: one token per query.
  const drain = await sendBatch(svc2.url, org.live, { signals: Array.from({ length: 495 }, () => ({ eventName: 'e', customer: { externalCustomerId: 'c' } })) });
  t.equal(drain.status, 202);
  let limited = null;
  for (let i = 0; i < 10 && !limited; i++) {
    const r = await query(org.live, 'SELECT 1', svc2.url);
    if (r.status === 429) limited = r;
  }
  t.ok(limited, 'the bucket runs dry');
  t.equal(limited?.body.code, 'RATE_LIMIT_EXCEEDED');
  t.match(limited?.headers.get('retry-after') ?? '', /^\d+$/);
});

t.test('with the rate framework off (default), analytics take no tokens', async (t) => {
  const org = await createOrg(svc.url, { burst: 500, refillPerSecond: 0.01 });
  t.equal((await sendBatch(svc.url, org.live, { signals: Array.from({ length: 500 }, () => ({ eventName: 'e', customer: { externalCustomerId: 'c' } })) })).status, 202);
  t.equal((await sendBatch(svc.url, org.live, { signals: [{ eventName: 'e', customer: { externalCustomerId: 'c' } }] })).status, 429, 'the bucket is empty');
  for (let i = 0; i < 3; i++) t.equal((await query(org.live, 'SELECT 1')).status, 200);
});

// In server mode the harness gives every process of the isolation CLICKHOUSE_URL (the front's),
// so there is no ingress without a server to start; the next subtest checks an ingress with one.
t.test('ROLE=ingress without a ClickHouse server answers 503 ANALYTICS_UNAVAILABLE', embeddedOnly('every process gets the front\'s CLICKHOUSE_URL, so no ingress lacks a server'), async (t) => {
  const ing = new ServiceProcess(iso, { ROLE: 'ingress' });
  t.teardown(() => ing.stop());
  await ing.start();
  const r = await query(A.live, 'SELECT 1', ing.url);
  t.equal(r.status, 503);
  t.equal(r.body.code, 'ANALYTICS_UNAVAILABLE');
  t.match(r.body.details, /ROLE=all|CLICKHOUSE_URL/);
});

t.test('ROLE=ingress with a ClickHouse server answers analytics queries from the shared store', serverOnly('an ingress reaches the engine only through CLICKHOUSE_URL'), async (t) => {
  const ing = new ServiceProcess(iso, { ROLE: 'ingress' });
  t.teardown(() => ing.stop());
  await ing.start();
  const q = 'SELECT count() AS n, uniqExact(external_customer_id) AS customers FROM fact_signal';
  const a = await query(A.live, q, ing.url);
  t.equal(a.status, 200, JSON.stringify(a.body));
  t.same(a.body.rows, [['30', '4']], 'the rows the pipeline of the other process stored');
  t.same((await query(B.live, q, ing.url)).body.rows, [['12', '1']], 'scoped to the caller');
  t.same((await query(A.test, q, ing.url)).body.rows, [['4', '1']], 'and to its mode');
});
