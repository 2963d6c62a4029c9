/**
 * The billing evaluator. Billable messages are split by partition (partition.ts: customers
 * spread by hash over BILLING_PARTITIONS) into the stream `<P>_BILLABLE_P`; each partition has
 * its consumer `billing-p<k>`. A partition's messages are evaluated in **groups**: the oldest
 * messages of the partition not yet committed, up to GROUP_MESSAGES messages and
 * GROUP_CUSTOMERS customers, in stream order, evaluated as one step with one pin, one round
 * of reads, one round of writes and one commit point — the per-message costs (the pin, its
 * commit, the configuration and state reads, a round trip each) are paid once per group, so
 * the busier a partition, the cheaper each message. The partitions are shared out between
 * the pipeline processes (members.ts); a process pulls from its own, all at once, at most
 * GROUP_HELD messages of a partition held, by successive fetches. A customer is in
 * exactly one partition, and everything the evaluator writes is one customer's, so each
 * customer's batches apply in order with one writer while partitions run in parallel.
 *
 * Keys in the state bucket `<P>_billing_state`:
 *   cs.<org>.<mode>.<customer>   running state of one customer: {seq, before, after, periods?}
 *                     (customer-state.ts): pool consumption and cumulative usage before and
 *                     after the group whose first sequence is `seq`, the last one that changed
 *                     it, and the entries of the customer's most recent cap periods (below).
 *   cp.<org>.<mode>.<cap hash>.<start ms>.<end ms>   a cap period's entry {seq, before, after}:
 *                     the first stream sequence of the group that last changed it and the
 *                     period's total ({used, reached}) before and after that group — held in
 *                     its customer's key while it is one of the customer's HELD_PERIODS latest
 *                     (or touched by the group that last wrote that key), and in its own key
 *                     once spilled from there. Only the periods a group touches are read, any age.
 *   pin.<k>           partition k's group in flight, and its commit point: {seq, last, seqs,
 *                     scopes, done?} — the stream sequences of the group's messages (`seq` the
 *                     first, `last` the last), and per organization and mode the configuration
 *                     of the customers the group names (and the plans they use) with the KV
 *                     revision of each document (the configuration bucket keeps one revision,
 *                     so the pin holds the documents themselves, less what evaluation never
 *                     reads: pinnedConfig) — then the same with `done: true` once committed.
 *                     Every message of partition k up to the done pin's `last` is committed.
 *
 * Which messages form a group, and why no message is ever evaluated before an older one of
 * its partition. Only the oldest uncommitted messages may be evaluated, and two processes
 * may hold messages of one partition (JetStream hands a consumer's messages to whichever pull
 * asks). So a group is formed from the messages this process holds, in sequence order, and
 * taken only when:
 *   - its first message is the oldest message of the partition after the done pin's `last`
 *     (one stream message get, `next_by_subj` of the partition's subjects: the stream is a
 *     work queue, so a message still there and after `last` is not committed) — or it was
 *     delivered right after the last message this process committed (by the next rule, no
 *     message of the partition lies between them; a redelivered last message does not count:
 *     newer messages may have been delivered before it); and
 *   - each next message was delivered right after the one before it (consecutive consumer
 *     delivery sequences, neither redelivered): the consumer hands out new messages in stream
 *     order, so nothing of the partition lies between them, held elsewhere.
 * Otherwise this process waits (another holder is committing older messages) and looks again.
 * Once pinned, a group is final: whoever holds the pinned messages (after a crash, the
 * process they are redelivered to) evaluates exactly those, against the pinned documents.
 *
 * Commit order for a group G of partition k whose first sequence is S:
 *  1. Read pin.<k> (a process that wrote it last and has seen no other holder since uses
 *     what it wrote: were it stale, its compare-and-set in 2 fails and the retry reads it).
 *     Messages at or before a done pin's `last` (or before a pending pin's `seq`) are
 *     committed: ack them. A pending pin names the group to finish: evaluate it
 *     once all its messages are held here (its documents, step 2 skipped).
 *  2. Pin the configuration: read the documents of the customers G's signals name, per
 *     organization and mode (resolved by the pipeline to service ids; store.forBatch: one
 *     get per customer, one per plan they use) and write the pin (compare-and-set), while
 *     step 3 reads (reads change nothing; nothing irreversible happens before the pin is
 *     written). From here on G is evaluated against these documents only. With no order line attribute in them
 *     nothing is priced: the pin is written done at once, and G acked.
 *  3. Read the running state of G's customers (their `cs` keys: `before` when the key's seq
 *     is S, `after` otherwise; no key: nothing), list the cap periods G touches
 *     (groupCapPeriods) and take each one's total from its customer's key when that holds it,
 *     else read its own key (with the keys a rewrite of a customer's key would spill, for their
 *     revisions), by the same rule (no key: zero). A key whose seq is after S was
 *     written by a later group: G was committed meanwhile by another holder (this one paused
 *     past the ack wait, G's messages redelivered), so these are not G's starting values and
 *     G is abandoned here, before anything is published (overtaken; with the pin unchanged
 *     there is no later group: the key comes from elsewhere, and the partition stops with an
 *     error rather than guess).
 *  4. Evaluate (group.ts: each message as alone, in order, from the state the ones before it
 *     left) in a piscina worker, or on the main thread for a group of at most `inlineSignals`
 *     signals, where the hop costs more than the work: pure and deterministic, so a replay,
 *     from the same state, period totals and pinned documents, computes the same rows and events.
 *  5. Publish each message's cost, credit-consumption and unpriced rows to `<P>_BILLING_ROWS`
 *     with Nats-Msg-Id = rows-<batch id>.p<k> (stored once); the rows inserter (rows.ts)
 *     stores them in bulk, dropping rows already in the tables on a redelivery.
 *  6. Publish the events with Nats-Msg-Id = event id, waiting for the stream's ack: an event
 *     published by an earlier attempt is stored only once.
 *  7. Write the state of every customer whose state or cap periods G changed,
 *     {seq: S, before, after, periods} with the periods it holds, and the own key of each
 *     period that rewrite spills, each with compare-and-set on the revision read in 3 (0: never
 *     written), all in one round (bus/kv-write.ts): a holder that lost G to an ack-wait expiry
 *     cannot overwrite a later group's values; it fails and finds G committed. One key per
 *     customer changed, not one per customer and one per cap period.
 *  8. Write pin.<k> marked `done: true` with compare-and-set on the pin's revision. This is
 *     the commit point. A failed compare-and-set means another holder finished G in between
 *     (an ack-wait expiry): the retry finds it done and acks. When the next group's pin was
 *     made while G published (pinAhead) and that group follows G directly (the rule of 2),
 *     that pin, pending, is written instead: it commits G just the same (every message
 *     before a pending pin's `seq` is committed), and the next step starts at 3.
 *  5–7 run at once: each is replayable without the other (3's before/after rule; the same
 *     ids), so no order between them is needed; both are settled before 8.
 *  9. Ack G's messages.
 * A crash before 8 replays G from the same pin, customer states and period totals (the
 * before/after rule undoes G's own writes): the same rows (deduplicated) and events (same
 * ids). Each period's `reached` flag is kept in its key for ever, so a cap fires at most once
 * per period even after the event stream's duplicate window. A failure is retried in place,
 * holding the messages; while held their ack wait is renewed (`working`), so only a dead
 * holder's messages are redelivered (BILLING_ACK_WAIT_MS). A process that stops naks what it
 * holds and has not evaluated: the next holder's group still starts at the oldest
 * uncommitted message, so it waits for their redelivery rather than overtake them. Balances and period totals live in JetStream KV on disk,
 * never only in Redis. Test-only fault points along this order: fault.ts.
 */
import { randomBytes } from 'node:crypto';
import { MessageChannel } from 'node:worker_threads';
import type { JsMsg } from '@nats-io/jetstream';
import type { KV, KvEntry } from '@nats-io/kv';
import { headers as natsHeaders } from '@nats-io/transport-node';
import type { Nats } from '../../bus/connection.js';
import { kvReader, type KvReader } from '../../bus/kv-read.js';
import { KvWriteConflict, kvWriter, type KvWrite, type KvWriter } from '../../bus/kv-write.js';
import { publishDurableMany, type DurableMessage } from '../../bus/publish.js';
import { nextSeq } from '../../bus/stream-get.js';
import { billingLog as log } from '../../log.js';
import { billingEvents, billingFetchesOverdue, billingGroupMessages, billingGroupSeconds, billingLag, billingPartitionsPulled, billingWaits } from '../../metrics/index.js';
import { H_BATCH, H_MODE, H_ORG, type BillableLine } from '../../bus/batch.js';
import { busEvent, eventMessage } from '../../bus/events.js';
import type { BillingConfig, CreditCap, CreditPool, Customer, OrderLineAttribute, Plan, Unit } from '../model.js';
import { parseDecimal, sum, toCanonicalString } from '../decimal.js';
import { startingTotal, type BillableSignal, type BillingState, type PeriodEntry, type PeriodTotal } from './evaluate.js';
import { evaluateGroup, groupCapPeriods, parseBillable, scopeOf, type AskingTask, type WorkerAnswer, type GroupCapPeriodsInput, type GroupInput, type GroupLookups, type GroupOutput, type GroupUnit, type ScopedCapPeriodRef, type UnitText, type WorkerTask } from './group.js';
import { FaultHook, type FaultContext } from './fault.js';
import { CustomerStates, heldTotal, spillsOf, type ChangedPeriods, type EntryWrite, type ReadStates } from './customer-state.js';
import { pinKey } from './pins.js';
import { pullLoop } from './pull.js';
import { StateCache, knownOf, type Known, type ReadKnown } from './state-cache.js';
import { stringEnd } from './partition.js';
import type { Mode } from '../../shared/mode.js';
import { workerTask, type WorkerPool } from '../../shared/worker-pool.js';

const WORKER_FILE = new URL('../../../workers/billing.js', import.meta.url).href;
const evaluateTask = workerTask<AskingTask, GroupOutput>(WORKER_FILE, 'evaluateAsking');
/** At most this many messages in a group. */
export const GROUP_MESSAGES = 64;
/**
 * At most this many distinct customers in a group (each adds its documents to the pin: ≈2 KB for a customer with a unit tree of three, an attribute, a pool and a cap, so ≈900 KB;
 * a pin over max_payload pins the group's first half instead: pinOf). 448 rather than 256: twice the messages per group for 500-signal batches (docs/decisions/0004-pins-with-documents.md).
 */
export const GROUP_CUSTOMERS = 448;
/** Messages of one partition a process holds at most (the partition consumer's max_ack_pending). */
export const GROUP_HELD = 2 * GROUP_MESSAGES;
/** How long a fetch of a partition's messages waits for them at most (its idle heartbeat is half of it). */
export const FETCH_EXPIRES_MS = 2_000;
/**
 * How long past its expiry a fetch that has not ended is taken as over on the server's side,
 * so that its loop pulls again without waiting for its end to be seen (pull.ts).
 */
export const FETCH_GRACE_MS = 250;
/** Fetch loops per partition (startPullers). */
const PULLERS = 2;
/** How long a process waits before looking again when older messages of a partition are held elsewhere. */
const WAIT_MS = 25;
/** How often the billing lag is reported (EvaluatorOptions.lag), besides after each commit. */
const LAG_REPORT_MS = 100;
/** A lane holding messages that has committed nothing for this long no longer counts in the billing lag reported (reportLag). */
const STUCK_MS = 10_000;
/** State keys a lane keeps at most (state-cache.ts): a customer's state and its cap periods, for a few thousand customers. */
const STATE_CACHE_KEYS = 8_192;

export interface ConfigSource {
  /** The configuration restricted to the customers `refs` name (ids or externalIds) and the plans they use. */
  forBatch(orgId: string, mode: Mode, refs: Iterable<string>): Promise<{ config: BillingConfig; revisions: Record<string, number> }>;
}

/** The pinned configuration of one organization and mode of a group. */
export interface PinScope {
  orgId: string;
  mode: Mode;
  /** KV key → revision of each configuration document in `config`. */
  revisions: Record<string, number>;
  config: BillingConfig;
}

/** The group a partition evaluates, from its first evaluation on (key `pin.<k>`). */
export interface Pin {
  /** The group's first stream sequence. */
  seq: number;
  /** Its last. */
  last: number;
  /** Every message's, in order. */
  seqs: number[];
  scopes: PinScope[];
}

/**
 * pin.<k> once its group is committed (step 8): the same pin, marked done, without the
 * documents (nothing evaluates a committed group again); each scope keeps its revisions.
 */
export interface DonePin extends Omit<Pin, 'scopes'> {
  scopes: Omit<PinScope, 'config'>[];
  done: true;
}

export function donePin(pin: Pin): DonePin {
  return { ...pin, scopes: pin.scopes.map(({ orgId, mode, revisions }) => ({ orgId, mode, revisions })), done: true };
}

/** Group `seq` of partition `k` was committed by another holder while this one read its states (BillingEvaluator.overtaken). */
export class GroupOvertaken extends Error {
  constructor(
    readonly partition: number,
    readonly seq: number,
    readonly newest: number,
  ) {
    super(`billing group ${seq} of partition ${partition} was committed elsewhere: a state key names sequence ${newest}`);
    this.name = 'GroupOvertaken';
  }
}

/** Part i of a pin too large for one NATS message (SpilledPin): unique to that pin (`id`), written once. */
export const pinPartKey = (k: number, id: string, i: number): string => `pinpart.${k}.${id}.${i}`;

/**
 * pin.<k> of a pending group whose pin does not fit in one NATS message (a group of one
 * message naming more customers' documents than max_payload holds): the pin's JSON text is
 * in `parts` keys pinPartKey(k, id, i), written create-only before pin.<k>, read back whole
 * when the group is taken up again, and removed once it is committed.
 */
interface SpilledPin {
  seq: number;
  last: number;
  seqs: number[];
  spilled: { id: string; parts: number };
}

/** A pin as read (a spilled one still to be read whole: BillingEvaluator.unspill). */
export function readPin(e: KvEntry | null): Pin | DonePin | SpilledPin | null {
  if (!e || e.operation !== 'PUT' || e.length === 0) return null;
  return e.json<Pin | DonePin | SpilledPin>();
}

export interface EvaluatorOptions {
  publishTimeoutMs: number;
  /** The billing consumer's ack wait: a held message's is renewed at a third of it. */
  ackWaitMs: number;
  /** Partitions in use (ensureBillingStreams). */
  partitions: number;
  /**
   * Groups of at most this many signals are evaluated on this thread, larger ones on a worker
   * (BILLING_INLINE_SIGNALS, config.ts), and groups are formed of at most this many (formGroup;
   * 0: no bound, every group on a worker). A worker's evaluation hands the group over four times
   * (task, cap periods asked, states answered, result), and on a loaded machine each handover
   * waits for a thread to be scheduled and for the other thread's queue: a 500-signal step
   * spent ~150 ms of wall time in handovers around ~9 ms of evaluation (docs/decisions/0009-billing-groups-inline.md).
   * Inline, the pin's documents are used as they are (no JSON copy to parse on the other
   * side) and the step runs in one thread's turns; the bound keeps one group from holding the
   * event loop (which also answers the ingress) for more than about 20 ms.
   */
  inlineSignals: number;
  /**
   * Told the billing lag of this process (ms: how long ago it received the oldest billable
   * message it holds and has not committed, over the partitions that are moving: reportLag; 0
   * when none) every LAG_REPORT_MS and after each commit: the ingress of the same process holds
   * its answers while it is too long (src/shared/backlog-gate.ts).
   */
  lag?: (ms: number) => void;
  fault?: FaultHook;
}

export interface EvaluatorStats {
  /** Billable messages committed. */
  messages: number;
  /** Groups committed. */
  groups: number;
  events: number;
  costRows: number;
}

/**
 * A held message of a partition: the customers its billed signals name (read from each line's
 * start, partition.ts); its text is decoded from the message's bytes again when its group is
 * evaluated (textOf), and the signals are parsed only then, on the thread that evaluates it.
 * A message waits held for as long as the billing lag: a string copy of every held message
 * would outlive the young generation's collections and be copied by each of them.
 */
interface Held {
  m: JsMsg;
  seq: number;
  batchId: string;
  /** When this process received it (performance.now(): the billing lag it reports, on this host's clock alone). */
  receivedAt: number;
  unit: Omit<UnitText, 'text'> & { customers: string[] };
  signals?: BillableSignal[];
}

/** A held message's text (the pipeline's lines), from its bytes. */
function textOf(h: Pick<Held, 'm'>): string {
  const { data } = h.m;
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8');
}

function signalsOf(h: Held): BillableSignal[] {
  return (h.signals ??= parseBillable(textOf(h)));
}

/** The customer (`k`) of each billed line of a billable message's text (lines without one are not billed). */
export function billedCustomers(text: string): string[] {
  const out: string[] = [];
  for (const line of text.split('\n')) {
    if (line === '') continue;
    // The partitioner writes `k` first (partition.ts); any other form is parsed whole.
    const end = line.startsWith('{"k":') ? stringEnd(line, 5) : -1;
    const k = end > 0 ? (JSON.parse(line.slice(5, end)) as string) : (JSON.parse(line) as BillableLine).k;
    if (k !== undefined) out.push(k);
  }
  return out;
}

/** A group's pin as pinOf makes it: the group (its first half, when the whole would not fit), the pin, its text, and whether nothing in it is priced. */
interface PinMade {
  group: Held[];
  pin: Pin;
  /** The pin's JSON text, UTF-8 (pinBytes). */
  bytes: Buffer;
  unpriced: boolean;
}

/** The messages a process holds of one partition, in sequence order, and a way to wait for more. */
class Lane {
  readonly held: Held[] = [];
  private wake: (() => void) | null = null;
  /**
   * What this process last wrote to the partition's pin (value and revision) and the delivery
   * sequence of the last message it committed: while no one else touches the partition, the
   * next step needs neither to read the pin nor to ask the stream for its oldest message (see
   * step). Forgotten on any failure or sign of another holder.
   */
  pin: { value: Pin | DonePin; revision: number; parts: number[] } | null = null;
  lastDelivery: number | null = null;
  /** The partition's state keys as of this lane's last commit (used while `pin` is: state-cache.ts). */
  readonly states = new StateCache(STATE_CACHE_KEYS);
  /** When this lane last committed a group (performance.now()): a lane that stops moving is left out of the billing lag reported. */
  progressAt = 0;
  /**
   * The pin of the group after the one in flight, made while that one publishes and writes
   * (step, `pinAhead`): `seqs` its messages, in order; `early` when it was started before that
   * group's writes (not after them). Used by the commit (early ones only) or by the next step
   * when the group it forms starts with those very messages; otherwise dropped.
   */
  ahead: { seqs: number[]; made: Promise<PinMade>; early: boolean } | null = null;

  forget(): void {
    this.pin = null;
    this.lastDelivery = null;
    this.ahead = null;
    this.states.clear();
  }

  add(h: Held): void {
    let i = this.held.length;
    while (i > 0 && this.held[i - 1]!.seq > h.seq) i--;
    if (i > 0 && this.held[i - 1]!.seq === h.seq) this.held[i - 1] = h; // the same message again (redelivered): its newer delivery
    else this.held.splice(i, 0, h);
    this.wake?.();
  }

  remove(done: ReadonlySet<number>): void {
    for (let i = this.held.length - 1; i >= 0; i--) if (done.has(this.held[i]!.seq)) this.held.splice(i, 1);
  }

  /** Resolves when a message arrives (or after `ms`). */
  next(ms: number): Promise<void> {
    return new Promise((r) => {
      const t = setTimeout(() => {
        this.wake = null;
        r();
      }, ms);
      this.wake = () => {
        clearTimeout(t);
        this.wake = null;
        r();
      };
    });
  }
}

export class BillingEvaluator {
  private readonly lanes: Lane[] = [];
  /** The partitions this process pulls from. */
  private readonly pulling = new Set<number>();
  /** The running fetch loops of each partition (startPullers; each ends at its fetch's end once the partition is given up). */
  private readonly pullers = new Map<number, Set<Promise<void>>>();
  private readonly loops: Promise<void>[] = [];
  private readonly customers: CustomerStates;
  /** Reads of the state bucket: direct gets, a group's keys in one round (bus/kv-read.ts). */
  private readonly stateReader: KvReader;
  /** Compare-and-set writes to the state bucket, a group's keys in one round (bus/kv-write.ts). */
  private readonly stateWriter: KvWriter;
  /** Tasks of this evaluator on the shared pool, at most what it runs at once (its queue is sized for the pipeline). */
  private readonly poolSlots: Slots;
  readonly stats: EvaluatorStats = { messages: 0, groups: 0, events: 0, costRows: 0 };

  constructor(
    private readonly nats: Nats,
    private readonly configs: ConfigSource,
    private readonly state: KV,
    /** The process's worker pool (main.ts), shared with the pipeline. */
    private readonly pool: WorkerPool,
    private readonly opts: EvaluatorOptions,
  ) {
    // With replicas, read from the leader: a follower may not have applied the last group's writes yet (kv-read.ts LeaderKvReader).
    this.stateReader = kvReader(state, undefined, { leader: nats.replicas > 1 });
    this.stateWriter = kvWriter(state);
    this.customers = new CustomerStates(state, this.stateReader);
    this.poolSlots = new Slots(Math.max(1, pool.capacity));
  }

  /**
   * The pure steps (group.ts) of a group on the worker pool, in one task (workers/billing.ts
   * evaluateAsking): the worker posts the cap periods the group touches, `before` reads what
   * the evaluation starts from, the worker evaluates. A group of at most `inlineSignals`
   * signals is evaluated on this thread instead (step): the hop to a worker (and the copies
   * there and back) costs more than the work.
   */
  private evaluateAsking(task: WorkerTask<GroupCapPeriodsInput>, before: (refs: ScopedCapPeriodRef[]) => Promise<Pick<GroupInput, 'states' | 'periods'>>): Promise<GroupOutput> {
    return this.poolSlots.with(async () => {
      const { port1, port2 } = new MessageChannel();
      let asked: Promise<void> = Promise.resolve();
      port1.once('message', (refs: ScopedCapPeriodRef[]) => {
        asked = before(refs).then(
          (answer) => port1.postMessage(answer satisfies WorkerAnswer),
          (err: unknown) => {
            port1.postMessage({ error: err instanceof Error ? err.message : String(err) } satisfies WorkerAnswer);
            throw err;
          },
        );
        asked.catch(() => undefined); // awaited below; not an unhandled rejection meanwhile
      });
      try {
        const out = await evaluateTask(this.pool, { ...task, port: port2 }, [port2]);
        await asked;
        return out;
      } catch (err) {
        // A failed read is the error to report (the worker only abandoned because of it).
        await asked;
        throw err;
      } finally {
        port1.close();
      }
    });
  }

  private lagTimer: NodeJS.Timeout | null = null;

  /**
   * Reports the billing lag (EvaluatorOptions.lag): how long ago this process received the
   * oldest message it holds, over the lanes that are moving — on this host's clock only (the
   * stream's timestamps are the NATS server's: a skew between the hosts would read as lag, or
   * hide it). A lane that has committed nothing for STUCK_MS while holding messages (a message
   * it cannot read, a partition stopped until an operator acts, a group waiting for a dead
   * holder's ack wait) is left out: holding the producers cannot help it, and would slow every
   * answer for as long as it lasts.
   */
  private reportLag(): void {
    if (!this.opts.lag || this.stopping) return;
    const now = performance.now();
    let oldest = Infinity;
    for (const lane of this.lanes) {
      const h = lane.held[0];
      if (!h || now - Math.max(lane.progressAt, h.receivedAt) > STUCK_MS) continue;
      if (h.receivedAt < oldest) oldest = h.receivedAt;
    }
    this.opts.lag(oldest === Infinity ? 0 : now - oldest);
  }

  private get fault(): FaultHook {
    return this.opts.fault ?? FaultHook.off;
  }

  /** One lane per partition, each evaluated by its own loop; pulling starts with `assign` (all partitions unless `membership`). */
  async start(membership = false): Promise<void> {
    if (this.opts.lag) this.lagTimer = setInterval(() => this.reportLag(), LAG_REPORT_MS);
    for (let k = 0; k < this.opts.partitions; k++) {
      const lane = new Lane();
      this.lanes.push(lane);
      this.loops.push(this.loop(lane, k));
    }
    if (!membership) await this.assign(this.lanes.map((_, k) => k));
  }

  /**
   * Pulls from these partitions (at most GROUP_HELD messages of each held) and no others
   * (members.ts). What is already held of a partition given up is evaluated all the same.
   */
  async assign(partitions: readonly number[]): Promise<void> {
    this.pulling.clear();
    for (const k of partitions) if (this.lanes[k]) this.pulling.add(k);
    billingPartitionsPulled.set(this.pulling.size);
    for (const k of this.pulling) if (!this.stopping) this.startPullers(k);
  }

  /**
   * Two fetch loops for partition k, half an expiry apart (pull): one fetch that ends late
   * leaves the other pulling. Tops up to two: a loop that ended (k given up for a moment and
   * given back) is replaced, the one still running kept.
   */
  private startPullers(k: number): void {
    let running = this.pullers.get(k);
    if (!running) this.pullers.set(k, (running = new Set()));
    for (let i = running.size; i < PULLERS; i++) {
      const loop: Promise<void> = this.pull(k, this.lanes[k]!, running.size === 0 ? 0 : FETCH_EXPIRES_MS / 2).finally(() => running.delete(loop));
      running.add(loop);
    }
  }

  /**
   * Takes partition k's messages into its lane while k is this process's (pull.ts: one fetch
   * after another, each for what the lane has room for; the consumer's max_ack_pending,
   * GROUP_HELD, bounds what the server hands out to all of a lane's fetches together).
   *
   * Each partition runs two of these loops, the second starting `delayMs` (half an expiry)
   * later, so that a fetch is outstanding while the other's next request is on its way. The
   * server shares a partition's messages out between its outstanding requests (the oldest
   * first, then in turn); the lane orders what any of them receives (Lane.add).
   */
  private async pull(k: number, lane: Lane, delayMs: number): Promise<void> {
    if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
    const { billableParts } = this.nats.topology;
    // Looked up until it answers: a puller that ended on a slow lookup would leave partition k
    // to nobody in this process until the membership changed (seen in CI: 70 messages left).
    let consumer: Awaited<ReturnType<typeof this.nats.js.consumers.get>> | null = null;
    while (!consumer && this.pulling.has(k) && !this.stopping) {
      try {
        consumer = await this.nats.js.consumers.get(billableParts.stream, billableParts.consumer(k));
      } catch (err) {
        log.warn('billing partition consumer lookup failed; looking again', { err, partition: k });
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    if (!consumer) return;
    const c = consumer;
    await pullLoop({
      fetch: (opts) => c.fetch(opts),
      receive: (m) => this.receive(m, lane),
      room: () => GROUP_HELD - lane.held.length,
      roomMade: (ms) => lane.next(ms),
      running: () => this.pulling.has(k) && !this.stopping,
      overdue: () => billingFetchesOverdue.inc(),
      expiresMs: FETCH_EXPIRES_MS,
      graceMs: FETCH_GRACE_MS,
      waitMs: WAIT_MS,
      partition: k,
    });
  }

  /** Takes a message of a partition into its lane. */
  private receive(m: JsMsg, lane: Lane): void {
    let h: Held;
    try {
      const { orgId, mode, batchId } = headersOf(m);
      h = { m, seq: m.seq, batchId, receivedAt: performance.now(), unit: { orgId, mode, customers: billedCustomers(textOf({ m })), evaluatedAt: Math.floor(m.info.timestampNanos / 1e6) } };
    } catch (err) {
      // Not a billable message this version can read: it is logged and left to its ack
      // wait (an operator's matter); the partition waits for it, as for any older message.
      log.error('billable message unreadable; not evaluated', { err, seq: m.seq });
      return;
    }
    lane.add(h);
  }

  /**
   * Evaluates a partition's held messages, a group at a time. A failed step is retried in
   * place, holding the messages (never nakked): a nak would let later messages of the
   * partition overtake them, applying a customer's batches out of order. Billing waits rather
   * than goes out of order.
   */
  private async loop(lane: Lane, k: number): Promise<void> {
    // Held, the messages must not be redelivered to another process: renew their ack wait.
    const beat = setInterval(() => {
      for (const h of lane.held) {
        try {
          h.m.working();
        } catch {
          /* disconnected: renewed again at the next beat */
        }
      }
    }, Math.max(100, Math.floor(this.opts.ackWaitMs / 3)));
    try {
      let attempt = 0;
      while (!this.stopping) {
        if (lane.held.length === 0) {
          await lane.next(1_000);
          continue;
        }
        try {
          const started = performance.now();
          const moved = await this.step(lane, k);
          attempt = 0;
          if (moved) {
            lane.progressAt = performance.now();
            billingGroupSeconds.observe((performance.now() - started) / 1000);
            this.reportLag();
          }
          else {
            billingWaits.inc();
            await lane.next(WAIT_MS);
          }
        } catch (err) {
          if (this.stopping) return;
          lane.forget();
          if ((err instanceof KvWriteConflict || err instanceof GroupOvertaken) && attempt < 3) {
            // Another holder wrote the pin or a state key in between: look again at once.
            attempt++;
            if (err instanceof GroupOvertaken) log.warn('billing group committed by another holder while this one evaluated it; abandoned before publishing, looking again', { seq: err.seq, newest: err.newest, partition: k });
            else log.warn('billing evaluation lost a compare-and-set; looking again', { seq: lane.held[0]?.seq, partition: k, keys: err.keys.slice(0, 3) });
            continue;
          }
          attempt++;
          log.error('billing evaluation failed; retrying in place', { err, seq: lane.held[0]?.seq, partition: k, attempt });
          await new Promise((r) => setTimeout(r, Math.min(10_000, 200 * 2 ** Math.min(6, attempt))));
        }
      }
    } finally {
      clearInterval(beat);
    }
  }

  private stopping = false;

  /** Acks held messages and forgets them. */
  private ackAll(lane: Lane, group: readonly Held[]): void {
    for (const h of group) h.m.ack();
    lane.remove(new Set(group.map((h) => h.seq)));
  }

  /** The oldest message of partition k after `after` still in the stream (not acked), or 0. */
  private async oldest(k: number, after: number): Promise<number> {
    const { billableParts } = this.nats.topology;
    return nextSeq(this.nats.nc, this.nats.js.getOptions().apiPrefix ?? '$JS.API', billableParts.stream, billableParts.filter(k), after + 1, this.opts.publishTimeoutMs);
  }

  /** One step of partition k: commits a group, or acks what is committed; false when it must wait for another holder. */
  private async step(lane: Lane, k: number): Promise<boolean> {
    // 1. The pin of partition k: what is committed, and the group in flight (as this process
    // last wrote it, while it is the partition's only holder: a stale one fails its
    // compare-and-set below, and the retry reads it).
    let current: Pin | DonePin | null;
    let pinRevision: number;
    /** The parts of the pin in use when it is a spilled one: removed once its group is committed. */
    let parts: number[] = [];
    if (lane.pin) ({ value: current, revision: pinRevision, parts } = lane.pin);
    else {
      const [e] = await this.stateReader.getMany([pinKey(k)], { markers: true });
      const read = readPin(e ?? null);
      pinRevision = e?.revision ?? 0;
      if (read && 'spilled' in read) ({ pin: current, parts } = await this.unspill(k, read));
      else current = read;
    }
    const committedUpTo = !current ? 0 : 'done' in current ? current.last : current.seq - 1;
    const committed = lane.held.filter((h) => h.seq <= committedUpTo);
    if (committed.length > 0) {
      log.warn('billable messages already committed (by another holder, or their ack was lost)', { partition: k, seqs: committed.map((h) => h.seq) });
      this.ackAll(lane, committed);
      lane.forget();
    }
    if (lane.held.length === 0) return committed.length > 0;

    let group: Held[];
    let pinned: { pin: Pin; revision: number } | null = null;
    if (current && !('done' in current)) {
      // 2'. A pinned group: exactly its messages, once all are held here.
      const want = new Set(current.seqs);
      group = lane.held.filter((h) => want.has(h.seq));
      if (group.length !== current.seqs.length) {
        // Part of the group is held by another process. One that no longer pulls partition k
        // gives its part back (naks it): otherwise both holders could wait for each other for
        // ever (the group's messages redelivered after a crash, split between the process that
        // pulled k then and the one k was given to next).
        if (!this.pulling.has(k) && group.length > 0) {
          log.warn('a pinned billing group is held partly elsewhere: giving back this part', { partition: k, seqs: group.map((h) => h.seq) });
          for (const h of group) h.m.nak();
          lane.remove(new Set(group.map((h) => h.seq)));
        }
        return committed.length > 0;
      }
      pinned = { pin: current, revision: pinRevision };
    } else {
      // At most inlineSignals signals, so that the group is evaluated on this thread (unless
      // its first message alone is larger): a worker's evaluation costs a loaded step its
      // handovers, and the workers, rarely used, run it with cold code (EvaluatorOptions).
      group = formGroup(lane.held, this.opts.inlineSignals > 0 ? this.opts.inlineSignals : Infinity);
      // Delivered right after the last message this process committed: nothing of the
      // partition lies between (the rule of formGroup); otherwise the stream says.
      const first = group[0]!.m;
      const next = lane.lastDelivery !== null && !first.redelivered && first.info.deliverySequence === lane.lastDelivery + 1;
      if (!next && (await this.oldest(k, committedUpTo)) !== group[0]!.seq) return committed.length > 0; // older messages held elsewhere
    }

    // The partition's keys as this lane last left them stand while its own pin is in use (state-cache.ts).
    const trusted = lane.pin !== null;
    // 2. The configuration G is evaluated against: pinned (written) while step 3 reads.
    let pinWrite: Promise<number>;
    /** The pin's JSON text (UTF-8), when this step wrote it: what the worker gets instead of the configurations' objects. */
    let pinBytesWritten: Buffer | null = null;
    if (pinned) {
      // This lane's own pending pin (a commit that wrote the next group's pin): nobody else has
      // written it since, or it is not this lane's to evaluate. Read beside the states, as the
      // compare-and-set of a pin write would have checked it: a process that stalled past the
      // ack wait finds the pin moved and publishes nothing from its kept states.
      pinWrite = trusted ? this.pinUnchanged(k, pinned.revision) : Promise.resolve(pinned.revision);
      pinWrite.catch(() => undefined);
    } else {
      const made = await this.aheadOr(lane, group);
      group = made.group;
      if (made.unpriced) {
        const [revision] = await this.stateWriter.writeMany([{ key: pinKey(k), value: made.bytes, revision: pinRevision }]);
        lane.pin = { value: donePin(made.pin), revision: revision!, parts: [] };
        lane.lastDelivery = lastDelivery(group);
        this.ackAll(lane, group);
        this.committed(group, 0, 0);
        return true;
      }
      pinned = { pin: made.pin, revision: 0 };
      pinBytesWritten = made.bytes;
      pinWrite = this.writePin(k, made.pin, made.bytes, pinRevision).then((w) => {
        parts = w.parts;
        return w.revision;
      });
      // Awaited by `before` (step 3); a worker that fails before asking leaves it unawaited: not
      // an unhandled rejection then (the step fails with the worker's error, and the next one
      // reads the pin again).
      pinWrite.catch(() => undefined);
    }
    const { pin } = pinned;
    const seq = pin.seq;
    const configs: Record<string, BillingConfig> = {};
    for (const s of pin.scopes) configs[scopeOf(s.orgId, s.mode)] = s.config;
    const priced = pin.scopes.filter((s) => Object.keys(s.config.attributes).length > 0);
    const signals = group.reduce((n, h) => n + h.unit.customers.length, 0);
    // On this thread (a small group): parsed here; for a worker: the texts, parsed there.
    const inline = signals <= this.opts.inlineSignals;
    const units: GroupUnit[] = inline ? group.map((h) => ({ orgId: h.unit.orgId, mode: h.unit.mode, evaluatedAt: h.unit.evaluatedAt, signals: signalsOf(h) })) : [];
    const texts: UnitText[] = inline ? [] : group.map((h) => ({ orgId: h.unit.orgId, mode: h.unit.mode, evaluatedAt: h.unit.evaluatedAt, text: textOf(h) }));

    // 3. The running state of G's customers and the totals of the cap periods G touches.
    // 4. Evaluate. On a worker, in one task: it lists the cap periods and asks for their
    // totals and the states over a port (the pin and the messages cross and are parsed once).
    let readOf = new Map<string, ReadStates>();
    let refs: ScopedCapPeriodRef[] = [];
    /** Per scope and customer id, the period keys of the customer G lists (customer-state.ts: those its key may hold). */
    let touched = new Map<string, Map<string, Set<string>>>();
    /** The `cp.…` keys read (periods not held in their customer's key, and those a rewrite would spill), as read. */
    let periodKeys = new Map<string, Known>();
    let periods: Record<string, PeriodTotal> = {};
    // Markers too: a key deleted or purged by hand is written over at its marker's revision.
    const readKnown: ReadKnown = async (keys) => (await this.stateReader.getMany(keys, { markers: true })).map(knownOf);
    const known: ReadKnown = (keys) => lane.states.readMany(keys, trusted, readKnown);
    /** The states and period totals before G, once the pin is written: `listed` the cap periods G touches. */
    const before = async (listed: ScopedCapPeriodRef[]): Promise<Pick<GroupInput, 'states' | 'periods'>> => {
      refs = listed;
      const read = (): Promise<ReadStates[]> => this.customers.readMany(priced, seq, known);
      // The test-only fault point between the pin and the reads orders them (else concurrent).
      const [revision, reads] = this.fault.armed('before-states')
        ? await pinWrite.then(async (r) => {
            await this.fault.at('before-states', { seq, messages: group.length, orgId: group[0]!.unit.orgId, mode: group[0]!.unit.mode });
            return [r, await read()] as const;
          })
        : await Promise.all([pinWrite, read()]);
      pinned.revision = revision;
      lane.pin = { value: pin, revision, parts };
      readOf = new Map<string, ReadStates>(priced.map((s, i) => [scopeOf(s.orgId, s.mode), reads[i]!]));
      // A period's total: from its customer's key when that holds it, else from its own key.
      touched = new Map();
      periods = {};
      const fromKeys: string[] = [];
      for (const r of refs) {
        const customerId = configs[r.scope]?.caps[r.capKey]?.customerId;
        const c = customerId === undefined ? undefined : readOf.get(r.scope)?.customers.get(customerId);
        if (c) {
          let byCustomer = touched.get(r.scope);
          if (!byCustomer) touched.set(r.scope, (byCustomer = new Map()));
          let keys = byCustomer.get(customerId!);
          if (!keys) byCustomer.set(customerId!, (keys = new Set()));
          keys.add(r.key);
          const held = heldTotal(c.held, r.key, seq);
          if (held) {
            periods[r.key] = held;
            continue;
          }
        }
        fromKeys.push(r.key);
      }
      const listedKeys = fromKeys.length;
      // The keys a rewrite of a customer's key would spill: read now, for their revisions.
      for (const [scope, read] of readOf) {
        for (const [id, c] of read.customers) {
          if (Object.keys(c.held).length > 0) fromKeys.push(...spillsOf(c.held, touched.get(scope)?.get(id) ?? new Set()));
        }
      }
      const entries = fromKeys.length > 0 ? await known(fromKeys) : [];
      periodKeys = new Map(fromKeys.map((key, i) => [key, entries[i]!]));
      let newest = Math.max(0, ...reads.map((r) => r.newest));
      for (let i = 0; i < fromKeys.length; i++) {
        const stored = entries[i]!.value as PeriodEntry | null;
        if (stored) newest = Math.max(newest, stored.seq);
        if (i < listedKeys) periods[fromKeys[i]!] = startingTotal(stored, seq);
      }
      if (newest > seq) await this.overtaken(k, seq, newest, revision);
      const states: Record<string, BillingState> = {};
      for (const [scope, read] of readOf) states[scope] = read.state;
      return { states, periods };
    };
    let out: GroupOutput;
    if (inline) {
      const task = { configs, units };
      const lookups: GroupLookups = new Map();
      out = evaluateGroup({ ...task, ...(await before(priced.some((s) => Object.keys(s.config.caps).length > 0) ? groupCapPeriods(task, lookups) : [])) }, lookups);
    } else out = await this.evaluateAsking(forWorker({ configs, units }, texts, pinBytesWritten === null ? null : pinBytesWritten.toString('utf8')), before);
    const events = out.units.reduce((n, u) => n + u.events.length, 0);
    const fault: FaultContext = { seq, messages: group.length, orgId: group[0]!.unit.orgId, mode: group[0]!.unit.mode, events };
    await this.fault.at('after-pin', fault);
    // The next group's configuration is read while this one publishes and writes.
    this.pinAhead(lane, group, true);

    // 5. Rows, per message. They go to a stream (stored once per batch id and partition) and
    // are inserted in bulk by the rows inserter (rows.ts): the engine's insert is off this
    // path. Durable here, before the commit point.
    // 6. Events, each under its id. Both in one round (publishDurableMany).
    const published: DurableMessage[] = [];
    group.forEach((h, i) => {
      const { rows, events } = out.units[i]!;
      if (rows !== null) {
        const hd = natsHeaders();
        hd.set(H_ORG, h.unit.orgId);
        hd.set(H_MODE, h.unit.mode);
        published.push({ subject: this.nats.topology.billingRows.subject(h.unit.orgId), data: rows, headers: hd, msgId: `rows-${h.batchId}.p${k}` });
      }
      const at = new Date(h.unit.evaluatedAt);
      for (const e of events) published.push(eventMessage(this.nats, busEvent(e, h.unit.orgId, h.unit.mode, at)));
    });
    const publish = (): Promise<unknown> => publishDurableMany(this.nats.nc, published, this.opts.publishTimeoutMs);

    // 7. Customer states with the cap periods they hold (and the periods a rewrite spills), each
    // compare-and-set on what step 3 read, in one round (customer-state.ts). Only the periods G
    // spent in change: a listed period G did not touch keeps its value (a replay reads its
    // `after`, as G's evaluation did). A period whose customer G does not name (none: a cap is
    // on the unit of the customer whose signal spends in it) would be written to its own key.
    const changed = new Map<string, Map<string, ChangedPeriods>>();
    const writes: EntryWrite[] = [];
    for (const r of refs) {
      const after = out.periods[r.key];
      if (!after) continue;
      const customerId = configs[r.scope]?.caps[r.capKey]?.customerId;
      if (customerId !== undefined && touched.get(r.scope)?.get(customerId)?.has(r.key)) {
        let byCustomer = changed.get(r.scope);
        if (!byCustomer) changed.set(r.scope, (byCustomer = new Map()));
        let mine = byCustomer.get(customerId);
        if (!mine) byCustomer.set(customerId, (mine = {}));
        mine[r.key] = { before: periods[r.key]!, after };
        continue;
      }
      const entry: PeriodEntry = { seq, before: periods[r.key]!, after };
      writes.push({ key: r.key, value: JSON.stringify(entry), revision: periodKeys.get(r.key)!.revision, entry });
    }
    const periodRevision = (key: string): number => {
      const read = periodKeys.get(key);
      if (!read) throw new Error(`billing partition ${k}: the key ${key} to spill was not read`);
      return read.revision;
    };
    for (const s of priced) {
      const scope = scopeOf(s.orgId, s.mode);
      writes.push(...this.customers.writesOf(s.orgId, s.mode, s.config, seq, readOf.get(scope)!, out.states[scope]!, touched.get(scope) ?? new Map(), changed.get(scope) ?? new Map(), periodRevision));
    }
    const writeStates = async (): Promise<void> => {
      const revisions = await this.stateWriter.writeMany(writes);
      writes.forEach((w, i) => lane.states.set(w.key, w.entry, revisions[i]!));
    };
    // 5–7 at once: each is replayable without the other (a replay reads a key G wrote as its
    // `before`, and publishes under the same ids), and only the commit point (8) ends G. The
    // test-only fault points between them order them instead: events first (after-events) or
    // states first (after-states).
    if (this.fault.armed('after-states')) {
      await writeStates();
      await this.fault.at('after-states', fault);
      await publish();
    } else if (this.fault.armed('after-events')) {
      await publish();
      await this.fault.at('after-events', fault);
      await writeStates();
    } else {
      // Both settled before the step goes on or fails (no write landing after a retry began).
      const [states, events] = await Promise.allSettled([writeStates(), publish()]);
      if (states.status === 'rejected') throw states.reason;
      if (events.status === 'rejected') throw events.reason;
    }
    await this.fault.at('before-state-write', fault);
    // Messages that came while those ran, when none were held before: their pin made during the commit.
    if (!lane.ahead) this.pinAhead(lane, group, false);

    // 8. The commit point: G's pin marked done — or, when the next group's pin is made and that
    // group follows G directly, that pin, pending: it commits G all the same (every message
    // before a pending pin's `seq` is committed) and spares the next step its pin write.
    const done = donePin(pin);
    const following = await this.following(lane, group);
    if (following) lane.ahead = null;
    const [doneRevision] = await this.stateWriter.writeMany([{ key: pinKey(k), value: following ? following.bytes : JSON.stringify(done), revision: pinned.revision }]);
    lane.pin = { value: following ? following.pin : done, revision: doneRevision!, parts: [] };
    await this.removeParts(parts);
    lane.lastDelivery = lastDelivery(group);
    await this.fault.at('after-state-write', fault);

    // 9.
    this.ackAll(lane, group);
    this.committed(group, events, out.units.reduce((n, u) => n + u.costs, 0));
    for (const u of out.units) for (const e of u.events) billingEvents.inc({ event: e.event, source: 'evaluator' });
    return true;
  }

  /**
   * `revision` when pin.<k> is still at it; otherwise a KvWriteConflict (the step looks again).
   * Asked as "is there a message on the pin's subject after `revision`" (a write, a delete or a
   * purge of the key is one; one message get, answered by the stream's leader), not by reading
   * the pin: a pending pin holds its group's documents (~1.4 KB a customer), and this is asked
   * before most steps of a busy partition. What it guards against is another holder's write of
   * the pin, which is such a message.
   */
  private async pinUnchanged(k: number, revision: number): Promise<number> {
    const { billingState } = this.nats.topology.buckets;
    const later = await nextSeq(this.nats.nc, this.nats.js.getOptions().apiPrefix ?? '$JS.API', `KV_${billingState}`, `$KV.${billingState}.${pinKey(k)}`, revision + 1, this.opts.publishTimeoutMs);
    if (later !== 0) throw new KvWriteConflict([pinKey(k)]);
    return revision;
  }

  /**
   * Starts making the pin of the group that follows `group` in the lane (the messages held
   * now, formed as step forms a group), so that the next step need not wait for its
   * configuration reads. Its documents are read after every one of its messages was received
   * here, as a step's own reads are: a change made before any of its signals was sent is in it.
   */
  private pinAhead(lane: Lane, group: readonly Held[], early: boolean): void {
    lane.ahead = null;
    const inGroup = new Set(group.map((h) => h.seq));
    const rest = lane.held.filter((h) => !inGroup.has(h.seq));
    if (rest.length === 0 || rest[0]!.seq < group[0]!.seq) return;
    const next = formGroup(rest, this.opts.inlineSignals > 0 ? this.opts.inlineSignals : Infinity);
    const made = this.pinOf(next);
    // Awaited by the commit or the next step, if either uses it; a failure there reads again (aheadOr).
    made.catch(() => undefined);
    lane.ahead = { seqs: next.map((h) => h.seq), made, early };
  }

  /**
   * The pin made ahead for the group right after `group`, when it may be written as `group`'s
   * commit. Only one started before `group`'s writes (it has had their round trip to be made,
   * and is waited for; waiting for one started after them would hold the commit back longer
   * than the next step's own pin write, which runs beside its reads, costs). Its first message
   * delivered right after `group`'s last (nothing of the partition between them: the rule by
   * which a step takes a group without asking the stream), its messages still held here,
   * priced, and one message's worth (no parts). Otherwise null, and `group`'s pin is marked done.
   */
  private async following(lane: Lane, group: readonly Held[]): Promise<PinMade | null> {
    const ahead = lane.ahead;
    const after = lastDelivery(group);
    const first = ahead && lane.held.find((h) => h.seq === ahead.seqs[0]);
    if (!ahead?.early || !first || after === null || first.m.redelivered || first.m.info.deliverySequence !== after + 1) return null;
    const made = await ahead.made.catch(() => null);
    if (!made || made.unpriced || lane.ahead !== ahead) return null;
    if (!made.group.every((g) => lane.held.some((h) => h.seq === g.seq))) return null;
    if (made.bytes.length > this.pinRoom()) return null;
    return made;
  }

  /** The pin made ahead for `group` (pinAhead), when `group` starts with its messages; otherwise made now. */
  private async aheadOr(lane: Lane, group: Held[]): Promise<PinMade> {
    const ahead = lane.ahead;
    lane.ahead = null;
    if (!ahead || ahead.seqs.length > group.length || !ahead.seqs.every((s, i) => group[i]!.seq === s)) return this.pinOf(group);
    // Its messages are the group's first ones, held here (a failure in between forgets `ahead`);
    // taken as the group holds them now (a message delivered again since: its newer delivery).
    let made: PinMade;
    try {
      made = await ahead.made;
    } catch {
      return this.pinOf(group);
    }
    return { ...made, group: group.slice(0, made.group.length) };
  }

  /**
   * Step 3 read a key written by a later stream sequence than group `seq`'s. A later group of
   * the partition wrote it, so G was committed by another holder while this one was not
   * looking (its messages redelivered after an ack-wait expiry: a long pause of this process):
   * what was read is where later groups left the customers, not G's start, and evaluating G
   * from it would publish events of a run that never happened (and could overwrite a state
   * nobody wrote since). G is abandoned before anything is published; the next step reads
   * the pin and acks what is committed. With the partition's pin still the one G was
   * evaluated under, no later group exists: the key comes from elsewhere (the billable stream
   * recreated, its sequences started again; a process hashing customers over another number
   * of partitions). Nothing can be evaluated exactly then: the partition stops, with an
   * error naming it, retried (and logged) until an operator acts.
   */
  private async overtaken(k: number, seq: number, newest: number, revision: number): Promise<void> {
    const e = await this.stateReader.get(pinKey(k));
    if ((e?.revision ?? 0) !== revision) throw new GroupOvertaken(k, seq, newest);
    throw new Error(`billing partition ${k}: a state key names stream sequence ${newest}, after group ${seq}, while no later group is pinned: the billable stream was recreated, or a process hashes customers over another number of partitions; this partition is not evaluated until that is mended`);
  }

  private committed(group: readonly Held[], events: number, costRows: number): void {
    billingGroupMessages.observe(group.length);
    this.stats.messages += group.length;
    this.stats.groups++;
    this.stats.events += events;
    this.stats.costRows += costRows;
    for (const h of group) observeEvaluated(h.m);
  }

  /** The most a pin's text may take in one message: max_payload less room for the subject and headers. */
  private pinRoom(): number {
    return this.nats.maxPayload - 4_096;
  }

  /**
   * Writes group G's pin (compare-and-set on `revision`), in parts first when its text does not
   * fit in one NATS message (SpilledPin). The parts' revisions (their stream sequences) come
   * back with the pin's. A pin that loses its compare-and-set leaves its parts to be removed here.
   */
  private async writePin(k: number, pin: Pin, text: Buffer, revision: number): Promise<{ revision: number; parts: number[] }> {
    const room = this.pinRoom();
    if (text.length <= room) {
      const [r] = await this.stateWriter.writeMany([{ key: pinKey(k), value: text, revision }]);
      return { revision: r!, parts: [] };
    }
    const id = randomBytes(8).toString('hex');
    const count = Math.ceil(text.length / room);
    const parts = await this.stateWriter.writeMany(Array.from({ length: count }, (_, i) => ({ key: pinPartKey(k, id, i), value: text.subarray(i * room, (i + 1) * room), revision: 0 })));
    const spilled: SpilledPin = { seq: pin.seq, last: pin.last, seqs: pin.seqs, spilled: { id, parts: count } };
    try {
      const [r] = await this.stateWriter.writeMany([{ key: pinKey(k), value: JSON.stringify(spilled), revision }]);
      log.warn('a billing pin larger than one NATS message was written in parts', { partition: k, seq: pin.seq, bytes: text.length, parts: count });
      return { revision: r!, parts };
    } catch (err) {
      await this.removeParts(parts);
      throw err;
    }
  }

  /** The whole pin of a spilled one, from its parts (a missing part: an error, retried, naming it). */
  private async unspill(k: number, p: SpilledPin): Promise<{ pin: Pin; parts: number[] }> {
    const keys = Array.from({ length: p.spilled.parts }, (_, i) => pinPartKey(k, p.spilled.id, i));
    const entries = await this.stateReader.getMany(keys);
    const chunks = entries.map((e, i) => {
      if (!e || e.operation !== 'PUT') throw new Error(`billing partition ${k}: part ${keys[i]} of the pin of group ${p.seq} is missing`);
      return e.value;
    });
    const pin = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Pin;
    if (pin.seq !== p.seq || pin.seqs.length !== p.seqs.length) throw new Error(`billing partition ${k}: the parts of the pin of group ${p.seq} hold group ${pin.seq}`);
    return { pin, parts: entries.map((e) => e!.revision) };
  }

  /** Removes a spilled pin's parts from the state bucket's stream (no delete markers left); best effort, logged. */
  private async removeParts(seqs: readonly number[]): Promise<void> {
    const stream = `KV_${this.nats.topology.buckets.billingState}`;
    for (const seq of seqs) {
      try {
        await this.nats.jsm.streams.deleteMessage(stream, seq, false);
      } catch (err) {
        log.warn('a part of a billing pin was not removed; it stays as garbage', { err, seq });
      }
    }
  }

  /**
   * Step 2: the pin of group G — the documents of the customers its signals name and of the
   * plans they use, per organization and mode — and its bytes (written by step, with
   * compare-and-set on the pin read in step 1). One key per partition, overwritten by each
   * group (no tombstone per group). Pinned even when nothing is priced (then written done at
   * once): a replay after a lost ack must not bill a group that its first evaluation did not.
   * A pin that would not fit in one NATS message pins the group's first half instead; a group
   * of one message whose pin is still too large has it written in parts (writePin).
   */
  private async pinOf(group: Held[]): Promise<PinMade> {
    for (;;) {
      const refs = new Map<string, { orgId: string; mode: Mode; customers: Set<string> }>();
      for (const h of group) {
        const scope = scopeOf(h.unit.orgId, h.unit.mode);
        let r = refs.get(scope);
        if (!r) refs.set(scope, (r = { orgId: h.unit.orgId, mode: h.unit.mode, customers: new Set() }));
        for (const c of h.unit.customers) r.customers.add(c);
      }
      const scopes = await Promise.all(
        [...refs.values()].map(async (r): Promise<PinScope> => {
          const { config, revisions } = await this.configs.forBatch(r.orgId, r.mode, r.customers);
          return { orgId: r.orgId, mode: r.mode, revisions, config: pinnedConfig(config) };
        }),
      );
      const unpriced = scopes.every((s) => Object.keys(s.config.attributes).length === 0);
      const pin: Pin = { seq: group[0]!.seq, last: group.at(-1)!.seq, seqs: group.map((h) => h.seq), scopes };
      const bytes = unpriced ? Buffer.from(JSON.stringify(donePin(pin))) : pinBytes(pin);
      if (bytes.length > this.pinRoom() && group.length > 1) {
        group = group.slice(0, Math.ceil(group.length / 2));
        continue;
      }
      return { group, pin, bytes, unpriced };
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.pulling.clear();
    billingPartitionsPulled.set(0);
    if (this.lagTimer) clearInterval(this.lagTimer);
    this.opts.lag?.(0);
    await Promise.all([...this.loops, ...[...this.pullers.values()].flatMap((running) => [...running])]);
    // What is held and not evaluated goes back now rather than after its ack wait: whoever
    // takes it still evaluates the partition oldest first (its group starts at the oldest
    // uncommitted message, one of these, so it waits for their redelivery).
    for (const lane of this.lanes) {
      for (const h of lane.held) h.m.nak();
      lane.held.length = 0;
    }
  }
}

/**
 * The configuration as a pin carries it: only what evaluation reads. Each credit pool's
 * top-ups folded into one, their sum (evaluation reads only a pool's total: evaluate.ts
 * `lookups`), so a customer topped up thousands of times does not put its whole top-up
 * history into every pin. Exact: decimal sums are exact, and the total is the same sum. Pools
 * whose sum would not parse as one top-up keep theirs. And every document without the fields
 * evaluation never reads — the timestamps (`createdAt`, `updatedAt`) and a unit's display
 * name — about 28% of a customer's bytes, which every pin carries for each customer of its
 * group: written to the state bucket, serialized here, copied to a worker and parsed there
 * (a unit test evaluates both forms alike). The slim form of a document is made once while
 * the store keeps it (the store's documents are frozen and shared; none is changed).
 */
export function pinnedConfig(config: BillingConfig): BillingConfig {
  return { customers: mapValues(config.customers, slimCustomer), plans: mapValues(config.plans, slimPlan), attributes: mapValues(config.attributes, slimAttribute), pools: mapValues(config.pools, slimPool), caps: mapValues(config.caps, slimCap) };
}

/** A pool as a pin carries it: without its timestamp, its top-ups folded into one (pinnedConfig). */
function pinnedPool({ createdAt: _c, ...p }: CreditPool): CreditPool {
  if (p.topUps.length <= 1) return p as CreditPool;
  const credits = toCanonicalString(sum(p.topUps.map((u) => parseDecimal(u.credits, { maxDecimalPlaces: 6 }))));
  // A sum past what one top-up may hold (parseDecimal's 30 integer digits, as evaluation
  // reads each top-up) stays unfolded: evaluation would refuse it, and a pin is final.
  if (!fitsOneTopUp(credits)) return p as CreditPool;
  const last = p.topUps.at(-1)!;
  return { ...p, topUps: [{ id: last.id, credits, at: last.at }] } as CreditPool;
}

/** `record` with `f` applied to each value, in the same key order (own properties, also for an id such as "__proto__"). */
function mapValues<T>(record: Record<string, T>, f: (v: T) => T): Record<string, T> {
  const out: Record<string, T> = {};
  for (const k of Object.keys(record)) {
    const v = f(record[k]!);
    if (k === '__proto__') Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
    else out[k] = v;
  }
  return out;
}

/** The slim form of each document the store gave out (kept while the store keeps the document). */
const slimmed = new WeakMap<object, object>();
function slimOnce<T extends object>(o: T, make: (o: T) => T): T {
  let s = slimmed.get(o) as T | undefined;
  if (s === undefined) slimmed.set(o, (s = make(o)));
  return s;
}
// The casts: a pinned document lacks exactly the fields evaluation never reads (above).
const slimUnit = (u: Unit): Unit => slimOnce(u, ({ name: _n, createdAt: _c, updatedAt: _u, ...rest }) => rest as Unit);
const slimCustomer = (c: Customer): Customer => slimOnce(c, ({ createdAt: _c, updatedAt: _u, units, ...rest }) => ({ ...rest, units: mapValues(units, slimUnit) }) as Customer);
const slimPlan = (p: Plan): Plan => slimOnce(p, ({ createdAt: _c, ...rest }) => rest as Plan);
const slimAttribute = (a: OrderLineAttribute): OrderLineAttribute => slimOnce(a, ({ createdAt: _c, ...rest }) => rest as OrderLineAttribute);
// The folded sum too is made once per stored pool, not once per group.
const slimPool = (p: CreditPool): CreditPool => slimOnce(p, pinnedPool);
const slimCap = (c: CreditCap): CreditCap => slimOnce(c, ({ updatedAt: _u, ...rest }) => rest as CreditCap);

/**
 * Each pinned document's JSON text as UTF-8 bytes, with its key in its record before it
 * (`"<key>":<document>`), made once while the document is kept (slimOnce): a group's pin
 * repeats the documents of the customers it names, most of them named by the groups before it.
 */
const texts = new WeakMap<object, { key: string; bytes: Buffer }>();
function entryBytes(key: string, doc: object): Buffer {
  let t = texts.get(doc);
  if (t === undefined || t.key !== key) texts.set(doc, (t = { key, bytes: Buffer.from(`${JSON.stringify(key)}:${JSON.stringify(doc)}`) }));
  return t.bytes;
}

const COMMA_BYTES = Buffer.from(',');
const OPEN_BYTES = Buffer.from('{');
const CLOSE_BYTES = Buffer.from('}');

/** Appends the bytes of `JSON.stringify(record)` of pinned documents to `out`, from each document's kept bytes (same key order: both take the own enumerable keys in property order). */
function recordBytes(out: Buffer[], record: Record<string, object>): void {
  out.push(OPEN_BYTES);
  let first = true;
  for (const k of Object.keys(record)) {
    if (!first) out.push(COMMA_BYTES);
    out.push(entryBytes(k, record[k]!));
    first = false;
  }
  out.push(CLOSE_BYTES);
}

/**
 * `JSON.stringify(pin)` as UTF-8 bytes, assembled from the documents' kept bytes (entryBytes)
 * instead of serializing and encoding every document of every group again: a pin of 448
 * customers is ~900 KB. Relies on pinOf's and pinnedConfig's key order (a unit test compares
 * both texts).
 */
export function pinBytes(pin: Pin): Buffer {
  const out: Buffer[] = [Buffer.from(`{"seq":${pin.seq},"last":${pin.last},"seqs":${JSON.stringify(pin.seqs)},"scopes":[`)];
  pin.scopes.forEach(({ orgId, mode, revisions, config: c }, i) => {
    out.push(Buffer.from(`${i === 0 ? '' : ','}{"orgId":${JSON.stringify(orgId)},"mode":${JSON.stringify(mode)},"revisions":${JSON.stringify(revisions)},"config":{"customers":`));
    recordBytes(out, c.customers);
    out.push(Buffer.from(',"plans":'));
    recordBytes(out, c.plans);
    out.push(Buffer.from(',"attributes":'));
    recordBytes(out, c.attributes);
    out.push(Buffer.from(',"pools":'));
    recordBytes(out, c.pools);
    out.push(Buffer.from(',"caps":'));
    recordBytes(out, c.caps);
    out.push(Buffer.from('}}'));
  });
  out.push(Buffer.from(']}'));
  return Buffer.concat(out);
}

/** `JSON.stringify(pin)`, the text of pinBytes. */
export function pinText(pin: Pin): string {
  return pinBytes(pin).toString('utf8');
}

function fitsOneTopUp(credits: string): boolean {
  try {
    parseDecimal(credits, { maxDecimalPlaces: 6 });
    return true;
  } catch {
    return false;
  }
}

/** A task for the worker: the units as their texts, the configurations as the pin's text when there is one (group.ts WorkerTask). */
function forWorker<T extends GroupCapPeriodsInput>(task: T, units: UnitText[], pinJson: string | null): WorkerTask<T> {
  const { configs, units: _objects, ...rest } = task;
  return (pinJson === null ? { ...rest, configs, units } : { ...rest, pinJson, units }) as unknown as WorkerTask<T>;
}

/**
 * The group the held messages (in sequence order) start: the first, then each next one while
 * it was delivered right after the one before it (consecutive delivery sequences, neither
 * redelivered), up to GROUP_MESSAGES messages, GROUP_CUSTOMERS customers and `maxSignals`
 * billed signals (the first message is taken whatever its size).
 */
export function formGroup<H extends { m: Pick<JsMsg, 'redelivered' | 'info'>; unit: { orgId: string; mode: Mode; customers: readonly string[] } }>(held: readonly H[], maxSignals = Infinity): H[] {
  const group = [held[0]!];
  let signals = held[0]!.unit.customers.length;
  const customers = new Set<string>();
  const count = (h: H): number => {
    let n = 0;
    for (const c of h.unit.customers) if (!customers.has(`${h.unit.orgId}\u0000${h.unit.mode}\u0000${c}`)) n++;
    return n;
  };
  const take = (h: H): void => {
    for (const c of h.unit.customers) customers.add(`${h.unit.orgId}\u0000${h.unit.mode}\u0000${c}`);
  };
  take(held[0]!);
  for (let i = 1; i < held.length && group.length < GROUP_MESSAGES; i++) {
    const prev = held[i - 1]!;
    const h = held[i]!;
    if (prev.m.redelivered || h.m.redelivered || h.m.info.deliverySequence !== prev.m.info.deliverySequence + 1) break;
    if (customers.size + count(h) > GROUP_CUSTOMERS || signals + h.unit.customers.length > maxSignals) break;
    take(h);
    group.push(h);
    signals += h.unit.customers.length;
  }
  return group;
}


/**
 * The delivery sequence the next step may take as "right after this group" (step): its last
 * message's, when that was a first delivery. A redelivered one came late (its delivery
 * sequence is after those of newer messages, possibly held elsewhere): none, then, and the
 * next step asks the stream for the partition's oldest message.
 */
function lastDelivery(group: readonly Held[]): number | null {
  const { m } = group.at(-1)!;
  return m.redelivered ? null : m.info.deliverySequence;
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

