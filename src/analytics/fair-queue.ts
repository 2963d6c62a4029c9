/**
 * The process-wide limit on analytics statements in the engine, shared so that no small set
 * of organizations can take every place:
 * - at most `width` statements run at once (the engine has that many analytics sessions,
 *   ANALYTICS_ENGINE_SESSIONS); a statement that waits here holds no place and no session;
 * - an organization (live and test together) that holds no place may take any free place;
 * - an organization that holds a place already may take another only while `reserve` =
 *   ⌊width / 2⌋ places stay free after it, so one organization alone holds at most
 *   width − reserve, and the reserve goes to organizations holding none, one place each;
 * - an organization the engine holds in quarantine (its statement ran past its deadline and
 *   the engine's work had to be ended, src/store/hosted/index.ts) holds at most one place;
 * - a freed place goes to the waiting organization that holds the fewest places (ties: in
 *   turn over organization + mode, each served in arrival order), so an organization holding
 *   none is served before every organization holding some.
 *
 * Invariant: running − (organizations holding a place) ≤ width − reserve − 1. A take by an
 * organization holding none adds one to both; any other take leaves running ≤ width −
 * reserve; a release lowers the left side or leaves it. So every place is busy only while at
 * least reserve + 1 organizations hold one (5 with the default 8 places): with fewer, a
 * statement of an organization holding none starts at once; with more, it is first in line
 * for the next place freed, behind only other organizations holding none that waited longer.
 *
 * A place is waited for at most `waitMs` (its own bound: the statement's execution time limit
 * starts when it has its place). Then the request answers 429 CONCURRENCY_LIMIT_EXCEEDED when
 * its organization holds places (its own running statements are what it waits for: retry
 * after one of them completes), else 408 QUERY_TIMEOUT (other organizations held every place).
 */
import { ApiError, concurrencyLimited } from '../errors.js';

interface Waiter {
  group: string;
  grant(release: () => void): void;
}

/** Places an organization may hold at most (the reserve applies on top); `Infinity` for no cap of its own. */
export type CapOf = (group: string) => number;

export class FairQueue {
  readonly reserve: number;
  private running = 0;
  private readonly perGroup = new Map<string, number>();
  /** Waiting requests per key; Map order is the turn order (a served key moves to the end). */
  private readonly waiting = new Map<string, Waiter[]>();

  constructor(
    readonly width: number,
    private readonly capOf: CapOf = () => Infinity,
  ) {
    this.reserve = Math.floor(width / 2);
  }

  /** How many statements run now, and how many wait. */
  get load(): { running: number; waiting: number } {
    let waiting = 0;
    for (const q of this.waiting.values()) waiting += q.length;
    return { running: this.running, waiting };
  }

  /** Places `group` holds now. */
  held(group: string): number {
    return this.perGroup.get(group) ?? 0;
  }

  /**
   * A place for a statement of `key` (organization + mode) in `group` (the organization).
   * Resolves with the function that gives it back (idempotent); rejects after `waitMs`
   * without a place (429 or 408, see above).
   */
  acquire(key: string, group: string, waitMs: number): Promise<() => void> {
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
        const s = Math.round(waitMs / 100) / 10;
        reject(
          this.held(group) > 0 ?
            concurrencyLimited()
          : new ApiError('QUERY_TIMEOUT', `the query waited ${s} s for a place in the analytics engine, which other organizations' statements held, and did not start; retry later`),
        );
      }, waitMs);
      const q = this.waiting.get(key);
      if (q) q.push(waiter);
      else this.waiting.set(key, [waiter]);
      // Served at once when it may take a place and no one waiting comes first (the order of
      // next()); a cap that rose since the last release (a quarantine ended) is seen here too.
      this.next();
    });
  }

  /** Whether `group` may take a place now. */
  private may(group: string): boolean {
    if (this.running >= this.width) return false;
    const h = this.held(group);
    if (h === 0) return true;
    return h < this.capOf(group) && this.running + 1 <= this.width - this.reserve;
  }

  private take(group: string): () => void {
    this.running++;
    this.perGroup.set(group, this.held(group) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.running--;
      const n = this.held(group) - 1;
      if (n <= 0) this.perGroup.delete(group);
      else this.perGroup.set(group, n);
      this.next();
    };
  }

  /** Hands free places to the waiting organizations: the one holding fewest first, in turn among equals. */
  private next(): void {
    while (this.running < this.width && this.waiting.size > 0) {
      let best: string | undefined;
      let bestHeld = Infinity;
      for (const [key, q] of this.waiting) {
        const g = q[0]!.group;
        const h = this.held(g);
        if (h < bestHeld && this.may(g)) {
          best = key;
          bestHeld = h;
          if (h === 0) break;
        }
      }
      if (best === undefined) return;
      const q = this.waiting.get(best)!;
      const w = q.shift()!;
      this.waiting.delete(best);
      if (q.length > 0) this.waiting.set(best, q);
      w.grant(this.take(w.group));
    }
  }
}
