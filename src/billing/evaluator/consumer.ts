/**
 * The billing evaluator: reads the billable stream one message at a time (consumer
 * `billing`, max_ack_pending 1, so exactly one evaluation runs at a time across every
 * pipeline process) and applies each batch to its organization's running state.
 *
 * Commit order for one message, and why a crash anywhere repeats nothing and loses nothing:
 *  0. Read the configuration; with no order line attribute nothing is priced: ack.
 *  1. Read the state (KV, with its revision). When the state already records this message
 *     (`lastSeq` ≥ its stream sequence), it was applied before a crash that lost the ack:
 *     ack and stop.
 *  2. Evaluate in a piscina worker (evaluate.ts): deterministic, so a replay computes the
 *     same rows and events, with the same event ids.
 *  3. Publish the cost, credit-consumption and unpriced rows to `<P>_BILLING_ROWS` with Nats-Msg-Id =
 *     rows-<batch id> (stored once); the rows inserter (rows.ts) stores them in bulk, dropping
 *     rows already in the tables on a redelivery.
 *  4. Publish the events to the bus with Nats-Msg-Id = event id, waiting for the stream's
 *     ack: an event published by an earlier attempt is stored only once.
 *  5. Write the new state with compare-and-set on the revision read in 1. This is the
 *     commit point. (A failed compare-and-set means another process applied something in
 *     between, which the single-consumer design rules out short of an ack-wait expiry: the
 *     evaluation is retried from the newer state, which then records the message.)
 * Order: messages are applied in stream order. A failure is retried in place (see loop);
 * after a crash, JetStream redelivers the held message before any later one.
 *  6. Ack.
 * Balances and period totals live in JetStream KV on disk, never only in Redis.
 *
 * Known limit: a configuration change between a crashed attempt and its replay (e.g. a
 * top-up) makes the replay evaluate against the newer configuration.
 */
import { Piscina } from 'piscina';
import type { ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { headers as natsHeaders } from '@nats-io/transport-node';
import type { Nats } from '../../nats/connection.js';
import { publishDurable } from '../../nats/publish.js';
import { log } from '../../log.js';
import { H_BATCH, H_MODE, H_ORG } from '../../pipeline/message.js';
import type { BillingConfig } from '../model.js';
import type { BillableLine } from '../../../workers/rows.js';
import { emptyState, type BillableSignal, type BillingState, type EvaluationInput, type EvaluationOutput } from './evaluate.js';
import type { BillingNames } from './streams.js';

const WORKER_FILE = new URL('../../../workers/billing.js', import.meta.url).href;

export interface ConfigSource {
  get(orgId: string, mode: 'live' | 'test'): Promise<{ config: BillingConfig; revision: number }>;
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
    private readonly names: BillingNames,
    private readonly configs: ConfigSource,
    private readonly state: KV,
    private readonly pool: Piscina,
    private readonly publishTimeoutMs: number,
  ) {}

  async start(): Promise<void> {
    const consumer = await this.nats.js.consumers.get(this.names.billableStream, this.names.billingConsumer);
    this.messages = await consumer.consume({ max_messages: 1 });
    this.loopDone = this.loop(this.messages);
  }

  /**
   * A failed evaluation is retried in place, holding the message (never nakked): a nak would
   * let the next message of the stream overtake it, and the state would then record a later
   * sequence than a batch not yet applied. Billing waits rather than goes out of order.
   */
  private async loop(messages: ConsumerMessages): Promise<void> {
    for await (const m of messages) {
      for (let attempt = 1; ; attempt++) {
        try {
          await this.handle(m);
          break;
        } catch (err) {
          if (this.stopping) return;
          log.error('billing evaluation failed; retrying in place', { err, seq: m.seq, attempt });
          m.working();
          await new Promise((r) => setTimeout(r, Math.min(10_000, 200 * 2 ** Math.min(6, attempt))));
          m.working();
        }
      }
    }
  }

  private stopping = false;

  private async handle(m: JsMsg): Promise<void> {
    const orgId = m.headers?.get(H_ORG) ?? '';
    const mode = m.headers?.get(H_MODE);
    const batchId = m.headers?.get(H_BATCH) ?? '';
    if (!orgId || (mode !== 'live' && mode !== 'test') || !batchId) throw new Error(`billable message ${m.seq} lacks its headers`);

    const { config } = await this.configs.get(orgId, mode);
    if (Object.keys(config.attributes).length === 0) {
      // Nothing is priced for this organization and mode: nothing to apply.
      m.ack();
      this.stats.messages++;
      return;
    }
    const stateKey = `st.${orgId}.${mode}`;
    const entry = await this.state.get(stateKey);
    const state: BillingState = entry && entry.length > 0 ? (entry.json() as BillingState) : emptyState();
    const revision = entry && entry.length > 0 ? entry.revision : 0;
    if (state.lastSeq >= m.seq) {
      m.ack();
      return;
    }
    const signals = parseBillable(m.data);
    const input: EvaluationInput = { orgId, mode, config, state, signals, evaluatedAt: Math.floor(m.info.timestampNanos / 1e6) };
    const out = (await this.pool.run(input, { filename: WORKER_FILE })) as EvaluationOutput;

    const { costs, consumption, unpriced } = out;
    if (costs.length > 0 || consumption.length > 0 || unpriced.length > 0) {
      // The rows go to a stream (stored once per batch id) and are inserted in bulk by the
      // rows inserter (rows.ts): the engine's insert is the slow part, and it is off this
      // one-at-a-time path. Durable here, before the commit point below.
      const h = natsHeaders();
      h.set(H_ORG, orgId);
      h.set(H_MODE, mode);
      await publishDurable(this.nats.nc, `${this.names.rowsSubjectPrefix}.${orgId}`, Buffer.from(JSON.stringify({ costs, consumption, unpriced })), h, `rows-${batchId}`, this.publishTimeoutMs);
    }

    await Promise.all(
      out.events.map((e) => {
        const h = natsHeaders();
        h.set(H_ORG, orgId);
        h.set(H_MODE, mode);
        const body = Buffer.from(JSON.stringify({ id: e.id, event: e.event, organizationId: orgId, livemode: mode === 'live', occurredAt: new Date(input.evaluatedAt).toISOString(), data: e.data }));
        return publishDurable(this.nats.nc, `${this.names.eventSubjectPrefix}.${orgId}.${mode}.${e.event}`, body, h, e.id, this.publishTimeoutMs);
      }),
    );

    const next = JSON.stringify({ ...out.state, lastSeq: m.seq });
    if (revision === 0) await this.state.create(stateKey, next);
    else await this.state.update(stateKey, next, revision);
    m.ack();
    this.stats.messages++;
    this.stats.events += out.events.length;
    this.stats.costRows += costs.length;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.messages?.stop();
    await this.loopDone;
  }
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
