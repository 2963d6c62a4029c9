/**
 * The host's side of an analytics session run in a worker thread (session-worker.ts): the
 * part of chdb's Session the analytics lane uses (`queryAsync`, `queryStream`, `close`), so
 * that the lane (lane.ts) and the streamed answers (stream.ts) work the same on it. A
 * statement's analysis, however long, runs in the session's own thread, never on the host's
 * event loop.
 *
 * A stream's next block is asked of the worker only when the stream's reader asks for it (the
 * answer's connection took the previous one), and leaving the stream early cancels it there.
 * An engine error comes back with its message and code, as chdb gives them.
 */
import { Worker } from 'node:worker_threads';

export interface WholeResult {
  readonly elapsed: number;
  readonly rowsRead: number;
  readonly bytesRead: number;
  bytes(): Uint8Array;
  text(): string;
}

export interface StreamBlock {
  readonly numRows: number;
  raw(): Uint8Array;
}

type Reply =
  | { id: number; result: { bytes: ArrayBuffer; rowsRead: number; bytesRead: number; elapsed: number } }
  | { id: number; block: { bytes: ArrayBuffer; numRows: number } }
  | { id: number; end: true }
  | { id: number; error: { message: string; clickhouseCode?: number } };

/** An engine error as chdb reports it: its message ("Code: N. DB::Exception: …") and code. */
export class EngineFailure extends Error {
  readonly clickhouseCode?: number;
  constructor(e: { message: string; clickhouseCode?: number }) {
    super(e.message);
    this.name = 'EngineFailure';
    if (e.clickhouseCode !== undefined) this.clickhouseCode = e.clickhouseCode;
  }
}

export class RemoteSession {
  private readonly worker: Worker;
  private ids = 0;
  /** Each operation's handler of the worker's replies, by id. */
  private readonly handlers = new Map<number, (r: Reply) => void>();
  private lost: Error | null = null;
  private closing = false;
  /** Told once when the thread ends or fails other than by `close`. */
  onLost: ((err: Error) => void) | null = null;

  private constructor(
    worker: Worker,
    /** The session's thread id (Linux), where the engine analyses the statements it starts. */
    readonly tid: number | null,
  ) {
    this.worker = worker;
    worker.on('message', (r: Reply) => this.handlers.get(r.id)?.(r));
    worker.on('error', (err) => this.fail(err));
    worker.on('exit', (code) => this.fail(new Error(`the analytics session's thread ended (exit code ${code})`)));
  }

  /** Opens a session on `dir` in a worker thread and runs `setup` on it. */
  static async open(dir: string, setup: string[]): Promise<RemoteSession> {
    const worker = new Worker(new URL('./session-worker.js', import.meta.url), { workerData: { dir, setup } });
    const tid = await new Promise<number | null>((resolve, reject) => {
      const onMessage = (m: { ready?: true; tid?: number | null; failed?: { message: string } }): void => {
        worker.off('message', onMessage);
        worker.off('error', reject);
        if (m.ready) resolve(typeof m.tid === 'number' && Number.isSafeInteger(m.tid) && m.tid > 0 ? m.tid : null);
        else reject(new EngineFailure(m.failed ?? { message: 'the analytics session could not be opened' }));
      };
      worker.on('message', onMessage);
      worker.once('error', reject);
    });
    return new RemoteSession(worker, tid);
  }

  queryAsync(sql: string, opts: { format: string }): Promise<WholeResult> {
    return new Promise<WholeResult>((resolve, reject) => {
      const id = this.send({ op: 'query', sql, format: opts.format }, (r) => {
        this.handlers.delete(id);
        if ('error' in r) reject(new EngineFailure(r.error));
        else if ('result' in r) {
          const bytes = new Uint8Array(r.result.bytes);
          resolve({
            elapsed: r.result.elapsed,
            rowsRead: r.result.rowsRead,
            bytesRead: r.result.bytesRead,
            bytes: () => bytes,
            text: () => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8'),
          });
        } else reject(new Error('the analytics session answered a statement run whole with a stream'));
      });
      if (id < 0) reject(this.lost!);
    });
  }

  queryStream(sql: string, opts: { format: string }): AsyncIterable<StreamBlock> {
    return { [Symbol.asyncIterator]: () => this.stream(sql, opts.format) };
  }

  private async *stream(sql: string, format: string): AsyncGenerator<StreamBlock> {
    /** Replies not taken yet, and the reader waiting for the next one. */
    const replies: Reply[] = [];
    let wake: (() => void) | null = null;
    let over = false;
    const id = this.send({ op: 'stream', sql, format }, (r) => {
      replies.push(r);
      const w = wake;
      wake = null;
      w?.();
    });
    if (id < 0) throw this.lost!;
    try {
      for (;;) {
        while (replies.length === 0) {
          if (this.lost) throw this.lost;
          await new Promise<void>((resolve) => (wake = resolve));
        }
        const r = replies.shift()!;
        if ('error' in r) {
          over = true;
          throw new EngineFailure(r.error);
        }
        if ('end' in r) {
          over = true;
          return;
        }
        if (!('block' in r)) throw new Error('the analytics session answered a stream with a whole result');
        const bytes = new Uint8Array(r.block.bytes);
        yield { numRows: r.block.numRows, raw: () => bytes };
        this.worker.postMessage({ op: 'more', id });
      }
    } finally {
      this.handlers.delete(id);
      if (!over && !this.lost) this.worker.postMessage({ op: 'cancel', id });
    }
  }

  close(): void {
    if (this.lost || this.closing) return;
    this.closing = true;
    this.worker.postMessage({ op: 'close' });
  }

  /** Sends an operation; its id (-1 when the thread is gone). */
  private send(m: Record<string, unknown>, onReply: (r: Reply) => void): number {
    if (this.lost) return -1;
    const id = ++this.ids;
    this.handlers.set(id, onReply);
    this.worker.postMessage({ ...m, id });
    return id;
  }

  private fail(err: Error): void {
    if (this.lost) return;
    this.lost = err;
    for (const h of [...this.handlers.values()]) h({ id: -1, error: { message: err.message } });
    this.handlers.clear();
    if (!this.closing) this.onLost?.(err);
  }
}
