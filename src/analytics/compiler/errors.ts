/** A refusal by the compiler: an API error code, a message, and the position it names. */
import { ApiError, type ErrorCode } from '../../errors.js';

export class CompileError extends Error {
  readonly line: number;
  readonly column: number;
  constructor(
    readonly code: ErrorCode,
    readonly reason: string,
    src: string,
    at: number,
  ) {
    const { line, column } = position(src, at);
    super(`${reason} (at ${line}:${column})`);
    this.line = line;
    this.column = column;
  }

  toApiError(): ApiError {
    return new ApiError(this.code, this.message);
  }
}

/** Line and column (1-based, columns in characters) of an offset. */
export function position(src: string, at: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  for (let i = 0; i < at && i < src.length; i++) {
    if (src.charCodeAt(i) === 10) {
      line++;
      lineStart = i + 1;
    }
  }
  let column = 1;
  for (let i = lineStart; i < at && i < src.length; i++) {
    const c = src.charCodeAt(i);
    if (c < 0xdc00 || c > 0xdfff) column++;
  }
  return { line, column };
}
