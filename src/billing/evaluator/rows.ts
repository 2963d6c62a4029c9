/**
 * The billing rows inserter: reads `<P>_BILLING_ROWS` (what the evaluator priced) and
 * inserts cost rows (each with its credit draw: fact_cost and fact_credit_consumption) and fact_unpriced rows in bulk, like the signal
 * pipeline:
 * messages are buffered (up to 10,000 rows or 200 ms), inserted with one statement per
 * table, then acked. On a redelivery (a crash after the insert, before the ack, or an ack wait
 * that ran out: flagged by JetStream, or found by the message's mark in the dedupe bucket,
 * taken before its first insert), rows of signals already in the tables are dropped first,
 * so every row is stored exactly once. That check is made in the flush, after every earlier flush of this
 * process has finished (flushes run one after another): checked on arrival, a redelivery
 * could miss the rows of its own first delivery still being inserted here. Held messages are
 * marked in progress every {@link WORKING_MS} so that their ack wait does not run out while
 * they wait for the engine.
 */
import type { ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import { PULL_EXPIRES_MS, type Nats } from '../../bus/connection.js';
import type { Store } from '../../store/index.js';
import { billingLog as log } from '../../log.js';
import { observeInsert } from '../../metrics/index.js';
import { H_MODE, H_ORG } from '../../bus/batch.js';
import { readRows, type RowLines, type TableLines } from './rows-body.js';
import { deadLetter } from '../../bus/dead-letter.js';
import { errorReason, isDataError } from '../../store/engine-error.js';

/** Marks taken once per message (IdempotencyClaims.takeBatch): true the first time. */
export interface BatchMarks {
  takeBatch(orgId: string, mode: string, batchId: string): Promise<boolean>;
}

const FLUSH_ROWS = 10_000;
const FLUSH_MS = 200;
/** How often held messages are marked in progress (BILLING_ACK_WAIT_MS is at least 1 s). */
const WORKING_MS = 400;

export class BillingRowsInserter {
  private messages: ConsumerMessages | null = null;
  private loopDone: Promise<void> | null = null;
  private buffer: { msgs: JsMsg[]; rows: RowLines[] } = { msgs: [], rows: [] };
  private rowCount = 0;
  /** Every message received and not yet acked or nakked. */
  private readonly held = new Set<JsMsg>();
  private heartbeat: NodeJS.Timeout | null = null;
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly nats: Nats,
    private readonly store: Store,
    /** The pipeline's batch marks (src/pipeline/dedupe.ts): one per rows message, taken before its insert. */
    private readonly marks: BatchMarks,
    /** How long a publish (a dead letter) waits for the stream's ack: PUBLISH_TIMEOUT_MS, as the pipeline's. */
    private readonly publishTimeoutMs: number,
  ) {}

  async start(): Promise<void> {
    const { billingRows } = this.nats.topology;
    const consumer = await this.nats.js.consumers.get(billingRows.stream, billingRows.consumer);
    this.messages = await consumer.consume({ max_messages: 256, expires: PULL_EXPIRES_MS });
    this.heartbeat = setInterval(() => {
      for (const m of this.held) m.working();
    }, WORKING_MS);
    this.heartbeat.unref();
    this.loopDone = this.loop(this.messages);
  }

  private async loop(messages: ConsumerMessages): Promise<void> {
    for await (const m of messages) {
      let rows: RowLines;
      try {
        // The rows as lines already (rows-body.ts; or the object form of earlier versions).
        rows = readRows(m.data);
      } catch (err) {
        log.error('billing rows could not be read; will be redelivered', { err, seq: m.seq });
        m.nak(2_000);
        continue;
      }
      this.held.add(m);
      this.buffer.msgs.push(m);
      this.buffer.rows.push(rows);
      this.rowCount += rows.costs.lines.length + rows.unpriced.lines.length;
      if (this.rowCount >= FLUSH_ROWS) await this.flush();
      else this.timer ??= setTimeout(() => void this.flush(), FLUSH_MS);
    }
  }

  private flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const batch = this.buffer;
    this.buffer = { msgs: [], rows: [] };
    this.rowCount = 0;
    this.flushing = this.flushing.then(async () => {
      if (batch.msgs.length === 0) return;
      try {
        const first = await Promise.all(batch.msgs.map((m) => this.firstTake(m)));
        const rows = await Promise.all(batch.msgs.map((m, i) => (m.redelivered || !first[i] ? this.notYetStored(m, batch.rows[i]!) : batch.rows[i]!)));
        await this.insert(rows);
        for (const m of batch.msgs) m.ack();
      } catch (err) {
        if (isDataError(err)) await this.isolate(batch, err);
        else {
          log.error('billing rows insert failed; will be redelivered', { err, messages: batch.msgs.length });
          for (const m of batch.msgs) m.nak(2_000);
        }
      } finally {
        for (const m of batch.msgs) this.held.delete(m);
      }
    });
    return this.flushing;
  }

  /**
   * The rows of some messages, one statement per table and column order (one, unless bodies
   * naming their columns in different orders meet in a flush), a signal's row once per table,
   * even when a message and its redelivery meet in one flush.
   */
  private async insert(rows: RowLines[]): Promise<void> {
    const tables = { costs: new Shapes(), unpriced: new Shapes() };
    for (const r of rows) {
      tables.costs.take(r.costs);
      tables.unpriced.take(r.unpriced);
    }
    for (const { columns, lines, count } of tables.costs.all()) await observeInsert('fact_cost', count, () => this.store.insertCosts(lines, columns));
    for (const { columns, lines, count } of tables.unpriced.all()) await observeInsert('fact_unpriced', count, () => this.store.insertUnpriced(lines, columns));
  }

  /**
   * A flush the engine refused for its content (a value it cannot parse: bodies are checked
   * when read, so only a producer's bug or a forged message gets here): each message again on
   * its own, after dropping what the failed flush may have stored of it (its other tables'
   * inserts may have landed). One the engine still refuses for its content goes to the
   * dead-letter stream with the reason and is acked, so it cannot hold back every other
   * organization's rows; any other failure naks it for a retry.
   */
  private async isolate(batch: { msgs: JsMsg[]; rows: RowLines[] }, err: unknown): Promise<void> {
    log.warn('billing rows refused for their content; inserting message by message', { err, messages: batch.msgs.length });
    for (let i = 0; i < batch.msgs.length; i++) {
      const m = batch.msgs[i]!;
      try {
        await this.insert([await this.notYetStored(m, batch.rows[i]!)]);
        m.ack();
      } catch (e) {
        if (!isDataError(e)) {
          log.error('billing rows insert failed; will be redelivered', { err: e, seq: m.seq });
          m.nak(2_000);
          continue;
        }
        try {
          await this.deadLetter(m, e);
        } catch (dlqErr) {
          log.error('dead-letter publish failed; will retry', { err: dlqErr, seq: m.seq });
          m.nak(2_000);
        }
      }
    }
  }

  /** Moves a rows message the engine refuses to the dead-letter stream (bus/dead-letter.ts), which acks it. */
  private async deadLetter(m: JsMsg, err: unknown): Promise<void> {
    const reason = await deadLetter(this.nats, m, errorReason(err), `dlq-${m.headers?.get('Nats-Msg-Id') ?? `rows-${m.seq}`}`, this.publishTimeoutMs);
    log.error('billing rows moved to the dead-letter stream', { seq: m.seq, stream: this.nats.topology.deadLetters.stream, reason });
  }

  /**
   * Whether no delivery of this message got as far as its insert before: its mark (by its
   * Nats-Msg-Id) is taken now. JetStream's redelivery flag is not proof: after a kill -9 of
   * the process holding a message, the next process can get it with deliveryCount 1
   * (src/pipeline/dedupe.ts takeBatch), its rows possibly stored already.
   */
  private async firstTake(m: JsMsg): Promise<boolean> {
    const orgId = m.headers?.get(H_ORG) ?? '';
    const mode = m.headers?.get(H_MODE) ?? '';
    const id = m.headers?.get('Nats-Msg-Id') ?? '';
    if (!orgId || !mode || !id) return false;
    return this.marks.takeBatch(orgId, mode, id);
  }

  /** The rows of a message whose signals are not in their tables yet. */
  private async notYetStored(m: JsMsg, rows: RowLines): Promise<RowLines> {
    const orgId = m.headers?.get(H_ORG) ?? '';
    const all = [...new Set([...rows.costs.ids, ...rows.unpriced.ids])];
    const [haveCosts, haveUnpriced] = await Promise.all([this.store.existingCostIds(orgId, all), this.store.existingUnpricedIds(orgId, all)]);
    const keep = (t: TableLines, have: Set<string>): TableLines => {
      const at = t.ids.flatMap((id, i) => (have.has(id) ? [] : [i]));
      return { columns: t.columns, lines: at.map((i) => t.lines[i]!), ids: at.map((i) => t.ids[i]!) };
    };
    return { costs: keep(rows.costs, haveCosts), unpriced: keep(rows.unpriced, haveUnpriced) };
  }

  async stop(): Promise<void> {
    this.messages?.stop();
    await this.loopDone;
    await this.flush();
    if (this.heartbeat) clearInterval(this.heartbeat);
  }
}

/** One table's lines of a flush, by shape (column list), each signal's row once. */
class Shapes {
  private readonly seen = new Set<string>();
  private readonly byShape = new Map<string, { columns: readonly string[] | undefined; lines: Uint8Array[] }>();

  take(t: TableLines): void {
    if (t.lines.length === 0) return;
    const key = t.columns ? t.columns.join(',') : '';
    let shape = this.byShape.get(key);
    if (!shape) this.byShape.set(key, (shape = { columns: t.columns ?? undefined, lines: [] }));
    t.lines.forEach((line, i) => {
      const id = t.ids[i]!;
      if (!this.seen.has(id)) (this.seen.add(id), shape.lines.push(line));
    });
  }

  /** What to insert: per shape, the lines (each ending in its newline) as one body. */
  all(): { columns: readonly string[] | undefined; lines: Buffer; count: number }[] {
    return [...this.byShape.values()].filter((s) => s.lines.length > 0).map((s) => ({ columns: s.columns, lines: Buffer.concat(s.lines), count: s.lines.length }));
  }
}
