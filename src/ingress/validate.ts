/**
 * Validation of signal batches. A batch is accepted whole or refused whole: the first bad
 * field anywhere refuses it with a 400 that names the signal index and the field.
 *
 * Limits (docs/api.md "Signals" lists the same):
 *   signals per request     1 to 500
 *   eventName               required string, 1 to 255 characters
 *   customerId              required string, 1 to 255 characters
 *   unitId                  optional string, 1 to 255 characters (null = absent)
 *   timestamp               optional RFC 3339 date-time with a Z or ±hh:mm offset, not before
 *                           2000-01-01T00:00:00Z and at most one hour after receipt
 *                           (null/absent = time of receipt)
 *   idempotencyKey          optional string, 1 to 255 characters (null = absent)
 *   data                    optional JSON object (null = absent), at most 16,384 bytes as
 *                           JSON and at most 10 levels of nesting (data itself is level 1);
 *                           no two keys naming the same path (dots in keys are path separators)
 *   every string            well-formed Unicode (no lone surrogates)
 */
import { ApiError } from '../errors.js';
import { Rfc3339Reader } from '../shared/time.js';

export const MAX_SIGNALS = 500;
export const MAX_STRING = 255;
export const MAX_DATA_BYTES = 16_384;
export const MAX_DATA_DEPTH = 10;
export const MIN_TIMESTAMP_MS = Date.UTC(2000, 0, 1);
export const MAX_FUTURE_MS = 3_600_000;

const ALLOWED_FIELDS = new Set(['eventName', 'customerId', 'unitId', 'timestamp', 'idempotencyKey', 'data']);


const bad = (path: string, problem: string): ApiError => new ApiError('INVALID_SIGNAL', `${path}: ${problem}`);

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** `field` of the signal at `path` (the path is joined only for an error: this runs for every field of every signal). */
function checkString(path: string, field: string, v: unknown, required: boolean): void {
  if (typeof v === 'string' && v.length > 0 && v.length <= MAX_STRING && v.isWellFormed()) return;
  if (v === undefined || v === null) {
    if (required) throw bad(`${path}.${field}`, 'is required');
    return;
  }
  if (typeof v !== 'string') throw bad(`${path}.${field}`, `must be a string, got ${typeName(v)}`);
  if (v.length === 0) throw bad(`${path}.${field}`, 'must not be empty');
  if (v.length > MAX_STRING) throw bad(`${path}.${field}`, `must be at most ${MAX_STRING} characters, got ${v.length}`);
  throw bad(`${path}.${field}`, 'must be well-formed Unicode (no lone surrogates)');
}

function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

/**
 * Walks `data` once and returns the first problem, or null:
 * - nesting deeper than MAX_DATA_DEPTH (data itself is level 1);
 * - two keys naming the same path. ClickHouse's JSON type reads dots in keys as path
 *   separators, so {"a.b": 1, "a": {"b": 2}} names `a.b` twice and the engine refuses the
 *   whole insert. Leaves (values that are not objects: numbers, strings, booleans, null,
 *   arrays) must have distinct paths; each object inside an array is its own document.
 * - (when `strings` is set) a string or key that is not well-formed UTF-16 (a lone
 *   surrogate such as "\ud800"), which the engine cannot store.
 */
function dataProblem(root: Record<string, unknown>, strings: boolean): string | null {
  const first = new DataWalk(strings, false);
  const problem = first.doc(root, 1);
  if (problem || !first.dotted) return sizeProblem(root, problem, first.bound);
  // Joining keys with '.' is one-to-one unless a key contains a dot: only then can two keys
  // name the same path, and only then is the (slower) path check needed.
  const second = new DataWalk(strings, true);
  return sizeProblem(root, second.doc(root, 1), second.bound);
}

function sizeProblem(root: Record<string, unknown>, problem: string | null, bound: number): string | null {
  if (problem || bound <= MAX_DATA_BYTES) return problem;
  const size = Buffer.byteLength(JSON.stringify(root));
  return size > MAX_DATA_BYTES ? `must be at most ${MAX_DATA_BYTES} bytes as JSON, got ${size}` : null;
}

/**
 * One walk of `data` (methods, not closures made per signal: this runs for every signal).
 * `bound` is an upper bound of the UTF-8 size of the JSON text: a UTF-16 unit is at most 6
 * bytes once escaped (\uXXXX), a number at most 24 characters. Only when the bound exceeds the
 * limit is the exact size measured (JSON.stringify), which keeps the common small payload cheap.
 */
class DataWalk {
  bound = 2;
  dotted = false;
  constructor(
    private readonly strings: boolean,
    private readonly paths: boolean,
  ) {}

  /** A document: `data` itself, or an object inside an array (its paths are its own). */
  doc(obj: Record<string, unknown>, level: number): string | null {
    return this.obj(obj, null, level, this.paths ? new Set<string>() : null);
  }

  // `prefix` is null at the document root: an empty key is a path segment of its own.
  private obj(o: Record<string, unknown>, prefix: string | null, lvl: number, leaves: Set<string> | null): string | null {
    if (lvl > MAX_DATA_DEPTH) return `must not nest deeper than ${MAX_DATA_DEPTH} levels`;
    this.bound += 3;
    for (const k in o) {
      this.bound += 6 * k.length + 4;
      if (this.strings && !k.isWellFormed()) return `key ${JSON.stringify(k)} is not well-formed Unicode (lone surrogate)`;
      if (!this.dotted && k.includes('.')) this.dotted = true;
      const path = leaves !== null ? (prefix === null ? k : `${prefix}.${k}`) : null;
      const v = o[k];
      if (isPlainObject(v)) {
        const p = this.obj(v, path, lvl + 1, leaves);
        if (p) return p;
        continue;
      }
      if (path !== null) {
        if (leaves!.has(path)) return `two keys name the same path "${path}" (dots in keys separate path segments)`;
        leaves!.add(path);
      }
      const p = this.value(v, lvl);
      if (p) return p;
    }
    return null;
  }

  private value(v: unknown, lvl: number): string | null {
    if (typeof v === 'string') {
      this.bound += 6 * v.length + 3;
      return this.strings && !v.isWellFormed() ? 'contains a string that is not well-formed Unicode (lone surrogate)' : null;
    }
    this.bound += 25;
    if (Array.isArray(v)) {
      if (lvl + 1 > MAX_DATA_DEPTH) return `must not nest deeper than ${MAX_DATA_DEPTH} levels`;
      for (const x of v) {
        const p = isPlainObject(x) ? this.doc(x, lvl + 1) : this.value(x, lvl + 1);
        if (p) return p;
      }
    }
    return null;
  }
}

/** Lone surrogates can only arrive as \uD800-\uDFFF escapes; most bodies have none, so the check is skipped. */
export const mayHaveSurrogates = (body: Buffer): boolean => body.includes('\\ud') || body.includes('\\uD');

/** `times` reads the timestamps: one per batch, so that signals sharing a date and hour read it once. */
export function validateSignal(s: unknown, path: string, receivedAtMs: number, strings = false, times = new Rfc3339Reader()): void {
  if (!isPlainObject(s)) throw bad(path, `must be an object, got ${typeName(s)}`);
  for (const k in s) if (!ALLOWED_FIELDS.has(k)) throw bad(`${path}.${k}`, 'unknown field');
  checkString(path, 'eventName', s.eventName, true);
  checkString(path, 'customerId', s.customerId, true);
  checkString(path, 'unitId', s.unitId, false);
  checkString(path, 'idempotencyKey', s.idempotencyKey, false);
  const ts = s.timestamp;
  if (ts !== undefined && ts !== null) {
    if (typeof ts !== 'string') throw bad(`${path}.timestamp`, `must be an RFC 3339 date-time string, got ${typeName(ts)}`);
    const ms = times.parse(ts);
    if (ms === null) throw bad(`${path}.timestamp`, `must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z, got ${JSON.stringify(ts.slice(0, 40))}`);
    if (ms < MIN_TIMESTAMP_MS) throw bad(`${path}.timestamp`, 'must not be before 2000-01-01T00:00:00Z');
    if (ms > receivedAtMs + MAX_FUTURE_MS) throw bad(`${path}.timestamp`, 'must not be more than one hour in the future');
  }
  const data = s.data;
  if (data !== undefined && data !== null) {
    if (!isPlainObject(data)) throw bad(`${path}.data`, `must be a JSON object, got ${typeName(data)}`);
    const problem = dataProblem(data, strings);
    if (problem) throw bad(`${path}.data`, problem);
  }
}

export function checkCount(n: number): void {
  if (n === 0) throw new ApiError('BATCH_EMPTY', 'signals: at least one signal is required');
  if (n > MAX_SIGNALS) throw new ApiError('BATCH_TOO_LARGE', `signals: at most ${MAX_SIGNALS} signals per request, got ${n}`);
}

/** `POST /api/v2/signals/bulk`: `{"signals": [...]}`. Returns the number of signals. */
export function validateBulk(body: unknown, receivedAtMs: number, strings = false): number {
  if (!isPlainObject(body)) throw new ApiError('INVALID_BODY', `body must be a JSON object {"signals": [...]}, got ${typeName(body)}`);
  for (const k in body) if (k !== 'signals') throw new ApiError('INVALID_BODY', `unknown top-level field ${JSON.stringify(k)}; the body is {"signals": [...]}`);
  const signals = body.signals;
  if (!Array.isArray(signals)) throw new ApiError('INVALID_BODY', `signals: must be an array, got ${typeName(signals)}`);
  checkCount(signals.length);
  const times = new Rfc3339Reader();
  for (let i = 0; i < signals.length; i++) validateSignal(signals[i], `signals[${i}]`, receivedAtMs, strings, times);
  return signals.length;
}

/** Legacy `POST /api/v1/usage`: one signal object or an array of at most 500. Returns the signals. */
export function validateV1(body: unknown, receivedAtMs: number, strings = false): unknown[] {
  if (Array.isArray(body)) {
    checkCount(body.length);
    const times = new Rfc3339Reader();
    for (let i = 0; i < body.length; i++) validateSignal(body[i], `[${i}]`, receivedAtMs, strings, times);
    return body;
  }
  if (!isPlainObject(body)) throw new ApiError('INVALID_BODY', `body must be a signal object or an array of signals, got ${typeName(body)}`);
  validateSignal(body, 'signal', receivedAtMs, strings);
  return [body];
}
