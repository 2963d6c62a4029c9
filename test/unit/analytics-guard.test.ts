/**
 * The analytics guard (src/analytics/guard.ts, policy.ts) with the real engine's parser,
 * in this process: honest queries pass unchanged in meaning, and the policy covers every
 * risky function and table function the engine actually has.
 */
import t from 'tap';
import { openTestStore } from '../helpers/chdb.js';
import { QueryGuard } from '../../src/analytics/guard.js';
import { ALLOWED_TABLE_FUNCTIONS, isDeniedFunction } from '../../src/analytics/policy.js';
import { ApiError } from '../../src/errors.js';
import { scopedSettings } from '../../src/analytics/service.js';

const tsv = (s: string): string[] => s.split('\n').filter((l) => l !== '');

t.test('guard decisions with the engine’s parser', async (t) => {
  const { store } = await openTestStore(t);
  const guard = new QueryGuard(store.analytics, ['billing', 'analytics']);
  const verdict = async (q: string): Promise<string> => {
    try {
      await guard.check(q);
      return 'ok';
    } catch (err) {
      if (err instanceof ApiError) return err.code;
      throw err;
    }
  };

  const honest = [
    'SELECT 1',
    'select count() from fact_signal',
    'SELECT data.customer.tier::String AS tier, avg(data.amount::Float64) FROM fact_signal GROUP BY tier',
    'WITH d AS (SELECT toDate(created_at) AS day, count() AS c FROM fact_signal GROUP BY day) SELECT day, sum(c) OVER (ORDER BY day) FROM d',
    'SELECT a.id FROM fact_signal AS a LEFT JOIN fact_cost AS b ON a.id = b.signal_id WHERE b.signal_id IS NULL',
    'SELECT event_name FROM fact_signal UNION ALL SELECT event_name FROM fact_cost',
    'SELECT id FROM fact_signal INTERSECT SELECT signal_id FROM fact_cost',
    'SELECT * EXCEPT (data) FROM fact_signal ORDER BY created_at DESC LIMIT 10',
    'SELECT toStartOfHour(created_at) AS h, count() FROM fact_signal WHERE created_at >= now() - INTERVAL 1 DAY GROUP BY h ORDER BY h WITH FILL STEP INTERVAL 1 HOUR',
    'SELECT number FROM numbers(10)',
    'SELECT * FROM generate_series(1, 5)',
    "SELECT arrayMap(x -> x * 2, [1, 2]), format('{}-{}', 'a', 'b'), formatReadableSize(1024)",
    'SELECT quantiles(0.5, 0.9)(data.latency::Float64) FROM fact_signal',
    'SELECT id FROM fact_signal WHERE event_name IN (SELECT event_name FROM fact_signal GROUP BY event_name HAVING count() > 1)',
    'WITH ["a", "b"] AS names SELECT has(names, event_name) FROM fact_signal',
    'SELECT `id`, "event_name" FROM `fact_signal` /* comment */ -- trailing',
    'WITH signals AS (SELECT 1 AS x) SELECT * FROM signals',
    'SELECT sleep(0)',
  ];
  for (const q of honest) t.equal(await verdict(q), 'ok', q);

  const refused: [string, string][] = [
    ['SELECT 1; SELECT 2', 'MULTIPLE_STATEMENTS'],
    ['SELECT 1; DROP TABLE billing.signals', 'MULTIPLE_STATEMENTS'],
    ['INSERT INTO fact_signal (id) SELECT 1', 'NOT_A_SELECT'],
    ['SHOW TABLES', 'NOT_A_SELECT'],
    ['DESCRIBE TABLE fact_signal', 'NOT_A_SELECT'],
    ['EXISTS TABLE billing.signals', 'NOT_A_SELECT'],
    ['SELECT 1 SETTINGS readonly = 0', 'CLAUSE_NOT_ALLOWED'],
    ["SELECT * FROM (SELECT * FROM fact_signal SETTINGS log_comment = 'scope:org_x:live')", 'CLAUSE_NOT_ALLOWED'],
    ['WITH x AS (SELECT 1 SETTINGS max_threads = 1) SELECT * FROM x', 'CLAUSE_NOT_ALLOWED'],
    ['SELECT 1 UNION ALL SELECT 2 SETTINGS readonly = 0', 'CLAUSE_NOT_ALLOWED'],
    ['SELECT 1 FORMAT TSV', 'CLAUSE_NOT_ALLOWED'],
    ["SELECT 1 INTO OUTFILE '/tmp/x'", 'CLAUSE_NOT_ALLOWED'],
    ['SELECT * FROM billing.signals', 'FORBIDDEN'],
    ['SELECT * FROM `billing`.`signals`', 'FORBIDDEN'],
    ['SELECT * FROM analytics.fact_signal', 'FORBIDDEN'],
    ['SELECT * FROM system.tables', 'FORBIDDEN'],
    ['SELECT * FROM INFORMATION_SCHEMA.TABLES', 'FORBIDDEN'],
    ['SELECT * FROM fact_signal WHERE id IN billing.signals', 'FORBIDDEN'],
    ['SELECT * FROM fact_signal WHERE id GLOBAL NOT IN system.one', 'FORBIDDEN'],
    ["SELECT file('/etc/passwd')", 'FORBIDDEN'],
    ["SELECT FILE('/etc/passwd')", 'FORBIDDEN'],
    ["SELECT `file`('/etc/passwd')", 'FORBIDDEN'],
    ["SELECT arrayMap(x -> file(x), ['/etc/passwd'])", 'FORBIDDEN'],
    ["SELECT * FROM fact_signal ORDER BY file('/etc/hostname')", 'FORBIDDEN'],
    ["SELECT getSetting('log_comment')", 'FORBIDDEN'],
    ["SELECT dictGetString('d', 'a', 1)", 'FORBIDDEN'],
    ["SELECT joinGet('billing.signals', 'data', 'x')", 'FORBIDDEN'],
    ['SELECT currentDatabase()', 'FORBIDDEN'],
    ['SELECT DATABASE()', 'FORBIDDEN'],
    ["SELECT * FROM url('http://127.0.0.1:1/', 'CSV', 'a String')", 'FORBIDDEN'],
    ["SELECT * FROM merge('billing', '.*')", 'FORBIDDEN'],
    ['SELECT * FROM view(SELECT * FROM billing.signals)', 'FORBIDDEN'],
    ['SELECT * FROM (EXPLAIN SELECT 1)', 'FORBIDDEN'],
    ["SELECT * FROM `x\n      TableIdentifier fact_signal`", 'INVALID_QUERY'],
    ['SELECT {p:String}', 'INVALID_QUERY'],
    ['SELEC 1', 'INVALID_QUERY'],
    ['/* nothing */', 'INVALID_QUERY'],
  ];
  for (const [q, code] of refused) t.equal(await verdict(q), code, q);
});

t.test('every risky function the engine has is denied', async (t) => {
  const { store } = await openTestStore(t);
  const out = await store.analytics.select(
    "SELECT name, categories FROM system.functions WHERE categories IN ('Dictionary', 'Introspection', 'AI', 'Embedded Dictionary', 'Internal') OR name ILIKE '%file%' OR name ILIKE 'dict%' OR name ILIKE '%setting%' OR name ILIKE '%host%' OR name ILIKE '%user%' OR name ILIKE '%database%' OR name ILIKE '%macro%' OR name ILIKE '%query%id%' OR name ILIKE '%server%' OR name ILIKE '%certificate%' OR name ILIKE '%profile%' OR name ILIKE '%role%' OR name ILIKE '%join%get%' OR name ILIKE '%column%table%' OR name ILIKE 'filesystem%' OR name ILIKE 'catboost%' OR name ILIKE 'evalML%'",
    {},
  );
  // Reviewed and harmless although their names match the patterns above.
  const reviewedHarmless = new Set(['_CAST', 'validateNestedArraySizes', 'nested', 'caseWithExpression', 'serverTimeZone', 'serverTimezone', 'rolesHierarchy'].map((n) => n.toLowerCase()));
  const rows = (JSON.parse(out.toString()) as { data: [string, string][] }).data;
  t.ok(rows.length > 100, `${rows.length} functions checked`);
  const missed = rows.filter(([name]) => !isDeniedFunction(name) && !reviewedHarmless.has(name.toLowerCase()));
  t.same(missed, [], 'not denied and not reviewed as harmless');
});

t.test('every table function but the generators is refused', async (t) => {
  const { store } = await openTestStore(t);
  const guard = new QueryGuard(store.analytics, []);
  const names = tsv(await store.analytics.select('SELECT name FROM system.table_functions', {}).then((o) => (JSON.parse(o.toString()) as { data: [string][] }).data.map((r) => r[0]).join('\n')));
  t.ok(names.length > 50);
  for (const name of names) {
    let code = 'ok';
    try {
      await guard.check(`SELECT * FROM ${name}('x')`);
    } catch (err) {
      code = err instanceof ApiError ? err.code : 'THROWN';
    }
    // view()/viewIfPermitted() take a subquery: with a string argument they do not even parse.
    if (ALLOWED_TABLE_FUNCTIONS.has(name.toLowerCase())) t.equal(code, 'ok', name);
    else t.ok(code === 'FORBIDDEN' || (code === 'INVALID_QUERY' && /^view/.test(name)), `${name}: ${code}`);
  }
});

t.test('the caller’s conditions never run on other organizations’ rows (scope barrier)', async (t) => {
  const { store } = await openTestStore(t);
  const row = (org: string, live: boolean, id: string, cus: string, data: object): string =>
    JSON.stringify({ org_id: org, livemode: live, signal_id: id, batch_id: 'bat_x', event_name: 'e', customer_id: cus, unit_id: null, idempotency_key: null, timestamp: '2026-01-01 00:00:00.000', received_at: '2026-01-01 00:00:00.000', data });
  // One insert, one part, one granule: the rows of all three scopes are read together.
  await store.insertSignals(Buffer.from([
    row('org_attacker', true, 's1', 'cus_a', { n: 1 }),
    row('org_attacker', true, 's2', 'cus_a', { n: 2 }),
    row('org_attacker', false, 's3', 'own-test-cus', { n: 3 }),
    row('org_victim', true, 's4', 'victim-cus', { secret: 'zzz' }),
  ].join('\n')));
  const settings = scopedSettings('org_attacker', 'live', { timeoutMs: 30_000, maxMemoryBytes: 2 ** 31 });
  const guard = new QueryGuard(store.analytics, []);
  const attacks = [
    "SELECT count() FROM fact_signal WHERE toUInt64(if(startsWith(customer_id, 'victim') OR startsWith(customer_id, 'own-test'), customer_id, '1')) > 0",
    "SELECT count() FROM fact_signal WHERE throwIf(customer_id = 'victim-cus') = 0",
    "SELECT count() FROM (SELECT * FROM fact_signal) WHERE throwIf(customer_id = 'own-test-cus') = 0",
    "WITH x AS (SELECT * FROM fact_signal) SELECT count() FROM x WHERE throwIf(customer_id = 'victim-cus') = 0",
    "SELECT customer_id, count() FROM fact_signal GROUP BY customer_id HAVING throwIf(customer_id = 'victim-cus') = 0",
    "SELECT count() FROM fact_signal WHERE created_at >= '2026-01-01' AND throwIf(customer_id = 'victim-cus') = 0",
    'SELECT count() FROM fact_signal a JOIN fact_signal b ON a.id = b.id WHERE throwIf(a.customer_id = \'victim-cus\') = 0',
    "SELECT count() FROM fact_signal WHERE throwIf(data.secret::String = 'zzz') = 0",
    "SELECT count() FROM fact_signal WHERE id IN (SELECT id FROM fact_signal WHERE throwIf(customer_id = 'victim-cus') = 0)",
    "SELECT count() FROM fact_signal ARRAY JOIN [1] AS z WHERE throwIf(customer_id = 'victim-cus') = 0",
  ];
  for (const q of attacks) {
    const out = await store.analytics.select(await guard.check(q), settings).then((b) => b.toString(), (err: Error) => `ERROR ${err.message}`);
    t.notMatch(out, /ERROR|victim|zzz|own-test/, q);
  }
});
