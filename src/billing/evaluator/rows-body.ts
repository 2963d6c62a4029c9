/**
 * The body of a billing rows message (`<P>_BILLING_ROWS`, one per evaluated billable
 * message): the rows already as the lines the store inserts, rendered where they are
 * computed (the evaluation worker), so neither the evaluator's main thread nor the rows
 * inserter builds, parses or re-renders row objects.
 *
 *   {"v":4,"costs":C,"unpriced":U,"columns":{"costs":[…],…}}\n
 *   C cost lines (store table `costs`), then U fact_unpriced lines, each one JSON array
 *   (JSONCompactEachRow) of its table's values in the order `columns` gives for that table
 *   (`signal_id` first), ending in '\n' (JSON text holds no raw newline).
 *
 * A priced signal's credit draw is in its cost line (the `draw_*` columns, null when it drew
 * none; the analytics view fact_credit_consumption shows the lines with a draw): one line a
 * priced signal to render, send, store, deliver, check and insert, instead of two.
 *
 * Arrays instead of objects: the field names were more than half of every row, and every byte
 * of a row is copied from the worker, sent to NATS, stored, delivered to the inserter and sent
 * to the engine. The column lists travel with the body, so an inserter reads a body of another
 * version as long as the columns are its tables' (checked: store/schema.ts compactColumns), and
 * every line is checked to be one row of that shape with a string signal id (readRows).
 */
import type { ConsumptionRow, CostRow, UnpricedRow } from './evaluate.js';
import { BILLING_COLUMNS, compactColumns, type BillingTable } from '../../store/schema.js';
import { BACKSLASH, COMMA, LBRACKET, MINUS, QUOTE, RBRACKET } from '../../shared/json-bytes.js';

const NEWLINE = 10;

/** The lines of one table: JSONCompactEachRow arrays in `columns` order (null: no lines), each as UTF-8 ending in its newline; each line's signal id. */
export interface TableLines {
  columns: readonly string[] | null;
  lines: Uint8Array[];
  ids: string[];
}

export interface RowLines {
  costs: TableLines;
  unpriced: TableLines;
}

type Part = keyof RowLines;
const PARTS: readonly Part[] = ['costs', 'unpriced'];
const TABLE: Record<Part, BillingTable> = { costs: 'costs', unpriced: 'unpriced' };

/** The order this version renders each table's values in: `signal_id` first, then the table's order. */
const first = (cols: readonly string[]): string[] => ['signal_id', ...cols.filter((c) => c !== 'signal_id')];
export const RENDER_COLUMNS: Record<Part, readonly string[]> = {
  costs: first(BILLING_COLUMNS.costs),
  unpriced: first(BILLING_COLUMNS.unpriced),
};

/** The cost line's columns of a credit draw, and the consumption row's field each holds. */
const DRAW_FIELDS: Readonly<Record<string, keyof ConsumptionRow>> = {
  draw_pool_id: 'pool_id',
  draw_credits_currency_id: 'credits_currency_id',
  draw_credits: 'credits',
  draw_balance_after: 'balance_after',
};

/** Per column of `columns`, the consumption row's field it holds (DRAW_FIELDS), or undefined. */
const drawFieldsOf = (columns: readonly string[]): readonly (keyof ConsumptionRow | undefined)[] => columns.map((c) => DRAW_FIELDS[c]);
const COST_DRAW_FIELDS = drawFieldsOf(RENDER_COLUMNS.costs);
const NO_DRAW_FIELDS: readonly undefined[] = [];

const V4 = '{"v":4,';

/** A string value needing an escape in JSON text (JSON.stringify also escapes lone surrogates). */
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/** A row value as JSON.stringify writes it inside an array (undefined as null). */
function jsonValue(v: unknown): string {
  if (typeof v === 'string') return NEEDS_ESCAPE.test(v) ? JSON.stringify(v) : `"${v}"`;
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number') return Number.isFinite(v) ? String(v) : 'null';
  return JSON.stringify(v) ?? 'null';
}

/**
 * Where a body is written (one at a time: rendering is synchronous), then copied out at its
 * length: the lines go straight into bytes, with no string per value, per line or per body
 * (which were the largest share of the evaluator's garbage). Grown when a body needs more.
 */
let scratch = Buffer.allocUnsafeSlow(64 * 1024);

/** Makes room for `need` more bytes after `at`. */
function room(at: number, need: number): void {
  if (at + need <= scratch.length) return;
  const next = Buffer.allocUnsafeSlow(Math.max(2 * scratch.length, at + need));
  scratch.copy(next, 0, 0, at);
  scratch = next;
}

/** A text's UTF-8 at `at`; the position after it. */
function writeText(at: number, text: string): number {
  room(at, 3 * text.length);
  return at + scratch.write(text, at, 'utf8');
}

/** A row value as JSON.stringify writes it inside an array (jsonValue), at `at`; the position after it. */
function writeValue(at: number, v: unknown): number {
  if (typeof v === 'string') {
    // Printable ASCII other than a quote or a backslash (ids, decimals, names): byte by byte,
    // as it stands between quotes; anything else as jsonValue writes it.
    const n = v.length;
    room(at, n + 2);
    const b = scratch;
    let o = at;
    b[o++] = QUOTE;
    for (let i = 0; i < n; i++) {
      const c = v.charCodeAt(i);
      if (c < 0x20 || c >= 0x80 || c === QUOTE || c === BACKSLASH) return writeText(at, jsonValue(v));
      b[o++] = c;
    }
    b[o++] = QUOTE;
    return o;
  }
  // Literals and a whole number's digits, byte by byte too (a time in epoch ms, a flag).
  const text = typeof v === 'number' && Number.isSafeInteger(v) && !Object.is(v, -0) ? String(v) : v === null || v === undefined ? 'null' : v === true ? 'true' : v === false ? 'false' : null;
  if (text === null) return writeText(at, jsonValue(v));
  room(at, text.length);
  for (let i = 0; i < text.length; i++) scratch[at++] = text.charCodeAt(i);
  return at;
}

/**
 * One row as its JSONCompactEachRow line (`JSON.stringify(columns.map((c) => row[c] ?? null))`
 * and a newline) at `at`; the position after it. A column with a field in `drawFields` (the
 * same positions as `columns`: drawFieldsOf) is read from `draw` (null without one).
 */
function writeLine(at: number, row: object, columns: readonly string[], draw: ConsumptionRow | null = null, drawFields: readonly (keyof ConsumptionRow | undefined)[] = NO_DRAW_FIELDS): number {
  const r = row as Record<string, unknown>;
  room(at, 1);
  scratch[at++] = LBRACKET;
  for (let i = 0; i < columns.length; i++) {
    if (i > 0) {
      room(at, 1);
      scratch[at++] = COMMA;
    }
    const field = drawFields[i];
    at = writeValue(at, field === undefined ? r[columns[i]!] : draw === null ? null : draw[field]);
  }
  room(at, 2);
  scratch[at++] = RBRACKET;
  scratch[at++] = NEWLINE;
  return at;
}

/** `JSON.stringify(columns.map((c) => row[c] ?? null))` and a newline, as UTF-8 (what renderRows writes for a row). */
export function arrayLine(row: object, columns: readonly string[]): Buffer {
  return Buffer.from(scratch.subarray(0, writeLine(0, row, columns)));
}

/**
 * The body for these rows as UTF-8 bytes, or null when there are none. Each consumption row is
 * a draw of a priced signal (evaluate.ts: after its cost row, in the same order): written into
 * its cost line.
 */
export function renderRows(rows: { costs: readonly CostRow[]; consumption: readonly ConsumptionRow[]; unpriced: readonly UnpricedRow[] }): Buffer | null {
  const { costs, consumption, unpriced } = rows;
  if (costs.length === 0 && unpriced.length === 0) {
    if (consumption.length > 0) throw new Error('billing rows: a credit draw without its cost row');
    return null;
  }
  const columns: Partial<Record<Part, readonly string[]>> = {};
  for (const p of PARTS) if (rows[p].length > 0) columns[p] = RENDER_COLUMNS[p];
  let at = writeText(0, `${V4}"costs":${costs.length},"unpriced":${unpriced.length},"columns":${JSON.stringify(columns)}}\n`);
  let d = 0;
  for (const r of costs) {
    const draw = d < consumption.length && consumption[d]!.signal_id === r.signal_id ? consumption[d++]! : null;
    at = writeLine(at, r, RENDER_COLUMNS.costs, draw, COST_DRAW_FIELDS);
  }
  if (d !== consumption.length) throw new Error(`billing rows: the credit draw of ${consumption[d]!.signal_id} is not after its cost row`);
  for (const r of unpriced) at = writeLine(at, r, RENDER_COLUMNS.unpriced);
  return Buffer.from(scratch.subarray(0, at));
}

const dec = new TextDecoder();

/**
 * The lines of a body, each checked to be one row of its table's shape: one JSON array of as
 * many values as the column list names, its signal id a string. Throws on anything else — a
 * column list that is not its table's included — so a line the engine would refuse, or that
 * holds more than one row, or whose id the redelivery check could not match, never reaches an
 * insert. Read as bytes: a line in the form this version renders (ASCII, as
 * scannedArrayId reads it) is kept as the body's own bytes, with no string made of it; any
 * other line is decoded and parsed (JSON.parse decides), and kept as the UTF-8 of its text.
 */
export function readRows(data: Uint8Array): RowLines {
  const nl = data.indexOf(NEWLINE);
  const head = dec.decode(nl < 0 ? data : data.subarray(0, nl));
  if (!head.startsWith(V4)) throw new Error(`billing rows body: not a body of this form: ${head.slice(0, 64)}`);
  if (nl < 0) throw new Error('billing rows body: a header without lines');
  const header = JSON.parse(head) as { costs: number; unpriced: number; columns?: Partial<Record<Part, unknown>> };
  // Each line's [start, end) (end at its newline, or at the body's end for a last line without one).
  const starts: number[] = [];
  const ends: number[] = [];
  for (let at = nl + 1; at < data.length; ) {
    let end = data.indexOf(NEWLINE, at);
    if (end < 0) end = data.length;
    starts.push(at);
    ends.push(end);
    at = end + 1;
  }
  const count = starts.length;
  const [costs, unpriced] = PARTS.map((p) => header[p]);
  if (![costs, unpriced].every((n) => Number.isSafeInteger(n) && n! >= 0) || costs! + unpriced! !== count) {
    throw new Error(`billing rows body: the header counts ${costs! + unpriced!} lines, the body has ${count}`);
  }
  const table = (p: Part, from: number, n: number): TableLines => {
    if (n === 0) return { columns: null, lines: [], ids: [] };
    const c = header.columns?.[p];
    if (!Array.isArray(c)) throw new Error(`billing rows body: no column list for its ${p}`);
    const columns = compactColumns(TABLE[p], c);
    const at = columns.indexOf('signal_id');
    const lines: Uint8Array[] = [];
    const ids: string[] = [];
    for (let i = from; i < from + n; i++) {
      const start = starts[i]!;
      const end = ends[i]!;
      const quick = end < data.length ? scannedArrayId(data, start, end, columns.length, at) : null;
      if (quick !== null) {
        ids.push(idOf(quick, data, start, end));
        lines.push(data.subarray(start, end + 1));
      } else {
        const line = dec.decode(data.subarray(start, end));
        ids.push(arrayId(line, columns.length, at));
        lines.push(Buffer.from(`${line}\n`));
      }
    }
    return { columns, lines, ids };
  };
  return { costs: table('costs', 0, costs!), unpriced: table('unpriced', costs!, unpriced!) };
}

const SIGNAL_ID = /^[\w-]{1,200}$/;

function idOf(v: unknown, data: Uint8Array | string, start = 0, end = data.length): string {
  if (typeof v !== 'string' || !SIGNAL_ID.test(v)) {
    const line = typeof data === 'string' ? data : dec.decode(data.subarray(start, Math.min(end, start + 120)));
    throw new Error(`billing rows body: a row without a valid signal id: ${line.slice(0, 120)}`);
  }
  return v;
}

/** The signal id of a JSONCompactEachRow line holding one array of `arity` values (JSON.parse decides). */
function arrayId(line: string, arity: number, at: number): string {
  const row = JSON.parse(line) as unknown;
  if (!Array.isArray(row) || row.length !== arity) throw new Error(`billing rows body: a line that is not one row of ${arity} values: ${line.slice(0, 120)}`);
  return idOf(row[at], line);
}

/**
 * The value at `at` of the line in [start, end) of `b` when it is exactly one JSON array of
 * `arity` values, read without decoding or parsing it, when the line is in the form this
 * version renders (renderRows): ASCII, no whitespace, no nested array or object, strings
 * without escapes, numbers in JSON's grammar, true, false, null. Null where the line is
 * anything else — a byte outside ASCII, a control character, an escape, a space, a nested
 * value, a syntax error — and then JSON.parse decides (the same answer, or the same refusal:
 * every line this reads, JSON.parse reads as the same array). The value at `at` must be a
 * string here.
 */
export function scannedArrayId(b: Uint8Array, start: number, end: number, arity: number, at: number): string | null {
  if (end - start < 2 || b[start] !== LBRACKET) return null;
  let i = start + 1;
  let from = -1;
  let to = -1;
  for (let k = 0; ; k++) {
    if (i >= end) return null;
    const c = b[i]!;
    if (c === QUOTE) {
      const first = ++i;
      for (;;) {
        if (i >= end) return null;
        const d = b[i]!;
        if (d === QUOTE) break;
        if (d === BACKSLASH || d < 0x20 || d >= 0x80) return null;
        i++;
      }
      if (k === at) {
        from = first;
        to = i;
      }
      i++;
    } else {
      if (k === at) return null; // the signal id is a string
      i = scalarEnd(b, i, end);
      if (i < 0) return null;
    }
    if (i >= end) return null;
    const sep = b[i++];
    if (sep === RBRACKET) return i === end && k + 1 === arity && from >= 0 ? latin1(b, from, to) : null;
    if (sep !== COMMA || k + 1 >= arity) return null;
  }
}

/** The text of ASCII bytes [from, to). */
function latin1(b: Uint8Array, from: number, to: number): string {
  return Buffer.from(b.buffer, b.byteOffset + from, to - from).toString('latin1');
}

/** Whether `b` holds `word`'s bytes at `i`, before `end`. */
function wordAt(b: Uint8Array, i: number, end: number, word: readonly number[]): boolean {
  if (i + word.length > end) return false;
  for (let j = 0; j < word.length; j++) if (b[i + j] !== word[j]) return false;
  return true;
}
const TRUE = [0x74, 0x72, 0x75, 0x65];
const FALSE = [0x66, 0x61, 0x6c, 0x73, 0x65];
const NULL = [0x6e, 0x75, 0x6c, 0x6c];

/** Whether the byte at `j` (before `end`) is a digit. */
const digitAt = (b: Uint8Array, j: number, end: number): boolean => j < end && b[j]! >= 0x30 && b[j]! <= 0x39;

/** Where a number, true, false or null starting at `i` ends (JSON's grammar, before `end`), or -1. */
function scalarEnd(b: Uint8Array, i: number, end: number): number {
  const c = b[i];
  if (c === 0x74) return wordAt(b, i, end, TRUE) ? i + 4 : -1;
  if (c === 0x66) return wordAt(b, i, end, FALSE) ? i + 5 : -1;
  if (c === 0x6e) return wordAt(b, i, end, NULL) ? i + 4 : -1;
  if (c === MINUS) i++;
  if (!digitAt(b, i, end)) return -1;
  if (b[i] === 0x30) i++;
  else while (digitAt(b, i, end)) i++;
  if (i < end && b[i] === 0x2e) {
    if (!digitAt(b, ++i, end)) return -1;
    while (digitAt(b, i, end)) i++;
  }
  if (i < end && (b[i]! | 0x20) === 0x65) {
    i++;
    if (i < end && (b[i] === 0x2b || b[i] === MINUS)) i++;
    if (!digitAt(b, i, end)) return -1;
    while (digitAt(b, i, end)) i++;
  }
  return i;
}
