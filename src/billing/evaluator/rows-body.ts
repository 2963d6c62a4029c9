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
 * version as long as the columns are its tables' (checked: store/schema.ts compactColumns).
 *
 * Earlier forms are still read (messages in flight across an upgrade): `{"v":2,…}` with
 * JSONEachRow object lines, and one JSON object `{costs: [...], consumption: [...],
 * unpriced?: [...]}` of row objects.
 */
import type { ConsumptionRow, CostRow, UnpricedRow } from './evaluate.js';
import { BILLING_COLUMNS, compactColumns, type BillingTable } from '../../store/schema.js';

/** The lines of one table: JSONEachRow objects (`columns` null), or JSONCompactEachRow arrays in `columns` order. */
export interface TableLines {
  columns: readonly string[] | null;
  lines: string[];
}

export interface RowLines {
  costs: TableLines;
  consumption: TableLines;
  unpriced: TableLines;
}

type Part = keyof RowLines;
const PARTS: readonly Part[] = ['costs', 'consumption', 'unpriced'];
const TABLE: Record<Part, BillingTable> = { costs: 'costs', consumption: 'credit_consumption', unpriced: 'unpriced' };

/** The order this version renders each table's values in: `signal_id` first (signalIdOf reads it from the line's start), then the table's order. */
const first = (cols: readonly string[]): string[] => ['signal_id', ...cols.filter((c) => c !== 'signal_id')];
export const RENDER_COLUMNS: Record<Part, readonly string[]> = {
  costs: first(BILLING_COLUMNS.costs),
  consumption: first(BILLING_COLUMNS.credit_consumption),
  unpriced: first(BILLING_COLUMNS.unpriced),
};

const V2 = '{"v":2,';
const V3 = '{"v":3,';

function arrayLine(row: object, columns: readonly string[]): string {
  const r = row as Record<string, unknown>;
  return `${JSON.stringify(columns.map((c) => r[c] ?? null))}\n`;
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

/** The lines of a body of any form; throws on anything else (a column list that is not its table's included). */
export function readRows(data: Uint8Array): RowLines {
  const text = dec.decode(data);
  const v3 = text.startsWith(V3);
  if (v3 || text.startsWith(V2)) {
    const nl = text.indexOf('\n');
    const head = JSON.parse(text.slice(0, nl)) as { costs: number; consumption: number; unpriced: number; columns?: Partial<Record<Part, unknown>> };
    const lines = text.slice(nl + 1).split('\n');
    if (lines.at(-1) === '') lines.pop();
    const [costs, consumption, unpriced] = PARTS.map((p) => head[p]);
    if (![costs, consumption, unpriced].every((n) => Number.isSafeInteger(n) && n! >= 0) || costs! + consumption! + unpriced! !== lines.length) {
      throw new Error(`billing rows body: the header counts ${costs! + consumption! + unpriced!} lines, the body has ${lines.length}`);
    }
    const columnsOf = (p: Part, n: number): readonly string[] | null => {
      if (!v3 || n === 0) return null;
      const c = head.columns?.[p];
      if (!Array.isArray(c)) throw new Error(`billing rows body: no column list for its ${p}`);
      return compactColumns(TABLE[p], c);
    };
    return {
      costs: { columns: columnsOf('costs', costs!), lines: lines.slice(0, costs) },
      consumption: { columns: columnsOf('consumption', consumption!), lines: lines.slice(costs, costs! + consumption!) },
      unpriced: { columns: columnsOf('unpriced', unpriced!), lines: lines.slice(costs! + consumption!) },
    };
  }
  const former = JSON.parse(text) as { costs?: unknown[]; consumption?: unknown[]; unpriced?: unknown[] };
  if (!Array.isArray(former.costs) || !Array.isArray(former.consumption)) throw new Error('billing rows body: neither form');
  const objects = (rows: unknown[] | undefined): TableLines => ({ columns: null, lines: (rows ?? []).map((r) => JSON.stringify(r)) });
  return { costs: objects(former.costs), consumption: objects(former.consumption), unpriced: objects(former.unpriced) };
}

const SIGNAL_ID = '"signal_id":"';

/**
 * The signal id of a row line, of either shape. An object line: rows are rendered with
 * `org_id`, `livemode`, `signal_id` first (evaluate.ts), before any text a user chose, and
 * signal ids need no escaping, so the first `"signal_id":"` of the line is the field. An
 * array line with `signal_id` first: the line's first string. Any other line is parsed.
 */
export function signalIdOf(line: string, columns: readonly string[] | null = null): string {
  if (columns === null) {
    const at = line.indexOf(SIGNAL_ID);
    if (at >= 0 && at < 128) {
      const end = line.indexOf('"', at + SIGNAL_ID.length);
      const id = line.slice(at + SIGNAL_ID.length, end);
      if (end > 0 && /^[\w-]+$/.test(id)) return id;
    }
    return (JSON.parse(line) as { signal_id: string }).signal_id;
  }
  const i = columns.indexOf('signal_id');
  if (i === 0 && line.startsWith('["')) {
    const end = line.indexOf('"', 2);
    const id = line.slice(2, end);
    if (end > 0 && /^[\w-]+$/.test(id)) return id;
  }
  return (JSON.parse(line) as unknown[])[i] as string;
}
