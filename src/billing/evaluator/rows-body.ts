/**
 * The body of a billing rows message (`<P>_BILLING_ROWS`, one per evaluated billable
 * message): the rows already as the lines the store inserts, rendered where they are
 * computed (the evaluation worker), so neither the evaluator's main thread nor the rows
 * inserter builds, parses or re-renders row objects.
 *
 *   {"v":3,"costs":C,"consumption":N,"unpriced":U,"columns":{"costs":[…],…}}\n
 *   C fact_cost lines, then N fact_credit_consumption lines, then U fact_unpriced lines, each
 *   one JSON array (JSONCompactEachRow) of its table's values in the order `columns` gives
 *   for that table (`signal_id` first), ending in '\n' (JSON text holds no raw newline).
 *
 * Arrays instead of objects: the field names were more than half of every row (about 730
 * bytes a priced signal, for its cost and consumption rows), and every byte of a row is
 * copied from the worker, sent to NATS, stored, delivered to the inserter and sent to the
 * engine. The column lists travel with the body, so an inserter reads a body of another
 * version as long as the columns are its tables' (checked: store/schema.ts compactColumns), and
 * every line is checked to be one row of that shape with a string signal id (readRows).
 */
import type { ConsumptionRow, CostRow, UnpricedRow } from './evaluate.js';
import { BILLING_COLUMNS, compactColumns, type BillingTable } from '../../store/schema.js';
import { BACKSLASH, COMMA, LBRACKET, MINUS, QUOTE, RBRACKET } from '../../shared/json-bytes.js';

/** The lines of one table: JSONCompactEachRow arrays in `columns` order (null: no lines); each line's signal id. */
export interface TableLines {
  columns: readonly string[] | null;
  lines: string[];
  ids: string[];
}

export interface RowLines {
  costs: TableLines;
  consumption: TableLines;
  unpriced: TableLines;
}

type Part = keyof RowLines;
const PARTS: readonly Part[] = ['costs', 'consumption', 'unpriced'];
const TABLE: Record<Part, BillingTable> = { costs: 'costs', consumption: 'credit_consumption', unpriced: 'unpriced' };

/** The order this version renders each table's values in: `signal_id` first, then the table's order. */
const first = (cols: readonly string[]): string[] => ['signal_id', ...cols.filter((c) => c !== 'signal_id')];
export const RENDER_COLUMNS: Record<Part, readonly string[]> = {
  costs: first(BILLING_COLUMNS.costs),
  consumption: first(BILLING_COLUMNS.credit_consumption),
  unpriced: first(BILLING_COLUMNS.unpriced),
};

const V3 = '{"v":3,';

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

/** `JSON.stringify(columns.map((c) => row[c] ?? null))` and a newline, written value by value. */
export function arrayLine(row: object, columns: readonly string[]): string {
  const r = row as Record<string, unknown>;
  let line = '[';
  for (let i = 0; i < columns.length; i++) line += (i === 0 ? '' : ',') + jsonValue(r[columns[i]!]);
  return `${line}]\n`;
}

/** The body for these rows, or null when there are none. */
export function renderRows(rows: { costs: readonly CostRow[]; consumption: readonly ConsumptionRow[]; unpriced: readonly UnpricedRow[] }): string | null {
  const counts = PARTS.map((p) => rows[p].length);
  if (counts.every((n) => n === 0)) return null;
  const columns: Partial<Record<Part, readonly string[]>> = {};
  for (const p of PARTS) if (rows[p].length > 0) columns[p] = RENDER_COLUMNS[p];
  let out = `${V3}"costs":${counts[0]},"consumption":${counts[1]},"unpriced":${counts[2]},"columns":${JSON.stringify(columns)}}\n`;
  for (const p of PARTS) for (const r of rows[p]) out += arrayLine(r, RENDER_COLUMNS[p]);
  return out;
}

const dec = new TextDecoder();

/**
 * The lines of a body, each checked to be one row of its table's shape: one JSON array of as
 * many values as the column list names, its signal id a string. Throws on anything else — a
 * column list that is not its table's included — so a line the engine would refuse, or that
 * holds more than one row, or whose id the redelivery check could not match, never reaches an
 * insert.
 */
export function readRows(data: Uint8Array): RowLines {
  const text = dec.decode(data);
  if (!text.startsWith(V3)) throw new Error(`billing rows body: not a body of this form: ${text.slice(0, 64)}`);
  const nl = text.indexOf('\n');
  if (nl < 0) throw new Error('billing rows body: a header without lines');
  const head = JSON.parse(text.slice(0, nl)) as { costs: number; consumption: number; unpriced: number; columns?: Partial<Record<Part, unknown>> };
  const lines = text.slice(nl + 1).split('\n');
  if (lines.at(-1) === '') lines.pop();
  const [costs, consumption, unpriced] = PARTS.map((p) => head[p]);
  if (![costs, consumption, unpriced].every((n) => Number.isSafeInteger(n) && n! >= 0) || costs! + consumption! + unpriced! !== lines.length) {
    throw new Error(`billing rows body: the header counts ${costs! + consumption! + unpriced!} lines, the body has ${lines.length}`);
  }
  const table = (p: Part, from: number, n: number): TableLines => {
    if (n === 0) return { columns: null, lines: [], ids: [] };
    const mine = lines.slice(from, from + n);
    const c = head.columns?.[p];
    if (!Array.isArray(c)) throw new Error(`billing rows body: no column list for its ${p}`);
    const columns = compactColumns(TABLE[p], c);
    const at = columns.indexOf('signal_id');
    return { columns, lines: mine, ids: mine.map((l) => arrayId(l, columns.length, at)) };
  };
  return { costs: table('costs', 0, costs!), consumption: table('consumption', costs!, consumption!), unpriced: table('unpriced', costs! + consumption!, unpriced!) };
}

const SIGNAL_ID = /^[\w-]{1,200}$/;

function idOf(v: unknown, line: string): string {
  if (typeof v !== 'string' || !SIGNAL_ID.test(v)) throw new Error(`billing rows body: a row without a valid signal id: ${line.slice(0, 120)}`);
  return v;
}

/** The signal id of a JSONCompactEachRow line holding one array of `arity` values. */
function arrayId(line: string, arity: number, at: number): string {
  const quick = scannedArrayId(line, arity, at);
  if (quick !== null) return idOf(quick, line);
  const row = JSON.parse(line) as unknown;
  if (!Array.isArray(row) || row.length !== arity) throw new Error(`billing rows body: a line that is not one row of ${arity} values: ${line.slice(0, 120)}`);
  return idOf(row[at], line);
}

/** The literals a value may be besides a string or a number. */
const WORDS = ['true', 'false', 'null'] as const;

/**
 * The value at `at` of a line that is exactly one JSON array of `arity` values, read without
 * parsing it, when the line is in the form this version renders (arrayLine): no whitespace, no
 * nested array or object, strings without escapes, numbers in JSON's grammar, true, false,
 * null. Null where the line is anything else — an escape, a space, a nested value, a syntax
 * error — and then JSON.parse decides (the same answer, or the same refusal: every line this
 * reads, JSON.parse reads as the same array). The value at `at` must be a string here.
 */
export function scannedArrayId(line: string, arity: number, at: number): string | null {
  const n = line.length;
  if (n < 2 || line.charCodeAt(0) !== LBRACKET) return null;
  let i = 1;
  let id: string | null = null;
  for (let k = 0; ; k++) {
    if (i >= n) return null;
    const c = line.charCodeAt(i);
    if (c === QUOTE) {
      const start = ++i;
      for (;;) {
        if (i >= n) return null;
        const d = line.charCodeAt(i);
        if (d === QUOTE) break;
        if (d === BACKSLASH || d < 0x20) return null;
        i++;
      }
      if (k === at) id = line.slice(start, i);
      i++;
    } else {
      if (k === at) return null; // the signal id is a string
      const end = scalarEnd(line, i);
      if (end < 0) return null;
      i = end;
    }
    if (i >= n) return null;
    const sep = line.charCodeAt(i++);
    if (sep === RBRACKET) return i === n && k + 1 === arity ? id : null;
    if (sep !== COMMA || k + 1 >= arity) return null;
  }
}

/** Where a number, true, false or null starting at `i` ends (JSON's grammar), or -1. */
function scalarEnd(line: string, i: number): number {
  for (const word of WORDS) if (line.startsWith(word, i)) return i + word.length;
  const n = line.length;
  const digit = (j: number): boolean => j < n && line.charCodeAt(j) >= 0x30 && line.charCodeAt(j) <= 0x39;
  if (i < n && line.charCodeAt(i) === MINUS) i++;
  if (!digit(i)) return -1;
  if (line.charCodeAt(i) === 0x30) i++;
  else while (digit(i)) i++;
  if (i < n && line.charCodeAt(i) === 0x2e) {
    if (!digit(++i)) return -1;
    while (digit(i)) i++;
  }
  if (i < n && (line.charCodeAt(i) | 0x20) === 0x65) {
    i++;
    if (i < n && (line.charCodeAt(i) === 0x2b || line.charCodeAt(i) === MINUS)) i++;
    if (!digit(i)) return -1;
    while (digit(i)) i++;
  }
  return i;
}
