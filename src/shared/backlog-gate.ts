/**
 * Back-pressure from the pipeline to the ingress of the same process (ROLE=all).
 *
 * The two share the process and the machine's cores. A producer that sends faster than the
 * pipeline stores would otherwise be answered at the ingress's own pace: the stream's backlog
 * (and every signal's freshness) grows without bound until the stream is full, and each
 * batch accepted beyond what the pipeline keeps up with takes CPU the pipeline needs. So while
 * the pipeline of this process is more than `limit` batches behind (in the stream and not yet
 * stored), the ingress holds each 202 — the batch is durable already; only the answer waits —
 * until the pipeline is back under the limit, or at most the hold time. A producer with a
 * bounded number of requests in flight (every SDK, every bench producer) then sends at the
 * rate the whole service sustains, and the backlog stays near the limit. Nothing is refused:
 * the status, the body and the rate limiter's 429 contract are unchanged (spec 7.2).
 *
 * The billing evaluator of the same process reports too: while the oldest billable message it
 * holds and has not committed was received more than `billingLagMs` ago (over its partitions
 * that are moving: a stopped one is left out), answers are held the same way, so
 * producers send at the rate billing keeps up with rather than let billing's lag grow with the
 * length of a burst (a credit cap enforced late is a cap overrun).
 *
 * An ingress without a pipeline in its process (ROLE=ingress) has no gate: nothing reports
 * to it, so it never holds.
 */
/** A report older than this no longer holds answers (ms). */
export const REPORT_FRESH_MS = 2_000;

export class BacklogGate {
  private pending = 0;
  private reportedAt = 0;
  private billingLag = 0;
  private billingReportedAt = 0;
  private readonly waiters = new Set<() => void>();

  /** A report older than this no longer holds answers (ms). */
  private readonly freshMs: number;
  /** Billing lag (ms) beyond which answers are held (0: never). */
  readonly billingLagMs: number;

  constructor(
    /** Batches behind beyond which answers are held (0: never). */
    readonly limit: number,
    /** The longest one answer is held (ms). */
    readonly holdMaxMs: number,
    opts: { freshMs?: number; billingLagMs?: number } = {},
  ) {
    this.freshMs = opts.freshMs ?? REPORT_FRESH_MS;
    this.billingLagMs = opts.billingLagMs ?? 0;
  }

  /** The pipeline's count of batches behind: in the stream not yet taken, and taken not yet stored. */
  report(batchesBehind: number): void {
    this.pending = batchesBehind;
    this.reportedAt = performance.now();
    this.releaseIfCaughtUp();
  }

  /** The billing evaluator's lag: how long ago it received the oldest billable message it has not committed (0: none waiting). */
  reportBillingLag(ms: number): void {
    this.billingLag = ms;
    this.billingReportedAt = performance.now();
    this.releaseIfCaughtUp();
  }

  /** After a report: every held answer goes once neither the pipeline nor billing is behind. */
  private releaseIfCaughtUp(): void {
    if (!this.behind() && this.waiters.size > 0) this.releaseAll();
  }

  /** Answers being held now. */
  get holding(): number {
    return this.waiters.size;
  }

  /** Behind as the pipeline or billing last reported, if that was recent (a pipeline far behind reports at every delivery and every flush; billing every 100 ms and at every commit). */
  behind(): boolean {
    if (this.holdMaxMs <= 0) return false;
    const now = performance.now();
    const pipeline = this.limit > 0 && this.pending > this.limit && now - this.reportedAt <= this.freshMs;
    const billing = this.billingLagMs > 0 && this.billingLag > this.billingLagMs && now - this.billingReportedAt <= this.freshMs;
    return pipeline || billing;
  }

  /** Resolves at once when the pipeline and billing keep up; otherwise once they are back under their limits, or after the hold time. True when it held. */
  async pass(): Promise<boolean> {
    if (!this.behind()) return false;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, this.holdMaxMs);
      this.waiters.add(done);
    });
    return true;
  }

  /** Releases every held answer (the process stops). */
  releaseAll(): void {
    for (const release of [...this.waiters]) release();
  }
}
