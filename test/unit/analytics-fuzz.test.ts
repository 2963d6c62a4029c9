/**
 * Grammar-driven fuzzing of the analytics boundary, in process with the real engine: queries
 * generated from fragments of everything ClickHouse's SQL has — column transformers,
 * subqueries in every position, lambdas, settings-shaped text, qualified and table-function
 * reads, quoted identifiers, comments, unicode — are compiled for one organization and mode,
 * and what compiles runs. Two organizations and both modes are seeded with distinct markers.
 * Asserted for every query: the compiler either refuses it with a CompileError or prints it;
 * no answer (rows or error details as the API would show them) holds another scope's marker;
 * and no engine error maps to a 500.
 */
import t from 'tap';
import fc from 'fast-check';
import { openTestStore } from '../helpers/chdb.js';
import { CompileError, QueryCompiler } from '../../src/analytics/compiler/index.js';
import { apiErrorFor } from '../../src/analytics/engine-error.js';
import { toEngineError } from '../../src/store/engine-error.js';
import { engineSettings } from '../../src/analytics/service.js';
import { VIEW_NAMES, VIEW_SCHEMAS } from '../../src/store/views.js';

const MARK = { al: 'mkALive7q', at: 'mkATest7q', bl: 'mkBLive7q', bt: 'mkBTest7q' };
const row = (org: string, live: boolean, m: string, i: number): string =>
  JSON.stringify({ org_id: org, livemode: live, signal_id: `sig_${m}_${i}`, batch_id: `bat_${m}`, event_name: `ev_${m}`, customer_id: `cus_${m}`, unit_id: `unit_${m}`, idempotency_key: `idem_${m}_${i}`, timestamp: '2026-01-01 00:00:00.000', received_at: '2026-01-01 00:00:00.000', data: { secret: m, n: i, nested: { tag: m } } });
const cost = (org: string, live: boolean, m: string): string =>
  JSON.stringify({ org_id: org, livemode: live, signal_id: `sig_${m}_0`, created_at: '2026-01-01 00:00:00.000', event_name: `ev_${m}`, customer_id: `cus_${m}`, unit_id: null, plan_id: `plan_${m}`, order_line_attribute_id: `ola_${m}`, quantity: '1', unit_price: '2', cost_amount: '2', currency: 'USD' });

/** Fragments in the language (weighted up, so whole queries compile often enough) and outside it. */
const pick = (ok: string[], bad: string[]): fc.Arbitrary<string> => fc.oneof({ arbitrary: fc.constantFrom(...ok), weight: 6 }, { arbitrary: fc.constantFrom(...bad), weight: 1 });
const source = pick(
  ['fact_signal', 'fact_cost', 'fact_credit_consumption', 'numbers(3)', '(SELECT * FROM fact_signal)', '(SELECT id, customer_id FROM fact_signal WHERE data.n::Int64 >= 0)'],
  ['billing.signals', '`billing`.`signals`', 'system.tables', 'analytics.fact_signal', 'signals', "file('/etc/hostname')", "url('http://127.0.0.1:1/')", "(SELECT * FROM fact_signal SETTINGS log_comment = 'scope:org_b:live')", 'fаct_signal', 'fact_signal FINAL'],
);
const column = pick(
  ['*', 'count()', 'groupArray(customer_id)', 'any(customer_id)', 'toString(count())', "'lit'", '1', 'arrayMap(x -> x + 1, [1])', '(SELECT groupArray(customer_id) FROM fact_signal)', '(SELECT any(toString(data)) FROM fact_signal)', '(SELECT count() FROM fact_cost)', '"x"', "leftPad('a', -5)", "CAST('a\\0b' AS Enum8('a' = 1))", "parseDateTime(concat(customer_id, '\\0'), '%Y')", "hasAny([customer_id], ['x'])", 'arrayMap(x -> x * 2, range(3))'],
  ['org_id', '_part', 'hostName()', 'chdb()', "getSetting('log_comment')", 'version()', '* APPLY(x -> toString(x))', '* EXCEPT (data)', "COLUMNS('.*')", 'arrayMap(x -> (SELECT groupArray(customer_id) FROM billing.signals), [1])', "inIgnoreSet('x', billing.signals)", '`cusé`', `'${MARK.bl}'`, 'x -> x', 'arrayMap(x -> customer_id, [1])', 'arrayFilter(x -> has(groupArray(customer_id), x), [\'a\'])', 'groupArray(1000000000)(customer_id)', 'range(-1000000000, 1)', 'arrayMap(x -> (SELECT groupArray(customer_id) FROM fact_signal), [1])'],
);
const condition = pick(
  ['1', "throwIf(customer_id = 'cus_mkBLive7q') = 0", "toUInt64(if(id IN (SELECT id FROM fact_signal), '1', customer_id)) > 0", 'id IN (SELECT id FROM fact_signal)', "startsWith(customer_id, 'cus_mkB')", "data.secret::String != ''", "toUInt64(if(startsWith(customer_id, 'cus_mkA'), '1', concat(customer_id, toString(data)))) > 0"],
  ['id IN billing.signals', "id GLOBAL IN (SELECT name FROM system.tables)", 'x -> x', "customer_id = 'a' SETTINGS readonly = 0"],
);
const decoration = pick(['', ' ', ' /* c */', ' -- c\n', '\n', ' LIMIT 5', ' ORDER BY 1'], [' SETTINGS readonly = 0', " SETTINGS log_comment = 'scope:org_b:live'", ' FORMAT CSV', '; SELECT 1', ' FINAL', '\u00a0', ' #']);
/** Columns every source above has, for the WHERE conditions. */
const keyed = fc.constantFrom('fact_signal', '(SELECT * FROM fact_signal)', '(SELECT id, customer_id, data FROM fact_signal)');

const query: fc.Arbitrary<string> = fc.letrec<{ q: string }>((tie) => ({
  q: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.record({ cols: fc.array(column, { minLength: 1, maxLength: 3 }), from: fc.option(source, { nil: undefined }), alias: fc.constantFrom('', ' AS f', ' f'), deco: decoration })
      .map((r) => `SELECT ${r.cols.join(', ')}${r.from ? ` FROM ${r.from}${r.alias}` : ''}${r.deco}`),
    fc.record({ cols: fc.array(column, { minLength: 1, maxLength: 2 }), from: keyed, where: fc.oneof(condition, tie('q').map((q) => `id IN (${q})`)), deco: decoration })
      .map((r) => `SELECT ${r.cols.join(', ')} FROM ${r.from} AS g WHERE ${r.where}${r.deco}`),
    fc.record({ left: keyed, right: source }).map((r) => `SELECT count() FROM ${r.left} AS a JOIN ${r.right} AS b ON 1 = 1`),
    fc.tuple(tie('q'), tie('q')).map(([a, b]) => `${a} UNION ALL ${b}`),
    fc.tuple(tie('q'), tie('q')).map(([a, b]) => `WITH f AS (${a}) ${b}`),
    tie('q').map((q) => `SELECT * FROM (${q})`),
  ),
})).q;

t.test('generated queries: refused, or scoped to the caller; never another scope\'s marker, never a 500', async (t) => {
  const { store, cfg } = await openTestStore(t);
  await store.insertSignals(Buffer.from([row('org_a', true, MARK.al, 0), row('org_a', false, MARK.at, 0), row('org_b', true, MARK.bl, 0), row('org_b', false, MARK.bt, 0), row('org_a', true, MARK.al, 1)].join('\n')));
  await store.insertCosts(Buffer.from([cost('org_a', true, MARK.al), cost('org_b', true, MARK.bl), cost('org_a', false, MARK.at)].join('\n')));
  const compiler = new QueryCompiler(VIEW_SCHEMAS, cfg.analytics.database);
  const settings = engineSettings({ timeoutMs: 10_000, maxMemoryBytes: 2 ** 30 });
  const internal = [cfg.clickhouseDatabase, cfg.analytics.database];
  const foreign = [MARK.at, MARK.bl, MARK.bt, 'org_b'];
  const samples = fc.sample(query, { numRuns: 400, seed: 20261124 });
  let ran = 0;
  let ownSeen = 0;
  const fiveHundreds: string[] = [];
  for (const q of samples) {
    let sql: string;
    try {
      sql = compiler.compile(q, { orgId: 'org_a', mode: 'live' });
    } catch (err) {
      if (!(err instanceof CompileError)) t.fail(`${q}: ${String(err)}`);
      continue;
    }
    ran++;
    let answer: string;
    try {
      answer = (await store.analytics.select(sql, settings)).toString();
    } catch (err) {
      const api = apiErrorFor(toEngineError(err), internal, VIEW_NAMES);
      if (api.code === 'INTERNAL') fiveHundreds.push(`${q} → ${(err as Error).message.slice(0, 200)}`);
      answer = api.details;
    }
    if (answer.includes(MARK.al)) ownSeen++;
    const leaked = foreign.filter((m) => answer.includes(m) && !q.includes(m));
    if (leaked.length > 0) t.fail(`${q}: answer holds ${leaked.join(', ')}`, { sql, answer: answer.slice(0, 500) });
  }
  t.ok(ran >= 40, `${ran} of ${samples.length} generated queries compiled and ran`);
  t.ok(ownSeen >= 10, `${ownSeen} answers held the caller's own marker (the fuzzer reaches data)`);
  t.same(fiveHundreds, [], 'no engine error maps to a 500');
});
