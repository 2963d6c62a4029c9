/**
 * The answer of an analytics statement, from the engine's output as it is read (result.ts
 * makes the cut):
 * - an output that ends within STREAM_FROM_BYTES is read whole and answered in one piece with
 *   its Content-Length (shapeResult);
 * - a longer one is passed on while it is read (a chunked body, src/http/wrap.ts): the engine's
 *   output is read only as fast as the client's socket takes the body, so the service holds at
 *   most STREAM_FROM_BYTES, one row and one piece of it per statement whatever the client's
 *   pace; once a limit cuts the rows, the rest is never read (the engine's connection is
 *   closed). `meta` comes after the rows, so the cut is flagged at the end as in a whole answer.
 *
 * The statement's slot and place are held until its output is done with (`done`): read to its
 * end, or closed. A client that has not read its result by the statement's deadline + the
 * grace (STOP_GRACE_MS) has its connection ended without the body's end, and so does one
 * whose result broke off (the engine failed, its host was lost): a client never takes a part
 * for the whole.
 */
import { ApiError } from '../errors.js';
import type { Reply, BodySource } from '../http/route.js';
import type { EngineOutput } from '../store/engine.js';
import { analyticsResultBytesHeld } from '../metrics/index.js';
import { MAX_RESULT_BYTES, MAX_ROWS, StreamShaper, shapeResult } from './result.js';

/** An output this long or shorter is answered whole (Content-Length); a longer one is passed on as it is read. */
export const STREAM_FROM_BYTES = 1024 * 1024;

const JSON_HEADERS = { 'Content-Type': 'application/json' };

export interface ResultOptions {
  /** The service's wall time until the engine answered: `elapsedMs` when the engine's own figure is not read. */
  wallMs: number;
  /** By when the result must have been taken by the client (ms since the epoch): the statement's deadline and its grace. */
  deadline: number;
  maxRows?: number;
  maxBytes?: number;
}

/**
 * Reads the start of `out` and answers: whole, or streamed. `done` settles once `out` is done
 * with (the caller holds the statement's slot and place until then). A rejection of `reply`
 * (an engine failure before the answer began, or the deadline) is the caller's to turn into
 * an error answer; `out` is closed then.
 */
export function resultReply(out: EngineOutput, opts: ResultOptions): { reply: Promise<Reply>; done: Promise<void> } {
  const body = new ResultBody(out, opts);
  return { reply: body.start(), done: body.done };
}

const LATE = "the result was not taken by the statement's deadline";

class ResultBody implements BodySource {
  readonly done: Promise<void>;
  abort?: (reason: string) => void;
  private settle!: () => void;
  /** The output is done with (read to its end, cut, or closed). */
  private finished = false;
  /** The body is done with: handed over whole, or abandoned. */
  private over = false;
  private late = false;
  private readonly shaper: StreamShaper;
  private readonly timer: NodeJS.Timeout;
  /** The output's first pieces, until the answer's kind is known. */
  private first = 0;
  /** The body's pieces not handed over yet. */
  private queue: Buffer[] = [];
  /** The piece handed over last: held until the socket took it (the next call). */
  private handed = 0;
  /** What this result counts in the gauge now. */
  private counted = 0;

  constructor(
    private readonly out: EngineOutput,
    private readonly opts: ResultOptions,
  ) {
    this.done = new Promise<void>((resolve) => (this.settle = resolve));
    this.shaper = new StreamShaper(opts.maxRows ?? MAX_ROWS, opts.maxBytes ?? MAX_RESULT_BYTES);
    this.timer = setTimeout(() => {
      this.late = true;
      // Streaming: the HTTP layer ends the connection (and cancels); before that, the output is closed.
      if (this.abort) this.abort(LATE);
      else this.finish();
    }, Math.max(0, opts.deadline - Date.now()));
  }

  async start(): Promise<Reply> {
    const first: Buffer[] = [];
    try {
      for (;;) {
        const c = await this.out.read();
        if (this.finished) throw new Error('the result was abandoned');
        if (c === null) {
          const whole = Buffer.concat(first, this.first);
          this.finish();
          this.over = true;
          this.first = 0;
          this.sync();
          return { status: 200, body: shapeResult(whole, this.shaper.maxRows, this.shaper.maxBytes, this.opts.wallMs).body, headers: JSON_HEADERS };
        }
        first.push(c);
        this.first += c.length;
        this.sync();
        if (this.first > STREAM_FROM_BYTES) break;
      }
      this.first = 0;
      for (const c of first) this.take(c);
      return { status: 200, headers: JSON_HEADERS, stream: this };
    } catch (err) {
      this.drop();
      if (this.late) throw new ApiError('QUERY_TIMEOUT', 'the query ran past the execution time limit and was stopped');
      throw err;
    }
  }

  /** The next piece of the body: what the shaper gave, else more of the output; the body's end once the output ended or a limit cut. */
  async next(): Promise<Buffer | null> {
    this.handed = 0;
    try {
      for (;;) {
        if (this.over) return null;
        if (this.late) throw new Error(LATE);
        if (this.queue.length > 0) {
          const piece = this.queue.length === 1 ? this.queue[0]! : Buffer.concat(this.queue);
          this.queue = [];
          this.handed = piece.length;
          return piece;
        }
        if (this.finished) {
          this.over = true;
          return null;
        }
        if (this.shaper.cut !== null) {
          this.finish();
          this.queue.push(this.shaper.end(this.opts.wallMs));
          continue;
        }
        const c = await this.out.read();
        if (this.over) return null;
        if (c === null) {
          this.finish();
          this.queue.push(this.shaper.end(this.opts.wallMs));
          continue;
        }
        this.take(c);
      }
    } catch (err) {
      this.drop();
      throw err;
    } finally {
      this.sync();
    }
  }

  cancel(): void {
    this.drop();
  }

  private take(c: Buffer): void {
    for (const p of this.shaper.push(c)) this.queue.push(p);
    this.sync();
  }

  /** The body is abandoned: the output closed, nothing held any more. */
  private drop(): void {
    this.finish();
    this.over = true;
    this.queue = [];
    this.handed = 0;
    this.first = 0;
    this.sync();
  }

  /** Done with the output: closed (the rest is never read), the deadline cleared, the slot's holder told. */
  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    clearTimeout(this.timer);
    this.out.close();
    this.settle();
  }

  /** Keeps the process-wide gauge in step with what this result holds. */
  private sync(): void {
    let n = this.over ? 0 : this.first + this.handed + (this.finished ? 0 : this.shaper.held);
    if (!this.over) for (const p of this.queue) n += p.length;
    if (n !== this.counted) analyticsResultBytesHeld.inc(n - this.counted);
    this.counted = n;
  }
}

/** An output already read whole (an engine without `open`), as one piece. */
export function wholeOutput(b: Buffer): EngineOutput {
  let given = false;
  return {
    read: async () => {
      if (given) return null;
      given = true;
      return b;
    },
    close: () => {
      given = true;
    },
  };
}
