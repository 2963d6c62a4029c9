/**
 * An insert's failure is a data error (dead-lettered, never retried) or an outage (retried) by
 * the engine's code number alone (src/store/engine-error.ts): the number an EngineError or a
 * chdb error carries, or the leading `Code: N.` the engine writes first. A number quoted later
 * in a message (the rows' own text, a proxy's page) decides nothing.
 */
import t from 'tap';
import { EngineError, engineErrorOf, errorReason, isDataError } from '../../src/store/engine-error.js';

t.test('the code number decides', async (t) => {
  t.ok(isDataError(engineErrorOf(117, 'Code: 117. DB::Exception: bad row (INCORRECT_DATA)')), 'INCORRECT_DATA is a data error');
  t.ok(isDataError(engineErrorOf(6, 'Cannot parse text')), 'CANNOT_PARSE_TEXT is a data error');
  t.notOk(isDataError(engineErrorOf(241, 'Memory limit exceeded while reading "Code: 117. (INCORRECT_DATA)"')), 'an outage quoting a data error code is an outage');
  t.notOk(isDataError(engineErrorOf(209, 'Timeout exceeded')), 'SOCKET_TIMEOUT is an outage');
  const chdb = Object.assign(new Error('Code: 27. DB::Exception: Cannot parse input'), { clickhouseCode: 27 });
  t.ok(isDataError(chdb), "a chdb error's clickhouseCode");
  t.ok(isDataError(new Error('Code: 117. DB::Exception: insert data holds an empty line at byte 3 (INCORRECT_DATA)')), 'the leading code of an engine-shaped message');
});

t.test('a code found past the start of a message decides nothing', async (t) => {
  for (const msg of [
    'socket hang up while sending a row whose data reads "Code: 117."',
    'the engine answered HTTP 502 without an exception code: <html>Code: 6. bad gateway</html>',
    ' Code: 117. leading space',
    'connect ECONNREFUSED 127.0.0.1:8123 (Code: 53.)',
  ]) t.notOk(isDataError(new Error(msg)), msg);
  t.notOk(isDataError('Code: 117'), 'no period: not the engine form');
  t.notOk(isDataError(new EngineError('', 0, 'Code: 117. quoted')), 'an EngineError without a code');
});

t.test('the dead-letter reason names the code first', async (t) => {
  t.equal(errorReason(engineErrorOf(117, 'Code: 117. DB::Exception: bad row (INCORRECT_DATA)')), 'Code: 117. INCORRECT_DATA: bad row');
  t.equal(errorReason(new Error('plain')), 'plain');
  t.equal(errorReason('text'), 'text');
});
