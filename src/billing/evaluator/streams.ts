/**
 * The JetStream resources of billing evaluation (names: src/bus/topology.ts), with their
 * configuration:
 *   billable      work queue, subject <P>.billable.<org>: per accepted batch, the signals
 *                 it contributes (idempotency duplicates excluded), published by the
 *                 pipeline after the rows are stored, with Nats-Msg-Id = the batch id.
 *   consumer `billing` with max_ack_pending 1: billable messages are evaluated one at a
 *                 time in stream order, whichever pipeline process takes them, so balances
 *                 and period totals are updated by exactly one writer at a time.
 *   events        the bus of billing events, subject <P>.events.<org>.<mode>.<event>,
 *                 Nats-Msg-Id = the deterministic event id (one copy per event), kept 30
 *                 days; the webhook dispatcher reads it.
 *   billing state KV: the evaluator's running state per organization and mode, the
 *                 cap period totals and the pin of the batch in flight (consumer.ts).
 *   billing rows  work queue: fact_cost / fact_credit_consumption / fact_unpriced rows per evaluated
 *                 batch (Nats-Msg-Id rows-<batch id>), inserted in bulk by rows.ts.
 */
import { AckPolicy, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { Nats } from '../../bus/connection.js';
import { ensure } from '../../bus/topology.js';
import { NS_PER_MS } from '../../shared/time.js';

const DAY_MS = 86_400_000;

export async function ensureBillingStreams(nats: Nats, ackWaitMs: number): Promise<void> {
  const t = nats.topology;
  // Created once and left alone, except that their replicas are raised to NATS_REPLICAS.
  const keep = (s: { stream: string; subjects: string }, config: Record<string, unknown>): Promise<void> =>
    ensure(nats, { existing: 'keep', stream: { name: s.stream, subjects: [s.subjects], storage: StorageType.File, ...config } });
  await keep(t.billable, {
    retention: RetentionPolicy.Workqueue,
    max_msg_size: nats.maxPayload,
    // A batch re-published after a pipeline crash (same Nats-Msg-Id) is stored once.
    duplicate_window: DAY_MS * NS_PER_MS,
  });
  await keep(t.events, {
    retention: RetentionPolicy.Limits,
    max_age: 30 * DAY_MS * NS_PER_MS,
    // An event re-published by a replay (same deterministic id) is stored once.
    duplicate_window: DAY_MS * NS_PER_MS,
  });
  await keep(t.billingRows, { retention: RetentionPolicy.Workqueue, max_msg_size: nats.maxPayload, duplicate_window: DAY_MS * NS_PER_MS });
  // Both billing consumers take BILLING_ACK_WAIT_MS; an existing consumer is updated to it.
  await ensure(nats, {
    of: t.billingRows.stream,
    consumer: { durable_name: t.billingRows.consumer, ack_policy: AckPolicy.Explicit, ack_wait: ackWaitMs * NS_PER_MS, max_ack_pending: 1_000, max_deliver: -1 },
  });
  await ensure(nats, {
    of: t.billable.stream,
    consumer: { durable_name: t.billable.consumer, ack_policy: AckPolicy.Explicit, ack_wait: ackWaitMs * NS_PER_MS, max_ack_pending: 1, max_deliver: -1 },
  });
}

export function stateBucket(nats: Nats): Promise<KV> {
  return ensure(nats, { bucket: nats.topology.buckets.billingState, options: { history: 1, storage: StorageType.File } });
}
