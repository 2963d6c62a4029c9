/**
 * The billing evaluator. Billable messages are split by partition (partition.ts: customers
 * spread by hash over BILLING_PARTITIONS) into the stream `<P>_BILLABLE_P`; each partition has
 * its consumer `billing-p<k>` with max_ack_pending 1, so a partition's messages are evaluated
 * one at a time in stream order across every pipeline process, and each process pulls from
 * every partition at once (at most one message per partition in flight). A customer is in
 * exactly one partition, and everything the evaluator writes is one customer's, so each
 * customer's batches apply in order with one writer while different customers run in parallel.
 *
 * Keys in the state bucket `<P>_billing_state`:
 *   cs.<org>.<mode>.<customer>   running state of one customer: {seq, before, after}
 *                     (customer-state.ts): pool consumption and cumulative usage before and
 *                     after the batch of sequence `seq`, the last one that changed it.
 *   cp.<org>.<mode>.<cap hash>.<start ms>.<end ms>   one per cap and period ever spent in:
 *                     {seq, before, after}: the stream sequence of the batch that last
 *                     changed it and the period's total ({used, reached}) before and after
 *                     that batch. Only the periods a batch touches are read, any age.
 *   pin.<k>           partition k's batch in flight, and its commit point: {seq, orgId, mode,
 *                     revisions, config} while it is evaluated — the configuration of the
 *                     customers the batch names (and the plans they use), with the KV revision
 *                     of each document (the configuration bucket keeps one revision, so the pin
 *                     holds the documents themselves) — then the same with `done: true`
 *                     once committed.
 *   st.<org>.<mode>, pin   the former layout (one state per organization and mode, one pin):
 *                     read in place, never written (customer-state.ts, routeFormer).
 *
 * Commit order for the message of stream sequence S in partition k, and why a crash anywhere
 * repeats nothing, loses nothing and bills the same:
 *  1. Read pin.<k>. It names a later sequence: S was acked by another holder (a later message
 *     of k is only delivered after S's ack): ack. It names S, done: S was committed before a
 *     crash that lost the ack: ack.
 *  2. Pin the configuration. pin.<k> names S (not done): a replay, use its documents.
 *     Otherwise read the documents of the customers S's signals name (resolved by the pipeline
 *     to service ids; store.forBatch: one get per customer, one per plan they use) and write
 *     the pin (compare-and-set). From here on S is evaluated against these documents only:
 *     rows and events depend only on the batch and those revisions. With no order line
 *     attribute in them nothing is priced: ack.
 *  3. Read the running state of those customers (their `cs` keys: `before` when the key's seq
 *     is S, `after` otherwise; no key: the former document's values, or nothing), list the
 *     cap periods S touches (capPeriods, in the worker) and read their keys, by the same rule
 *     (no key: zero, or what a former document kept for that period).
 *  4. Evaluate in a piscina worker (evaluate.ts; a part of at most 16 signals on the main
 *     thread, where the hop costs more than the work): pure and deterministic, so a replay, from
 *     the same state, period totals and pinned documents, computes the same rows and events.
 *  5. Publish the cost, credit-consumption and unpriced rows to `<P>_BILLING_ROWS` with
 *     Nats-Msg-Id = rows-<batch id>.p<k> (stored once); the rows inserter (rows.ts) stores them
 *     in bulk, dropping rows already in the tables on a redelivery.
 *  6. Publish the events with Nats-Msg-Id = event id, waiting for the stream's ack: an event
 *     published by an earlier attempt is stored only once.
 *  7. Write the touched period keys and the state of every customer S changed,
 *     {seq: S, before, after}, each with compare-and-set on the revision read in 3 (create
 *     when absent): a holder that lost S to an ack-wait expiry cannot overwrite a later
 *     batch's values; it fails and finds S committed.
 *  8. Write pin.<k> marked `done: true` with compare-and-set on the pin's revision. This is
 *     the commit point. A failed compare-and-set means another holder finished S in between
 *     (an ack-wait expiry): the retry finds it done and acks.
 *  9. Ack.
 * A crash before 8 replays S from the same pin, customer states and period totals (the
 * before/after rule undoes S's own writes): the same rows (deduplicated) and events (same
 * ids). Each period's `reached` flag is kept in its key for ever, so a cap fires at most once
 * per period even after the event stream's duplicate window. A failure is retried in place,
 * holding the message (see loop), so no later batch of the partition overtakes it; after a
 * crash, JetStream redelivers the held message before any later one. While a message is held
 * its ack wait is renewed (`working`), so only a dead holder's message is redelivered
 * (BILLING_ACK_WAIT_MS). Balances and period totals live in JetStream KV on disk, never only
 * in Redis. Test-only fault points along this order: fault.ts.
 */
import type { ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import type { KV, KvEntry } from '@nats-io/kv';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { PULL_EXPIRES_MS, type Nats } from '../../bus/connection.js';
import { kvReader, type KvReader } from '../../bus/kv-read.js';
import { publishDurable } from '../../bus/publish.js';
import { billingLog as log } from '../../log.js';
import { billingEvents, billingLag } from '../../metrics/index.js';
import { H_BATCH, H_MODE, H_ORG, type BillableLine } from '../../bus/batch.js';
import { busEvent, publishEvent } from '../../bus/events.js';
import type { BillingConfig } from '../model.js';
import { capPeriods, evaluate, startingTotal, type BillableSignal, type CapPeriodRef, type CapPeriodsInput, type EvaluationInput, type EvaluationOutput, type PeriodEntry, type PeriodTotal } from './evaluate.js';
import { FaultHook, type FaultContext } from './fault.js';
import { CustomerStates, formerStateKey } from './customer-state.js';
import type { BillablePartitioner } from './partition.js';
import type { Mode } from '../../shared/mode.js';
import { workerTask, type WorkerPool } from '../../shared/worker-pool.js';

const WORKER_FILE = new URL('../../../workers/billing.js', import.meta.url).href;
const evaluateTask = workerTask<EvaluationInput, EvaluationOutput>(WORKER_FILE);
const capPeriodsTask = workerTask<CapPeriodsInput, CapPeriodRef[]>(WORKER_FILE, 'capPeriods');
/** Parts of batches with at most this many signals are evaluated on the main thread (see run). */
const INLINE_SIGNALS = 16;

export interface ConfigSource {
  /** The configuration restricted to the customers `refs` name (ids or externalIds) and the plans they use. */
  forBatch(orgId: string, mode: Mode, refs: Iterable<string>): Promise<{ config: BillingConfig; revisions: Record<string, number> }>;
}

/** The configuration a partition's batch is evaluated against, from its first evaluation on (key `pin.<k>`). */
export interface Pin {
  seq: number;
  orgId: string;
  mode: Mode;
  /** KV key → revision of each configuration document in `config`. */
  revisions: Record<string, number>;
  config: BillingConfig;
}

/** pin.<k> once its batch is committed (step 8): the same pin, marked done. */
export interface DonePin extends Pin {
  done: true;
}

export const pinKey = (k: number): string => `pin.${k}`;

export interface EvaluatorOptions {
  publishTimeoutMs: number;
  /** The billing consumer's ack wait: a held message's is renewed at a third of it. */
  ackWaitMs: number;
  /** Partitions in use (ensureBillingStreams). */
  partitions: number;
  fault?: FaultHook;
}

export interface EvaluatorStats {
  messages: number;
  events: number;
  costRows: number;
}

export class BillingEvaluator {
  private readonly subscriptions: ConsumerMessages[] = [];
  private readonly loops: Promise<void>[] = [];
  private readonly customers: CustomerStates;
  /** Reads of the state bucket: direct gets, a batch's keys in one round (bus/kv-read.ts). */
  private readonly stateReader: KvReader;
  /** Tasks of this evaluator on the shared pool, at most one per thread (its queue is sized for the pipeline). */
  private readonly poolSlots: Slots;
  readonly stats: EvaluatorStats = { messages: 0, events: 0, costRows: 0 };

  constructor(
    private readonly nats: Nats,
    private readonly configs: ConfigSource,
    private readonly state: KV,
    /** The process's worker pool (main.ts), shared with the pipeline. */
    private readonly pool: WorkerPool,
    private readonly opts: EvaluatorOptions,
  ) {
    this.stateReader = kvReader(state);
    this.customers = new CustomerStates(state, this.stateReader);
    this.poolSlots = new Slots(Math.max(1, pool.maxThreads));
  }

  /**
   * The pure steps (evaluate.ts) on the worker pool, or on this thread for a batch of at most
   * INLINE_SIGNALS signals: a partition's part of a small batch is a signal or two, for which
   * the hop to a worker (and the copies there and back) costs more than the work.
   */
  private capPeriods(task: CapPeriodsInput): Promise<CapPeriodRef[]> {
    if (task.signals.length <= INLINE_SIGNALS) return Promise.resolve(capPeriods(task));
    return this.poolSlots.with(() => capPeriodsTask(this.pool, task));
  }

  private evaluate(task: EvaluationInput): Promise<EvaluationOutput> {
    if (task.signals.length <= INLINE_SIGNALS) return Promise.resolve(evaluate(task));
    return this.poolSlots.with(() => evaluateTask(this.pool, task));
  }

  private get fault(): FaultHook {
    return this.opts.fault ?? FaultHook.off;
  }

  /** Pulls from every partition at once: one message per partition in flight. */
  async start(): Promise<void> {
    const { billableParts } = this.nats.topology;
    for (let k = 0; k < this.opts.partitions; k++) {
      const consumer = await this.nats.js.consumers.get(billableParts.stream, billableParts.consumer(k));
      const messages = await consumer.consume({ max_messages: 1, expires: PULL_EXPIRES_MS });
      this.subscriptions.push(messages);
      this.loops.push(this.loop(messages, k));
    }
  }

  /**
   * Re-routes what a former version left on the single-lane stream (`<P>_BILLABLE`, consumer
   * `billing`) into the partitions, and returns once that consumer has nothing left. Run on
   * start before the pipeline publishes anything, so a customer's older signals enter its
   * partition before its newer ones. A message the former document already records
   * (`lastSeq` ≥ its sequence: committed before a crash lost its ack) is only acked.
   */
  async routeFormer(partitioner: BillablePartitioner): Promise<number> {
    const { billable } = this.nats.topology;
    let routed = 0;
    const consumer = await this.nats.js.consumers.get(billable.stream, billable.consumer);
    for (;;) {
      const info = await this.nats.jsm.consumers.info(billable.stream, billable.consumer);
      if (info.num_pending === 0 && info.num_ack_pending === 0) return routed;
      if (info.num_pending === 0) {
        // Held by another process (it routes it): wait for it.
        await new Promise((r) => setTimeout(r, 200));
        continue;
      }
      const batch = await consumer.fetch({ max_messages: 1, expires: 1_000 });
      for await (const m of batch) {
        const { orgId, mode, batchId } = headersOf(m);
        const former = await this.state.get(formerStateKey(orgId, mode));
        const lastSeq = former && former.operation === 'PUT' && former.length > 0 ? (former.json() as { lastSeq: number }).lastSeq : 0;
        if (lastSeq < m.seq) {
          const lines = Buffer.from(m.data).toString('utf8').split('\n').filter((l) => l !== '');
          await partitioner.publish({ orgId, mode, batchId }, lines, this.opts.publishTimeoutMs);
          routed++;
        }
        m.ack();
      }
    }
  }

  /**
   * A failed evaluation is retried in place, holding the message (never nakked): a nak would
   * let the partition's next message overtake it, applying a customer's batches out of order.
   * Billing waits rather than goes out of order.
   */
  private async loop(messages: ConsumerMessages, k: number): Promise<void> {
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
            await this.handle(m, k);
            break;
          } catch (err) {
            if (this.stopping) return;
            log.error('billing evaluation failed; retrying in place', { err, seq: m.seq, partition: k, attempt });
            await new Promise((r) => setTimeout(r, Math.min(10_000, 200 * 2 ** Math.min(6, attempt))));
          }
        }
      } finally {
        clearInterval(beat);
      }
    }
  }

  private stopping = false;

  private async handle(m: JsMsg, k: number): Promise<void> {
    const { orgId, mode, batchId } = headersOf(m);

    // 1. The pin of partition k, and whether S is already finished.
    const pinEntry = await this.stateReader.get(pinKey(k));
    const current = pinEntry && pinEntry.operation === 'PUT' && pinEntry.length > 0 ? (pinEntry.json() as Pin | DonePin) : null;
    if (current && (current.seq > m.seq || (current.seq === m.seq && 'done' in current))) {
      if (current.seq > m.seq) log.warn('billable message already finished by another holder', { seq: m.seq, partition: k });
      m.ack();
      return;
    }

    // 2. The configuration S is evaluated against.
    const signals = parseBillable(m.data);
    const pinned = current && current.seq === m.seq && !('done' in current) ? { pin: current, revision: pinEntry!.revision } : await this.pin(k, m.seq, orgId, mode, pinEntry, signals);
    const { config } = pinned.pin;
    if (Object.keys(config.attributes).length === 0) {
      // Nothing is priced for these customers (in the pinned revision): nothing to apply.
      m.ack();
      this.stats.messages++;
      observeEvaluated(m);
      return;
    }
    const evaluatedAt = Math.floor(m.info.timestampNanos / 1e6);

    // 3. The running state of the batch's customers and the totals of the cap periods S touches.
    const [read, refs] = await Promise.all([
      this.customers.read(orgId, mode, config, m.seq),
      Object.keys(config.caps).length === 0 ? Promise.resolve([] as CapPeriodRef[]) : this.capPeriods({ orgId, mode, config, signals }),
    ]);
    const entries = await this.stateReader.getMany(refs.map((r) => r.key));
    const former = refs.length > 0 && entries.some((e) => !e) ? (read.former ?? (await this.customers.formerState(orgId, mode))) : null;
    const periods: Record<string, PeriodTotal> = {};
    refs.forEach((r, i) => {
      const e = entries[i];
      const stored = e && e.operation === 'PUT' && e.length > 0 ? (e.json() as PeriodEntry) : null;
      periods[r.key] = startingTotal(stored, m.seq, former?.caps?.[r.capKey]?.[r.start]);
    });

    // 4. Evaluate.
    const input: EvaluationInput = { orgId, mode, config, state: read.state, signals, evaluatedAt, periods };
    const out = await this.evaluate(input);
    const fault: FaultContext = { seq: m.seq, orgId, mode, events: out.events.length };
    await this.fault.at('after-pin', fault);

    // 5. Rows. They go to a stream (stored once per batch id and partition) and are inserted in
    // bulk by the rows inserter (rows.ts): the engine's insert is off this path. Durable here,
    // before the commit point.
    const { costs, consumption, unpriced } = out;
    if (costs.length > 0 || consumption.length > 0 || unpriced.length > 0) {
      const h = natsHeaders();
      h.set(H_ORG, orgId);
      h.set(H_MODE, mode);
      await publishDurable(this.nats.nc, this.nats.topology.billingRows.subject(orgId), Buffer.from(JSON.stringify({ costs, consumption, unpriced })), h, `rows-${batchId}.p${k}`, this.opts.publishTimeoutMs);
    }

    // 6. Events.
    await Promise.all(out.events.map((e) => publishEvent(this.nats, busEvent(e, orgId, mode, new Date(evaluatedAt)), this.opts.publishTimeoutMs)));
    await this.fault.at('after-events', fault);

    // 7. Period keys and customer states, each compare-and-set on what step 3 read.
    await Promise.all([
      ...refs.map((r, i) => {
        const value: PeriodEntry = { seq: m.seq, before: periods[r.key]!, after: out.periods[r.key] ?? periods[r.key]! };
        const e = entries[i];
        return e ? this.state.update(r.key, JSON.stringify(value), e.revision) : this.state.create(r.key, JSON.stringify(value));
      }),
      this.customers.write(orgId, mode, config, m.seq, read, out.state),
    ]);
    await this.fault.at('before-state-write', fault);

    // 8. The commit point.
    await this.state.update(pinKey(k), JSON.stringify({ ...pinned.pin, done: true } satisfies DonePin), pinned.revision);
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
   * Step 2: the pinned configuration of S, written now when S has none yet. One key per
   * partition: one message of it is in flight at a time, and a later one is only delivered
   * after S is acked (so it is overwritten, never deleted: no tombstone per batch).
   */
  private async pin(k: number, seq: number, orgId: string, mode: Mode, e: KvEntry | null, signals: BillableSignal[]): Promise<{ pin: Pin; revision: number }> {
    // Pinned even when nothing is priced (a small document): a replay after a lost ack must
    // not bill a batch that its first evaluation did not.
    const { config, revisions } = await this.configs.forBatch(orgId, mode, signals.map((s) => s.customerId));
    const pin: Pin = { seq, orgId, mode, revisions, config };
    const bytes = JSON.stringify(pin);
    const revision = e ? await this.state.update(pinKey(k), bytes, e.revision) : await this.state.create(pinKey(k), bytes);
    return { pin, revision };
  }

  async stop(): Promise<void> {
    this.stopping = true;
    for (const s of this.subscriptions) s.stop();
    await Promise.all(this.loops);
  }
}

/** At most `n` at once; the others wait their turn, in order. */
class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];

  constructor(n: number) {
    this.free = n;
  }

  async with<T>(fn: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((r) => this.waiting.push(r));
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    }
  }
}

function headersOf(m: JsMsg): { orgId: string; mode: Mode; batchId: string } {
  const orgId = m.headers?.get(H_ORG) ?? '';
  const mode = m.headers?.get(H_MODE);
  const batchId = m.headers?.get(H_BATCH) ?? '';
  if (!orgId || (mode !== 'live' && mode !== 'test') || !batchId) throw new Error(`billable message ${m.seq} lacks its headers`);
  return { orgId, mode, batchId };
}

/** Billing lag: from the batch stored (its billable message's stream time) to its evaluation. */
function observeEvaluated(m: JsMsg): void {
  billingLag.observe(Math.max(0, Date.now() - m.info.timestampNanos / 1e6) / 1000);
}

/**
 * The signals of a partition's billable message, each naming the customer the pipeline
 * resolved (`k`, partition.ts). A signal whose reference named no customer when it was stored
 * is not billed (it has no `k`).
 */
export function parseBillable(data: Uint8Array): BillableSignal[] {
  const text = Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8');
  const out: BillableSignal[] = [];
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const b = JSON.parse(line) as BillableLine;
    if (b.k === undefined) continue;
    out.push({ id: b.i, eventName: b.e, customerId: b.k, unitId: b.u, ts: b.t, data: b.d, ...(b.x !== undefined ? { exact: b.x } : {}) });
  }
  return out;
}
