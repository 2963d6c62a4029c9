/**
 * The process-wide limit on analytics statements in the engine, shared fairly: at most
 * `width` run at once (the embedded engine host has that many analytics sessions), and when
 * all are busy the next free place goes to the organizations in turn (round robin over
 * organization + mode, each served in arrival order), so one organization's backlog can
 * delay another's query by at most one statement per busy place, never by its whole backlog.
 *
 * A place is waited for only until the request's deadline (the wait counts against the
 * query's time limit); then the request answers 408.
 */
import { ApiError } from '../errors.js';

interface Waiter {
  grant(release: () => void): void;
}

export class FairQueue {
  private running = 0;
  /** Waiting requests per key; Map order is the round-robin order (a served key moves to the end). */
  private readonly waiting = new Map<string, Waiter[]>();

  constructor(readonly width: number) {}

  /** How many statements run now, and how many wait (for tests and logs). */
  get load(): { running: number; waiting: number } {
    let waiting = 0;
    for (const q of this.waiting.values()) waiting += q.length;
    return { running: this.running, waiting };
  }

  /** Resolves with the function that gives the place back (idempotent); rejects with 408 at the deadline. */
  acquire(key: string, deadlineMs: number): Promise<() => void> {
    if (this.running < this.width && this.waiting.size === 0) {
      this.running++;
      return Promise.resolve(this.releaser());
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        grant: (release) => {
          clearTimeout(timer);
          resolve(release);
        },
      };
      const timer = setTimeout(() => {
        const q = this.waiting.get(key);
        if (!q) return;
        const i = q.indexOf(waiter);
        if (i < 0) return;
        q.splice(i, 1);
        if (q.length === 0) this.waiting.delete(key);
        reject(new ApiError('QUERY_TIMEOUT', 'the query waited for the analytics engine past its execution time limit'));
      }, Math.max(0, deadlineMs - Date.now()));
      const q = this.waiting.get(key);
      if (q) q.push(waiter);
      else this.waiting.set(key, [waiter]);
    });
  }

  private releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.running--;
      this.next();
    };
  }

  private next(): void {
    while (this.running < this.width && this.waiting.size > 0) {
      const [key, q] = this.waiting.entries().next().value as [string, Waiter[]];
      const w = q.shift()!;
      this.waiting.delete(key);
      if (q.length > 0) this.waiting.set(key, q);
      this.running++;
      w.grant(this.releaser());
    }
  }
}
