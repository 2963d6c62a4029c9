/**
 * Grammar-driven fuzzing of POST /api/v2/analytics/query.
 *
 * fast-check generates queries from a grammar that mixes every construct of the engine's
 * SQL that can carry a read: column transformers (`* APPLY(f)`, `APPLY(x -> …)`, EXCEPT,
 * REPLACE, COLUMNS('re')), subqueries in every position (select list, WHERE, IN, FROM,
 * JOIN, lambda bodies, CTEs, transformer bodies), lambdas, settings-shaped text
 * (`SETTINGS readonly = 0`, `log_comment = 'scope:<other org>…'`, also in subqueries),
 * table functions (file, url, remote, merge, view, input, numbers, …), database-qualified
 * names (billing.*, system.*, analytics.*, INFORMATION_SCHEMA), quoted identifiers with odd
 * characters, comments, odd and Unicode whitespace, allowed functions (from the compiler's
 * catalogue) and denied ones, and literals carrying other scopes' markers.
 *
 * The real service runs with two organizations, each with live and test signals whose
 * customer ids, event names and data carry a marker of their scope (and billing rows where
 * the billing API makes them). Each generated query is posted with one of the four keys,
 * and every answer must:
 *   - hold no marker, id or key of another scope (a marker the query itself contains does
 *     not count: an error may quote the caller's own text);
 *   - not be a 5xx (408 for a query that ran out of time is an answer);
 *   - hold nothing only readable outside the views: the engine version, the host name,
 *     /etc/passwd, the service's command line, the data directory, the webhook key, the
 *     operator token, the internal database prefix, system-table contents.
 *
 * Bounded: FUZZ_RUNS queries (default 500) or FUZZ_TIME_MS (default 40 s), whichever ends
 * first. The seed is printed; FUZZ_SEED=<n> replays a run exactly (fc.sample is
 * deterministic for a seed), and every failing query is listed with its index.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import t from 'tap';
import { allowedFunctionNames, lookupFunction, type FunctionSpec } from '../../src/analytics/compiler/functions.js';
import { createOrg, drained, http, OPERATOR_TOKEN, queryRaw, sendBatch, TEST_WEBHOOK_KEY, useService, waitFor, type RawAnswer, type TestOrg } from '../helpers/service.js';

const RUNS = Number(process.env.FUZZ_RUNS ?? 500);
const TIME_MS = Number(process.env.FUZZ_TIME_MS ?? 40_000);
const SEED = process.env.FUZZ_SEED !== undefined ? Number(process.env.FUZZ_SEED) : Date.now() % 2 ** 31;

const { iso, svc } = useService(t, 'analytics-fuzz', { ANALYTICS_TIMEOUT_MS: '3000' });

interface Scope {
  name: string;
  org: TestOrg;
  mode: 'live' | 'test';
  key: string;
  marker: string;
  /** Strings only this scope's rows (or its keys) contain. */
  needles: string[];
}

const scopes: Scope[] = [];

// ── the grammar ─────────────────────────────────────────────────────────────

/** Values filled in when the service is up (other orgs' ids, the url() target, …). */
const ctx = { orgIds: ['org_x', 'org_y'], markers: ['m0', 'm1', 'm2', 'm3'], port: 9, dataDir: '/tmp/x' };

const VIEWS = ['fact_signal', 'fact_cost', 'fact_credit_consumption'];
const COLUMNS = ['id', 'customer_id', 'external_customer_id', 'external_product_id', 'event_name', 'created_at', 'received_at', 'batch_id', 'data', 'signal_id', 'unit_id', 'idempotency_key', 'cost_amount', 'x', 'n', 'c'];
const FOREIGN_TABLES = [
  'billing.signals', 'billing.costs', 'billing.credit_consumption', '`billing`.`signals`', '"billing"."signals"', 'billing . signals', 'billing.`signals`',
  '`billing.signals`', 'system.tables', 'system.one', 'system.functions', 'system.settings', 'system.databases', 'system.processes', 'system.query_log',
  'system.build_options', 'system.columns', 'analytics.fact_signal', '`analytics`.`fact_cost`', 'INFORMATION_SCHEMA.TABLES', 'information_schema.columns',
  'default.signals', '_temporary_and_external_tables.x', 'signals', 'costs', 'one', 'tables',
];
const tableFunctions = (): string[] => [
  "file('/etc/hostname', 'LineAsString')", "file('/etc/passwd', 'LineAsString')", "file('/proc/self/cmdline', 'LineAsString')",
  `file('${ctx.dataDir}/chdb/metadata/billing/signals.sql', 'LineAsString')`, "file('*', 'LineAsString')",
  `url('http://127.0.0.1:${ctx.port}/', 'LineAsString')`, 'numbers(3)', 'numbers_mt(2)', 'zeros(2)', 'generate_series(1, 3)',
  "remote('127.0.0.1', billing.signals)", "remote('127.0.0.1', system.one)", "merge('billing', '.*')", "merge(REGEXP('.*'), '.*')",
  'view(SELECT * FROM billing.signals)', "input('x String')", "values('x String', 'a')", "format(JSONEachRow, '{\"x\":1}')",
  "cluster('default', billing.signals)", "s3('http://127.0.0.1:1/x', 'LineAsString')", "executable('id', 'TSV', 'x String')",
  "generateRandom('x String', 1, 10, 2)",
];
const DENIED_FUNCTIONS = [
  'file', 'url', 'hostName', 'fqdn', 'version', 'chdb', 'uptime', 'getSetting', 'currentDatabase', 'currentUser', 'queryID', 'editDistance',
  'damerauLevenshteinDistance', 'throwIf', 'sleep', 'dictGet', 'joinGet', 'inIgnoreSet', 'notInIgnoreSet', 'globalIn', 'rand', 'randomString', 'bar',
  'reinterpretAsString', 'arrayReduce', 'formatQuery', 'getServerSetting', 'filesystemAvailable', 'buildId', 'hasColumnInTable', 'aggThrow', '__getScalar',
];
const TYPES = ['String', 'Int64', 'UInt8', 'Float64', 'Date', "DateTime64(3, 'UTC')", 'Nullable(String)', 'Array(String)', 'JSON', 'Dynamic', 'Decimal(38, 12)', 'UUID'];
const WEIRD_IDENTS = ['`fact signal`', '`x``y`', '"é"', '`\u200b`', '`a.b`', '`SELECT`', '"from"', '`--`', '`/*`', '`\u0000`', '`ﬁ`', '`\\``'];

/** Separators between tokens: mostly a space, sometimes comments and odd or Unicode whitespace. */
const SEPARATORS = [' ', ' ', ' ', ' ', ' ', ' ', '\n', '\t', '  ', ' /* c */ ', ' -- c\n', '\r\n', '\f', '\v', '\u00a0', '\u2028', '\u3000', '\u200b', ' /* /* nested */ */ ', ' #!c\n', ' /*+ hint */ '];

const pick = <T>(xs: readonly T[]): fc.Arbitrary<T> => fc.constantFrom(...xs);
const seq = (...parts: fc.Arbitrary<string>[]): fc.Arbitrary<string> => fc.tuple(...parts).map((xs) => xs.filter((x) => x !== '').join(' '));
const opt = (a: fc.Arbitrary<string>, freq = 3): fc.Arbitrary<string> => fc.oneof({ weight: freq, arbitrary: fc.constant('') }, { weight: 1, arbitrary: a });
const lit = (s: string): fc.Arbitrary<string> => fc.constant(s);
const list = (a: fc.Arbitrary<string>, min: number, max: number, sep = ', '): fc.Arbitrary<string> => fc.array(a, { minLength: min, maxLength: max }).map((xs) => xs.join(sep));

const sqlString = (s: string): string => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

const leaf: fc.Arbitrary<string> = fc.oneof(
  { weight: 6, arbitrary: pick(COLUMNS) },
  { weight: 2, arbitrary: fc.tuple(pick(['fact_signal', 'a', 'b', 't', '`fact_signal`']), pick(COLUMNS)).map(([a, c]) => `${a}.${c}`) },
  { weight: 3, arbitrary: fc.integer({ min: -3, max: 1000 }).map(String) },
  { weight: 2, arbitrary: pick(["'x'", "'%'", "'scope:'", "''", "'é☃'", "'a\\'b'", "'\\0'", "'\\\\'", '0.5', '1e3', 'NULL', 'true', '[1, 2]', "('a', 1)", "map('k', 1)", "INTERVAL 1 DAY", 'now()', "toDate('2026-01-01')"]) },
  { weight: 2, arbitrary: fc.tuple(pick(['data.n', 'data.secret', 'data.nested.m', 'data.`odd key`', 'data.a.b.c', 'data.^nested', 'data.secret.:String']), pick(TYPES)).map(([p, ty]) => `${p}::${ty}`) },
  { weight: 1, arbitrary: fc.nat(3).map((i) => sqlString(`cus-${ctx.markers[i]}`)) },
  { weight: 1, arbitrary: fc.nat(1).map((i) => sqlString(`scope:${ctx.orgIds[i]}:live`)) },
);

function callOf(spec: FunctionSpec, args: string[], params: string[]): string {
  return `${spec.name}${params.length > 0 ? `(${params.join(', ')})` : ''}(${args.join(', ')})`;
}

const CATALOGUE = allowedFunctionNames().map((n) => lookupFunction(n)!);

const exprAt = new Map<number, fc.Arbitrary<string>>();
const selectAt = new Map<number, fc.Arbitrary<string>>();

function expr(d: number): fc.Arbitrary<string> {
  const hit = exprAt.get(d);
  if (hit) return hit;
  if (d <= 0) return leaf;
  const sub = expr(d - 1);
  const subq = fc.constant(null).chain(() => select(d - 1));
  const allowedCall = fc
    .tuple(pick(CATALOGUE), fc.array(sub, { minLength: 0, maxLength: 4 }), fc.array(pick(['0.5', '5', "','"]), { maxLength: 2 }))
    .map(([spec, args, params]) => {
      const n = Math.max(spec.minArgs, Math.min(args.length, Number.isFinite(spec.maxArgs) ? spec.maxArgs : 4));
      const a = Array.from({ length: n }, (_, i) => (spec.lambdaArgs?.includes(i) && n > 1 ? `x -> ${args[i] ?? 'x'}` : (args[i] ?? '1')));
      return callOf(spec, a, spec.params ? params.slice(0, spec.params.max) : []);
    });
  const a: fc.Arbitrary<string> = fc.oneof(
    { weight: 4, arbitrary: sub },
    { weight: 5, arbitrary: allowedCall },
    { weight: 3, arbitrary: fc.tuple(pick(DENIED_FUNCTIONS), list(sub, 0, 2)).map(([f, args]) => `${f}(${args})`) },
    { weight: 2, arbitrary: fc.tuple(pick(['hostName()', 'version()', "getSetting('log_comment')", 'currentDatabase()', "file('/etc/hostname')", "file('/etc/passwd', 'RawBLOB')", 'chdb()'])).map(([x]) => x) },
    { weight: 3, arbitrary: fc.tuple(sub, pick(['+', '-', '*', '=', '!=', '<', 'AND', 'OR', '||', 'LIKE', 'ILIKE', 'IS NOT DISTINCT FROM']), sub).map(([l, op, r]) => `(${l} ${op} ${r})`) },
    { weight: 3, arbitrary: fc.tuple(sub, pick(['IN', 'NOT IN', 'GLOBAL IN', 'GLOBAL NOT IN']), subq).map(([l, op, s]) => `${l} ${op} (${s})`) },
    { weight: 2, arbitrary: fc.tuple(sub, pick(['IN', 'NOT IN', 'GLOBAL IN']), pick([...FOREIGN_TABLES, ...VIEWS])).map(([l, op, tb]) => `${l} ${op} ${tb}`) },
    { weight: 2, arbitrary: fc.tuple(pick(['inIgnoreSet', 'notInIgnoreSet', 'nullInIgnoreSet', 'globalInIgnoreSet', 'in', 'notIn', 'globalIn']), sub, pick([...FOREIGN_TABLES, 'fact_signal', 'nosuchdb.x', 'billing.nosuch'])).map(([f, l, tb]) => `${f}(${l}, ${tb})`) },
    { weight: 4, arbitrary: subq.map((s) => `(${s})`) },
    { weight: 1, arbitrary: subq.map((s) => `EXISTS (${s})`) },
    { weight: 3, arbitrary: fc.tuple(pick(['arrayMap', 'arrayFilter', 'arrayExists', 'arraySum', 'arrayAll', 'arrayFirst', 'arraySort', 'arrayFold', 'arrayReduce']), fc.oneof(sub, subq.map((s) => `(${s})`)), pick(['[1, 2]', 'range(3)', '[customer_id]', 'groupArray(customer_id)', 'splitByChar(\',\', \'a,b\')'])).map(([f, body, arr]) => `${f}(x -> ${body}, ${arr})`) },
    { weight: 2, arbitrary: fc.tuple(sub, sub, sub).map(([c, x, y]) => `CASE WHEN ${c} THEN ${x} ELSE ${y} END`) },
    { weight: 2, arbitrary: fc.tuple(sub, pick(TYPES)).map(([x, ty]) => pick([`CAST(${x} AS ${ty})`, `${x}::${ty}`, `CAST(${x}, '${ty.replace(/'/g, "\\'")}')`, `_CAST(${x}, 'String')`, `accurateCast(${x}, 'String')`])).chain((x) => x) },
    { weight: 2, arbitrary: fc.tuple(pick(['count()', 'sum', 'groupArray', 'uniqExact', 'any', 'max', 'groupUniqArray', 'topK(3)', 'quantile(0.5)', 'countIf', 'sumState', 'groupArrayMerge', 'argMax']), sub).map(([f, x]) => (f.endsWith(')') && !f.includes('(') ? f : f === 'count()' ? f : f === 'countIf' ? `countIf(${x})` : f === 'argMax' ? `argMax(${x}, ${x})` : `${f}(${x})`)) },
    { weight: 1, arbitrary: fc.tuple(pick(['row_number()', 'rank()', 'sum(1)', 'lagInFrame(customer_id)', 'groupArray(customer_id)']), sub).map(([w, p]) => `${w} OVER (PARTITION BY ${p} ORDER BY ${p})`) },
    { weight: 1, arbitrary: fc.tuple(pick(['JSONAllPaths', 'JSONAllPathsWithTypes', 'dynamicType', 'JSONExtractString', 'toString']), pick(['data', 'data.secret', "'{\"a\":1}'"])).map(([f, x]) => `${f}(${x})`) },
    { weight: 1, arbitrary: fc.tuple(sub, sub).map(([x, y]) => `tuple(${x}, ${y}).1`) },
    { weight: 1, arbitrary: fc.tuple(sub).map(([x]) => `[${x}][1]`) },
  );
  exprAt.set(d, a);
  return a;
}

function selectItem(d: number): fc.Arbitrary<string> {
  const e = expr(d);
  const lambdaBody = fc.oneof(e, fc.constant(null).chain(() => select(Math.max(0, d - 1))).map((s) => `(${s})`), pick(['(SELECT groupArray(customer_id) FROM billing.signals)', "(SELECT groupArray(line) FROM file('/etc/hostname', 'LineAsString'))", '(SELECT hostName())', "(SELECT groupArray(name) FROM system.tables)"]));
  const applyFn = fc.oneof(
    pick(['toString', 'length', 'hex', 'lower', 'file', 'url', 'hostName', 'version', 'getSetting', 'currentDatabase', 'editDistance', 'sum', 'groupArray', 'any', 'toTypeName', 'x -> x', 'chdb', 'throwIf']),
    lambdaBody.map((b) => `x -> ${b}`),
  );
  const transformer = fc.oneof(
    applyFn.map((f) => `APPLY(${f})`),
    pick(COLUMNS).map((c) => `EXCEPT (${c})`),
    pick(COLUMNS).map((c) => `EXCEPT ${c}`),
    lit("EXCEPT ('data|id')"),
    lit('EXCEPT STRICT (id)'),
    fc.tuple(lambdaBody, pick(COLUMNS)).map(([b, c]) => `REPLACE (${b} AS ${c})`),
    fc.tuple(e, pick(COLUMNS)).map(([b, c]) => `REPLACE ${b} AS ${c}`),
  );
  const matcher = pick(['*', 'fact_signal.*', 'a.*', "COLUMNS('.*')", "COLUMNS('id|customer')", 'COLUMNS(id, customer_id)', "a.COLUMNS('.')", "COLUMNS('^d')"]);
  return fc.oneof(
    { weight: 5, arbitrary: fc.tuple(e, opt(fc.oneof(pick(['x', 'n', 'c', 'id', 'customer_id']), pick(WEIRD_IDENTS)).map((a) => `AS ${a}`))).map(([x, a]) => (a ? `${x} ${a}` : x)) },
    { weight: 4, arbitrary: fc.tuple(matcher, fc.array(transformer, { minLength: 0, maxLength: 3 })).map(([m, ts]) => [m, ...ts].join(' ')) },
  );
}

function source(d: number): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 6, arbitrary: fc.tuple(pick([...VIEWS, ...VIEWS, '`fact_signal`', '"fact_cost"', 'FACT_SIGNAL', 'fact_signal FINAL', 'fact_signal SAMPLE 0.5']), opt(pick(['AS a', 'AS b', 't', 'AS `t t`']), 1)).map(([x, a]) => `${x} ${a}`.trim()) },
    { weight: 3, arbitrary: pick(FOREIGN_TABLES) },
    { weight: 3, arbitrary: fc.constant(null).map(() => tableFunctions()).chain((tf) => pick(tf)) },
    { weight: d > 0 ? 4 : 0, arbitrary: fc.tuple(fc.constant(null).chain(() => select(d - 1)), opt(pick(['AS a', 'AS b', 'sub']), 1)).map(([s, a]) => `(${s}) ${a}`.trim()) },
    { weight: 2, arbitrary: pick(['c', 'cte', 'r']) },
  );
}

const settingsClause: fc.Arbitrary<string> = fc.oneof(
  lit('SETTINGS readonly = 0'),
  lit('SETTINGS readonly = 2'),
  fc.nat(1).map((i) => `SETTINGS log_comment = ${sqlString(`scope:${ctx.orgIds[i]}:live`)}`),
  fc.nat(1).map((i) => `SETTINGS readonly = 0, log_comment = ${sqlString(`scope:${ctx.orgIds[i]}:test`)}`),
  lit('SETTINGS max_execution_time = 1000, max_memory_usage = 0'),
  lit('SETTINGS allow_experimental_analyzer = 0'),
  lit("SETTINGS log_comment = ''"),
  lit('SETTINGS query_plan_filter_push_down = 1, optimize_move_to_prewhere = 1'),
);

function select(d: number): fc.Arbitrary<string> {
  const hit = selectAt.get(d);
  if (hit) return hit;
  const e = expr(Math.max(0, d - 1));
  const withClause = opt(
    fc.oneof(
      fc.tuple(pick(['c', 'cte', 'r']), d > 0 ? select(d - 1) : lit('SELECT 1 AS x')).map(([n, s]) => `WITH ${n} AS (${s})`),
      fc.tuple(d > 0 ? select(d - 1) : lit('SELECT 1'), pick(['c', 'x', 'v'])).map(([s, n]) => `WITH (${s}) AS ${n}`),
      fc.tuple(e).map(([x]) => `WITH ${x} AS x`),
      fc.tuple(e).map(([x]) => `WITH y -> ${x} AS f`),
      lit('WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3)'),
      lit("WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1, 'x' FROM r WHERE n < 3)"),
    ),
    2,
  );
  const join = opt(
    fc.tuple(pick(['JOIN', 'LEFT JOIN', 'INNER JOIN', 'CROSS JOIN', 'FULL OUTER JOIN', 'ANY LEFT JOIN', 'GLOBAL JOIN', 'PASTE JOIN']), source(Math.max(0, d - 1)), pick(['ON 1 = 1', 'ON a.id = b.signal_id', 'USING (customer_id)', 'USING customer_id', ''])).map(([j, s, on]) => (j === 'CROSS JOIN' ? `${j} ${s}` : `${j} ${s} ${on}`)),
    2,
  );
  const arrayJoin = opt(pick(['ARRAY JOIN [1, 2] AS j', 'ARRAY JOIN mapKeys(JSONAllPathsWithTypes(data)) AS p', 'LEFT ARRAY JOIN splitByChar(\',\', customer_id) AS p']), 5);
  const s = fc
    .tuple(
      withClause,
      pick(['SELECT', 'SELECT', 'SELECT', 'select', 'SELECT DISTINCT', 'SeLeCt', 'SELECT ALL']),
      list(selectItem(Math.max(0, d - 1)), 1, 3),
      opt(fc.tuple(source(d), join, arrayJoin).map(([src, j, aj]) => `FROM ${src} ${j} ${aj}`.trim()), 0),
      opt(e.map((x) => `WHERE ${x}`), 2),
      opt(e.map((x) => `GROUP BY ${x}`), 3),
      opt(e.map((x) => `HAVING ${x}`), 6),
      opt(fc.tuple(e, pick(['', 'DESC', 'ASC NULLS FIRST'])).map(([x, dir]) => `ORDER BY ${x} ${dir}`.trim()), 3),
      opt(pick(['LIMIT 5', 'LIMIT 1 BY customer_id', 'LIMIT 2, 3', 'LIMIT 1 OFFSET 1', 'LIMIT 100000000000', 'LIMIT (SELECT count() FROM billing.signals)']), 2),
      opt(settingsClause, 4),
    )
    .map((parts) => parts.filter((x) => x !== '').join(' '));
  const out = d > 0 ? fc.oneof({ weight: 5, arbitrary: s }, { weight: 1, arbitrary: fc.tuple(s, pick(['UNION ALL', 'UNION DISTINCT', 'INTERSECT', 'EXCEPT']), s).map(([l, op, r]) => `${l} ${op} ${r}`) }) : s;
  selectAt.set(d, out);
  return out;
}


// ── honest queries with one risky fragment injected ──────────────────────────
// Most chaos is refused for its first problem; an honest query with exactly one risky
// fragment tests that one vector, in one position.

const honestExpr = pick([
  'customer_id', 'event_name', 'id', 'created_at', 'toString(created_at)', 'length(customer_id)', 'lower(event_name)', 'toStartOfDay(created_at)',
  "concat(customer_id, '-', event_name)", 'data.n::Int64', 'data.secret::String', 'toString(data)', 'arrayMap(x -> x * 2, [1, 2])', 'cityHash64(id)',
  "formatDateTime(created_at, '%F')", 'toTypeName(data)', 'JSONAllPaths(data)', "if(data.n::Int64 > 2, 'big', 'small')",
]);
const honestAgg = pick(['count()', 'uniqExact(customer_id)', 'groupArray(customer_id)', 'max(created_at)', 'sum(data.n::Int64)', 'countIf(data.n::Int64 > 1)', 'any(event_name)', 'groupUniqArray(event_name)']);

/** A read of something other than the caller's views, or of the views with a forged scope. */
const riskyTable: fc.Arbitrary<string> = fc.oneof(
  pick(FOREIGN_TABLES),
  fc.constant(null).map(() => tableFunctions()).chain((tf) => pick(tf)),
  fc.tuple(pick(VIEWS), fc.nat(1), pick(['live', 'test'])).map(([v, i, m]) => `(SELECT * FROM ${v} SETTINGS log_comment = ${sqlString(`scope:${ctx.orgIds[i]}:${m}`)})`),
  fc.tuple(pick(VIEWS), fc.nat(1)).map(([v, i]) => `(SELECT * FROM ${v} SETTINGS readonly = 0, log_comment = ${sqlString(`scope:${ctx.orgIds[i]}:live`)})`),
  pick(['(SELECT * FROM fact_signal SETTINGS readonly = 0)', '(SELECT * FROM fact_signal SETTINGS log_comment = \'\')']),
);
const riskyColumn = pick(['customer_id', 'toString(tuple(*))', 'event_name', '*', 'toString(data)', 'line', 'name', 'value']);
const riskyExpr: fc.Arbitrary<string> = fc.oneof(
  { weight: 5, arbitrary: fc.tuple(pick(['groupArray', 'any', 'groupUniqArray', 'max', 'toString(groupArray']), riskyColumn, riskyTable).map(([f, c, tb]) => (f.includes('(') ? `(SELECT ${f}(${c})) FROM ${tb})` : `(SELECT ${f}(${c}) FROM ${tb})`)) },
  { weight: 3, arbitrary: pick(['hostName()', 'version()', 'chdb()', "getSetting('log_comment')", 'currentDatabase()', "file('/etc/hostname')", "file('/etc/passwd', 'RawBLOB')", 'uptime()', 'fqdn()', 'currentUser()', "getSettingOrDefault('log_comment', '')", "(SELECT groupArray(line) FROM file('/proc/self/cmdline', 'LineAsString'))", 'buildId()', 'throwIf(1)', 'aggThrow(1)', 'sleep(0.001)']) },
  { weight: 2, arbitrary: fc.tuple(pick(['inIgnoreSet', 'notInIgnoreSet', 'globalIn', 'globalInIgnoreSet', 'in', 'nullInIgnoreSet']), pick(FOREIGN_TABLES)).map(([f, tb]) => `${f}(customer_id, ${tb})`) },
  { weight: 2, arbitrary: pick(FOREIGN_TABLES).map((tb) => `customer_id IN ${tb}`) },
  { weight: 2, arbitrary: fc.tuple(pick(['editDistance', 'damerauLevenshteinDistance', 'jaroSimilarity']), fc.integer({ min: 1, max: 64 })).map(([f, n]) => `${f}(repeat('a', ${n}), customer_id)`) },
);
/** A function name for APPLY(f). */
const riskyApply = pick(['file', 'url', 'hostName', 'version', 'getSetting', 'currentDatabase', 'chdb', 'editDistance', 'throwIf', 'dictGet', 'joinGet', 'reinterpretAsString', 'toTypeName', 'sleep']);

const injected: fc.Arbitrary<string> = fc
  .tuple(riskyExpr, riskyTable, riskyApply, honestExpr, honestAgg, fc.nat(13), pick(VIEWS))
  .map(([r, tb, f, h, agg, slot, view]) => {
    switch (slot) {
      case 0: return `SELECT ${h}, ${r} AS inj FROM ${view}`;
      case 1: return `SELECT * APPLY(x -> ${r}) FROM ${view}`;
      case 2: return `SELECT * APPLY(x -> ${r}) FROM (SELECT 1 AS x)`;
      case 3: return `SELECT * REPLACE (${r} AS customer_id) FROM ${view}`;
      case 4: return `SELECT COLUMNS('id') APPLY(${f}) FROM ${view}`;
      case 5: return `SELECT * EXCEPT (data) APPLY(${f}) FROM ${view}`;
      case 6: return `SELECT ${h} FROM ${view} WHERE ${r} IS NOT NULL`;
      case 7: return `SELECT ${agg} FROM ${tb}`;
      case 8: return `SELECT ${h} FROM ${view} AS a JOIN ${tb} AS b ON 1 = 1`;
      case 9: return `WITH c AS (SELECT * FROM ${tb}) SELECT ${agg} FROM c`;
      case 10: return `SELECT arrayMap(x -> ${r}, [1]) AS inj, ${agg} FROM ${view}`;
      case 11: return `WITH (${r.startsWith('(') ? r.slice(1, -1) : `SELECT ${r}`}) AS v SELECT v, ${h} FROM ${view}`;
      case 12: return `SELECT ${h} FROM ${view} WHERE customer_id IN (SELECT customer_id FROM ${tb})`;
      default: return `SELECT ${agg}, (SELECT ${agg} FROM ${tb}) AS inj FROM ${view} GROUP BY ${h.includes('(') ? 'event_name' : h}`;
    }
  });
const honest: fc.Arbitrary<string> = fc
  .tuple(list(honestExpr, 1, 3), honestAgg, pick(VIEWS.slice(0, 1)), fc.boolean(), opt(pick(['ORDER BY 1', 'LIMIT 3', 'ORDER BY 1 DESC LIMIT 2']), 1))
  .map(([xs, agg, v, grouped, tail]) => (grouped ? `SELECT event_name, ${agg} FROM ${v} GROUP BY event_name ${tail}` : `SELECT ${xs} FROM ${v} ${tail}`).trim());

/** A whole request: mostly one SELECT, sometimes other statements, trailers or multi-statements. */
const statement: fc.Arbitrary<string> = fc.oneof(
  { weight: 10, arbitrary: injected },
  { weight: 3, arbitrary: honest },
  { weight: 6, arbitrary: select(2) },
  { weight: 2, arbitrary: fc.tuple(select(1), opt(settingsClause, 1), pick(['', 'FORMAT JSON', 'FORMAT TSV', "INTO OUTFILE '/dev/null'", '; SELECT 1', ';', '-- trailing', '/* unterminated'])).map(([s, st, tail]) => [s, st, tail].filter((x) => x !== '').join(' ')) },
  { weight: 1, arbitrary: pick(['SHOW TABLES', 'SHOW DATABASES', 'DESCRIBE billing.signals', 'EXPLAIN SELECT 1', 'EXPLAIN AST SELECT * FROM billing.signals', 'EXISTS billing.signals', 'SET readonly = 0', 'USE billing', 'SHOW CREATE TABLE billing.signals', 'SELECT * FROM billing.signals; SELECT 1', '(SELECT * FROM billing.signals)', 'SHOW SETTINGS LIKE \'%\'', 'CHECK TABLE billing.signals']) },
);

/** Re-joins the tokens of a query with chosen separators (comments, odd whitespace). */
const decorated: fc.Arbitrary<{ sql: string; scope: number }> = fc
  .tuple(statement, fc.array(fc.nat(SEPARATORS.length - 1), { minLength: 1, maxLength: 40 }), fc.nat(3), fc.boolean())
  .map(([sql, seps, scope, decorate]) => {
    if (!decorate) return { sql, scope };
    const parts = sql.split(' ');
    return { sql: parts.map((p, i) => (i === 0 ? p : SEPARATORS[seps[i % seps.length]!]! + p)).join(''), scope };
  });

/** Escapes everything but printable ASCII, so a TAP comment stays one line (U+2028 would break it). */
const ascii = (text: string): string => text.replace(/[^\x20-\x7e]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`);

// ── the service and its data ────────────────────────────────────────────────

type Raw = RawAnswer;

const post = (key: string, q: string): Promise<Raw> => queryRaw(svc.url, key, q, 20_000);

/** Billing configuration for a scope, so that fact_cost holds marked rows too; best effort (the scope's signals carry markers either way). */
async function configureBilling(s: Scope): Promise<boolean> {
  const call = (method: string, path: string, body?: unknown) => http(svc.url, method, path, { token: s.key, body });
  const customer = await call('POST', '/api/v2/customers', { externalId: `cus-${s.marker}`, name: `name-${s.marker}` });
  if (customer.status !== 201 && customer.status !== 200) return false;
  const plan = await call('POST', '/api/v2/plans', { name: `plan-${s.marker}` });
  if (plan.status !== 201 && plan.status !== 200) return false;
  const ola = await call('POST', `/api/v2/customers/${customer.body.id}/order-line-attributes`, { planId: plan.body.id, eventName: `ev-${s.marker}`, unitPrice: '0.5', currency: 'USD' });
  if (ola.status !== 201 && ola.status !== 200) return false;
  s.needles.push(customer.body.id, plan.body.id, ola.body.id);
  return true;
}

async function ingest(s: Scope): Promise<void> {
  const signals = Array.from({ length: 6 }, (_, i) => ({
    eventName: `ev-${s.marker}`,
    customer: { externalCustomerId: `cus-${s.marker}` },
    unitId: i % 2 ? `unit-${s.marker}` : undefined,
    idempotencyKey: `idem-${s.marker}-${i}`,
    data: { secret: `data-${s.marker}`, n: i, nested: { m: `nested-${s.marker}` }, 'odd key': `odd-${s.marker}` },
  }));
  const r = await sendBatch(svc.url, s.key, { signals });
  if (r.status !== 202) throw new Error(`ingest ${s.name}: ${r.status} ${JSON.stringify(r.body)}`);
  const batchId = r.body.batchId as string;
  s.needles.push(batchId, `sig_${batchId.slice(4)}_`);
}

/** Strings that only something outside the views could put in an answer. */
function outsideNeedles(engineVersion: string): Record<string, string[]> {
  const host = existsSync('/etc/hostname') ? readFileSync('/etc/hostname', 'utf8').trim() : '';
  return {
    'engine version': engineVersion ? [engineVersion] : [],
    'host name': [...new Set([host, hostname()].filter((h) => h.length >= 6 && h !== 'localhost'))],
    '/etc/passwd': ['root:x:0:0'],
    'the service command line': ['dist/src/main.js'],
    'the data directory': [iso.dataDir],
    'the webhook key': [TEST_WEBHOOK_KEY],
    'the operator token': [OPERATOR_TOKEN],
    'the internal database prefix': ['billing.'],
    'the scope setting': ['log_comment'],
    'system tables': ['MergeTree', 'max_insert_block_size', 'bitmapSubsetLimit'],
  };
}

/** The engine's version string, asked of chdb in a short-lived process of its own. */
function engineVersion(): string {
  try {
    const root = fileURLToPath(new URL('../../', import.meta.url));
    return execFileSync(process.execPath, ['--input-type=module', '-e', "import { query } from 'chdb'; process.stdout.write(String(query('SELECT version()', 'TSVRaw')).trim())"], { cwd: root, timeout: 30_000 }).toString().trim();
  } catch {
    return '';
  }
}

t.before(async () => {
  const A = await createOrg(svc.url);
  const B = await createOrg(svc.url);
  const tag = randomBytes(4).toString('hex');
  for (const [name, org, mode] of [['A.live', A, 'live'], ['A.test', A, 'test'], ['B.live', B, 'live'], ['B.test', B, 'test']] as const) {
    const marker = `mk${name.replace('.', '')}${tag}`;
    scopes.push({ name, org, mode, key: org[mode], marker, needles: [marker, org[mode]] });
  }
  ctx.orgIds = [A.id, B.id];
  ctx.markers = scopes.map((s) => s.marker);
  ctx.port = svc.port;
  ctx.dataDir = iso.dataDir;
  for (const s of scopes) s.needles.push(s.org.id); // a needle for the other organization's callers only
  const billing: string[] = [];
  for (const s of scopes) if (await configureBilling(s).catch(() => false)) billing.push(s.name);
  for (const s of scopes) await ingest(s);
  await drained(iso);
  t.comment(`billing configured for: ${billing.join(', ') || 'none'}`);
});

t.test('each scope reads its own markers (the fuzzing is not vacuous)', async (t) => {
  for (const s of scopes) {
    const r = await waitFor(() => post(s.key, 'SELECT * FROM fact_signal'), (x) => x.status === 200 && x.text.includes(`data-${s.marker}`), 10_000);
    t.equal(r.status, 200, `${s.name}: 200`);
    t.ok(r.text.includes(`cus-${s.marker}`) && r.text.includes(`ev-${s.marker}`) && r.text.includes(`data-${s.marker}`), `${s.name}: its customer, event and data markers`);
    t.notOk(scopes.some((o) => o !== s && r.text.includes(o.marker)), `${s.name}: no other scope's marker`);
  }
});

t.test(`fuzz: ${RUNS} generated queries (seed ${SEED})`, async (t) => {
  t.comment(`FUZZ_SEED=${SEED} FUZZ_RUNS=${RUNS} reproduces this run`);
  const outside = outsideNeedles(engineVersion());
  t.ok(outside['engine version']!.length === 1, `the engine version is known (${outside['engine version']![0] ?? 'unknown'})`);
  const cases = fc.sample(decorated, { seed: SEED, numRuns: RUNS });
  const started = Date.now();
  const failures: { index: number; scope: string; sql: string; status: number; problems: string[]; body: string }[] = [];
  const statuses = new Map<number, number>();
  const codes = new Map<string, number>();
  let ran = 0;
  for (const [index, c] of cases.entries()) {
    if (Date.now() - started > TIME_MS) break;
    const caller = scopes[c.scope]!;
    const problems: string[] = [];
    let r: Raw;
    try {
      r = await post(caller.key, c.sql);
    } catch (err) {
      r = { status: 0, text: '' };
      problems.push(`no answer (${(err as Error).message})`);
    }
    ran++;
    statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
    const code = /"code":"([A-Z_]+)"/.exec(r.text)?.[1] ?? String(r.status);
    codes.set(code, (codes.get(code) ?? 0) + 1);
    if (process.env.FUZZ_DEBUG) t.comment(ascii(`#${index} ${r.status} ${JSON.stringify(c.sql)} → ${r.text.slice(0, 300)}`));
    if (r.status >= 500) problems.push(`status ${r.status}`);
    const needles: Record<string, string[]> = { ...outside };
    for (const o of scopes) if (o !== caller) needles[`${o.name}'s data`] = o.needles.filter((n) => n !== '' && n !== caller.org.id && n !== caller.key);
    for (const [what, list] of Object.entries(needles)) {
      for (const needle of list) {
        if (!r.text.includes(needle) || c.sql.includes(needle)) continue;
        if (needle === 'billing.' && /billing/i.test(c.sql)) continue;
        if (what === 'system tables' && c.sql.toLowerCase().includes(needle.toLowerCase())) continue;
        problems.push(`the answer holds ${what} (${JSON.stringify(needle)})`);
      }
    }
    if (problems.length > 0) failures.push({ index, scope: caller.name, sql: c.sql, status: r.status, problems, body: r.text.length > 400 ? `${r.text.slice(0, 400)}…` : r.text });
    if (r.status === 0) break; // the service is gone: every later case would fail the same way
  }
  t.comment(`${ran} queries in ${Date.now() - started} ms; statuses ${JSON.stringify(Object.fromEntries([...statuses].sort()))}; codes ${JSON.stringify(Object.fromEntries([...codes].sort((a, b) => b[1] - a[1])))}`);
  t.ok(ran >= Math.min(RUNS, 50), `${ran} of ${RUNS} queries ran within the time bound`);
  for (const f of failures.slice(0, 25)) {
    // One JSON line per failure (the query may hold control characters): what to replay.
    t.comment(ascii(JSON.stringify({ seed: SEED, case: f.index, scope: f.scope, status: f.status, query: f.sql, answer: f.body })));
    t.fail(`case ${f.index} as ${f.scope}: ${f.problems.join('; ')}`);
  }
  t.equal(failures.length, 0, `${failures.length} failing queries (seed ${SEED})`);
});
