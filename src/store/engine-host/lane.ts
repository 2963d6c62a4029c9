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
import { Session } from 'chdb';

const DRAIN_SQL = "SELECT 'drained'";

interface Waiter {
  start(session: Session): void;
}

export class Lane {
  private readonly idle: Session[];
  private readonly queue: Waiter[] = [];

  constructor(
    readonly name: string,
    readonly sessions: readonly Session[],
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
  run<T>(call: (s: Session) => Promise<T>, cleanup?: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const after = (s: Session, first: string | null): void => {
        const steps = [first, cleanup].filter((x): x is string => !!x);
        void steps
          .reduce<Promise<unknown>>((p, sql) => p.then(() => s.queryAsync(sql, { format: 'TSVRaw' })).catch(() => undefined), Promise.resolve())
          .then(() => this.free(s));
      };
      const waiter: Waiter = {
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

  private free(s: Session): void {
    const next = this.queue.shift();
    if (next) next.start(s);
    else this.idle.push(s);
  }
}
