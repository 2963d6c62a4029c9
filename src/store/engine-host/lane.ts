/**
 * A lane: a fixed set of chdb sessions on the host's data directory and a FIFO queue in
 * front of them. A session runs one statement at a time; sessions of one process run
 * concurrently (each is its own connection to the engine). Lanes share nothing but the
 * data, so a statement in one lane never waits for a session of another.
 *
 * After a statement fails on a session, the session first runs a throw-away statement that
 * swallows the partial output chdb keeps from the failed statement (it would otherwise be
 * prepended to the next statement's output), before anyone else's statement runs on it.
 * (A stream that failed or was cancelled leaves nothing behind, as test/api/engine-host-stream
 * checks; the throw-away statement runs after its failure all the same.)
 *
 * A session is the call's until the call's promise settles: a streamed statement (stream.ts)
 * holds it until its stream has ended or was cancelled.
 */
const DRAIN_SQL = "SELECT 'drained'";

/** What a lane needs of a session: chdb's Session, or an analytics session in a thread of its own (remote-session.ts). */
export interface LaneSession {
  queryAsync(sql: string, opts: { format: string }): Promise<unknown>;
}

interface Waiter<S> {
  start(session: S): void;
}

export class Lane<S extends LaneSession> {
  private readonly idle: S[];
  private readonly queue: Waiter<S>[] = [];

  constructor(
    readonly name: string,
    readonly sessions: readonly S[],
  ) {
    this.idle = [...sessions];
  }

  /** Statements running or waiting in this lane now. */
  get busy(): number {
    return this.sessions.length - this.idle.length + this.queue.length;
  }

  /**
   * Runs `call` on a free session of this lane (waiting for one in order of arrival), then
   * `cleanup` (if any) on the same session before anyone else's statement runs on it.
   */
  run<T>(call: (s: S) => Promise<T>, cleanup?: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const after = (s: S, first: string | null): void => {
        const steps = [first, cleanup].filter((x): x is string => !!x);
        void steps
          .reduce<Promise<unknown>>((p, sql) => p.then(() => s.queryAsync(sql, { format: 'TSVRaw' })).catch(() => undefined), Promise.resolve())
          .then(() => this.free(s));
      };
      const waiter: Waiter<S> = {
        start: (s) => {
          call(s).then(
            (v) => {
              if (cleanup) after(s, null);
              else this.free(s);
              resolve(v);
            },
            (err: unknown) => {
              after(s, DRAIN_SQL);
              reject(err);
            },
          );
        },
      };
      const s = this.idle.pop();
      if (s) waiter.start(s);
      else this.queue.push(waiter);
    });
  }

  private free(s: S): void {
    const next = this.queue.shift();
    if (next) next.start(s);
    else this.idle.push(s);
  }
}
