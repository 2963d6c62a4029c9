/**
 * Test-only fault hook of the billing evaluator, so that crash tests act at a known point of
 * the commit order (consumer.ts) instead of after a guessed sleep. Off unless
 * BILLING_FAULT_POINT is set (docs/operations.md "Configuration"; parsed in src/config.ts).
 *
 * The first evaluation of this process that reaches the named point *with at least one event
 * to publish* (at `before-states`, where its events are not known yet: any priced group) logs
 * `billing fault point reached` (warn, with point, seq, orgId, mode, events) and then:
 *   - BILLING_FAULT_ACTION=kill: SIGKILLs its own process there (a real crash at a precise
 *     point: no handler runs, nothing is flushed);
 *   - BILLING_FAULT_ACTION=pause: waits BILLING_FAULT_PAUSE_MS, then goes on (a test cuts
 *     NATS during the pause, for example);
 *   - BILLING_FAULT_ACTION=stall: blocks the process's main thread for BILLING_FAULT_PAUSE_MS,
 *     or until the file BILLING_FAULT_RELEASE_FILE exists (looked at every 50 ms), then goes
 *     on: what a long garbage collection or a starved CPU does to a loaded process — no
 *     ack-wait renewal, no heartbeat, nothing read or written meanwhile, so its held messages
 *     go to another process. The file lets a test end the stall once it has seen what it
 *     waits for, instead of guessing a length.
 * It acts once per process. Points, in commit order:
 *   before-states       the group's pin is written (or a pending pin found); the customers'
 *                       states and cap periods are not read yet;
 *   after-pin           the batch's configuration is pinned and evaluated; nothing else is written;
 *   after-events        rows and events are published; no period key or customer state
 *                       written (armed, it orders the two: the evaluator otherwise does
 *                       both at once);
 *   after-states        period keys and customer states are written; no row or event is
 *                       published (armed, the other order);
 *   before-state-write  rows, events, period keys and customer states are all written; the
 *                       group is not committed (its pin not marked done);
 *   after-state-write   the group is committed (its pin marked done); its messages are not acked.
 */
import { existsSync } from 'node:fs';
import type { BillingFaultPoint } from '../../config.js';
import { billingLog as log } from '../../log.js';
import type { Mode } from '../../shared/mode.js';

export interface FaultContext {
  /** The group's first stream sequence. */
  seq: number;
  /** Its messages. */
  messages?: number;
  orgId: string;
  mode: Mode;
  /** The events it publishes; absent where they are not known yet (before-states). */
  events?: number;
}

export class FaultHook {
  private fired = false;

  constructor(
    private readonly point: BillingFaultPoint | null,
    private readonly action: 'kill' | 'pause' | 'stall',
    private readonly pauseMs: number,
    /** With `stall`: a file whose existence ends the stall early (null: none). */
    private readonly releaseFile: string | null = null,
    /** Where the "reached" line goes; written synchronously by default (see `at`). */
    private readonly report: (fields: Record<string, unknown>) => void = (fields) => log.now('warn', 'billing fault point reached', fields),
  ) {}

  static readonly off = new FaultHook(null, 'kill', 0, null);

  /** Whether the hook may act at `point` (the evaluator orders its reads so that it can, there). */
  armed(point: BillingFaultPoint): boolean {
    return this.point === point && !this.fired;
  }

  async at(point: BillingFaultPoint, ctx: FaultContext): Promise<void> {
    if (this.point !== point || this.fired || ctx.events === 0) return;
    this.fired = true;
    // Written synchronously: with `kill` the process dies right after (tests read this line).
    this.report({ point, action: this.action, ...ctx });
    if (this.action === 'kill') {
      process.kill(process.pid, 'SIGKILL');
      await new Promise<never>(() => undefined);
    }
    if (this.action === 'stall') stall(this.pauseMs, this.releaseFile);
    else await new Promise((r) => setTimeout(r, this.pauseMs));
  }
}

/** Blocks this thread for `ms`, or until `releaseFile` exists. */
function stall(ms: number, releaseFile: string | null): void {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const end = Date.now() + ms;
  for (let left = ms; left > 0; left = end - Date.now()) {
    if (releaseFile !== null && existsSync(releaseFile)) return;
    Atomics.wait(cell, 0, 0, Math.min(50, left));
  }
}
