/**
 * Test-only fault hook of the billing evaluator, so that crash tests act at a known point of
 * the commit order (consumer.ts) instead of after a guessed sleep. Off unless
 * BILLING_FAULT_POINT is set (README "Configuration"; parsed in src/config.ts).
 *
 * The first evaluation of this process that reaches the named point *with at least one event
 * to publish* logs `billing fault point reached` (warn, with point, seq, orgId, mode, events)
 * and then:
 *   - BILLING_FAULT_ACTION=kill: SIGKILLs its own process there (a real crash at a precise
 *     point: no handler runs, nothing is flushed);
 *   - BILLING_FAULT_ACTION=pause: waits BILLING_FAULT_PAUSE_MS, then goes on (a test cuts
 *     NATS during the pause, for example).
 * It acts once per process. Points, in commit order:
 *   after-pin           the batch's configuration is pinned; nothing else is written;
 *   after-events        rows and events are published; no period key or state written;
 *   before-state-write  period keys are written too; the state is not;
 *   after-state-write   the state is committed; the message is not acked.
 */
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
  events: number;
}

export class FaultHook {
  private fired = false;

  constructor(
    private readonly point: BillingFaultPoint | null,
    private readonly action: 'kill' | 'pause',
    private readonly pauseMs: number,
    /** Where the "reached" line goes; written synchronously by default (see `at`). */
    private readonly report: (fields: Record<string, unknown>) => void = (fields) => log.now('warn', 'billing fault point reached', fields),
  ) {}

  static readonly off = new FaultHook(null, 'kill', 0);

  async at(point: BillingFaultPoint, ctx: FaultContext): Promise<void> {
    if (this.point !== point || this.fired || ctx.events === 0) return;
    this.fired = true;
    // Written synchronously: with `kill` the process dies right after (tests read this line).
    this.report({ point, action: this.action, ...ctx });
    if (this.action === 'kill') {
      process.kill(process.pid, 'SIGKILL');
      await new Promise<never>(() => undefined);
    }
    await new Promise((r) => setTimeout(r, this.pauseMs));
  }
}
