/**
 * Errors of the analytics engine (chdb or a ClickHouse server), classified for the API:
 * the query's own fault → 400 with the engine's reason (cleaned of internals), a time
 * limit → 408, naming something outside the views → 403, anything else → 500 with the
 * error class only.
 */
import { ApiError } from '../errors.js';

export class EngineError extends Error {
  constructor(
    /** ClickHouse error code name, e.g. SYNTAX_ERROR; '' when unknown. */
    readonly codeName: string,
    readonly codeNumber: number,
    /** The engine's message without the code prefix and suffix. */
    readonly reason: string,
  ) {
    super(`${codeName || 'engine error'}: ${reason}`);
  }
}

const CH_MESSAGE = /Code: (\d+)\.\s*(?:DB::Exception:\s*)?([\s\S]*?)\s*\(([A-Z][A-Z0-9_]*)\)(?:\s*\(version [^)]*\))?\s*$/;

/** Reads an error thrown by chdb ("Code: 62. DB::Exception: … (SYNTAX_ERROR)") or passes an EngineError through. */
export function toEngineError(err: unknown): EngineError {
  if (err instanceof EngineError) return err;
  const msg = err instanceof Error ? err.message : String(err);
  const m = CH_MESSAGE.exec(msg);
  if (m) return new EngineError(m[3]!, Number(m[1]), m[2]!);
  return new EngineError('', 0, msg);
}

/** Cuts the parts of an engine message that could show internals: scopes, plans, hints, stacks. */
export function cleanReason(reason: string, internalNames: readonly string[]): string {
  let r = reason;
  for (const cut of [/:? while executing/i, /[.:]?\s*in scope\b/i, /\.?\s*Maybe you meant/i, /\.?\s*Stack trace/i, /\n/, /\sSETTINGS\s/]) {
    const m = cut.exec(r);
    if (m) r = r.slice(0, m.index);
  }
  r = r.replace(/\s*\([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\)/gi, '');
  for (const name of internalNames) r = r.split(`${name}.`).join('');
  r = r.replace(/__table\d+\./g, '').replace(/(?:\/[\w.@%+-]+){2,}\/?/g, '<path>');
  if (r.length > 500) r = `${r.slice(0, 500)}…`;
  // Last line of defence: never echo the scope mechanism.
  if (/log_comment|scope:|getSetting/i.test(r)) return 'the engine refused the query';
  return r.replace(/[.\s]+$/, '');
}

const CLIENT_FAULT = new Set([
  'SYNTAX_ERROR', 'UNKNOWN_IDENTIFIER', 'UNKNOWN_FUNCTION', 'UNKNOWN_TYPE', 'UNKNOWN_AGGREGATE_FUNCTION',
  'UNKNOWN_QUERY_PARAMETER', 'NOT_AN_AGGREGATE', 'TYPE_MISMATCH', 'BAD_ARGUMENTS', 'ARGUMENT_OUT_OF_BOUND',
  'DECIMAL_OVERFLOW', 'NO_COMMON_TYPE', 'FUNCTION_THROW_IF_VALUE_IS_NON_ZERO', 'MEMORY_LIMIT_EXCEEDED',
  'EMPTY_LIST_OF_COLUMNS_QUERIED', 'INCORRECT_QUERY', 'INCORRECT_DATA', 'INCORRECT_NUMBER_OF_COLUMNS',
  'UNSUPPORTED_METHOD', 'NOT_IMPLEMENTED', 'CYCLIC_ALIASES', 'MULTIPLE_EXPRESSIONS_FOR_ALIAS',
  'NUMBER_OF_COLUMNS_DOESNT_MATCH', 'SIZES_OF_ARRAYS_DONT_MATCH', 'VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE',
  'UNEXPECTED_EXPRESSION', 'INVALID_JOIN_ON_EXPRESSION', 'INVALID_WITH_FILL_EXPRESSION', 'BAD_TYPE_OF_FIELD',
  'CANNOT_EXTRACT_TABLE_STRUCTURE', 'SET_SIZE_LIMIT_EXCEEDED', 'TOO_LARGE_ARRAY_SIZE', 'TOO_LARGE_STRING_SIZE',
  'NO_SUCH_COLUMN_IN_TABLE', 'THERE_IS_NO_COLUMN', 'LOGICAL_ERROR_IN_QUERY', 'UNEXPECTED_AST_STRUCTURE',
  'DUPLICATE_COLUMN', 'INVALID_SETTING_VALUE', 'UNFINISHED', 'UNION_ALL_RESULT_STRUCTURES_MISMATCH',
  'ATTEMPT_TO_READ_AFTER_EOF', 'UNKNOWN_ELEMENT_OF_ENUM', 'INCORRECT_RESULT_OF_SCALAR_SUBQUERY', 'CANNOT_COMPILE_REGEXP',
  'PARAMETER_OUT_OF_BOUND', 'TOO_FEW_ARGUMENTS_FOR_FUNCTION', 'BAD_DATA_FOR_TYPE', 'NO_ELEMENTS_IN_CONFIG',
  'SIZE_OF_FIXED_STRING_DOESNT_MATCH', 'UNKNOWN_FORMAT', 'NOT_FOUND_COLUMN_IN_BLOCK', 'ZERO_ARRAY_OR_TUPLE_INDEX',
  'CANNOT_COMPILE_CODE', 'UNKNOWN_SETTING', 'CANNOT_DECOMPRESS',
]);
const CLIENT_FAULT_PREFIX = /^(CANNOT_PARSE|CANNOT_CONVERT|CANNOT_READ_ARRAY|CANNOT_INSERT|CANNOT_COMPILE|ILLEGAL_|AMBIGUOUS_|TOO_MANY_|TOO_FEW_|TOO_BIG_|TOO_DEEP_|TOO_SLOW|TOO_LARGE_|NUMBER_OF_ARGUMENTS|UNKNOWN_IDENTIFIER|UNKNOWN_ELEMENT|QUERY_IS_TOO_LARGE|UNSUPPORTED_|INCORRECT_|PARAMETER_|BAD_ARGUMENTS|ARGUMENT_)/;
const OUTSIDE_VIEWS = new Set(['UNKNOWN_TABLE', 'UNKNOWN_DATABASE', 'UNKNOWN_DICTIONARY', 'READONLY', 'ACCESS_DENIED', 'UNKNOWN_STORAGE', 'UNKNOWN_TABLE_FUNCTION']);

/** The API error for an engine error raised while running a guarded query. */
export function apiErrorFor(e: EngineError, internalNames: readonly string[], viewNames: readonly string[]): ApiError {
  if (e.codeName === 'TIMEOUT_EXCEEDED') return new ApiError('QUERY_TIMEOUT', 'the query ran past the execution time limit and was stopped');
  if (OUTSIDE_VIEWS.has(e.codeName)) {
    return new ApiError('FORBIDDEN', `${cleanReason(e.reason, internalNames)}. Only the analytics views (${viewNames.join(', ')}) and names the query defines with WITH can be read`);
  }
  if (CLIENT_FAULT.has(e.codeName) || CLIENT_FAULT_PREFIX.test(e.codeName)) {
    return new ApiError('QUERY_FAILED', `${e.codeName}: ${cleanReason(e.reason, internalNames)}`);
  }
  return new ApiError('INTERNAL', `the analytics engine failed (${e.codeName || 'unknown error'}); it has been logged`);
}
