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
