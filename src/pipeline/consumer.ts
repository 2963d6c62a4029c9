/**
 * The pipeline: JetStream → piscina workers → ClickHouse, exactly once.
 *
 * Order in which a batch becomes durable, deduplicated and acknowledged, and why it
 * loses nothing and counts nothing twice:
 *
 *  1. The batch is already durable in the JetStream stream (the ingress waited for the
 *     stream's ack before answering 202). It stays there until step 6 acknowledges it.
 *  2. A worker turns it into rows; pure computation, repeatable with the same result
 *     (signal ids are derived from the batch id, not made up here).
 *  3. Idempotency claims (dedupe.ts): each keyed signal claims its key in its organization
 *     and mode, naming itself, in the claim log (one append per round of batches). A claim
 *     owned by another signal drops this signal; a claim owned by this very signal (an
 *     earlier delivery died after claiming) keeps it.
 *  4. Only when an earlier delivery of the batch may have stored rows: rows already in the
 *     store from it (crash after insert, before ack) are dropped by signal id. Row-level, so
 *     it is right even if that earlier insert landed only in part. "May have" is JetStream's
 *     redelivery flag OR the batch's mark in the claim log (dedupe.ts `takeBatch`), made
 *     before the batch can reach an insert, OR a key already held by the same signal: the
 *     flag alone is not enough, since a message the killed process had received came back
 *     to its successor with deliveryCount 1 (and a consumer leader failover in a cluster can
 *     hand a message out again as a first delivery).
 *     The check runs after any insert of that earlier delivery has ended: a held message is
 *     never taken up twice in one process (`held`); an insert whose answer was lost (its
 *     host may still be running it) ends that host before its error comes back
 *     (src/store/hosted); and another process's engine host dies with it and holds the data
 *     directory's lock until then (src/store/engine-host).
 *  5. Rows of many messages are inserted together (flush by PIPELINE_FLUSH_ROWS or after
 *     PIPELINE_FLUSH_MS): ClickHouse wants few large inserts. While the pipeline is behind, two
 *     flushes insert at once (MAX_FLUSHES); each publishes (6) after the one started before it
 *     (a flush whose insert failed settles at once: billing order is best effort, see `order`).
 *  6. After the insert returned, each message's billable signals (those it owns by step 3,
 *     whether or not an earlier delivery already stored them) are published to the billable
 *     partitions of their customers with Nats-Msg-Id = <batch id>.p<k> (stored once;
 *     src/billing/evaluator/partition.ts; resolved and split by partition when the message
 *     was processed, so the flush only publishes), then the messages are acked. A crash anywhere before this point means redelivery, and steps
 *     3–4 make the redelivery write exactly what is missing. A failed insert or publish naks
 *     the messages for a later retry.
 *
 * Poison: when a flush fails, its messages are inserted one by one; one the engine refuses
 * for its content (a ClickHouse parse/data error, see isDataError) goes to the dead-letter
 * stream with the reason and is acked, so it cannot block everyone else's signals. Any
 * other failure (the engine is down) naks for a later retry: nothing is dropped for an outage.
 *
 * A message redelivered while this process still holds it (in the buffer or in a running
 * insert) is ignored: the held copy's ack settles it. Across processes, redelivery only
 * happens after PIPELINE_ACK_WAIT_MS without an ack, i.e. when the holder died: every message
 * this process has taken from the consumer is held from that moment (waiting its turn,
 * processed, buffered or being inserted) and marked in progress four times per ack wait,
 * however long an insert or a publish takes. (Otherwise a slow insert would let another
 * process take the same batch while this one is still storing it: both would find none of its
 * rows stored and both would insert them.) Back-pressure holds messages back in `waiting`,
 * not in the client's pull buffer, where nothing could keep them alive.
 */
import type { ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import type { Config } from '../config.js';
import { PULL_EXPIRES_MS, type Nats } from '../bus/connection.js';
import type { Store } from '../store/index.js';
import type { IdempotencyClaims } from './dedupe.js';
import { deadLetter } from '../bus/dead-letter.js';
import { H_BATCH, H_MODE, H_ORG, H_RECEIVED_AT, H_SKIP, skipIndexes, type BatchMeta } from '../bus/batch.js';
import type { PackedRows, RowsTask } from './rows-task.js';
import { keptLines, keptRefs, prefixedLines } from './lines.js';
import { identityPrefix, type Identities, type Identity } from './identities.js';
import { InOrder } from './in-order.js';
import { pipelineLog as log } from '../log.js';
import { workerTask, type WorkerPool } from '../shared/worker-pool.js';
import { observeFreshness, observeInsert } from '../metrics/index.js';
import { errorReason, isDataError } from '../store/engine-error.js';
import type { BacklogGate } from '../shared/backlog-gate.js';

export { isDataError };
/**
 * Flushes at once. A second starts only while the pipeline is behind (flush): their inserts run
 * together (the engine host has two writer sessions, a ClickHouse server takes concurrent
 * inserts), so draining a backlog is not held to one insert's pace — the engine parses one
 * insert on one core. Pipeline alone 90,744 / 93,284 → 104,822 / 101,420 signals/s, end to end
 * unchanged (docs/decisions/0011-inserts-and-flushes.md).
 */
const MAX_FLUSHES = 2;
/** Where the pipeline hands each batch's billable lines (main.ts gives the billing partitioner, src/billing/evaluator/partition.ts). */
export interface BillablePublisher<P extends PreparedBillable = PreparedBillable> {
  /**
   * A batch's `lines` (BillableLine JSON texts as UTF-8, each ending in '\n',
   * src/pipeline/lines.ts; possibly empty) made ready to publish: resolved and split. Done as
   * the batch is processed, so that a flush, once its insert returned, only publishes.
   * `refs`: each line's customer reference (the distinct ones, and per line the index of its own),
   * and the service id each distinct one names (null: none) when the pipeline resolved them.
   */
  prepare(meta: BatchMeta, lines: Uint8Array, refs: { refs: readonly string[]; refOf: ArrayLike<number>; ids?: readonly (string | null)[] }): Promise<P>;
  /** Publishes prepared batches (each as `prepare` gave it), entering the partitions in the order given. */
  publishPrepared(batches: readonly P[], timeoutMs: number): Promise<void>;
}

/** A batch's billable lines as the publisher prepared them: the pipeline reads only its batch. */
export interface PreparedBillable {
  meta: BatchMeta;
}

const buildRows = workerTask<RowsTask, PackedRows>(new URL('../../workers/rows.js', import.meta.url).href, 'packedMoved');

/** Batches processed at once (held by the loop) with `threads` workers; the pool queues twice as many tasks. */
export const maxInflight = (threads: number): number => Math.max(4, threads * 4);

/** How often held messages are marked in progress: four times per ack wait (at least 1 s, config.ts). */
export const keepAlivePeriod = (ackWaitMs: number): number => Math.max(100, Math.floor(ackWaitMs / 4));

/** How long the stream's count of undelivered messages, as a delivery gave it, is taken as current (ms). */
const UNDELIVERED_FRESH_MS = 1_000;

interface Buffered<P extends PreparedBillable> {
  msgs: JsMsg[];
  /** Per message: its billable signals, resolved and split by partition, with its metadata. */
  billable: P[];
  /** Per message: its rows to insert (JSONEachRow lines, each ending in '\n') and how many. */
  rows: Uint8Array[];
  rowCounts: number[];
  /** Rows in `rows` altogether. */
  rowTotal: number;
}

const emptyBuffer = <P extends PreparedBillable>(): Buffered<P> => ({ msgs: [], billable: [], rows: [], rowCounts: [], rowTotal: 0 });

export function batchMeta(m: JsMsg): BatchMeta {
  const h = m.headers;
  const orgId = h?.get(H_ORG) ?? '';
  const mode = h?.get(H_MODE);
  const receivedAtMs = Number(h?.get(H_RECEIVED_AT));
  const batchId = h?.get(H_BATCH) ?? '';
  if (!orgId || (mode !== 'live' && mode !== 'test') || !Number.isFinite(receivedAtMs) || !batchId) {
    throw new Error(`message ${m.seq} lacks billing headers`);
  }
  return { orgId, mode, receivedAtMs, batchId };
}

/** The rows kept, each with its identity columns first (identities.ts); a prefix made once per pair of references. */
function withIdentities(r: PackedRows, keep: readonly boolean[], found: { customers: (Identity | null)[]; products: (Identity | null)[] } | null): Uint8Array {
  const prefixes = new Map<number, Uint8Array>();
  return prefixedLines(r.rows, keep, (i) => {
    const c = r.refOf[i]!;
    const p = r.productOf[i]!;
    const k = c * 65_536 + p;
    let prefix = prefixes.get(k);
    if (!prefix) prefixes.set(k, (prefix = identityPrefix(r.refs[c]!, found?.customers[c] ?? null, r.products[p]!, found?.products[p] ?? null)));
    return prefix;
  });
}

/** `P`: what the billable publisher prepares of a batch (opaque here: the pipeline imports no billing). */
export class Pipeline<P extends PreparedBillable = PreparedBillable> {
  /** Every message taken from the consumer and not yet settled, by stream sequence (marked in progress by `keepAlive`). */
  private readonly held = new Map<number, JsMsg>();
  /** Taken, not yet started: back-pressure (in flight, or two flushes' worth of rows buffered) holds them here, in order. */
  private readonly waiting: JsMsg[] = [];
  private keepAlive: NodeJS.Timeout | null = null;
  private stopping = false;
  private buffer: Buffered<P> = emptyBuffer();
  /** Flushes running: at most MAX_FLUSHES, their inserts at once, their publishes in the order they started. */
  private readonly flushes = new Set<Promise<void>>();
  /** Resolves when the last flush started has published (or failed): the next one publishes after it. */
  private publishTurn: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | null = null;
  private messages: ConsumerMessages | null = null;
  private loopDone: Promise<void> | null = null;
  private readonly inflight = new Set<Promise<void>>();
  /**
   * Batches are processed concurrently but buffered in the order they came, so one process's
   * batches reach the billing partitions in the order it received them (a customer's batches
   * sent one after the other are billed in that order). Best effort, not a guarantee: a batch
   * that fails and is redelivered, a flush that fails while a later one succeeds, a publish
   * retried, or batches taken by different pipeline processes go in another order, and each
   * order is billed exactly. A slow batch holds back the buffering of those after it (they
   * count as in flight meanwhile).
   */
  private readonly order = new InOrder();
  private readonly maxInflight: number;

  constructor(
    private readonly cfg: Config,
    private readonly nats: Nats,
    private readonly store: Store,
    /** The pipeline's idempotency claims (streams.ts idempotencyClaims, kind `signals`). */
    private readonly claims: IdempotencyClaims,
    /** The process's worker pool (main.ts; the billing evaluator runs on it too), of cfg.pipeline.workers threads. */
    private readonly pool: WorkerPool,
    private readonly billable: BillablePublisher<P>,
    /** The ingress of this process, told how far behind the pipeline is (src/shared/backlog-gate.ts); null: none. */
    private readonly backlog: BacklogGate | null = null,
    /** Resolves the references for the identity columns (identities.ts); null: only the form each signal sent is stored. */
    private readonly identities: Identities | null = null,
  ) {
    this.maxInflight = maxInflight(cfg.pipeline.workers);
  }

  /** Messages of the stream the consumer had not delivered yet, as the last delivery said, and when it said so. */
  private undeliveredCount = 0;
  private undeliveredAt = 0;

  /**
   * Messages of the stream not delivered yet, as a recent delivery said: one that came more
   * than UNDELIVERED_FRESH_MS ago no longer counts (another process may have taken them, or
   * the server hands this one nothing more until it acks).
   */
  private get undelivered(): number {
    return performance.now() - this.undeliveredAt <= UNDELIVERED_FRESH_MS ? this.undeliveredCount : 0;
  }

  /** Tells the ingress of this process how many batches the pipeline is behind: undelivered, and held (taken, not yet stored). */
  private reportBacklog(): void {
    this.backlog?.report(this.undelivered + this.held.size);
  }

  async start(): Promise<void> {
    const consumer = await this.nats.js.consumers.get(this.nats.topology.signals.stream, this.nats.topology.signals.consumer);
    this.messages = await consumer.consume({ max_messages: Math.min(this.cfg.pipeline.maxAckPending, 128), expires: PULL_EXPIRES_MS });
    this.keepAlive = setInterval(() => this.markWorking(), keepAlivePeriod(this.cfg.pipeline.ackWaitMs));
    this.loopDone = this.loop(this.messages);
  }

  /** Tells JetStream that every held message is still being worked on (restarts its ack wait). */
  private markWorking(): void {
    for (const m of this.held.values()) {
      try {
        m.working();
      } catch (err) {
        // The connection is closing: what is held comes back after its ack wait, as after a crash.
        log.warn('could not mark held batches in progress', { err });
        return;
      }
    }
  }

  /**
   * Takes every message as it comes (held and kept alive from then on), so the client's pull
   * buffer never holds a message for long. What one process holds is bounded by the server:
   * the consumer's max_ack_pending (PIPELINE_MAX_ACK_PENDING), shared by all processes.
   */
  private async loop(messages: ConsumerMessages): Promise<void> {
    for await (const m of messages) {
      // A redelivery of a message this process still holds: the held copy's ack settles it.
      if (this.held.has(m.seq)) continue;
      this.held.set(m.seq, m);
      this.undeliveredCount = m.info.pending;
      this.undeliveredAt = performance.now();
      this.reportBacklog();
      this.waiting.push(m);
      this.startWaiting();
    }
  }

  /** Starts waiting messages, in order, while fewer than maxInflight run and the buffer has room. */
  private startWaiting(): void {
    while (this.waiting.length > 0 && !this.stopping && this.inflight.size < this.maxInflight && !this.bufferFull()) {
      const m = this.waiting.shift()!;
      const p: Promise<void> = this.order.take(() => this.process(m)).finally(() => {
        this.inflight.delete(p);
        this.startWaiting();
      });
      this.inflight.add(p);
    }
  }

  /** Two flushes' worth of rows wait: the pipeline is behind. */
  private behind(): boolean {
    return this.buffer.rowTotal >= 2 * this.cfg.pipeline.flushRows;
  }

  /** Back-pressure: two flushes' worth of rows wait while MAX_FLUSHES flushes run. */
  private bufferFull(): boolean {
    return this.behind() && this.flushes.size >= MAX_FLUSHES;
  }

  /** A message's part of the buffer, or null (nothing to buffer): added by `order`, in the order the messages came. */
  private async process(m: JsMsg): Promise<(() => void) | null> {
    try {
      const meta = batchMeta(m);
      const skip = skipIndexes(m.headers?.get(H_SKIP));
      // A copy in its own ArrayBuffer, transferred to the worker. (Buffer#slice would be a view
      // on the NATS client's read buffer, and transferring that would detach it.)
      const body = new Uint8Array(m.data);
      const r = await buildRows(this.pool, skip.length > 0 ? { body, meta, skip } : { body, meta }, [body.buffer as ArrayBuffer]);
      const [{ claims: { keep, reclaimed }, first }, found] = await Promise.all([
        this.claims.claimBatch(r.claimKeys, r.ids, meta),
        this.identities ? this.identities.resolve(meta.orgId, meta.mode, r.refs, r.products) : null,
      ]);
      const lines = keptLines(r.billable, keep);
      const lineRefs = { refs: r.refs, refOf: keptRefs(r.refOf, keep), ...(found ? { ids: found.customers.map((c) => c?.id ?? null) } : {}) };
      // Rows may be stored already when some delivery of this batch got this far before (see 4.).
      if (m.redelivered || !first || reclaimed) {
        const existing = await this.store.existingSignalIds(meta.orgId, r.ids);
        for (let i = 0; i < r.ids.length; i++) if (existing.has(r.ids[i]!)) keep[i] = false;
      }
      let kept = 0;
      for (const k of keep) if (k) kept++;
      const rows = withIdentities(r, keep, found);
      // Resolved and split now, while an earlier flush's insert runs (published after this one's).
      const billable = await this.billable.prepare(meta, lines, lineRefs);
      return () => {
        this.buffer.rows.push(rows);
        this.buffer.rowCounts.push(kept);
        this.buffer.rowTotal += kept;
        this.buffer.msgs.push(m);
        this.buffer.billable.push(billable);
        this.scheduleFlush();
      };
    } catch (err) {
      this.held.delete(m.seq);
      this.reportBacklog();
      log.error('batch could not be processed; will be redelivered', { err, seq: m.seq, deliveries: m.info.deliveryCount });
      try {
        m.nak(Math.min(30_000, 1_000 * 2 ** Math.min(5, m.info.deliveryCount)));
      } catch (nakErr) {
        // The connection is closing: the message comes back after its ack wait all the same.
        log.warn('nak failed; the batch is redelivered after its ack wait', { err: nakErr, seq: m.seq });
      }
      return null;
    }
  }

  /**
   * Flushes now when a flush's worth of rows waits; otherwise when no new batch has come for
   * PIPELINE_FLUSH_IDLE_MS (the stream went quiet: a lone batch is not kept waiting), and at
   * the latest PIPELINE_FLUSH_MS after the first buffered batch (under steady load batches
   * keep coming and the buffer grows into large inserts).
   */
  private scheduleFlush(): void {
    if (this.buffer.rowTotal >= this.cfg.pipeline.flushRows) {
      void this.flush();
      return;
    }
    if (this.buffer.msgs.length === 0) return;
    if (!this.timer) {
      this.timer = setTimeout(() => {
        this.timer = null;
        void this.flush();
      }, this.cfg.pipeline.flushMs);
    }
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null;
      if (this.inflight.size === 0) void this.flush();
    }, this.cfg.pipeline.flushIdleMs);
  }

  private idleTimer: NodeJS.Timeout | null = null;

  /**
   * Inserts what is buffered and acks its messages. While a flush runs, another starts only
   * once two flushes' worth of rows wait (where back-pressure would otherwise stop taking
   * batches: the pipeline is behind), at most MAX_FLUSHES at once; otherwise this resolves
   * when a running one ends, and the next starts then.
   */
  flush(): Promise<void> {
    if (this.flushes.size >= MAX_FLUSHES || (this.flushes.size > 0 && !this.behind())) return Promise.race(this.flushes);
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    if (this.idleTimer) {
      clearTimeout(this.idleTimer);
      this.idleTimer = null;
    }
    const batch = this.buffer;
    if (batch.msgs.length === 0) return Promise.resolve();
    this.buffer = emptyBuffer();
    const turn = this.publishTurn;
    let published!: () => void;
    this.publishTurn = new Promise<void>((r) => (published = r));
    // .finally runs as a microtask, so the flush is removed only after it was added, even
    // when the batch has no rows and insertAndAck finishes without awaiting anything.
    const flush: Promise<void> = this.insertAndAck(batch, turn).finally(() => {
      published();
      this.flushes.delete(flush);
      this.scheduleFlush();
      this.startWaiting();
    });
    this.flushes.add(flush);
    return flush;
  }

  /** Inserts a flush's rows, then — once the flush started before it has published (`turn`) — publishes its billable lines and acks. */
  private async insertAndAck(batch: Buffered<P>, turn: Promise<void>): Promise<void> {
    try {
      await this.insert(batch.rows, batch.rowTotal);
      await turn;
      for (const b of batch.billable) observeFreshness(b.meta.receivedAtMs);
      await this.billable.publishPrepared(batch.billable, this.cfg.publishTimeoutMs);
      for (const m of batch.msgs) m.ack();
    } catch (err) {
      if (batch.msgs.length > 1 && isDataError(err)) await this.isolate(batch);
      else await this.settleFailed(batch.msgs, err);
    } finally {
      for (const m of batch.msgs) this.held.delete(m.seq);
      this.reportBacklog();
    }
  }

  /** Inserts the rows of some messages (`count` rows in all) as one JSONEachRow body. */
  private async insert(rows: Uint8Array[], count: number): Promise<void> {
    if (count === 0) return;
    await observeInsert('signals', count, () => this.store.insertSignals(rows.length === 1 ? Buffer.from(rows[0]!.buffer, rows[0]!.byteOffset, rows[0]!.byteLength) : Buffer.concat(rows)));
  }

  /** A flush the engine refused for its content: find the message(s) responsible. */
  private async isolate(batch: Buffered<P>): Promise<void> {
    log.warn('insert refused for its content; inserting batch by batch', { messages: batch.msgs.length });
    for (let i = 0; i < batch.msgs.length; i++) {
      const m = batch.msgs[i]!;
      try {
        await this.insert([batch.rows[i]!], batch.rowCounts[i]!);
        observeFreshness(batch.billable[i]!.meta.receivedAtMs);
        await this.billable.publishPrepared([batch.billable[i]!], this.cfg.publishTimeoutMs);
        m.ack();
      } catch (err) {
        await this.settleFailed([m], err);
      }
    }
  }

  /** A lone message the engine refused for its data is dead-lettered; anything else is naked for a retry. */
  private async settleFailed(msgs: JsMsg[], err: unknown): Promise<void> {
    const only = msgs.length === 1 ? msgs[0] : undefined;
    if (only && isDataError(err)) {
      try {
        await this.deadLetter(only, err);
        return;
      } catch (dlqErr) {
        log.error('dead-letter publish failed; will retry', { err: dlqErr, seq: only.seq });
      }
    } else {
      log.error('insert failed; batches will be redelivered', { err, messages: msgs.length });
    }
    for (const m of msgs) {
      try {
        m.nak(2_000);
      } catch (nakErr) {
        // The connection is closing: the message comes back after its ack wait all the same
        // (and a flush, whose promise nobody awaits, must not reject for it).
        log.warn('nak failed; the batch is redelivered after its ack wait', { err: nakErr, seq: m.seq });
      }
    }
  }

  private async deadLetter(m: JsMsg, err: unknown): Promise<void> {
    const reason = await deadLetter(this.nats, m, errorReason(err), `dlq-${m.headers?.get(H_BATCH) ?? m.seq}`, this.cfg.publishTimeoutMs);
    log.error('batch moved to the dead-letter stream', { seq: m.seq, stream: this.nats.topology.deadLetters.stream, reason });
  }

  /** Stops taking messages and finishes what it started; what waits is given back (main.ts stops the workers afterwards). */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.messages?.close();
    await this.loopDone?.catch(() => undefined);
    for (const m of this.waiting.splice(0)) {
      this.held.delete(m.seq);
      try {
        m.nak();
      } catch {
        // The connection is closing: it comes back after its ack wait.
      }
    }
    await Promise.allSettled([...this.inflight]);
    while (this.flushes.size > 0 || this.buffer.msgs.length > 0) {
      if (this.buffer.msgs.length > 0) void this.flush();
      await Promise.allSettled([...this.flushes]);
    }
    if (this.keepAlive) clearInterval(this.keepAlive);
    this.keepAlive = null;
    this.undeliveredCount = 0;
    this.reportBacklog();
  }
}
