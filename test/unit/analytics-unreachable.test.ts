/** Which engine-call failures are "the engine is not reachable" (503) rather than the engine's answer. */
import t from 'tap';
import { engineUnreachable } from '../../src/analytics/unreachable.js';
import { HostUnavailable } from '../../src/store/engine-host/supervisor.js';
import { EngineError } from '../../src/store/engine-error.js';

t.ok(engineUnreachable(new HostUnavailable('the engine host is not serving (waited 15000 ms)')), 'the host did not come back in time');
t.ok(engineUnreachable(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' })));
t.ok(engineUnreachable(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' })));
t.ok(engineUnreachable(new Error('socket hang up')));
t.notOk(engineUnreachable(new EngineError('SYNTAX_ERROR', 62, 'Syntax error')), 'an engine answer');
t.notOk(engineUnreachable(Object.assign(new Error('Timeout exceeded'), { code: '159' })), 'an engine error code');
t.notOk(engineUnreachable('socket hang up'), 'not an Error');
