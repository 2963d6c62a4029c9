/**
 * Engine errors → API errors (src/analytics/engine-error.ts): the class decides the
 * status, and nothing internal survives in the details.
 */
import t from 'tap';
import { apiErrorFor, cleanReason, toEngineError, EngineError } from '../../src/analytics/engine-error.js';

const internal = ['billing', 'analytics'];
const views = ['fact_signal', 'fact_cost'];

t.test('reads chdb error messages', async (t) => {
  const e = toEngineError(new Error("Code: 47. DB::Exception: Unknown expression identifier `x` in scope SELECT x FROM analytics.fact_signal SETTINGS log_comment = 'scope:org_1:live'. (UNKNOWN_IDENTIFIER)"));
  t.equal(e.codeName, 'UNKNOWN_IDENTIFIER');
  t.equal(e.codeNumber, 47);
  t.equal(cleanReason(e.reason, internal), 'Unknown expression identifier `x`');
  const v = toEngineError(new Error('Code: 159. DB::Exception: Timeout exceeded: elapsed 1000.2 ms, maximum: 1000 ms. (TIMEOUT_EXCEEDED) (version 25.8.1.1)'));
  t.equal(v.codeName, 'TIMEOUT_EXCEEDED');
  t.equal(toEngineError(new Error('socket hang up')).codeName, '');
});

t.test('classification', async (t) => {
  const cases: [string, string, number][] = [
    ['TIMEOUT_EXCEEDED', 'QUERY_TIMEOUT', 408],
    ['UNKNOWN_TABLE', 'FORBIDDEN', 403],
    ['UNKNOWN_DATABASE', 'FORBIDDEN', 403],
    ['READONLY', 'FORBIDDEN', 403],
    ['ACCESS_DENIED', 'FORBIDDEN', 403],
    ['SYNTAX_ERROR', 'QUERY_FAILED', 400],
    ['UNKNOWN_IDENTIFIER', 'QUERY_FAILED', 400],
    ['ILLEGAL_TYPE_OF_ARGUMENT', 'QUERY_FAILED', 400],
    ['CANNOT_PARSE_TEXT', 'QUERY_FAILED', 400],
    ['MEMORY_LIMIT_EXCEEDED', 'QUERY_FAILED', 400],
    ['TOO_MANY_ROWS', 'QUERY_FAILED', 400],
    ['LOGICAL_ERROR', 'INTERNAL', 500],
    ['CANNOT_OPEN_FILE', 'INTERNAL', 500],
    ['', 'INTERNAL', 500],
  ];
  for (const [name, code, status] of cases) {
    const api = apiErrorFor(new EngineError(name, 1, 'Cannot open file /var/lib/x/billing.signals/data.bin in scope SELECT * FROM billing.signals'), internal, views);
    t.equal(api.code, code, name);
    t.equal(api.status, status, name);
    t.notMatch(api.details, /\/var\/lib|billing\.|in scope/, `${name}: no paths, internal names or scopes`);
  }
  const internalErr = apiErrorFor(new EngineError('LOGICAL_ERROR', 49, 'Stack trace: 0x1234 DB::foo() /src/Interpreters/x.cpp:12'), internal, views);
  t.equal(internalErr.details, 'the analytics engine failed (LOGICAL_ERROR); it has been logged', 'a 500 names the error class only');
});
