/**
 * Turns the engine's JSONCompact output (bytes) into the API's response body (bytes)
 * without decoding, parsing or re-encoding the rows: JSONCompact prints one row per line,
 * so rows are cut as lines (the exact 10,000-row cut happens here; the engine's own limits
 * stop at block size) and passed through as they are. Only the small head (column names
 * and types) and tail (row count, timing) are parsed. The line layout is checked against
 * the engine's row count; when it does not match, the whole output is parsed instead.
 * The rows are also cut at MAX_RESULT_BYTES, at the last whole row, and the output may
 * arrive cut at the store's byte limit (MAX_OUTPUT_BYTES, no tail): then its whole lines
 * are the rows, and the result is flagged as cut by bytes.
 */
import { ApiError } from '../errors.js';

export const MAX_ROWS = 10_000;

/**
 * The rows of a result take at most this many bytes of JSON (16 MiB): the row limit does not
 * bound bytes (10,000 rows of 500 strings each are ~215 MB). A result past it is cut at the
 * last whole row within it and flagged `truncatedBy: "bytes"`.
 */
export const MAX_RESULT_BYTES = 16 * 1024 * 1024;

/**
 * What the service reads of the engine's output at most: the rows' cap plus room for the
 * head (column names and types) and the tail. The rest is never read (the store stops there).
 */
export const MAX_OUTPUT_BYTES = MAX_RESULT_BYTES + 1024 * 1024;

export interface Column {
  name: string;
  type: string;
}

export interface ResultMeta {
  truncated: boolean;
  /** Which limit cut the result (only when truncated): the row limit or the byte cap. */
  truncatedBy?: 'rows' | 'bytes';
  /** The limit that cut it (only when truncated): MAX_ROWS rows or MAX_RESULT_BYTES bytes. */
  limit?: number;
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

type Cut = 'rows' | 'bytes' | null;

/**
 * `out` is the engine's JSONCompact output, whole or cut at the store's byte limit (then it
 * has no end). `elapsedMs` stands in for the engine's own figure when the output has no tail.
 */
export function shapeResult(out: Buffer, maxRows = MAX_ROWS, maxBytes = MAX_RESULT_BYTES, elapsedMs = 0): Shaped {
  const open = out.indexOf(DATA_OPEN);
  const close = open === -1 ? -1 : out.indexOf(DATA_CLOSE, open + DATA_OPEN.length - 1);
  if (open !== -1) {
    const head = JSON.parse(`${out.toString('utf8', 0, open).replace(/,\s*$/, '')}}`) as { meta: Column[] };
    const from = open + DATA_OPEN.length;
    if (close !== -1) {
      let tail: Tail | null = null;
      try {
        tail = JSON.parse(`{${out.toString('utf8', close + DATA_CLOSE.length)}`) as Tail;
      } catch {
        // Cut inside the tail: every row is here, only the statistics are not.
      }
      const cut = cutRows(out, from, close, true, maxRows, maxBytes);
      if (cut && (tail === null || cut.rows === tail.rows)) {
        // The rows keep the engine's layout (tabs and line breaks are JSON whitespace).
        const by: Cut = cut.byBytes ? 'bytes' : cut.rows > maxRows ? 'rows' : null;
        return build(head.meta, out.subarray(from, cut.end), cut.kept, by, maxRows, maxBytes, tail ? engineMs(tail) : elapsedMs);
      }
    } else {
      // Cut at the store's byte limit, before the end: whole lines only.
      const cut = cutRows(out, from, out.length, false, maxRows, maxBytes);
      if (cut) return build(head.meta, out.subarray(from, cut.end), cut.kept, cut.byBytes ? 'bytes' : 'rows', maxRows, maxBytes, elapsedMs);
      return build(head.meta, Buffer.alloc(0), 0, 'bytes', maxRows, maxBytes, elapsedMs);
    }
  }
  let all: { meta: Column[]; data: unknown[][] } & Tail;
  try {
    all = JSON.parse(out.toString('utf8')) as typeof all;
  } catch (err) {
    // Only an output cut by the store before its rows began: the head alone passed the room left for it.
    if (open === -1 && out.length > maxBytes) throw new ApiError('QUERY_FAILED', "the result's column names and types take more than 1 MiB; name the columns with shorter aliases");
    throw err;
  }
  const kept: string[] = [];
  let bytes = 0;
  let by: Cut = null;
  for (const row of all.data) {
    if (kept.length === maxRows) {
      by = 'rows';
      break;
    }
    const text = JSON.stringify(row);
    if (bytes + text.length + (kept.length > 0 ? 1 : 0) > maxBytes) {
      by = 'bytes';
      break;
    }
    bytes += text.length + (kept.length > 0 ? 1 : 0);
    kept.push(text);
  }
  return build(all.meta, Buffer.from(kept.join(',')), kept.length, by, maxRows, maxBytes, engineMs(all));
}

function engineMs(tail: Tail): number {
  return Math.round((tail.statistics?.elapsed ?? 0) * 1e6) / 1e3;
}

/**
 * Walks the row lines between `from` and `to`: every line must be `\t\t[…]` with a comma
 * after all but the last (when `whole`; otherwise the output was cut and a line without its
 * end is dropped). Returns the number of rows seen, how many are kept (at most `maxRows`,
 * within `maxBytes` from `from`), where the kept ones end (before the comma) and whether the
 * byte cap cut them (a cut output: unless more than `maxRows` whole rows arrived), or null
 * when the layout is not one row per line.
 */
function cutRows(b: Buffer, from: number, to: number, whole: boolean, maxRows: number, maxBytes: number): { rows: number; kept: number; end: number; byBytes: boolean } | null {
  if (from >= to) return { rows: 0, kept: 0, end: from, byBytes: false };
  let rows = 0;
  let kept = 0;
  let pos = from;
  let end = from;
  let byBytes = false;
  for (;;) {
    const nl = b.indexOf(NL, pos);
    if (!whole && (nl === -1 || nl >= to)) return { rows, kept, end, byBytes: byBytes || rows <= maxRows };
    if (b[pos] !== TAB || b[pos + 1] !== TAB || b[pos + 2] !== OPEN_BRACKET) return null;
    const lineEnd = nl === -1 || nl > to ? to : nl;
    const last = whole && lineEnd === to;
    const closeAt = last ? lineEnd - 1 : lineEnd - 2;
    if (b[closeAt] !== CLOSE_BRACKET || (!last && b[lineEnd - 1] !== COMMA)) return null;
    rows++;
    if (kept === rows - 1 && kept < maxRows && !byBytes) {
      if (closeAt + 1 - from <= maxBytes) {
        kept++;
        end = closeAt + 1;
      } else byBytes = true;
    }
    if (last) return { rows, kept, end, byBytes };
    pos = lineEnd + 1;
  }
}

function build(meta: Column[], rows: Buffer, rowCount: number, by: Cut, maxRows: number, maxBytes: number, elapsedMs: number): Shaped {
  const columns = meta.map((c) => ({ name: c.name, type: c.type }));
  const m: ResultMeta =
    by === null ? { truncated: false, rowCount, elapsedMs } : { truncated: true, truncatedBy: by, limit: by === 'rows' ? maxRows : maxBytes, rowCount, elapsedMs };
  const body = Buffer.concat([Buffer.from(`{"columns":${JSON.stringify(columns)},"rows":[`), rows, Buffer.from(`],"meta":${JSON.stringify(m)}}`)]);
  return { body, meta: m, columns };
}
