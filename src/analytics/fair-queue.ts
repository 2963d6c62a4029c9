/**
 * The process-wide limit on analytics statements in the engine, shared fairly:
 * - at most `width` statements run at once (the embedded engine host has that many
 *   analytics sessions, ANALYTICS_ENGINE_SESSIONS);
 * - one organization (live and test together) holds at most `share` = ⌊width / 2⌋ of them,
 *   so one organization alone can never take every place: another organization's statement
 *   starts at once while fewer than two organizations are at their share;
 * - when all places are busy, the next free one goes to the waiting organizations in turn
 *   (round robin over organization + mode, each served in arrival order), so a backlog can
 *   delay another organization's query by at most one statement ahead of it, never by the
 *   backlog.
 *
 * A place is waited for only until the request's deadline (the wait counts against the
 * query's time limit); then the request answers 408.
 */
import { ApiError } from '../errors.js';

interface Waiter {
  group: string;
  grant(release: () => void): void;
}

export class FairQueue {
  readonly share: number;
  private running = 0;
  private readonly perGroup = new Map<string, number>();
  /** Waiting requests per key; Map order is the round-robin order (a served key moves to the end). */
  private readonly waiting = new Map<string, Waiter[]>();

  constructor(readonly width: number) {
    this.share = Math.max(1, Math.floor(width / 2));
  }

  /** How many statements run now, and how many wait. */
  get load(): { running: number; waiting: number } {
    let waiting = 0;
    for (const q of this.waiting.values()) waiting += q.length;
    return { running: this.running, waiting };
  }

  /**
   * A place for a statement of `key` (organization + mode) in `group` (the organization).
   * Resolves with the function that gives it back (idempotent); rejects with 408 at the deadline.
   */
  acquire(key: string, group: string, deadlineMs: number): Promise<() => void> {
    if (!this.waiting.has(key) && this.free(group)) return Promise.resolve(this.take(group));
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        group,
        grant: (release) => {
          clearTimeout(timer);
          resolve(release);
        },
      };
      const timer = setTimeout(() => {
        const q = this.waiting.get(key);
        const i = q ? q.indexOf(waiter) : -1;
        if (!q || i < 0) return;
        q.splice(i, 1);
        if (q.length === 0) this.waiting.delete(key);
        reject(new ApiError('QUERY_TIMEOUT', 'the query waited for the analytics engine past its execution time limit'));
      }, Math.max(0, deadlineMs - Date.now()));
      const q = this.waiting.get(key);
      if (q) q.push(waiter);
      else this.waiting.set(key, [waiter]);
    });
  }

  private free(group: string): boolean {
    return this.running < this.width && (this.perGroup.get(group) ?? 0) < this.share;
  }

  private take(group: string): () => void {
    this.running++;
    this.perGroup.set(group, (this.perGroup.get(group) ?? 0) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.running--;
      const n = (this.perGroup.get(group) ?? 1) - 1;
      if (n === 0) this.perGroup.delete(group);
      else this.perGroup.set(group, n);
      this.next();
    };
  }

  /** Hands free places to the waiting keys in turn, skipping organizations at their share. */
  private next(): void {
    let progress = true;
    while (progress && this.running < this.width && this.waiting.size > 0) {
      progress = false;
      for (const [key, q] of [...this.waiting]) {
        if (this.running >= this.width) break;
        if (!this.free(q[0]!.group)) continue;
        const w = q.shift()!;
        this.waiting.delete(key);
        if (q.length > 0) this.waiting.set(key, q);
        w.grant(this.take(w.group));
        progress = true;
        break;
      }
    }
  }
}
