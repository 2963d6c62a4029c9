/**
 * The body of a billing rows message (`<P>_BILLING_ROWS`, one per evaluated billable
 * message): the rows already as the JSONEachRow lines the store inserts, rendered where they
 * are computed (the evaluation worker), so neither the evaluator's main thread nor the rows
 * inserter builds, parses or re-renders row objects.
 *
 *   {"v":2,"costs":C,"consumption":N,"unpriced":U}\n
 *   C fact_cost lines, then N fact_credit_consumption lines, then U fact_unpriced lines, each
 *   ending in '\n' (JSON text holds no raw newline).
 *
 * The form of earlier versions, one JSON object `{costs: [...], consumption: [...],
 * unpriced?: [...]}` of row objects, is still read (messages in flight across an upgrade).
 */
import type { ConsumptionRow, CostRow, UnpricedRow } from './evaluate.js';

export interface RowLines {
  costs: string[];
  consumption: string[];
  unpriced: string[];
}

const HEADER = '{"v":2,';

/** The body for these rows, or null when there are none. */
export function renderRows(rows: { costs: readonly CostRow[]; consumption: readonly ConsumptionRow[]; unpriced: readonly UnpricedRow[] }): string | null {
  const { costs, consumption, unpriced } = rows;
  if (costs.length === 0 && consumption.length === 0 && unpriced.length === 0) return null;
  let out = `${HEADER}"costs":${costs.length},"consumption":${consumption.length},"unpriced":${unpriced.length}}\n`;
  for (const r of costs) out += `${JSON.stringify(r)}\n`;
  for (const r of consumption) out += `${JSON.stringify(r)}\n`;
  for (const r of unpriced) out += `${JSON.stringify(r)}\n`;
  return out;
}

const dec = new TextDecoder();

/** The lines of a body of either form; throws on anything else. */
export function readRows(data: Uint8Array): RowLines {
  const text = dec.decode(data);
  if (text.startsWith(HEADER)) {
    const nl = text.indexOf('\n');
    const head = JSON.parse(text.slice(0, nl)) as { costs: number; consumption: number; unpriced: number };
    const lines = text.slice(nl + 1).split('\n');
    if (lines.at(-1) === '') lines.pop();
    const { costs, consumption, unpriced } = head;
    if (![costs, consumption, unpriced].every((n) => Number.isSafeInteger(n) && n >= 0) || costs + consumption + unpriced !== lines.length) {
      throw new Error(`billing rows body: the header counts ${costs + consumption + unpriced} lines, the body has ${lines.length}`);
    }
    return { costs: lines.slice(0, costs), consumption: lines.slice(costs, costs + consumption), unpriced: lines.slice(costs + consumption) };
  }
  const former = JSON.parse(text) as { costs?: unknown[]; consumption?: unknown[]; unpriced?: unknown[] };
  if (!Array.isArray(former.costs) || !Array.isArray(former.consumption)) throw new Error('billing rows body: neither form');
  const lines = (rows: unknown[] | undefined): string[] => (rows ?? []).map((r) => JSON.stringify(r));
  return { costs: lines(former.costs), consumption: lines(former.consumption), unpriced: lines(former.unpriced) };
}

const SIGNAL_ID = '"signal_id":"';

/**
 * The signal id of a row line. Rows are rendered with `org_id`, `livemode`, `signal_id` first
 * (evaluate.ts), before any text a user chose, and signal ids need no escaping, so the first
 * `"signal_id":"` of the line is the field; a line of another shape is parsed.
 */
export function signalIdOf(line: string): string {
  const at = line.indexOf(SIGNAL_ID);
  if (at >= 0 && at < 128) {
    const end = line.indexOf('"', at + SIGNAL_ID.length);
    const id = line.slice(at + SIGNAL_ID.length, end);
    if (end > 0 && /^[\w-]+$/.test(id)) return id;
  }
  return (JSON.parse(line) as { signal_id: string }).signal_id;
}
