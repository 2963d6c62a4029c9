/**
 * The engine host's reading of a ClickHouse HTTP request: where the statement is, the
 * output format, settings (allowlisted), bound parameters, inserts.
 */
import t from 'tap';
import { HostError, basicAuth, errorCode, insertTarget, paramReset, paramStatements, parseRequest, settingsClause } from '../../src/store/engine-host/protocol.js';

/** Whether `fn` throws a HostError. */
function refused(fn: () => unknown): boolean {
  try {
    fn();
  } catch (e) {
    return e instanceof HostError;
  }
  return false;
}

const req = (params: Record<string, string>, body = '') => parseRequest(new URLSearchParams(params), Buffer.from(body));

t.test('a query in the body, its trailing FORMAT taken as the output format', async (t) => {
  const r = req({ query_id: 'q1', database: 'analytics', log_comment: "scope:o'1:live", max_execution_time: '2.5' }, 'SELECT 1 \nFORMAT JSONCompact');
  t.equal(r.sql, 'SELECT 1');
  t.equal(r.format, 'JSONCompact');
  t.equal(r.queryId, 'q1');
  t.equal(r.database, 'analytics');
  t.equal(r.insertData, null);
  t.same(r.settings, [['log_comment', "scope:o'1:live"], ['max_execution_time', '2.5']]);
  t.equal(settingsClause(r.settings), " SETTINGS log_comment = 'scope:o\\'1:live', max_execution_time = 2.5");
  t.equal(req({}, 'CREATE TABLE x (a UInt8) ENGINE = Memory').format, 'TabSeparated', 'no FORMAT: ClickHouse’s default');
  t.equal(req({}, "SELECT 'FORMAT JSON'").sql, "SELECT 'FORMAT JSON'", 'FORMAT inside a literal is the statement’s');
  const spaces = ' '.repeat(100_000);
  const started = performance.now();
  const long = req({}, `SELECT '${spaces}' AS s FORMAT JSONEachRow  ;  `);
  t.same([long.sql, long.format], [`SELECT '${spaces}' AS s`, 'JSONEachRow'], 'a long run of whitespace in a literal: the trailing FORMAT still found');
  t.ok(performance.now() - started < 2_000, 'and found in linear time (the whole-text match took ~11 s at 100,000 spaces)');
});

t.test('an insert: the statement in the URL, the rows in the body', async (t) => {
  const r = req({ query: 'INSERT INTO billing.signals FORMAT JSONEachRow', max_partitions_per_insert_block: '0' }, '{"a":1}\n');
  t.equal(r.insertData?.toString(), '{"a":1}\n');
  t.same(insertTarget(r.sql), { table: 'billing.signals', format: 'JSONEachRow' });
  t.same(insertTarget('INSERT INTO billing.costs (signal_id, org_id,cost_amount) FORMAT JSONCompactEachRow'), { table: 'billing.costs', format: 'JSONCompactEachRow', columns: ['signal_id', 'org_id', 'cost_amount'] }, 'compact rows with their column list');
  for (const bad of [
    'INSERT INTO signals FORMAT JSONEachRow',
    'INSERT INTO a.b SELECT 1',
    'INSERT INTO a.b FORMAT CSV',
    'INSERT INTO a.b; DROP TABLE a.b FORMAT JSONEachRow',
    'INSERT INTO a.b FORMAT JSONCompactEachRow',
    'INSERT INTO a.b (x) FORMAT JSONEachRow',
    'INSERT INTO a.b (x, x) FORMAT JSONCompactEachRow',
    'INSERT INTO a.b (x, y z) FORMAT JSONCompactEachRow',
    'INSERT INTO a.b (x, `y`) FORMAT JSONCompactEachRow',
    'INSERT INTO a.b (x) SELECT 1 FORMAT JSONCompactEachRow',
    'INSERT INTO a.b (x, (SELECT 1)) FORMAT JSONCompactEachRow',
    'INSERT INTO a.b () FORMAT JSONCompactEachRow',
  ]) {
    t.ok(refused(() => insertTarget(bad)), bad);
  }
});

t.test('settings outside the allowlist are refused; readonly is the session’s', async (t) => {
  for (const name of ['readonly_x', 'allow_ddl', 'max_threads', 'send_logs_level', 'http_headers_progress_interval_ms']) {
    const err = (() => {
      try {
        req({ [name]: '1' }, 'SELECT 1');
      } catch (e) {
        return e;
      }
      return null;
    })();
    t.ok(err instanceof HostError && err.codeName === 'UNKNOWN_SETTING' && err.status === 400, name);
  }
  t.same(req({ readonly: '1' }, 'SELECT 1').settings, [], 'readonly is not passed on');
  t.same(req({ enable_http_compression: '0' }, 'SELECT 1').settings, []);
  t.ok(refused(() => req({ enable_http_compression: '1' }, 'SELECT 1')), 'compression is not offered');
  t.same(req({ cancel_http_readonly_queries_on_client_close: '1' }, 'SELECT 1').settings, [], 'server mode’s cancel-on-close is accepted and not passed on (the test front cannot stop a statement)');
  t.ok(refused(() => req({}, '   ')), 'an empty statement');
});

t.test('bound parameters become SET param_ statements with the text quoted', async (t) => {
  const r = req({ 'param_org': "o'1\\x", 'param_ids': "['a','b\\'c']" }, 'SELECT {org:String}');
  t.same(r.params, [['org', "o'1\\x"], ['ids', "['a','b\\'c']"]]);
  t.equal(paramStatements(r.params), "SET param_org = 'o\\'1\\\\x'; SET param_ids = '[\\'a\\',\\'b\\\\\\'c\\']'; ");
  t.ok(refused(() => req({ 'param_a;b': '1' }, 'SELECT 1')), 'a parameter name must be an identifier');
  t.equal(paramReset(r.params), "SET param_org = ''; SET param_ids = ''", 'emptied again after the statement');
  t.equal(paramReset([]), undefined);
});

t.test('credentials and error codes', async (t) => {
  t.same(basicAuth(`Basic ${Buffer.from('writer:p:w').toString('base64')}`), { user: 'writer', password: 'p:w' });
  t.equal(basicAuth(undefined), null);
  t.equal(basicAuth('Bearer x'), null);
  t.same(errorCode('Code: 62. DB::Exception: Syntax error: failed at position 1. (SYNTAX_ERROR) (version 26.7.2.1)'), { code: 62, name: 'SYNTAX_ERROR' });
  t.same(errorCode('something else'), { code: 1002, name: 'UNKNOWN_EXCEPTION' });
  // chdb's own code property decides; a class name the message quotes never does.
  const quoted = "Code: 6. DB::Exception: Cannot parse string '(LOGICAL_ERROR)' as UInt64. (CANNOT_PARSE_TEXT)";
  t.same(errorCode(Object.assign(new Error(quoted), { clickhouseCode: 6 })), { code: 6, name: 'CANNOT_PARSE_TEXT' });
  t.same(errorCode(new Error("Code: 6. DB::Exception: Cannot parse string 'x (TIMEOUT_EXCEEDED)'")), { code: 6, name: 'CANNOT_PARSE_TEXT' });
  t.same(errorCode(new Error("not an engine error: 'Code: 159. DB::Exception: (TIMEOUT_EXCEEDED)'")), { code: 1002, name: 'UNKNOWN_EXCEPTION' });
  t.equal(new HostError(401, 516, 'AUTHENTICATION_FAILED', 'Authentication failed').text(), 'Code: 516. DB::Exception: Authentication failed. (AUTHENTICATION_FAILED)\n');
});
