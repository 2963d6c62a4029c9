/**
 * Turns the engine's JSONCompact output (bytes) into the API's response body (bytes)
 * without decoding, parsing or re-encoding the rows: JSONCompact prints one row per line,
 * so rows are cut as lines (the exact 10,000-row cut happens here; the engine's own limits
 * stop at block size) and passed through as they are. Only the small head (column names
 * and types) and tail (row count, timing) are parsed. The line layout is checked against
 * the engine's row count; when it does not match, the whole output is parsed instead.
 */
export const MAX_ROWS = 10_000;

export interface Column {
  name: string;
  type: string;
}

export interface ResultMeta {
  truncated: boolean;
  /** Rows in this response. */
  rowCount: number;
  /** Engine's execution time, milliseconds. (Rows and bytes read are not reported: they count granules of the base table shared with other organizations.) */
  elapsedMs: number;
}

interface Tail {
  rows: number;
  statistics?: { elapsed?: number };
}

const DATA_OPEN = '\n\t"data":\n\t[\n';
const DATA_CLOSE = '\n\t],\n';
const TAB = 0x09;
const NL = 0x0a;
const COMMA = 0x2c;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;

export interface Shaped {
  body: Buffer;
  meta: ResultMeta;
  columns: Column[];
}

export function shapeResult(out: Buffer, maxRows = MAX_ROWS): Shaped {
  const open = out.indexOf(DATA_OPEN);
  const close = open === -1 ? -1 : out.indexOf(DATA_CLOSE, open + DATA_OPEN.length - 1);
  if (open !== -1 && close !== -1) {
    const head = JSON.parse(`${out.toString('utf8', 0, open).replace(/,\s*$/, '')}}`) as { meta: Column[] };
    const tail = JSON.parse(`{${out.toString('utf8', close + DATA_CLOSE.length)}`) as Tail;
    const from = open + DATA_OPEN.length;
    const cut = cutRows(out, from, close, maxRows);
    if (cut && cut.rows === tail.rows) {
      // The rows keep the engine's layout (tabs and line breaks are JSON whitespace).
      return build(head.meta, out.subarray(from, cut.end), Math.min(cut.rows, maxRows), cut.rows > maxRows, tail);
    }
  }
  const all = JSON.parse(out.toString('utf8')) as { meta: Column[]; data: unknown[][] } & Tail;
  const kept = all.data.slice(0, maxRows);
  const rows = JSON.stringify(kept);
  return build(all.meta, Buffer.from(rows.slice(1, -1)), kept.length, all.data.length > maxRows, all);
}

/**
 * Walks the row lines between `from` and `to`: every line must be `\t\t[…]` with a comma
 * after all but the last. Returns the number of rows and where the first `maxRows` end
 * (before the comma), or null when the layout is not one row per line.
 */
function cutRows(b: Buffer, from: number, to: number, maxRows: number): { rows: number; end: number } | null {
  if (from >= to) return { rows: 0, end: from };
  let rows = 0;
  let pos = from;
  let end = from;
  for (;;) {
    if (b[pos] !== TAB || b[pos + 1] !== TAB || b[pos + 2] !== OPEN_BRACKET) return null;
    const nl = b.indexOf(NL, pos);
    const lineEnd = nl === -1 || nl > to ? to : nl;
    const last = lineEnd === to;
    const closeAt = last ? lineEnd - 1 : lineEnd - 2;
    if (b[closeAt] !== CLOSE_BRACKET || (!last && b[lineEnd - 1] !== COMMA)) return null;
    rows++;
    if (rows <= maxRows) end = closeAt + 1;
    if (last) return { rows, end };
    pos = lineEnd + 1;
  }
}

function build(meta: Column[], rows: Buffer, rowCount: number, truncated: boolean, tail: Tail): Shaped {
  const columns = meta.map((c) => ({ name: c.name, type: c.type }));
  const m: ResultMeta = { truncated, rowCount, elapsedMs: Math.round((tail.statistics?.elapsed ?? 0) * 1e6) / 1e3 };
  const body = Buffer.concat([Buffer.from(`{"columns":${JSON.stringify(columns)},"rows":[`), rows, Buffer.from(`],"meta":${JSON.stringify(m)}}`)]);
  return { body, meta: m, columns };
}
