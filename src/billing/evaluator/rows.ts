/**
 * The billing rows inserter: reads `<P>_BILLING_ROWS` (what the evaluator priced) and
 * inserts fact_cost, fact_credit_consumption and fact_unpriced rows in bulk, like the signal
 * pipeline:
 * messages are buffered (up to 10,000 rows or 200 ms), inserted with one statement per
 * table, then acked. On a redelivery (a crash after the insert, before the ack), rows of
 * signals already in the tables are dropped first, so every row is stored exactly once.
 */
import type { ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import type { Nats } from '../../nats/connection.js';
import type { Store } from '../../store/index.js';
import { billingLog as log } from '../../log.js';
import { H_ORG } from '../../pipeline/message.js';
import type { ConsumptionRow, CostRow, UnpricedRow } from './evaluate.js';
import type { BillingNames } from './streams.js';

const FLUSH_ROWS = 10_000;
const FLUSH_MS = 200;

export class BillingRowsInserter {
  private messages: ConsumerMessages | null = null;
  private loopDone: Promise<void> | null = null;
  private buffer: { msgs: JsMsg[]; costs: CostRow[]; consumption: ConsumptionRow[]; unpriced: UnpricedRow[] } = { msgs: [], costs: [], consumption: [], unpriced: [] };
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly nats: Nats,
    private readonly names: BillingNames,
    private readonly store: Store,
  ) {}

  async start(): Promise<void> {
    const consumer = await this.nats.js.consumers.get(this.names.rowsStream, this.names.rowsConsumer);
    this.messages = await consumer.consume({ max_messages: 256 });
    this.loopDone = this.loop(this.messages);
  }

  private async loop(messages: ConsumerMessages): Promise<void> {
    for await (const m of messages) {
      try {
        // `unpriced` is absent from messages written before fact_unpriced existed.
        let { costs, consumption, unpriced = [] } = m.json<{ costs: CostRow[]; consumption: ConsumptionRow[]; unpriced?: UnpricedRow[] }>();
        if (m.redelivered) {
          const orgId = m.headers?.get(H_ORG) ?? '';
          const ids = [...new Set([...costs, ...consumption, ...unpriced].map((r) => r.signal_id))];
          const [haveCosts, haveConsumption, haveUnpriced] = await Promise.all([
            this.store.existingCostIds(orgId, ids),
            this.store.existingConsumptionIds(orgId, ids),
            this.store.existingUnpricedIds(orgId, ids),
          ]);
          costs = costs.filter((r) => !haveCosts.has(r.signal_id));
          consumption = consumption.filter((r) => !haveConsumption.has(r.signal_id));
          unpriced = unpriced.filter((r) => !haveUnpriced.has(r.signal_id));
        }
        this.buffer.msgs.push(m);
        this.buffer.costs.push(...costs);
        this.buffer.consumption.push(...consumption);
        this.buffer.unpriced.push(...unpriced);
      } catch (err) {
        log.error('billing rows could not be read; will be redelivered', { err, seq: m.seq });
        m.nak(2_000);
        continue;
      }
      if (this.buffer.costs.length + this.buffer.consumption.length + this.buffer.unpriced.length >= FLUSH_ROWS) await this.flush();
      else this.timer ??= setTimeout(() => void this.flush(), FLUSH_MS);
    }
  }

  private flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const batch = this.buffer;
    this.buffer = { msgs: [], costs: [], consumption: [], unpriced: [] };
    this.flushing = this.flushing.then(async () => {
      if (batch.msgs.length === 0) return;
      try {
        const lines = (rows: object[]): Buffer => Buffer.from(`${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
        if (batch.costs.length > 0) await this.store.insertCosts(lines(batch.costs));
        if (batch.consumption.length > 0) await this.store.insertConsumption(lines(batch.consumption));
        if (batch.unpriced.length > 0) await this.store.insertUnpriced(lines(batch.unpriced));
        for (const m of batch.msgs) m.ack();
      } catch (err) {
        log.error('billing rows insert failed; will be redelivered', { err, messages: batch.msgs.length });
        for (const m of batch.msgs) m.nak(2_000);
      }
    });
    return this.flushing;
  }

  async stop(): Promise<void> {
    this.messages?.stop();
    await this.loopDone;
    await this.flush();
  }
}
