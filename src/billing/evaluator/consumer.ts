/**
 * The billing evaluator: reads the billable stream one message at a time (consumer
 * `billing`, max_ack_pending 1, so exactly one evaluation runs at a time across every
 * pipeline process) and applies each batch to its organization's running state.
 *
 * Keys in the state bucket `<P>_billing_state`:
 *   st.<org>.<mode>   running state: lastSeq (the commit point), pool consumption, usage;
 *   cp.<org>.<mode>.<cap hash>.<start ms>.<end ms>   one per cap and period ever spent in:
 *                     {seq, before, after}: the stream sequence of the batch that last
 *                     changed it and the period's total ({used, reached}) before and after
 *                     that batch. Only the periods a batch touches are read, any age.
 *   pin               the batch in flight: {seq, orgId, mode, revisions, config}: the
 *                     configuration of the customers the batch names (and the plans they
 *                     use) it is evaluated against, with the KV revision of each document
 *                     read (the configuration bucket keeps one revision, so the pin holds the
 *                     documents themselves). Its size follows the batch, not the organization.
 *
 * Commit order for the message of stream sequence S, and why a crash anywhere repeats
 * nothing, loses nothing and bills the same:
 *  1. Read the state. `lastSeq` ≥ S: S was committed before a crash that lost the ack: ack.
 *  2. Pin the configuration (the pin is read together with the state in 1). The pin names S:
 *     a replay, use its documents. It names a later sequence: S was acked by another holder (a
 *     later message is only delivered after S's ack): ack. Otherwise read the documents of the
 *     customers S's signals name (service ids or externalIds, resolved through their claim
 *     keys; store.forBatch: one or two gets per distinct customer, one per plan they use) and
 *     write the pin (compare-and-set). From here on S is evaluated against these documents
 *     only, whatever changes in the configuration before its replay: rows and events depend
 *     only on the batch and those revisions (evaluation never looks at a customer a batch
 *     does not name). With no order line attribute in them nothing is priced: ack.
 *  3. List the cap periods S touches (capPeriods, in the worker) and read their keys. A
 *     period's total before S is `before` when the key's seq is S (S wrote it, then crashed
 *     before its commit) and `after` otherwise (the key's batch committed: batches commit in
 *     stream order); no key: zero (or what a state of the former layout kept for it).
 *  4. Evaluate in a piscina worker (evaluate.ts): pure and deterministic, so a replay, from
 *     the same state, period totals and pinned document, computes the same rows and events.
 *  5. Publish the cost, credit-consumption and unpriced rows to `<P>_BILLING_ROWS` with Nats-Msg-Id =
 *     rows-<batch id> (stored once); the rows inserter (rows.ts) stores them in bulk,
 *     dropping rows already in the tables on a redelivery.
 *  6. Publish the events with Nats-Msg-Id = event id, waiting for the stream's ack: an event
 *     published by an earlier attempt is stored only once.
 *  7. Write the touched period keys {seq: S, before, after}, each with compare-and-set on the
 *     revision read in 3 (create when absent): a holder that lost S to an ack-wait expiry
 *     cannot overwrite a later batch's totals; it fails and finds S committed.
 *  8. Write the new state with compare-and-set on the revision read in 1, lastSeq = S. This
 *     is the commit point. A failed compare-and-set means another holder applied S in
 *     between (an ack-wait expiry): the retry finds it recorded and acks.
 *  9. Ack.
 * A crash before 8 replays S from the same state, pin and period totals (step 3's rule
 * undoes S's own period writes): the same rows (deduplicated) and events (same ids). Each
 * period's `reached` flag is kept in its key for ever, so a cap fires at most once per period
 * even after the event stream's duplicate window. A failure is retried in place, holding the
 * message (see loop), so no later batch overtakes it; after a crash, JetStream redelivers the
 * held message before any later one. While a message is held its ack wait is renewed
 * (`working`), so only a dead holder's message is redelivered (BILLING_ACK_WAIT_MS).
 * Balances and period totals live in JetStream KV on disk, never only in Redis.
 * Test-only fault points along this order: fault.ts.
 */
import type { ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import type { KV, KvEntry } from '@nats-io/kv';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { PULL_EXPIRES_MS, type Nats } from '../../bus/connection.js';
import { publishDurable } from '../../bus/publish.js';
import { billingLog as log } from '../../log.js';
import { billingEvents, billingLag } from '../../metrics/index.js';
import { H_BATCH, H_MODE, H_ORG, type BillableLine } from '../../bus/batch.js';
import { busEvent, publishEvent } from '../../bus/events.js';
import type { BillingConfig } from '../model.js';
import { emptyState, startingTotal, type BillableSignal, type BillingState, type CapPeriodRef, type CapPeriodsInput, type EvaluationInput, type EvaluationOutput, type PeriodEntry, type PeriodTotal } from './evaluate.js';
import { FaultHook, type FaultContext } from './fault.js';
import type { Mode } from '../../shared/mode.js';
import { workerTask, type WorkerPool } from '../../shared/worker-pool.js';

const WORKER_FILE = new URL('../../../workers/billing.js', import.meta.url).href;
const evaluateTask = workerTask<EvaluationInput, EvaluationOutput>(WORKER_FILE);
const capPeriodsTask = workerTask<CapPeriodsInput, CapPeriodRef[]>(WORKER_FILE, 'capPeriods');

export interface ConfigSource {
  /** The configuration restricted to the customers `refs` name (ids or externalIds) and the plans they use. */
  forBatch(orgId: string, mode: Mode, refs: Iterable<string>): Promise<{ config: BillingConfig; revisions: Record<string, number> }>;
}

/** The configuration a batch is evaluated against, from its first evaluation on (key `pin`). */
export interface Pin {
  seq: number;
  orgId: string;
  mode: Mode;
  /** KV key → revision of each configuration document in `config` (a pin of the former layout has `configRevision`). */
  revisions?: Record<string, number>;
  configRevision?: number;
  config: BillingConfig;
}

export const PIN_KEY = 'pin';

export interface EvaluatorOptions {
  publishTimeoutMs: number;
  /** The billing consumer's ack wait: a held message's is renewed at a third of it. */
  ackWaitMs: number;
  fault?: FaultHook;
}

export interface EvaluatorStats {
  messages: number;
  events: number;
  costRows: number;
}

export class BillingEvaluator {
  private messages: ConsumerMessages | null = null;
  private loopDone: Promise<void> | null = null;
  readonly stats: EvaluatorStats = { messages: 0, events: 0, costRows: 0 };

  constructor(
    private readonly nats: Nats,
    private readonly configs: ConfigSource,
    private readonly state: KV,
    /** The process's worker pool (main.ts), shared with the pipeline. */
    private readonly pool: WorkerPool,
    private readonly opts: EvaluatorOptions,
  ) {}

  private get fault(): FaultHook {
    return this.opts.fault ?? FaultHook.off;
  }

  async start(): Promise<void> {
    const { billable } = this.nats.topology;
    const consumer = await this.nats.js.consumers.get(billable.stream, billable.consumer);
    this.messages = await consumer.consume({ max_messages: 1, expires: PULL_EXPIRES_MS });
    this.loopDone = this.loop(this.messages);
  }

  /**
   * A failed evaluation is retried in place, holding the message (never nakked): a nak would
   * let the next message of the stream overtake it, and the state would then record a later
   * sequence than a batch not yet applied. Billing waits rather than goes out of order.
   */
  private async loop(messages: ConsumerMessages): Promise<void> {
    for await (const m of messages) {
      // Held, the message must not be redelivered to another process: renew its ack wait.
      const beat = setInterval(() => {
        try {
          m.working();
        } catch {
          /* disconnected: the retry below renews it again */
        }
      }, Math.max(100, Math.floor(this.opts.ackWaitMs / 3)));
      try {
        for (let attempt = 1; ; attempt++) {
          try {
            await this.handle(m);
            break;
          } catch (err) {
            if (this.stopping) return;
            log.error('billing evaluation failed; retrying in place', { err, seq: m.seq, attempt });
            await new Promise((r) => setTimeout(r, Math.min(10_000, 200 * 2 ** Math.min(6, attempt))));
          }
        }
      } finally {
        clearInterval(beat);
      }
    }
  }

  private stopping = false;

  private async handle(m: JsMsg): Promise<void> {
    const orgId = m.headers?.get(H_ORG) ?? '';
    const mode = m.headers?.get(H_MODE);
    const batchId = m.headers?.get(H_BATCH) ?? '';
    if (!orgId || (mode !== 'live' && mode !== 'test') || !batchId) throw new Error(`billable message ${m.seq} lacks its headers`);

    // 1. The state, and whether S is already committed.
    const stateKey = `st.${orgId}.${mode}`;
    // The pin is read with it (step 2 needs it; the two reads are independent).
    const [entry, pinEntry] = await Promise.all([this.state.get(stateKey), this.state.get(PIN_KEY)]);
    const state: BillingState = entry && entry.length > 0 ? (entry.json() as BillingState) : emptyState();
    const revision = entry && entry.length > 0 ? entry.revision : 0;
    if (state.lastSeq >= m.seq) {
      m.ack();
      return;
    }

    // 2. The configuration S is evaluated against.
    const signals = parseBillable(m.data);
    const pinned = await this.pin(m.seq, orgId, mode, pinEntry, signals);
    if (pinned === 'acked-elsewhere') {
      log.warn('billable message already finished by another holder', { seq: m.seq });
      m.ack();
      return;
    }
    const { config } = pinned;
    if (Object.keys(config.attributes).length === 0) {
      // Nothing is priced for this organization and mode (in the pinned revision): nothing to apply.
      m.ack();
      this.stats.messages++;
      observeEvaluated(m);
      return;
    }
    const evaluatedAt = Math.floor(m.info.timestampNanos / 1e6);

    // 3. The totals of the cap periods S touches.
    const refs: CapPeriodRef[] =
      Object.keys(config.caps).length === 0 ? [] : await capPeriodsTask(this.pool, { orgId, mode, config, signals });
    const entries = await Promise.all(refs.map((r) => this.state.get(r.key)));
    const periods: Record<string, PeriodTotal> = {};
    refs.forEach((r, i) => {
      const e = entries[i];
      const stored = e && e.operation === 'PUT' && e.length > 0 ? (e.json() as PeriodEntry) : null;
      periods[r.key] = startingTotal(stored, m.seq, state.caps?.[r.capKey]?.[r.start]);
    });

    // 4. Evaluate.
    const input: EvaluationInput = { orgId, mode, config, state, signals, evaluatedAt, periods };
    const out = await evaluateTask(this.pool, input);
    const fault: FaultContext = { seq: m.seq, orgId, mode, events: out.events.length };
    await this.fault.at('after-pin', fault);

    // 5. Rows. They go to a stream (stored once per batch id) and are inserted in bulk by the
    // rows inserter (rows.ts): the engine's insert is the slow part, and it is off this
    // one-at-a-time path. Durable here, before the commit point.
    const { costs, consumption, unpriced } = out;
    if (costs.length > 0 || consumption.length > 0 || unpriced.length > 0) {
      const h = natsHeaders();
      h.set(H_ORG, orgId);
      h.set(H_MODE, mode);
      await publishDurable(this.nats.nc, this.nats.topology.billingRows.subject(orgId), Buffer.from(JSON.stringify({ costs, consumption, unpriced })), h, `rows-${batchId}`, this.opts.publishTimeoutMs);
    }

    // 6. Events.
    await Promise.all(out.events.map((e) => publishEvent(this.nats, busEvent(e, orgId, mode, new Date(evaluatedAt)), this.opts.publishTimeoutMs)));
    await this.fault.at('after-events', fault);

    // 7. Period keys, each compare-and-set on what step 3 read.
    await Promise.all(
      refs.map((r, i) => {
        const value: PeriodEntry = { seq: m.seq, before: periods[r.key]!, after: out.periods[r.key] ?? periods[r.key]! };
        const e = entries[i];
        return e ? this.state.update(r.key, JSON.stringify(value), e.revision) : this.state.create(r.key, JSON.stringify(value));
      }),
    );
    await this.fault.at('before-state-write', fault);

    // 8. The commit point.
    const next = JSON.stringify({ ...out.state, lastSeq: m.seq });
    if (revision === 0) await this.state.create(stateKey, next);
    else await this.state.update(stateKey, next, revision);
    await this.fault.at('after-state-write', fault);

    // 9.
    m.ack();
    this.stats.messages++;
    observeEvaluated(m);
    for (const e of out.events) billingEvents.inc({ event: e.event, source: 'evaluator' });
    this.stats.events += out.events.length;
    this.stats.costRows += costs.length;
  }

  /**
   * Step 2: the pinned configuration of S, written now when S has none yet. One key serves
   * every batch: one message is in flight at a time, and a later one is only delivered after
   * S is acked, i.e. after S no longer needs its pin (so it is overwritten, never deleted:
   * no tombstone per batch).
   */
  private async pin(seq: number, orgId: string, mode: Mode, e: KvEntry | null, signals: BillableSignal[]): Promise<Pin | 'acked-elsewhere'> {
    const current = e && e.operation === 'PUT' && e.length > 0 ? (e.json() as Pin) : null;
    if (current && current.seq === seq) return current;
    if (current && current.seq > seq) return 'acked-elsewhere';
    // Pinned even when nothing is priced (a small document): a replay after a lost ack must
    // not bill a batch that its first evaluation did not.
    const { config, revisions } = await this.configs.forBatch(orgId, mode, signals.map((s) => s.customerId));
    const pin: Pin = { seq, orgId, mode, revisions, config };
    const bytes = JSON.stringify(pin);
    if (e) await this.state.update(PIN_KEY, bytes, e.revision);
    else await this.state.create(PIN_KEY, bytes);
    return pin;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.messages?.stop();
    await this.loopDone;
  }
}

/** Billing lag: from the batch stored (its billable message's stream time) to its evaluation. */
function observeEvaluated(m: JsMsg): void {
  billingLag.observe(Math.max(0, Date.now() - m.info.timestampNanos / 1e6) / 1000);
}

export function parseBillable(data: Uint8Array): BillableSignal[] {
  const text = Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8');
  const out: BillableSignal[] = [];
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const b = JSON.parse(line) as BillableLine;
    out.push({ id: b.i, eventName: b.e, customerId: b.c, unitId: b.u, ts: b.t, data: b.d, ...(b.x !== undefined ? { exact: b.x } : {}) });
  }
  return out;
}
