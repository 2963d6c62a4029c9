/**
 * Engine errors → API errors (src/analytics/engine-error.ts): the class decides the
 * status, and nothing internal survives in the details.
 */
import t from 'tap';
import { apiErrorFor, cleanReason } from '../../src/analytics/engine-error.js';
import { toEngineError, EngineError, engineErrorOf } from '../../src/store/engine-error.js';
import { errorCodeName, errorCodeNumber } from '../../src/store/error-codes.js';

/** An engine error of class `name` (its number from the engine's table). */
const of = (name: string, reason: string): EngineError => new EngineError(name, errorCodeNumber(name), reason);

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
    const api = apiErrorFor(name === '' ? new EngineError('', 0, 'x') : of(name, 'Cannot open file /var/lib/x/billing.signals/data.bin in scope SELECT * FROM billing.signals'), internal, views);
    t.equal(api.code, code, name);
    t.equal(api.status, status, name);
    t.notMatch(api.details, /\/var\/lib|billing\.|in scope/, `${name}: no paths, internal names or scopes`);
  }
  const internalErr = apiErrorFor(of('LOGICAL_ERROR', 'Stack trace: 0x1234 DB::foo() /src/Interpreters/x.cpp:12'), internal, views);
  t.equal(internalErr.details, 'the analytics engine failed (LOGICAL_ERROR); it has been logged', 'a 500 names the error class only');
});

t.test('every error the query causes is a 400: the classes the engine adds over time included', async (t) => {
  // Error classes a compiled query has caused (the adversarial corpus and the fuzzer), none of which
  // a fixed list of "client faults" had: the query is at fault unless the class says the
  // service or the host failed.
  for (const name of [
    'INDEX_OF_POSITIONAL_ARGUMENT_IS_OUT_OF_RANGE', // leftPad('a', -5)
    'AGGREGATE_FUNCTION_THROW', 'TLD_LIST_NOT_FOUND', 'INVALID_TEMPLATE_FORMAT', 'SUPPORT_IS_DISABLED',
    'INVALID_LIMIT_EXPRESSION', 'SIZES_OF_COLUMNS_DOESNT_MATCH',
  ]) {
    const api = apiErrorFor(of(name, 'New padded length (-5) is negative'), internal, views);
    t.equal(api.code, 'QUERY_FAILED', name);
    t.equal(api.status, 400, name);
    t.equal(api.details, `${name}: New padded length (-5) is negative`, `${name}: the class and the cleaned reason`);
  }
  // A number this engine does not know (a later engine's class): shown by its number, a 400.
  const later = apiErrorFor(engineErrorOf(9999, 'Code: 9999. DB::Exception: something new. (SOME_CLASS_A_LATER_ENGINE_ADDS)'), internal, views);
  t.same([later.status, later.details], [400, 'Code 9999: something new. (SOME_CLASS_A_LATER_ENGINE_ADDS)']);
  for (const name of ['LOGICAL_ERROR', 'CANNOT_ALLOCATE_MEMORY', 'CANNOT_OPEN_FILE', 'FILE_DOESNT_EXIST', 'CANNOT_READ_FROM_FILE_DESCRIPTOR', 'NOT_ENOUGH_SPACE', 'CORRUPTED_DATA', 'CHECKSUM_DOESNT_MATCH', 'ABORTED', 'STD_EXCEPTION', 'POCO_EXCEPTION', 'NETWORK_ERROR', 'SOCKET_TIMEOUT', 'TABLE_IS_DROPPED', 'TOO_MANY_SIMULTANEOUS_QUERIES', 'QUERY_WAS_CANCELLED', 'CANNOT_SCHEDULE_TASK']) {
    const api = apiErrorFor(of(name, 'x'), internal, views);
    t.equal(api.status, 500, `${name}: the service's own failure`);
  }
});

t.test('the class is the code number\'s, never a name the message quotes', async (t) => {
  const names = ['TIMEOUT_EXCEEDED', 'UNKNOWN_DATABASE', 'UNKNOWN_TABLE', 'READONLY', 'ACCESS_DENIED', 'LOGICAL_ERROR', 'CANNOT_ALLOCATE_MEMORY', 'NETWORK_ERROR', 'CANNOT_OPEN_FILE'];
  for (const name of names) {
    for (const literal of [`(${name})`, `Code: 159. DB::Exception: x. (${name}) (version 26.7.1.1)`, `x\\0(${name})`]) {
      const message = `Code: 6. DB::Exception: Cannot parse string '${literal}' as UInt64: syntax error at begin of string. In scope SELECT toUInt64('${literal}'). (CANNOT_PARSE_TEXT)`;
      // What chdb throws (its code as a property), what the engine host answers (the header's number), and a bare message.
      const chdb = Object.assign(new Error(message), { clickhouseCode: 6 });
      for (const e of [toEngineError(chdb), engineErrorOf(6, message), toEngineError(new Error(message))]) {
        t.same([e.codeNumber, e.codeName], [6, 'CANNOT_PARSE_TEXT'], literal);
        const api = apiErrorFor(e, internal, views);
        t.same([api.status, api.code], [400, 'QUERY_FAILED'], literal);
        t.match(api.details, /^CANNOT_PARSE_TEXT: Cannot parse string '/, literal);
      }
    }
  }
  // A message whose own class is quoted text: the code's number wins.
  const e = engineErrorOf(6, 'Code: 6. DB::Exception: x (TIMEOUT_EXCEEDED)');
  t.same([e.codeName, e.reason], ['CANNOT_PARSE_TEXT', 'x (TIMEOUT_EXCEEDED)']);
  t.equal(errorCodeName(159), 'TIMEOUT_EXCEEDED');
});

t.test('a message cut at a NUL byte (chdb hands back C strings) is still the query\'s fault', async (t) => {
  // CAST('a\0b' AS Enum8('a' = 1)): chdb's message ends at the NUL, without its class.
  const e = toEngineError(new Error("Code: 691. DB::Exception: Unknown element 'a"));
  t.equal(e.codeNumber, 691);
  const api = apiErrorFor(e, internal, views);
  t.equal(api.status, 400);
  t.equal(api.code, 'QUERY_FAILED');
  t.match(api.details, /^UNKNOWN_ELEMENT_OF_ENUM: Unknown element 'a/, 'the class is the code number\'s, message or not');
  // parseDateTime('\0', '%Y')
  t.equal(apiErrorFor(toEngineError(new Error('Code: 41. DB::Exception: Unable to parse fragment %Y from ')), internal, views).status, 400);
  // A service-fault number stays a 500, also when cut.
  t.equal(apiErrorFor(toEngineError(new Error('Code: 49. DB::Exception: Logical error: ')), internal, views).status, 500);
  t.equal(apiErrorFor(toEngineError(new Error('Code: 173. DB::Exception: Cannot allocate')), internal, views).status, 500);
  // Not an engine message at all: the service's failure.
  t.equal(apiErrorFor(toEngineError(new Error('engine host exited')), internal, views).status, 500);
});

t.test('no NUL or control characters, engine version or scope mechanism in a reason', async (t) => {
  const r = cleanReason("Cannot parse string 'a\u0000b\u0007' as UInt8", internal);
  t.notMatch(r, /[\u0000-\u001f\u007f]/, 'control characters are gone');
  t.match(r, /a\\x00b\\x07/, 'shown escaped');
  for (const reason of [
    'Unknown function chdb (version 26.7.2.1). Maybe you meant',
    'Function x is not supported in ClickHouse 26.7.2.1',
    'this build (26.7.2.1) does not support it',
    'server version 26.7.2.1 official build',
  ]) t.notMatch(cleanReason(reason, internal), /26\.7|version \d/, `${reason}: no engine version`);
  t.equal(cleanReason('Unknown element \'log_comment\' of enum', internal), "Unknown element 'log_comment' of enum", 'no scope setting exists any more: a word the caller wrote is not hidden');
});

t.test('the printed statement and the view mechanism are not echoed', async (t) => {
  // NOT_AN_AGGREGATE and ILLEGAL_TYPE_OF_COLUMN_FOR_FILTER quote the statement the engine ran.
  const r = cleanReason("Column 'fact_signal.id' is not under aggregate function and not in GROUP BY keys. In query SELECT id, count() FROM `analytics.fact_signal`(org = 'org_1', live = true) AS fact_signal", internal);
  t.equal(r, "Column 'fact_signal.id' is not under aggregate function and not in GROUP BY keys");
  for (const reason of ['x in `analytics`.`fact_signal` y', 'x in "analytics"."fact_signal" y', 'x in analytics.fact_signal y', 'x in `billing.signals` y']) {
    t.notMatch(cleanReason(reason, internal), /analytics|billing/, reason);
  }
  // Not a path: type lists separated by slashes.
  t.equal(cleanReason('some of them are String/FixedString/Enum and some of them are not', internal), 'some of them are String/FixedString/Enum and some of them are not');
  t.equal(cleanReason('Cannot open /var/lib/x/y.bin', internal), 'Cannot open <path>');
});
