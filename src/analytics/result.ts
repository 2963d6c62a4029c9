/**
 * Turns the engine's JSONCompact output into the API's response body without parsing and
 * re-serializing every value: JSONCompact prints one row per line, so rows are cut as
 * lines (the exact 10,000-row cut happens here; the engine's own limits stop at block
 * size). The line layout is checked against the engine's row count; when it does not
 * match, the whole output is parsed instead.
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

export function shapeResult(text: string, maxRows = MAX_ROWS): { body: string; meta: ResultMeta; columns: Column[] } {
  const open = text.indexOf(DATA_OPEN);
  const close = open === -1 ? -1 : text.indexOf(DATA_CLOSE, open + DATA_OPEN.length - 1);
  if (open !== -1 && close !== -1) {
    const head = JSON.parse(`${text.slice(0, open).replace(/,\s*$/, '')}}`) as { meta: Column[] };
    const tail = JSON.parse(`{${text.slice(close + DATA_CLOSE.length)}`) as Tail;
    const cut = cutRows(text, open + DATA_OPEN.length, close, maxRows);
    if (cut && cut.rows === tail.rows) {
      // The rows keep the engine's layout (tabs and line breaks are JSON whitespace).
      return build(head.meta, `[${text.slice(open + DATA_OPEN.length, cut.end)}]`, Math.min(cut.rows, maxRows), cut.rows > maxRows, tail);
    }
  }
  const all = JSON.parse(text) as { meta: Column[]; data: unknown[][] } & Tail;
  const kept = all.data.slice(0, maxRows);
  return build(all.meta, JSON.stringify(kept), kept.length, all.data.length > maxRows, all);
}

/**
 * Walks the row lines between `from` and `to`: every line must be `\t\t[…]` with a comma
 * after all but the last. Returns the number of rows and where the first `maxRows` end
 * (before the comma), or null when the layout is not one row per line.
 */
function cutRows(text: string, from: number, to: number, maxRows: number): { rows: number; end: number } | null {
  if (from >= to) return { rows: 0, end: from };
  let rows = 0;
  let pos = from;
  let end = from;
  for (;;) {
    if (!text.startsWith('\t\t[', pos)) return null;
    const nl = text.indexOf('\n', pos);
    const lineEnd = nl === -1 || nl > to ? to : nl;
    const last = lineEnd === to;
    const closeAt = last ? lineEnd - 1 : lineEnd - 2;
    if (text.charCodeAt(closeAt) !== 93 /* ] */ || (!last && text.charCodeAt(lineEnd - 1) !== 44) /* , */) return null;
    rows++;
    if (rows <= maxRows) end = closeAt + 1;
    if (last) return { rows, end };
    pos = lineEnd + 1;
  }
}

function build(meta: Column[], rowsJson: string, rowCount: number, truncated: boolean, tail: Tail): { body: string; meta: ResultMeta; columns: Column[] } {
  const columns = meta.map((c) => ({ name: c.name, type: c.type }));
  const m: ResultMeta = {
    truncated,
    rowCount,
    elapsedMs: Math.round((tail.statistics?.elapsed ?? 0) * 1e6) / 1e3,
  };
  return { body: `{"columns":${JSON.stringify(columns)},"rows":${rowsJson},"meta":${JSON.stringify(m)}}`, meta: m, columns };
}
