/**
 * The query compiler against the real engine, in this process: what it prints is SQL the
 * engine runs with the meaning the caller wrote, every read is scoped to the caller by the
 * printed view parameters, and the caller's conditions never run on another scope's rows.
 */
import t from 'tap';
import fc from 'fast-check';
import { openTestStore } from '../helpers/chdb.js';
import { CompileError, QueryCompiler } from '../../src/analytics/compiler/index.js';
import { engineSettings } from '../../src/analytics/service.js';
import { VIEW_SCHEMAS } from '../../src/store/views.js';
import type { ChdbStore } from '../../src/store/chdb/index.js';

const row = (org: string, live: boolean, id: string, cus: string, data: object): string =>
  JSON.stringify({ org_id: org, livemode: live, signal_id: id, batch_id: 'bat_x', event_name: 'e', customer_id: cus, unit_id: null, idempotency_key: null, timestamp: '2026-01-01 00:00:00.000', received_at: '2026-01-01 00:00:00.000', data });

/** One insert, one part, one granule: the rows of all three scopes are read together. */
async function seed(store: ChdbStore): Promise<void> {
  await store.insertSignals(
    Buffer.from(
      [
        row('org_attacker', true, 's1', 'cus_a', { n: 1, tags: ['x', 'y'] }),
        row('org_attacker', true, 's2', 'cus_a', { n: 2 }),
        row('org_attacker', false, 's3', 'own-test-cus', { n: 3 }),
        row('org_victim', true, 's4', 'victim-cus', { secret: 'zzz' }),
      ].join('\n'),
    ),
  );
}

const settings = engineSettings({ timeoutMs: 30_000, maxMemoryBytes: 2 ** 31 });

t.test('printed SQL runs in the engine with the meaning written, scoped to the caller', async (t) => {
  const { store, cfg } = await openTestStore(t);
  await seed(store);
  const compiler = new QueryCompiler(VIEW_SCHEMAS, cfg.analytics.database);
  const run = async (q: string, org = 'org_attacker', mode: 'live' | 'test' = 'live'): Promise<unknown[][]> => {
    const out = await store.analytics.select(compiler.compile(q, { orgId: org, mode }), settings);
    return (JSON.parse(out.toString()) as { data: unknown[][] }).data;
  };
  const cases: [string, unknown[][]][] = [
    ['SELECT count() FROM fact_signal', [['2']]],
    ['SELECT id FROM fact_signal ORDER BY id DESC', [['s2'], ['s1']]],
    ['SELECT sum(data.n::Int64), max(`data`.`n`::Int64), countIf(fact_signal.data.n::Int64 > 1) FROM fact_signal', [['3', '2', '1']]],
    ['SELECT a.id, b.id FROM fact_signal AS a JOIN fact_signal AS b ON a.id = b.id ORDER BY a.id', [['s1', 's1'], ['s2', 's2']]],
    ['SELECT id FROM fact_signal LEFT JOIN (SELECT signal_id AS id FROM fact_cost) AS c USING (id) ORDER BY id', [['s1'], ['s2']]],
    ['WITH c AS (SELECT customer_id, count() AS n FROM fact_signal GROUP BY customer_id) SELECT * FROM c', [['cus_a', '2']]],
    ["WITH 'cus_a' AS who SELECT count() FROM fact_signal WHERE customer_id = who", [['2']]],
    ['SELECT tag FROM fact_signal ARRAY JOIN data.tags::Array(String) AS tag ORDER BY tag', [['x'], ['y']]],
    ['SELECT id, row_number() OVER (ORDER BY id DESC) AS r, sum(data.n::Int64) OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS s FROM fact_signal ORDER BY id', [['s1', '2', '1'], ['s2', '1', '3']]],
    ['SELECT * FROM (SELECT id FROM fact_signal UNION ALL SELECT id FROM fact_signal) ORDER BY id', [['s1'], ['s1'], ['s2'], ['s2']]],
    ['SELECT count() FROM ((SELECT id FROM fact_signal) UNION DISTINCT (SELECT id FROM fact_signal))', [['2']]],
    ['SELECT count() FROM fact_signal WHERE id IN (SELECT id FROM fact_signal WHERE data.n::Int64 = 2)', [['1']]],
    ['SELECT customer_id, count() FROM fact_signal GROUP BY customer_id HAVING count() > 0', [['cus_a', '2']]],
    ['SELECT id FROM fact_signal ORDER BY id LIMIT 1 OFFSET 1', [['s2']]],
    ['SELECT customer_id FROM fact_signal LIMIT 1 BY customer_id', [['cus_a']]],
    ["SELECT -1, - 1, -(1), 1 - -1, 2 * 3 + 1, 7 % 4, 'a' || 'b', 1.5, 1e3, 0x10, 'it''s', '\\x41\\t'", [[-1, -1, -1, 2, 7, 3, 'ab', 1.5, 1000, 16, "it's", 'A\t']]],
    ['SELECT toTypeName(-1), toTypeName(-(1)), toTypeName(1::UInt256), toTypeName(CAST(1, \'Nullable(Int8)\'))', [['Int8', 'Int16', 'UInt256', 'Nullable(Int8)']]],
    ["SELECT [1, 2][2], (1, 'b').2, (1,).1, NULL IS NULL, 1 IS NOT NULL, 2 BETWEEN 1 AND 3, 1 NOT IN (2, 3), 'abc' LIKE 'a%', 'ABC' ILIKE 'a%', 'a' NOT LIKE 'b'", [[2, 'b', 1, true, true, true, true, true, true, true]]],
    ["SELECT 1 ? 'y' : 'n', CASE WHEN 0 THEN 'a' WHEN 1 THEN 'b' END, CASE 2 WHEN 1 THEN 'one' ELSE 'other' END, NOT 0 AND 1 OR 0", [['y', 'b', 'other', true]]],
    ["SELECT arrayMap(x -> x * 2, [1, 2]), arrayFilter((x, y) -> x > y, [1, 3], [2, 2]), toDate('2026-01-02') + INTERVAL 1 DAY", [[[2, 4], [3], '2026-01-03']]],
    ["SELECT CAST('1.5' AS Decimal(10, 2)), CAST('a' AS Enum8('a' = 1, 'b' = -2)), toTypeName(CAST((1, 'a') AS Tuple(x Int8, `y z` String)))", [['1.5', 'a', 'Tuple(\n    x Int8,\n    `y z` String)']]],
    ['SELECT quantile(0.5)(data.n::Float64), count(*), count(DISTINCT id) FROM fact_signal', [[1.5, '2', '2']]],
    ['SELECT number FROM numbers(2, 3) ORDER BY number', [['2'], ['3'], ['4']]],
    ['SELECT x.a FROM (SELECT 1 AS a) AS x, (SELECT 2 AS b) AS y', [[1]]],
    ['WITH fact_signal AS (SELECT * FROM fact_signal WHERE id = \'s1\') SELECT id FROM fact_signal', [['s1']]],
    ["SELECT count() FROM fact_signal WHERE toUInt64(if(customer_id = 'cus_a', '1', customer_id)) = 1", [['2']]],
    // Literals the compiler accepts where the allowlist wants one, and WITH names for literals in lambdas.
    ["WITH 2 AS factor, ['a', 'b'] AS keys SELECT arrayMap(x -> x * factor, [1, 2]), arrayFilter(x -> has(keys, x), ['a', 'c'])", [[[2, 4], ['a']]]],
    ['SELECT range(1000, 0, -1)[1], length(range(0, 10, 3)), hasAny([1], [1, 2]), transform(2, [1, 2], [-1, -2], 0), round(1234.5, -(2))', [[1000, '4', 1, -2, 1200]]],
    ["SELECT hasAny(data.tags::Array(String), ['y', 'z']) AS h, count() FROM fact_signal GROUP BY h ORDER BY h", [[false, '1'], [true, '1']]],
  ];
  for (const [q, want] of cases) {
    let got: unknown;
    try {
      got = await run(q);
    } catch (err) {
      got = `ERROR ${(err as Error).message}`;
    }
    t.same(got, want, q);
  }
  t.same(await run('SELECT id FROM fact_signal', 'org_attacker', 'test'), [['s3']], 'test mode reads its own rows');
  t.same(await run('SELECT id FROM fact_signal', 'org_victim', 'live'), [['s4']], 'another organization reads its own rows');
  t.same(await run('SELECT id FROM fact_signal', 'org_nobody', 'live'), [], 'an organization without data reads nothing');
  const meta = await run(
    'SELECT path, type, count() AS signals FROM fact_signal ARRAY JOIN mapKeys(JSONAllPathsWithTypes(data)) AS path, mapValues(JSONAllPathsWithTypes(data)) AS type GROUP BY path, type ORDER BY path, type',
  );
  t.same(meta, [['n', 'Int64', '2'], ['tags', 'Array(Nullable(String))', '1']], 'the metadata query: the caller\'s paths only');
});

t.test('a view read without the printer\'s scope reads nothing', async (t) => {
  const { store, cfg } = await openTestStore(t);
  await seed(store);
  const out = await store.analytics.select(`SELECT count() FROM ${cfg.analytics.database}.fact_signal`, settings).then(
    (b) => b.toString(),
    (err: Error) => `ERROR ${err.message}`,
  );
  t.match(out, /^ERROR/, 'the parameterized view refuses a read without parameters');
  t.notMatch(out, /victim|zzz/);
});

t.test('the caller\'s conditions never run on other organizations\' rows (scope barrier)', async (t) => {
  const { store, cfg } = await openTestStore(t);
  await seed(store);
  const compiler = new QueryCompiler(VIEW_SCHEMAS, cfg.analytics.database);
  const attacks = [
    "SELECT count() FROM fact_signal WHERE toUInt64(if(startsWith(customer_id, 'victim') OR startsWith(customer_id, 'own-test'), customer_id, '1')) > 0",
    // A cast that fails on a row quotes the row's value: it must never see another scope's rows.
    "SELECT count() FROM fact_signal WHERE toUInt64(if(customer_id = 'cus_a', '1', customer_id)) = 1",
    "SELECT count() FROM (SELECT * FROM fact_signal) WHERE toUInt64(if(customer_id = 'cus_a', '1', customer_id)) = 1",
    "WITH x AS (SELECT * FROM fact_signal) SELECT count() FROM x WHERE toUInt64(if(customer_id = 'cus_a', '1', customer_id)) = 1",
    "SELECT customer_id, count() FROM fact_signal GROUP BY customer_id HAVING toUInt64(if(customer_id = 'cus_a', '1', customer_id)) = 1",
    "SELECT count() FROM fact_signal WHERE created_at >= '2026-01-01' AND toUInt64(if(customer_id = 'cus_a', '1', customer_id)) = 1",
    "SELECT count() FROM fact_signal a JOIN fact_signal b ON a.id = b.id WHERE toUInt64(if(a.customer_id = 'cus_a', '1', a.customer_id)) = 1",
    "SELECT count() FROM fact_signal WHERE toUInt64(if(data.secret::String = '', '1', data.secret::String)) = 1",
    "SELECT count() FROM fact_signal WHERE id IN (SELECT id FROM fact_signal WHERE toUInt64(if(customer_id = 'cus_a', '1', customer_id)) = 1)",
    "SELECT count() FROM fact_signal ARRAY JOIN [1] AS z WHERE toUInt64(if(customer_id = 'cus_a', '1', customer_id)) = 1",
    "SELECT count() FROM fact_signal WHERE toUInt64(if(customer_id = 'cus_a', '1', customer_id)) = 1 UNION ALL SELECT count() FROM fact_cost WHERE toUInt64(if(customer_id = 'cus_a', '1', customer_id)) = 1",
  ];
  for (const q of attacks) {
    const out = await store.analytics.select(compiler.compile(q, { orgId: 'org_attacker', mode: 'live' }), settings).then(
      (b) => b.toString(),
      (err: Error) => `ERROR ${err.message}`,
    );
    t.notMatch(out, /ERROR|victim|zzz|own-test/, q);
  }
});

t.test('operator precedence: the printed statement means what the engine reads in the text', async (t) => {
  // Differential: generated expressions without parentheses, evaluated by the engine from the
  // caller's text and from the printed (fully parenthesized) statement; the answers must match.
  const { store, cfg } = await openTestStore(t);
  const compiler = new QueryCompiler(VIEW_SCHEMAS, cfg.analytics.database);
  const atoms = ['0', '1', '2', '3', '-1', 'NULL', "'a'", "'1'", 'x', '[1, 2]', '(1, 2)'];
  const binary = ['+', '-', '*', '/', '%', '||', '=', '!=', '<', '<=', '>', '>=', 'AND', 'OR', 'LIKE', 'NOT LIKE', 'IN', 'NOT IN'];
  const gen = fc.letrec<{ e: string }>((tie) => ({
    e: fc.oneof(
      { depthSize: 'small', withCrossShrink: true },
      fc.constantFrom(...atoms),
      fc.tuple(tie('e'), fc.constantFrom(...binary), tie('e')).map(([a, op, b]) => `${a} ${op} ${b}`),
      tie('e').map((a) => `NOT ${a}`),
      tie('e').map((a) => `-${a}`),
      tie('e').map((a) => `${a} IS NULL`),
      tie('e').map((a) => `${a} IS NOT NULL`),
      fc.tuple(tie('e'), tie('e'), tie('e')).map(([a, b, c]) => `${a} BETWEEN ${b} AND ${c}`),
      fc.tuple(tie('e'), tie('e'), tie('e')).map(([a, b, c]) => `${a} ? ${b} : ${c}`),
      tie('e').map((a) => `${a}::String`),
      tie('e').map((a) => `(${a})`),
    ),
  })).e;
  const answer = async (sql: string): Promise<string> => {
    try {
      return JSON.stringify((JSON.parse((await store.analytics.select(sql, settings)).toString()) as { data: unknown[][] }).data);
    } catch {
      return 'error';
    }
  };
  const samples = fc.sample(gen, { numRuns: 700, seed: 11 });
  let compared = 0;
  for (const e of samples) {
    const text = `SELECT toString(${e}) AS r FROM (SELECT 5 AS x)`;
    let printed: string;
    try {
      printed = compiler.compile(text, { orgId: 'org_a', mode: 'live' });
    } catch {
      continue; // outside the language (e.g. a lambda-like shape): nothing runs
    }
    const direct = await answer(text);
    if (direct === 'error') continue;
    compared++;
    t.equal(await answer(printed), direct, `${e}  →  ${printed}`);
  }
  t.ok(compared > 200, `${compared} expressions compared`);
});

t.test('escapes in strings and quoted names decode as the engine decodes them', async (t) => {
  const { store, cfg } = await openTestStore(t);
  const compiler = new QueryCompiler(VIEW_SCHEMAS, cfg.analytics.database);
  const answer = async (sql: string): Promise<string> => {
    try {
      const out = JSON.parse((await store.analytics.select(sql, settings)).toString()) as { meta: { name: string }[]; data: unknown[][] };
      return JSON.stringify([out.meta.map((m) => m.name), out.data]);
    } catch {
      return 'error';
    }
  };
  let compared = 0;
  for (let code = 0x20; code < 0x7f; code++) {
    const c = String.fromCharCode(code);
    const q = `SELECT 'x\\${c}y' AS \`s\\${c}t\``;
    const direct = await answer(q);
    let printed: string;
    try {
      printed = compiler.compile(q, { orgId: 'o', mode: 'live' });
    } catch (err) {
      // Refused: only where the engine would make a control character of a name, or refuses itself.
      t.ok(err instanceof CompileError && (direct === 'error' || /[\x00-\x1f]/.test(JSON.parse(direct)[0][0])), `\\${c}: refused (${(err as Error).message})`);
      continue;
    }
    compared++;
    t.equal(await answer(printed), direct, `\\${c}`);
  }
  t.ok(compared > 70, `${compared} escapes compared`);
});
