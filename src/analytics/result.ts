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
  /** Engine's execution time, milliseconds. */
  elapsedMs: number;
  rowsRead: number;
  bytesRead: number;
}

interface Tail {
  rows: number;
  statistics?: { elapsed?: number; rows_read?: number; bytes_read?: number };
}

const DATA_OPEN = '\n\t"data":\n\t[\n';
const DATA_CLOSE = '\n\t],\n';

export function shapeResult(text: string, maxRows = MAX_ROWS): { body: string; meta: ResultMeta; columns: Column[] } {
  const open = text.indexOf(DATA_OPEN);
  const close = open === -1 ? -1 : text.indexOf(DATA_CLOSE, open + DATA_OPEN.length - 1);
  if (open !== -1 && close !== -1) {
    const head = JSON.parse(`${text.slice(0, open).replace(/,\s*$/, '')}}`) as { meta: Column[] };
    const tail = JSON.parse(`{${text.slice(close + DATA_CLOSE.length)}`) as Tail;
    const section = text.slice(open + DATA_OPEN.length, close);
    const lines = section === '' || section === '\n' ? [] : section.split('\n');
    if (lines.length === tail.rows && lines.every((l) => l.startsWith('\t\t[') && (l.endsWith(']') || l.endsWith('],')))) {
      const kept = lines.slice(0, maxRows).map((l) => l.slice(2, l.endsWith(',') ? -1 : undefined));
      return build(head.meta, `[${kept.join(',')}]`, kept.length, lines.length > maxRows, tail);
    }
  }
  const all = JSON.parse(text) as { meta: Column[]; data: unknown[][] } & Tail;
  const kept = all.data.slice(0, maxRows);
  return build(all.meta, JSON.stringify(kept), kept.length, all.data.length > maxRows, all);
}

function build(meta: Column[], rowsJson: string, rowCount: number, truncated: boolean, tail: Tail): { body: string; meta: ResultMeta; columns: Column[] } {
  const columns = meta.map((c) => ({ name: c.name, type: c.type }));
  const m: ResultMeta = {
    truncated,
    rowCount,
    elapsedMs: Math.round((tail.statistics?.elapsed ?? 0) * 1e6) / 1e3,
    rowsRead: tail.statistics?.rows_read ?? 0,
    bytesRead: tail.statistics?.bytes_read ?? 0,
  };
  return { body: `{"columns":${JSON.stringify(columns)},"rows":${rowsJson},"meta":${JSON.stringify(m)}}`, meta: m, columns };
}
