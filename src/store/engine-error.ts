/**
 * The errors of the analytics engine (chdb or a ClickHouse server) as the store reports them:
 * an `EngineError` carries the ClickHouse class and code and the engine's reason. What an
 * error means for the API (400, 403, 408 or 500) is the analytics stage's decision
 * (src/analytics/engine-error.ts).
 */
import { errorCodeName } from './error-codes.js';

export class EngineError extends Error {
  constructor(
    /** The engine's name of `codeNumber` (src/store/error-codes.ts); '' when unknown. Never read from the message. */
    readonly codeName: string,
    readonly codeNumber: number,
    /** The engine's message without the code prefix and suffix. */
    readonly reason: string,
  ) {
    super(`${codeName || 'engine error'}: ${reason}`);
  }
}

/**
 * The error for exception code `code` (from the engine's answer: a header, a chdb error's
 * `clickhouseCode`) and the engine's message. The class is the code's name; the message only
 * gives the reason: its leading `Code: N. DB::Exception: ` and its trailing `(NAME)` and
 * `(version …)` are cut when they are the code's own, and anything the message quotes (the
 * caller's literals, class names in parentheses included) stays text.
 */
export function engineErrorOf(code: number, message: string): EngineError {
  const name = errorCodeName(code);
  let reason = message.trimEnd();
  const prefix = /^Code: (\d+)\.\s*(?:DB::Exception:\s*)?/.exec(reason);
  if (prefix && Number(prefix[1]) === code) reason = reason.slice(prefix[0].length);
  reason = reason.replace(/\s*\(version [^)]*\)$/, '');
  if (name && reason.endsWith(`(${name})`)) reason = reason.slice(0, -name.length - 2).trimEnd();
  return new EngineError(name, code, reason);
}

/**
 * An error thrown by the engine's client (chdb's errors carry the code as `clickhouseCode`),
 * as an EngineError; an EngineError passes through. Without a code property, the number of the
 * message's leading `Code: N.` (the engine writes it first, before any text of the caller's);
 * anything else is no engine answer: code 0.
 */
export function toEngineError(err: unknown): EngineError {
  if (err instanceof EngineError) return err;
  const msg = err instanceof Error ? err.message : String(err);
  const own = (err as { clickhouseCode?: unknown } | null)?.clickhouseCode;
  if (typeof own === 'number' && Number.isInteger(own)) return engineErrorOf(own, msg);
  const lead = /^Code: (\d+)\./.exec(msg);
  if (lead) return engineErrorOf(Number(lead[1]), msg);
  return new EngineError('', 0, msg);
}

/**
 * ClickHouse error codes that mean "this data cannot be inserted", as opposed to "the engine
 * cannot insert right now": CANNOT_PARSE_TEXT 6, CANNOT_PARSE_ESCAPE_SEQUENCE 25,
 * CANNOT_PARSE_QUOTED_STRING 26, CANNOT_PARSE_INPUT_ASSERTION_FAILED 27, CANNOT_PARSE_DATE 38,
 * CANNOT_PARSE_DATETIME 41, TYPE_MISMATCH 53, CANNOT_PARSE_NUMBER 72, INCORRECT_DATA 117,
 * TOO_LARGE_STRING_SIZE 131, ARGUMENT_OUT_OF_BOUND 69, CANNOT_CONVERT_TYPE 70. An insert that
 * fails with one is dead-lettered (the pipeline's batches, the billing rows), never retried.
 * The code is the engine's number (an EngineError's, a chdb error's `clickhouseCode`, or the
 * leading `Code: N.` the engine writes before any quoted text), never a number found further
 * on in a message, which may quote the rows' own text.
 */
const DATA_ERROR_CODES = new Set([6, 25, 26, 27, 38, 41, 53, 69, 70, 72, 117, 131]);

export function isDataError(err: unknown): boolean {
  return DATA_ERROR_CODES.has(toEngineError(err).codeNumber);
}

/**
 * The text a dead-lettered message records as its reason: `Code: N. NAME: reason` for an
 * engine error (its number first, as the engine writes it), the message otherwise.
 */
export function errorReason(err: unknown): string {
  if (err instanceof EngineError && err.codeNumber > 0) return `Code: ${err.codeNumber}. ${err.codeName || 'engine error'}: ${err.reason}`;
  return err instanceof Error ? err.message : String(err);
}
