/**
 * An analytics statement's output passed from the engine to its HTTP answer while the engine
 * makes it (chdb's `Session.queryStream`: one block at a time), at the pace the answer's
 * reader takes it, so that the host holds about one block of a result, not all of it:
 *
 * - The first HOLD_BYTES of output are held before the answer's headers go. An output that
 *   ends within them is answered whole (with its Content-Length), and a statement that fails
 *   within them answers with its error (status, X-ClickHouse-Exception-Code, the engine's text)
 *   exactly as a statement run whole does: the caller classifies it by the code.
 * - Past them the answer is chunked: each block is written and the next one is not asked of
 *   the engine while the connection's buffer is full (until 'drain').
 * - When the connection closes before the answer's end (the reader stopped: it had what it
 *   wanted, or went away), the stream is cancelled at the next block: the engine stops the
 *   statement and the session is free again. A block being made then is waited for (chdb
 *   cannot stop a block in the making; the statement's max_execution_time still bounds it).
 * - A statement that fails after the headers went out breaks the answer off: what was written
 *   is flushed, then the connection is destroyed without the body's end, so that the reader
 *   sees an incomplete answer, never a complete-looking part (BrokenOff).
 *
 * Only SELECT statements are streamed (chdb refuses others: NotStreamed, and the host runs
 * them whole), and only in the formats in STREAMED: chdb formats each block as a document of its own,
 * so a format with a header or a whole-document layout cannot be passed on block by block.
 * JSONCompact (what the service asks for) is joined into one document (compact-join.ts); the
 * row formats' blocks simply follow each other. Other formats are run whole (host.ts).
 *
 * X-ClickHouse-Summary goes with the headers, before a streamed output has ended (as a
 * ClickHouse server's does): it says the rows and bytes of output and the time up to then
 * (`result_rows`, `result_bytes`, `elapsed_ns`; final for an answer sent whole). chdb's
 * streaming does not report the rows and bytes the statement read, so `read_rows` and
 * `read_bytes` are not sent. The service reads none of it: its timing comes from the
 * JSONCompact tail's `statistics.elapsed`, which the host writes at the end (the statement's
 * wall time in the host, less the time its output waited for the connection to take it).
 */
import type http from 'node:http';
import { CompactJoin } from './compact-join.js';
import type { StreamBlock } from './remote-session.js';

/**
 * What a streamed answer needs of a session (an analytics session in a thread of its own,
 * remote-session.ts): each block's bytes are the caller's to keep, never the engine's memory.
 */
export interface StreamingSession {
  queryStream(sql: string, opts: { format: string }): AsyncIterable<StreamBlock>;
}

/** Output formats streamed: JSONCompact, joined, and row formats without a header, whose blocks follow each other. */
const STREAMED: ReadonlySet<string> = new Set([
  'JSONCompact',
  'TabSeparated',
  'TSV',
  'TabSeparatedRaw',
  'TSVRaw',
  'CSV',
  'JSONEachRow',
  'JSONCompactEachRow',
  'JSONStringsEachRow',
  'JSONCompactStringsEachRow',
]);

/** Whether a statement's output in `format` is streamed (streamAnswer), or made whole first. */
export function streamed(format: string): boolean {
  return STREAMED.has(format);
}

/** Output held before the answer's headers go: up to this much, a failure answers as an error. */
export const HOLD_BYTES = 1024 * 1024;

/** How long a broken-off answer's written output is given to reach the reader before the connection is destroyed. */
const FLUSH_MS = 10_000;

/** chdb streams SELECT statements only: another kind is refused before it runs, and is run whole instead (the caller). */
export class NotStreamed extends Error {
  constructor(cause: unknown) {
    super('the statement is not one chdb streams', { cause });
    this.name = 'NotStreamed';
  }
}

const NOT_STREAMED = /^Code: 36\. DB::Exception: Streaming query is not supported for query/;

/** A statement failed after its answer began: the answer was broken off (the error is the cause), nothing more is to be sent. */
export class BrokenOff extends Error {
  constructor(cause: unknown) {
    super(`the statement failed after its answer began: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'BrokenOff';
  }
}

/**
 * Runs `sql` on `session` as a stream and answers `res` with its output (see the top of this
 * file). Resolves when the stream has ended or was cancelled (the session is free then);
 * rejects with the engine's error when the statement failed before the headers went out (the
 * caller answers it), or with BrokenOff after, or with NotStreamed when chdb does not stream
 * this kind of statement (nothing was run or sent: the caller runs it whole).
 */
export async function streamAnswer(session: StreamingSession, sql: string, format: string, res: http.ServerResponse, headers: Record<string, string>): Promise<void> {
  const started = performance.now();
  const join = format === 'JSONCompact' ? new CompactJoin() : null;
  const out = new Outgoing(res);
  let held: Buffer[] = [];
  let rows = 0;
  let bytes = 0;
  let blocks = 0;
  /** Time spent waiting for the connection to take the output (not the engine's), ms. */
  let waited = 0;
  const summary = (): string =>
    JSON.stringify({ result_rows: String(rows), result_bytes: String(bytes), elapsed_ns: String(Math.round((performance.now() - started) * 1e6)) });
  try {
    const stream = session.queryStream(sql, { format });
    for await (const block of stream) {
      blocks++;
      if (out.gone) break;
      // The session's own copy of the block (remote-session.ts): held (the first 1 MiB) and
      // queued on the connection past the next block as it is.
      const b = block.raw();
      const raw = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
      const pieces = join ? join.push(raw, block.numRows) : [raw];
      rows += block.numRows;
      for (const p of pieces) bytes += p.length;
      if (!res.headersSent) {
        for (const p of pieces) held.push(p);
        if (bytes <= HOLD_BYTES) continue;
        res.writeHead(200, { ...headers, 'X-ClickHouse-Summary': summary() });
        out.write(held);
        held = [];
      } else out.write(pieces);
      // The next block is asked for once the connection took this one (or closed).
      const waitFrom = performance.now();
      await out.room();
      waited += performance.now() - waitFrom;
      if (out.gone) break;
    }
    if (out.gone) return;
    const tail = join ? [join.end((performance.now() - started - waited) / 1000)] : [];
    if (res.headersSent) {
      res.end(tail[0]);
      return;
    }
    const body = Buffer.concat([...held, ...tail]);
    bytes = body.length;
    res.writeHead(200, { ...headers, 'X-ClickHouse-Summary': summary(), 'Content-Length': String(body.length) }).end(body);
  } catch (err) {
    if (blocks === 0 && NOT_STREAMED.test(err instanceof Error ? err.message : String(err))) throw new NotStreamed(err);
    if (!res.headersSent || out.gone) throw err;
    void out.breakOff();
    throw new BrokenOff(err);
  } finally {
    out.release();
  }
}

/** The answer's connection as the stream writes to it: writes not yet flushed, whether it has room, whether it closed early. */
class Outgoing {
  /** The connection closed before the answer's end. */
  gone = false;
  /** Writes not yet handed to the connection. */
  private pending = 0;
  private wake: (() => void) | null = null;
  private readonly onClose = (): void => {
    if (!this.res.writableFinished) this.gone = true;
    this.wakeUp();
  };
  private readonly onDrain = (): void => this.wakeUp();

  constructor(private readonly res: http.ServerResponse) {
    res.on('close', this.onClose);
    res.on('drain', this.onDrain);
  }

  write(pieces: Buffer[]): void {
    for (const p of pieces) {
      this.pending++;
      this.res.write(p, () => {
        this.pending--;
        this.wakeUp();
      });
    }
  }

  /** Resolves once the connection takes more (or closed). */
  async room(): Promise<void> {
    while (this.res.writableNeedDrain && !this.gone) await new Promise<void>((resolve) => (this.wake = resolve));
  }

  /** Ends the connection without the answer's end: once what was written reached it (at most FLUSH_MS), it is destroyed. */
  async breakOff(): Promise<void> {
    const limit = Date.now() + FLUSH_MS;
    while (this.pending > 0 && !this.gone && Date.now() < limit) {
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, Math.max(0, limit - Date.now())).unref();
      });
    }
    this.res.destroy();
  }

  release(): void {
    this.res.off('drain', this.onDrain);
    // 'close' stays watched while a broken-off answer is flushed; it only wakes a waiter.
  }

  private wakeUp(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }
}
