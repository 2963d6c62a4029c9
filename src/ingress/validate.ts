/**
 * Validation of signal batches. A request is refused whole only for what is wrong with the
 * request itself (not JSON, not `{"signals": [...]}`, 0 or more than 500 signals); a signal
 * that breaks a field rule is refused alone: it is reported (its index, the dotted path of the
 * field within it, the problem) and nothing of it is stored, billed or claimed.
 *
 * Limits (docs/api.md "Signals" lists the same):
 *   signals per request     1 to 500
 *   eventName               required string, 1 to 255 characters
 *   customer                required object with exactly one of customerId (the service's
 *                           customer id) or externalCustomerId (the producer's own id):
 *                           a string of 1 to 255 characters
 *   attribution             optional object (null = absent) with exactly one of productId or
 *                           externalProductId: a string of 1 to 255 characters
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

const ALLOWED_FIELDS = new Set(['eventName', 'customer', 'attribution', 'unitId', 'timestamp', 'idempotencyKey', 'data']);
const CUSTOMER_FIELDS = ['customerId', 'externalCustomerId'] as const;
const PRODUCT_FIELDS = ['productId', 'externalProductId'] as const;

/** A signal's refusal: the dotted path of the field within the signal ("" for the signal itself) and the problem. */
export class SignalProblem extends Error {
  constructor(
    readonly field: string,
    readonly problem: string,
  ) {
    super(`${field}: ${problem}`);
  }
}

/** One refused signal of a request, as the answer lists it. */
export interface SignalError {
  index: number;
  code: 'INVALID_SIGNAL';
  field: string;
  message: string;
}

const bad = (field: string, problem: string): SignalProblem => new SignalProblem(field, problem);

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** `field` of the signal (its dotted path within the signal); the path is joined only for an error: this runs for every field of every signal. */
function checkString(prefix: string, field: string, v: unknown, required: boolean): void {
  if (typeof v === 'string' && v.length > 0 && v.length <= MAX_STRING && v.isWellFormed()) return;
  const path = prefix === '' ? field : `${prefix}.${field}`;
  if (v === undefined || v === null) {
    if (required) throw bad(path, 'is required');
    return;
  }
  if (typeof v !== 'string') throw bad(path, `must be a string, got ${typeName(v)}`);
  if (v.length === 0) throw bad(path, 'must not be empty');
  if (v.length > MAX_STRING) throw bad(path, `must be at most ${MAX_STRING} characters, got ${v.length}`);
  throw bad(path, 'must be well-formed Unicode (no lone surrogates)');
}

/** `customer` or `attribution`: an object with exactly one of the two keys `keys`, a string of 1 to 255 characters. */
function checkReference(field: string, v: unknown, keys: readonly [string, string], required: boolean): void {
  if (v === undefined || v === null) {
    if (required) throw bad(field, `is required: {"${keys[0]}": …} or {"${keys[1]}": …}`);
    return;
  }
  if (!isPlainObject(v)) throw bad(field, `must be an object {"${keys[0]}": …} or {"${keys[1]}": …}, got ${typeName(v)}`);
  let named: string | null = null;
  for (const k in v) {
    if (k !== keys[0] && k !== keys[1]) throw bad(`${field}.${k}`, 'unknown field');
    if (named !== null) throw bad(field, `must have exactly one of ${keys[0]} or ${keys[1]}, got both`);
    named = k;
  }
  if (named === null) throw bad(field, `must have exactly one of ${keys[0]} or ${keys[1]}, got neither`);
  checkString(field, named, v[named], true);
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
function dataProblem(root: Record<string, unknown>, strings: boolean, body: Buffer | undefined): string | null {
  const first = new DataWalk(strings, false);
  const problem = first.doc(root, 1);
  if (problem || !first.dotted) return sizeProblem(root, problem, first, body);
  // Joining keys with '.' is one-to-one unless a key contains a dot: only then can two keys
  // name the same path, and only then is the (slower) path check needed.
  const second = new DataWalk(strings, true);
  return sizeProblem(root, second.doc(root, 1), second, body);
}

/**
 * The size rule. A number beyond the double's range parses as ±Infinity (JSON.stringify
 * writes null) but is stored as the string of its text (src/pipeline/exact-numbers.ts): each
 * counts as the longest number text of the request's body (`body`), quoted.
 */
function sizeProblem(root: Record<string, unknown>, problem: string | null, walk: DataWalk, body: Buffer | undefined): string | null {
  if (problem) return problem;
  const extra = walk.huge > 0 ? walk.huge * Math.max(0, (body ? longestNumberText(body) : 0) + 2 - 'null'.length) : 0;
  if (walk.bound + extra <= MAX_DATA_BYTES) return null;
  const size = Buffer.byteLength(JSON.stringify(root)) + extra;
  const counted = extra > 0 ? " (a number beyond the double's range counted as its text)" : '';
  return size > MAX_DATA_BYTES ? `must be at most ${MAX_DATA_BYTES} bytes as JSON${counted}, got ${size}` : null;
}

/** Body → the length of its longest number text, measured once per body (only for one with a number beyond the double's range). */
const longestNumbers = new WeakMap<Buffer, number>();

/** The length of the longest run that reads as a JSON number in `body` (digits inside strings count too: an upper bound). */
export function longestNumberText(body: Buffer): number {
  let n = longestNumbers.get(body);
  if (n === undefined) {
    n = 0;
    for (const m of body.toString('latin1').matchAll(/-?[0-9][0-9.eE+-]*/g)) if (m[0].length > n) n = m[0].length;
    longestNumbers.set(body, n);
  }
  return n;
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
  /** Numbers beyond the double's range (parsed as ±Infinity). */
  huge = 0;
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
    if (typeof v === 'number' && !Number.isFinite(v)) this.huge++;
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

/**
 * Throws a SignalProblem for the first rule `s` breaks. `times` reads the timestamps: one per
 * batch, so that signals sharing a date and hour read it once.
 */
export function validateSignal(s: unknown, receivedAtMs: number, strings = false, times = new Rfc3339Reader(), body?: Buffer): void {
  if (!isPlainObject(s)) throw bad('', `must be an object, got ${typeName(s)}`);
  for (const k in s) if (!ALLOWED_FIELDS.has(k)) throw bad(k, 'unknown field');
  checkString('', 'eventName', s.eventName, true);
  checkReference('customer', s.customer, CUSTOMER_FIELDS, true);
  checkReference('attribution', s.attribution, PRODUCT_FIELDS, false);
  checkString('', 'unitId', s.unitId, false);
  checkString('', 'idempotencyKey', s.idempotencyKey, false);
  const ts = s.timestamp;
  if (ts !== undefined && ts !== null) {
    if (typeof ts !== 'string') throw bad('timestamp', `must be an RFC 3339 date-time string, got ${typeName(ts)}`);
    const ms = times.parse(ts);
    if (ms === null) throw bad('timestamp', `must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z, got ${JSON.stringify(ts.slice(0, 40))}`);
    if (ms < MIN_TIMESTAMP_MS) throw bad('timestamp', 'must not be before 2000-01-01T00:00:00Z');
    if (ms > receivedAtMs + MAX_FUTURE_MS) throw bad('timestamp', 'must not be more than one hour in the future');
  }
  const data = s.data;
  if (data !== undefined && data !== null) {
    if (!isPlainObject(data)) throw bad('data', `must be a JSON object, got ${typeName(data)}`);
    const problem = dataProblem(data, strings, body);
    if (problem) throw bad('data', problem);
  }
}

/** The problem of signal `s`, or null when it is valid. */
export function signalProblem(s: unknown, receivedAtMs: number, strings = false, times = new Rfc3339Reader(), body?: Buffer): SignalProblem | null {
  try {
    validateSignal(s, receivedAtMs, strings, times, body);
    return null;
  } catch (err) {
    if (err instanceof SignalProblem) return err;
    throw err;
  }
}

export function checkCount(n: number): void {
  if (n === 0) throw new ApiError('BATCH_EMPTY', 'signals: at least one signal is required');
  if (n > MAX_SIGNALS) throw new ApiError('BATCH_TOO_LARGE', `signals: at most ${MAX_SIGNALS} signals per request, got ${n}`);
}

/** A request's signals judged one by one: how many, and the refused ones (ascending index, one error each). */
export interface Judged {
  count: number;
  errors: SignalError[];
}

export const signalError = (index: number, p: SignalProblem): SignalError => ({ index, code: 'INVALID_SIGNAL', field: p.field, message: p.problem });

/** The request-level 400 of a request whose every signal was refused: the first error in `details`, all of them in `errors`. */
export function allRefused(errors: SignalError[], where: (index: number) => string): ApiError {
  const e = errors[0]!;
  const at = e.field === '' ? where(e.index) : `${where(e.index)}.${e.field}`;
  return new ApiError('INVALID_SIGNAL', `${at}: ${e.message}`, {}, { errors });
}

/** `POST /api/v2/signals/bulk`: `{"signals": [...]}`. Throws for a request-level problem; the signals' own problems are returned. */
export function validateBulk(body: unknown, receivedAtMs: number, strings = false, raw?: Buffer): Judged & { signals: unknown[] } {
  if (!isPlainObject(body)) throw new ApiError('INVALID_BODY', `body must be a JSON object {"signals": [...]}, got ${typeName(body)}`);
  for (const k in body) if (k !== 'signals') throw new ApiError('INVALID_BODY', `unknown top-level field ${JSON.stringify(k)}; the body is {"signals": [...]}`);
  const signals = body.signals;
  if (!Array.isArray(signals)) throw new ApiError('INVALID_BODY', `signals: must be an array, got ${typeName(signals)}`);
  checkCount(signals.length);
  const times = new Rfc3339Reader();
  const errors: SignalError[] = [];
  for (let i = 0; i < signals.length; i++) {
    const p = signalProblem(signals[i], receivedAtMs, strings, times, raw);
    if (p) errors.push(signalError(i, p));
  }
  return { count: signals.length, errors, signals };
}

/**
 * The legacy v1 fields (the official client's README) and the v2 field each maps to. A v1
 * signal is one with any of these names; any other object is read as a v2 signal.
 */
const V1_FIELDS: Readonly<Record<string, string>> = {
  event_name: 'eventName',
  customer_id: 'customer.externalCustomerId',
  agent_id: 'attribution.externalProductId',
  data: 'data',
  timestamp: 'timestamp',
  idempotency_key: 'idempotencyKey',
};
/** A v2 field path (of a mapped v1 signal) back to the v1 name its caller wrote. */
const V1_NAME_OF: Readonly<Record<string, string>> = {
  eventName: 'event_name',
  customer: 'customer_id',
  'customer.externalCustomerId': 'customer_id',
  attribution: 'agent_id',
  'attribution.externalProductId': 'agent_id',
  idempotencyKey: 'idempotency_key',
};

const isV1 = (s: Record<string, unknown>): boolean => 'event_name' in s || 'customer_id' in s || 'agent_id' in s || 'idempotency_key' in s;

/**
 * A v1 signal in the v2 shape (same values: `data` is carried as it is), or the SignalProblem
 * of a v1 field (named as the caller wrote it). A signal that is not v1 is returned as it is.
 */
function fromV1(s: unknown): unknown {
  if (!isPlainObject(s) || !isV1(s)) return s;
  for (const k in s) if (!Object.hasOwn(V1_FIELDS, k)) throw bad(k, 'unknown field');
  const out: Record<string, unknown> = {};
  if (s.event_name !== undefined) out.eventName = s.event_name;
  if (s.customer_id !== undefined && s.customer_id !== null) out.customer = { externalCustomerId: s.customer_id };
  if (s.agent_id !== undefined && s.agent_id !== null) out.attribution = { externalProductId: s.agent_id };
  if (s.timestamp !== undefined) out.timestamp = s.timestamp;
  if (s.idempotency_key !== undefined) out.idempotencyKey = s.idempotency_key;
  if (s.data !== undefined) out.data = s.data;
  return out;
}

/** A v1 signal's problem with its field named the v1 way. */
function v1Problem(original: unknown, p: SignalProblem): SignalProblem {
  if (!isPlainObject(original) || !isV1(original)) return p;
  const named = V1_NAME_OF[p.field];
  return named === undefined ? p : new SignalProblem(named, p.problem);
}

/**
 * Legacy `POST /api/v1/usage`: one signal object or an array of at most 500. Returns the
 * signals in the v2 shape (a refused one as null; `data` as parsed: the body's own text of it
 * is what travels, src/ingress/v1-body.ts) and the refused ones' errors.
 */
export function validateV1(body: unknown, receivedAtMs: number, strings = false, raw?: Buffer): Judged & { signals: unknown[]; array: boolean } {
  const array = Array.isArray(body);
  if (!array && !isPlainObject(body)) throw new ApiError('INVALID_BODY', `body must be a signal object or an array of signals, got ${typeName(body)}`);
  const list = array ? (body as unknown[]) : [body];
  checkCount(list.length);
  const times = new Rfc3339Reader();
  const errors: SignalError[] = [];
  const signals = new Array<unknown>(list.length);
  for (let i = 0; i < list.length; i++) {
    let p: SignalProblem | null;
    let v2: unknown = null;
    try {
      v2 = fromV1(list[i]);
      p = signalProblem(v2, receivedAtMs, strings, times, raw);
    } catch (err) {
      if (!(err instanceof SignalProblem)) throw err;
      p = err;
    }
    if (p) errors.push(signalError(i, v1Problem(list[i], p)));
    signals[i] = p ? null : v2;
  }
  return { count: list.length, errors, signals, array };
}
