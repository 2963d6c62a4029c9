/**
 * The compiler's share of the event loop, per organization. Compiling a caller's text runs on
 * the event loop (it is synchronous and takes up to tens of milliseconds for a 20 KB
 * pathological text); without a bound, one organization sending many such texts at once
 * held every other request of the process up for seconds. The gate runs compilations:
 *
 *  - one at a time and at most one per turn of the event loop: after each, the loop polls
 *    for I/O (other requests, inserts, answers) before the next one starts;
 *  - among the organizations that have texts waiting, the one with the most budget left
 *    first (in turn among equals), so an organization that has compiled little waits for
 *    the compilation in progress only, however many texts a flooding one has queued;
 *  - within a compile-time budget per organization (a bucket of COMPILE_BUDGET_MS,
 *    refilled at COMPILE_REFILL_MS_PER_S): an organization past it waits for the refill
 *    while the others go on, so no organization takes more than its share of the loop;
 *  - with at most MAX_WAITING texts of one organization waiting: one more is refused at
 *    once (429 CONCURRENCY_LIMIT_EXCEEDED), before any work.
 *
 * A text compiled before (accepted or refused) is answered from the compiler's cache without
 * passing the gate (src/analytics/compiler/index.ts). When nothing waits and no compilation
 * ran in this turn, a text is compiled at once, so a lone request pays nothing.
 */
import { ApiError } from '../errors.js';

/** Compile time an organization may spend at once (ms). */
export const COMPILE_BUDGET_MS = 1_000;
/** Compile time an organization earns per second (ms): a quarter of the event loop at most. */
export const COMPILE_REFILL_MS_PER_S = 250;
/** Texts of one organization waiting to be compiled; one more answers 429. */
export const MAX_WAITING = 32;

interface Job {
  work: () => unknown;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

interface Tenant {
  jobs: Job[];
  /** Budget left (ms); negative after a compilation that cost more than was left. */
  tokens: number;
  at: number;
}

export class CompileGate {
  private readonly tenants = new Map<string, Tenant>();
  /** Organizations with jobs waiting, in turn order. */
  private readonly ring: string[] = [];
  /** A compilation ran in this turn of the event loop (cleared by the next setImmediate). */
  private ranThisTurn = false;
  private scheduled = false;
  private refillTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly budgetMs = COMPILE_BUDGET_MS,
    private readonly refillMsPerS = COMPILE_REFILL_MS_PER_S,
    private readonly maxWaiting = MAX_WAITING,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Runs `work` (a compilation for `org`) when its turn comes; its result or error. */
  run<T>(org: string, work: () => T): Promise<T> {
    const t = this.tenant(org);
    this.refill(t);
    if (!this.ranThisTurn && this.ring.length === 0 && t.tokens > 0) {
      try {
        return Promise.resolve(this.measure(t, work));
      } catch (err) {
        return Promise.reject(err);
      }
    }
    if (t.jobs.length >= this.maxWaiting) {
      return Promise.reject(new ApiError('CONCURRENCY_LIMIT_EXCEEDED', `${this.maxWaiting} queries of this organization are already waiting to be compiled; send fewer at once`));
    }
    return new Promise<T>((resolve, reject) => {
      t.jobs.push({ work, resolve: resolve as (v: unknown) => void, reject });
      if (t.jobs.length === 1) this.ring.push(org);
      this.schedule();
    });
  }

  /** Organizations with texts waiting (for tests and metrics). */
  waiting(): number {
    return this.ring.reduce((n, org) => n + this.tenants.get(org)!.jobs.length, 0);
  }

  private tenant(org: string): Tenant {
    let t = this.tenants.get(org);
    if (!t) {
      t = { jobs: [], tokens: this.budgetMs, at: this.now() };
      this.tenants.set(org, t);
      // Forget organizations that are idle with their full budget back (the map stays small).
      if (this.tenants.size > 10_000) {
        for (const [k, v] of this.tenants) {
          this.refill(v);
          if (v.jobs.length === 0 && v.tokens >= this.budgetMs) this.tenants.delete(k);
        }
      }
    }
    return t;
  }

  private refill(t: Tenant): void {
    const now = this.now();
    t.tokens = Math.min(this.budgetMs, t.tokens + ((now - t.at) / 1000) * this.refillMsPerS);
    t.at = now;
  }

  private measure<T>(t: Tenant, work: () => T): T {
    this.ranThisTurn = true;
    this.schedule();
    const start = this.now();
    try {
      return work();
    } finally {
      const end = this.now();
      this.refill(t);
      t.tokens -= end - start;
    }
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.ranThisTurn = false;
      this.step();
    });
  }

  /**
   * One compilation: of the waiting organization with the most budget left (the first in
   * turn among equals), so an organization that has compiled little goes before one that has
   * compiled much; the others keep their place.
   */
  private step(): void {
    if (this.ring.length === 0) return;
    let best = -1;
    for (let i = 0; i < this.ring.length; i++) {
      const t = this.tenants.get(this.ring[i]!)!;
      this.refill(t);
      if (t.tokens > 0 && (best < 0 || t.tokens > this.tenants.get(this.ring[best]!)!.tokens)) best = i;
    }
    if (best >= 0) {
      const org = this.ring[best]!;
      const t = this.tenants.get(org)!;
      const job = t.jobs.shift()!;
      this.ring.splice(best, 1);
      if (t.jobs.length > 0) this.ring.push(org);
      try {
        job.resolve(this.measure(t, job.work));
      } catch (err) {
        job.reject(err);
      }
      return;
    }
    // Every waiting organization is past its budget: wait for the first to earn some back.
    if (this.refillTimer) return;
    const deficit = Math.min(...this.ring.map((org) => -this.tenants.get(org)!.tokens));
    const ms = Math.max(1, Math.ceil(((deficit + 1) / this.refillMsPerS) * 1000));
    this.refillTimer = setTimeout(() => {
      this.refillTimer = undefined;
      this.schedule();
    }, ms);
  }
}
