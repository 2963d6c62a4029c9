/**
 * The errors of the analytics engine (chdb or a ClickHouse server) as the store reports them:
 * an `EngineError` carries the ClickHouse class and code and the engine's reason. What an
 * error means for the API (400, 403, 408 or 500) is the analytics stage's decision
 * (src/analytics/engine-error.ts).
 */
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
const CH_CUT_MESSAGE = /^Code: (\d+)\.\s*(?:DB::Exception:\s*)?([\s\S]*)$/;

/** Reads an error thrown by chdb ("Code: 62. DB::Exception: … (SYNTAX_ERROR)") or passes an EngineError through. */
export function toEngineError(err: unknown): EngineError {
  if (err instanceof EngineError) return err;
  const msg = err instanceof Error ? err.message : String(err);
  const m = CH_MESSAGE.exec(msg);
  if (m) return new EngineError(m[3]!, Number(m[1]), m[2]!);
  // chdb returns C strings: a message with a NUL byte ends there, before its class.
  const cut = CH_CUT_MESSAGE.exec(msg);
  if (cut) return new EngineError('', Number(cut[1]), cut[2]!);
  return new EngineError('', 0, msg);
}

/**
 * ClickHouse error codes that mean "this data cannot be inserted", as opposed to "the engine
 * cannot insert right now": CANNOT_PARSE_TEXT 6, CANNOT_PARSE_ESCAPE_SEQUENCE 25,
 * CANNOT_PARSE_QUOTED_STRING 26, CANNOT_PARSE_INPUT_ASSERTION_FAILED 27, CANNOT_PARSE_DATE 38,
 * CANNOT_PARSE_DATETIME 41, TYPE_MISMATCH 53, CANNOT_PARSE_NUMBER 72, INCORRECT_DATA 117,
 * TOO_LARGE_STRING_SIZE 131, ARGUMENT_OUT_OF_BOUND 69, CANNOT_CONVERT_TYPE 70. An insert that
 * fails with one is dead-lettered (the pipeline's batches, the billing rows), never retried.
 */
const DATA_ERROR_CODES = new Set([6, 25, 26, 27, 38, 41, 53, 69, 70, 72, 117, 131]);

export function isDataError(err: unknown): boolean {
  const m = /Code: (\d+)\./.exec(err instanceof Error ? err.message : String(err));
  return m !== null && DATA_ERROR_CODES.has(Number(m[1]));
}
