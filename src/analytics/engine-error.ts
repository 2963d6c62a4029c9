/**
 * Errors of the analytics engine (chdb or a ClickHouse server), classified for the API.
 *
 * Only statements printed by the query compiler reach the engine, so an engine error with a
 * ClickHouse code is the query's doing unless its class says the service or the host failed.
 * The class is the engine's exception code number (src/store/error-codes.ts names it), never
 * a name read from the message, which may quote the caller's own literals:
 * a time limit → 408, a name outside the views → 403, a class in SERVICE_FAULT (the engine's
 * own bugs, I/O, memory allocation, network, cancellation) → 500 with the class only, every
 * other class → 400 with the class and the engine's reason, cleaned of internals. A class a
 * later engine adds is a 400, never a 500 (classes such as TLD_LIST_NOT_FOUND or
 * AGGREGATE_FUNCTION_THROW are the query's own failures). An error without a ClickHouse code (the
 * engine host, the client) is the service's failure: 500.
 */
import { ApiError } from '../errors.js';
import type { EngineError } from '../store/engine-error.js';
import { errorCodeNumber, errorCodes } from '../store/error-codes.js';

/** Cuts the parts of an engine message that could show internals: scopes, plans, hints, stacks, the engine's version. */
export function cleanReason(reason: string, internalNames: readonly string[]): string {
  let r = reason;
  for (const cut of [/:? while executing/i, /[.:]?\s*in scope\b/i, /[.:]?\s*In query\b/, /\.?\s*Maybe you meant/i, /\.?\s*Stack trace/i, /\n/, /\sSETTINGS\s/]) {
    const m = cut.exec(r);
    if (m) r = r.slice(0, m.index);
  }
  r = r.replace(/\s*\([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\)/gi, '');
  for (const name of internalNames) r = r.split(`\`${name}\`.`).join('').split(`"${name}".`).join('').split(`${name}.`).join('');
  r = r.replace(/__table\d+\./g, '').replace(/(?<![\w/])(?:\/[\w.@%+-]+){2,}\/?/g, '<path>');
  // The engine's version, however it is written (`(version 26.7.2.1)`, `ClickHouse 26.7.2.1`, a bare 26.7.2.1).
  r = r.replace(/\s*\(version [^)]*\)/gi, '').replace(/\b(?:version|ClickHouse|chdb)\s+v?\d+(?:\.\d+)+\b/gi, 'the engine').replace(/\b\d{2}\.\d{1,2}\.\d+\.\d+\b/g, '<version>');
  // Control characters (a NUL from the caller's data included) are shown escaped.
  r = r.replace(/[\u0000-\u001f\u007f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
  if (r.length > 500) r = `${r.slice(0, 500)}…`;
  return r.replace(/[.\s]+$/, '');
}

/**
 * Classes that are the service's or the host's failure, not the query's: the engine's own
 * bugs, memory allocation, files and disks, network, cancellation, sessions.
 */
const SERVICE_FAULT = new Set([
  'LOGICAL_ERROR', 'CANNOT_ALLOCATE_MEMORY', 'STD_EXCEPTION', 'POCO_EXCEPTION', 'UNKNOWN_EXCEPTION', 'ABORTED',
  'NOT_ENOUGH_SPACE', 'CORRUPTED_DATA', 'CHECKSUM_DOESNT_MATCH', 'CANNOT_READ_ALL_DATA', 'FILE_DOESNT_EXIST', 'FILE_ALREADY_EXISTS',
  'DIRECTORY_DOESNT_EXIST', 'TABLE_IS_DROPPED', 'TABLE_IS_READ_ONLY', 'NO_SUCH_DATA_PART', 'TOO_MANY_SIMULTANEOUS_QUERIES',
  'QUERY_WAS_CANCELLED', 'QUERY_WAS_CANCELLED_BY_CLIENT', 'SYSTEM_ERROR', 'SESSION_NOT_FOUND', 'SESSION_IS_LOCKED',
  'UNKNOWN_USER', 'AUTHENTICATION_FAILED', 'REQUIRED_PASSWORD', 'WRONG_PASSWORD', 'UNKNOWN_PACKET_FROM_SERVER', 'UNEXPECTED_PACKET_FROM_SERVER',
  'ALL_CONNECTION_TRIES_FAILED', 'NO_FREE_CONNECTION', 'SERVER_OVERLOADED',
]);
const SERVICE_FAULT_PREFIX = /^(CANNOT_(OPEN|READ_FROM|WRITE_TO|FSYNC|CREATE|SCHEDULE|STAT|TRUNCATE|UNLINK|RENAME|PIPE|FORK|MREMAP|MUNMAP|SEEK|SELECT|CLOCK|SET_|BLOCK|WAIT|LINK|MKDIR|REMOVE|ALLOCATE|MPROTECT|DLOPEN|FCNTL|IOSETUP|POLL|CLOSE|STATVFS)|NETWORK_|SOCKET_|KEEPER_|ZOOKEEPER|DISK_|S3_|HDFS_|AZURE_|REPLICA_|RECEIVED_ERROR_)/;
const OUTSIDE_VIEWS = new Set(['UNKNOWN_TABLE', 'UNKNOWN_DATABASE', 'READONLY', 'ACCESS_DENIED', 'UNKNOWN_STORAGE', 'DICTIONARY_ACCESS_DENIED']);

/** The numbers of the classes above, from the engine's own table: the number decides, never a name in a message. */
const numbersOf = (is: (name: string) => boolean): Set<number> => new Set([...errorCodes()].filter(([, name]) => is(name)).map(([n]) => n));
const TIMEOUT_NUMBER = errorCodeNumber('TIMEOUT_EXCEEDED');
const OUTSIDE_VIEWS_NUMBERS = numbersOf((name) => OUTSIDE_VIEWS.has(name));
const SERVICE_FAULT_NUMBERS = numbersOf((name) => SERVICE_FAULT.has(name) || SERVICE_FAULT_PREFIX.test(name));

/** The service's or the host's failure: no engine code at all (0), or a code of a service-fault class. */
export function isServiceFault(e: EngineError): boolean {
  return e.codeNumber === 0 || SERVICE_FAULT_NUMBERS.has(e.codeNumber);
}

/** The API error for an engine error raised while running a guarded query, decided by its code number. */
export function apiErrorFor(e: EngineError, internalNames: readonly string[], viewNames: readonly string[]): ApiError {
  if (e.codeNumber === TIMEOUT_NUMBER) return new ApiError('QUERY_TIMEOUT', 'the query ran past the execution time limit and was stopped');
  if (OUTSIDE_VIEWS_NUMBERS.has(e.codeNumber)) {
    return new ApiError('FORBIDDEN', `${cleanReason(e.reason, internalNames)}. Only the analytics views (${viewNames.join(', ')}) and names the query defines with WITH can be read`);
  }
  if (isServiceFault(e)) return new ApiError('INTERNAL', `the analytics engine failed (${e.codeName || (e.codeNumber ? `code ${e.codeNumber}` : 'unknown error')}); it has been logged`);
  return new ApiError('QUERY_FAILED', `${e.codeName || `Code ${e.codeNumber}`}: ${cleanReason(e.reason, internalNames)}`);
}
