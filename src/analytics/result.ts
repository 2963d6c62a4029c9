/**
 * Turns the engine's JSONCompact output (bytes) into the API's response body (bytes)
 * without decoding, parsing or re-encoding the rows: JSONCompact prints one row per line,
 * so rows are cut as lines (the exact 10,000-row cut happens here; the engine's own limits
 * stop at block size) and passed through as they are. Only the small head (column names
 * and types) and tail (row count, timing) are parsed. The line layout is checked against
 * the engine's row count; when it does not match, the whole output is parsed instead.
 * The rows are also cut at MAX_RESULT_BYTES, at the last whole row, and the output may
 * arrive cut at the store's byte limit (MAX_OUTPUT_BYTES, no tail): then its whole lines
 * are the rows, and the result is flagged as cut by bytes. StreamShaper makes the same cut on
 * the output as it is read, for a result passed on while it is read (result-body.ts).
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
 * What the service reads of the engine's output at most when it reads it whole (`select`):
 * the rows' cap plus room for the head (column names and types) and the tail. The rest is
 * never read (the store stops there).
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

/** The most of the engine's output before its rows (column names and types) the service reads. */
export const MAX_HEAD_BYTES = MAX_OUTPUT_BYTES - MAX_RESULT_BYTES;

/** The most of the engine's output after its rows (row count, statistics) the service reads. */
const MAX_TAIL_BYTES = 64 * 1024;

const ROW_START = Buffer.from('\t\t[');
const ROWS_END = Buffer.from('\t],');
const SEPARATOR = Buffer.from(',\n');

/**
 * The cut of shapeResult on the engine's JSONCompact output as it comes, for a result passed
 * on while it is read: `push` takes the next piece of the output and gives the body's bytes
 * that are final (the head, then whole rows in the engine's layout), `end` the body's last
 * bytes (the closing of the rows and `meta`). The rows and their cut are those of
 * shapeResult: at most `maxRows`, within `maxBytes` (the rows' bytes as the engine lays them
 * out, separators included), cut at the last whole row; once a limit cuts, `cut` is set and
 * nothing more of the output is wanted. A row is held until its line ends, so what is held
 * is at most one row (never more than `maxBytes`: a row that cannot fit cuts as soon as its
 * unfinished line is too long). An output not in the one-row-per-line layout, or whose rows
 * disagree with its own row count, throws: its rows may have been passed on already, so
 * there is no falling back to a full parse here.
 */
export class StreamShaper {
  /** Which limit cut the rows (then nothing more of the output is wanted), else null. */
  cut: Cut = null;
  /** The rows passed on. */
  kept = 0;
  /** Bytes of the rows passed on, as shapeResult counts them (from the first row's start to the last kept row's end). */
  private rowBytes = 0;
  private stage: 'head' | 'rows' | 'tail' = 'head';
  /** The last row seen was followed by a comma: another row comes. */
  private more = false;
  /** The unfinished line (or head, or tail), in pieces. */
  private partial: Buffer[] = [];
  private partialLen = 0;

  constructor(
    readonly maxRows = MAX_ROWS,
    readonly maxBytes = MAX_RESULT_BYTES,
  ) {}

  /** What the shaper holds now, bytes. */
  get held(): number {
    return this.partialLen;
  }

  /** Takes the next piece of the engine's output; returns the body's bytes that are final now (possibly none). */
  push(chunk: Buffer): Buffer[] {
    const out: Buffer[] = [];
    if (this.cut !== null || chunk.length === 0) return out;
    if (this.stage === 'head') {
      this.hold(chunk);
      const all = this.take();
      const open = all.indexOf(DATA_OPEN);
      if (open === -1) {
        if (all.length > MAX_HEAD_BYTES) throw new ApiError('QUERY_FAILED', "the result's column names and types take more than 1 MiB; name the columns with shorter aliases");
        this.hold(all);
        return out;
      }
      const head = JSON.parse(`${all.toString('utf8', 0, open).replace(/,\s*$/, '')}}`) as { meta: Column[] };
      out.push(Buffer.from(`{"columns":${JSON.stringify(head.meta.map((c) => ({ name: c.name, type: c.type })))},"rows":[`));
      this.stage = 'rows';
      // The last line break of DATA_OPEN starts the first line.
      chunk = all.subarray(open + DATA_OPEN.length);
    }
    if (this.stage === 'rows') {
      let pos = 0;
      for (;;) {
        if (this.cut !== null) return out;
        const nl = chunk.indexOf(NL, pos);
        if (nl === -1) {
          this.hold(chunk.subarray(pos));
          this.cutEarly();
          return out;
        }
        const line = this.partialLen > 0 ? Buffer.concat([this.take(), chunk.subarray(pos, nl)]) : chunk.subarray(pos, nl);
        pos = nl + 1;
        if (!this.line(line, out)) {
          // The rows ended: the rest is the tail.
          this.stage = 'tail';
          chunk = chunk.subarray(pos);
          break;
        }
      }
    }
    if (this.stage === 'tail') {
      this.hold(chunk);
      if (this.partialLen > MAX_TAIL_BYTES) throw new Error(`the engine's output has more than ${MAX_TAIL_BYTES} bytes after its rows`);
    }
    return out;
  }

  /**
   * The body's last bytes, once the output ended (or was left unread after a cut). `elapsedMs`
   * stands in for the engine's own figure when its tail was not read. Throws when the output
   * ended where it could not (inside the head or a row, without its tail) or its row count
   * disagrees with the rows seen.
   */
  end(elapsedMs: number): Buffer {
    let ms = elapsedMs;
    if (this.cut === null) {
      if (this.stage !== 'tail') throw new Error(`the engine's output ended inside its ${this.stage}`);
      let tail: Tail;
      try {
        tail = JSON.parse(`{${this.take().toString('utf8')}`) as Tail;
      } catch {
        throw new Error("the engine's output ended inside its tail");
      }
      if (tail.rows !== this.kept) throw new Error(`the engine's output has ${this.kept} rows in its layout and says ${tail.rows}`);
      ms = engineMs(tail);
    }
    this.partial = [];
    this.partialLen = 0;
    const m: ResultMeta =
      this.cut === null
        ? { truncated: false, rowCount: this.kept, elapsedMs: ms }
        : { truncated: true, truncatedBy: this.cut, limit: this.cut === 'rows' ? this.maxRows : this.maxBytes, rowCount: this.kept, elapsedMs: ms };
    return Buffer.from(`],"meta":${JSON.stringify(m)}}`);
  }

  /** One whole line of the rows (without its line break): a row, passed on or cutting, or the end of the rows (false). */
  private line(line: Buffer, out: Buffer[]): boolean {
    if (line.equals(ROWS_END) && !this.more) return false;
    // No rows: an empty line comes before the end of the rows.
    if (line.length === 0 && this.kept === 0 && !this.more) return true;
    const comma = line[line.length - 1] === COMMA;
    const rowEnd = comma ? line.length - 1 : line.length;
    if (line.length < 4 || line.compare(ROW_START, 0, 3, 0, 3) !== 0 || line[rowEnd - 1] !== CLOSE_BRACKET) throw new Error("the engine's output is not one row per line");
    const row = line.subarray(0, rowEnd);
    if (this.kept === this.maxRows) {
      this.cut = 'rows';
      return true;
    }
    const bytes = this.rowBytes + (this.kept > 0 ? SEPARATOR.length : 0) + row.length;
    if (bytes > this.maxBytes) {
      this.cut = 'bytes';
      return true;
    }
    if (this.kept > 0) out.push(SEPARATOR);
    out.push(row);
    this.kept++;
    this.rowBytes = bytes;
    this.more = comma;
    // After the last row allowed, another one (its comma says so) is the row limit's cut: it need not be read.
    if (comma && this.kept === this.maxRows) this.cut = 'rows';
    return true;
  }

  /** An unfinished row that can no longer fit within the byte cap cuts now, without waiting for its end. */
  private cutEarly(): void {
    // Only a row's line is longer than the line ending the rows; after a row without a comma only that line comes.
    if (this.kept >= this.maxRows || this.partialLen <= ROWS_END.length || (this.kept > 0 && !this.more)) return;
    // The line so far, less a comma it may end with, is at least the row's length.
    if (this.rowBytes + (this.kept > 0 ? SEPARATOR.length : 0) + this.partialLen - 1 > this.maxBytes) this.cut = 'bytes';
  }

  private hold(b: Buffer): void {
    if (b.length === 0) return;
    this.partial.push(b);
    this.partialLen += b.length;
  }

  private take(): Buffer {
    const all = this.partial.length === 1 ? this.partial[0]! : Buffer.concat(this.partial, this.partialLen);
    this.partial = [];
    this.partialLen = 0;
    return all;
  }
}
