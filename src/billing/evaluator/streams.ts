/**
 * The JetStream resources of billing evaluation (names: src/bus/topology.ts), with their
 * configuration:
 *   billable parts  work queue, subject <P>.billable-p.<k>.<org>: per accepted batch and
 *                 partition k (partition.ts: hash of organization, mode and customer mod
 *                 BILLING_PARTITIONS), the signals it contributes to k (idempotency
 *                 duplicates excluded), published by the pipeline after the rows are
 *                 stored, with Nats-Msg-Id = <batch id>.p<k>.
 *   consumers `billing-p<k>`, one per partition, filter <P>.billable-p.<k>.>, each with
 *                 max_ack_pending GROUP_HELD: a partition's messages are evaluated a group
 *                 at a time, oldest first, in stream order, whichever pipeline processes hold
 *                 them (consumer.ts), so a customer's balances and period totals have
 *                 exactly one writer at a time; partitions run in parallel.
 *   events        the bus of billing events, subject <P>.events.<org>.<mode>.<event>,
 *                 Nats-Msg-Id = the deterministic event id (one copy per event), kept 30
 *                 days; the webhook dispatcher reads it.
 *   billing state KV: the evaluator's running state per customer, the cap period totals and
 *                 the pin of each partition's batch in flight (consumer.ts); and the key
 *                 `partitions`: the number of partitions, decided once for good (below).
 *   billing rows  work queue: cost (with their credit draws) and fact_unpriced rows per evaluated
 *                 batch (Nats-Msg-Id rows-<batch id>.p<k>), inserted in bulk by rows.ts.
 */
import { AckPolicy, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { Nats } from '../../bus/connection.js';
import { ensure } from '../../bus/topology.js';
import { NS_PER_MS } from '../../shared/time.js';
import { billingLog } from '../../log.js';
import { GROUP_HELD } from './consumer.js';
import { MAX_BILLING_PARTITIONS } from '../../config.js';

const DAY_MS = 86_400_000;

/** The state bucket's key holding the number of partitions in use. */
export const PARTITIONS_KEY = 'partitions';

/**
 * Creates the billing streams and consumers (`state`: the state bucket, stateBucket) and returns the number of partitions in use: the
 * one decided (the state bucket's key `partitions`: customers must keep their partition, so a
 * different BILLING_PARTITIONS is ignored and logged), else `partitions`, decided now.
 * `ackWaitMs` null: this process consumes none of the billing consumers (ingress, dispatcher):
 * it leaves them to the pipeline processes, which create them and set their ack wait
 * (BILLING_ACK_WAIT_MS), rather than reset that to its own setting on every start.
 */
export async function ensureBillingStreams(nats: Nats, state: KV, ackWaitMs: number | null, partitions: number): Promise<number> {
  const t = nats.topology;
  // Created once and left alone, except that their replicas are raised to NATS_REPLICAS.
  const keep = (s: { stream: string; subjects: string }, config: Record<string, unknown>): Promise<void> =>
    ensure(nats, { existing: 'keep', stream: { name: s.stream, subjects: [s.subjects], storage: StorageType.File, ...config } });
  // A batch (or a batch's part) re-published after a pipeline crash (same Nats-Msg-Id) is stored once.
  const workQueue = { retention: RetentionPolicy.Workqueue, max_msg_size: nats.maxPayload, duplicate_window: DAY_MS * NS_PER_MS };
  await keep(t.billableParts, workQueue);
  await keep(t.events, {
    retention: RetentionPolicy.Limits,
    max_age: 30 * DAY_MS * NS_PER_MS,
    // An event re-published by a replay (same deterministic id) is stored once.
    duplicate_window: DAY_MS * NS_PER_MS,
  });
  await keep(t.billingRows, workQueue);
  const p = await partitionsInUse(nats, state, partitions);
  if (p !== partitions) billingLog.warn('BILLING_PARTITIONS differs from the partitions in use; keeping those', { configured: partitions, inUse: p });
  if (ackWaitMs === null) return p;
  // Every billing consumer takes BILLING_ACK_WAIT_MS; an existing consumer is updated to it.
  const consumer = { ack_policy: AckPolicy.Explicit, ack_wait: ackWaitMs * NS_PER_MS, max_deliver: -1 };
  await ensure(nats, { of: t.billingRows.stream, consumer: { ...consumer, durable_name: t.billingRows.consumer, max_ack_pending: 1_000 } });
  for (let k = 0; k < p; k++) {
    await ensure(nats, {
      of: t.billableParts.stream,
      consumer: { ...consumer, durable_name: t.billableParts.consumer(k), max_ack_pending: GROUP_HELD, filter_subject: t.billableParts.filter(k) },
    });
  }
  return p;
}

/**
 * The number of partitions, decided once for the deployment: every process must hash a
 * customer to the same partition, or two partitions would evaluate one customer at once (two
 * writers of its balance, events of both). Decided by whoever creates the key first
 * (compare-and-set on its absence), before any partition consumer exists; everyone else reads
 * it. Counting the partition consumers instead (as before) raced with a process still
 * creating them: a process starting alongside found 7 of 16 and hashed over 7. Consumers
 * there without the key were made by a version that counted them, all before it ran: their
 * number is decided.
 */
export async function partitionsInUse(nats: Nats, state: KV, configured: number): Promise<number> {
  for (let attempt = 0; ; attempt++) {
    const e = await state.get(PARTITIONS_KEY);
    if (e && e.operation === 'PUT' && e.length > 0) {
      const n = Number(e.string());
      if (!Number.isInteger(n) || n < 1 || n > MAX_BILLING_PARTITIONS) throw new Error(`the billing state's key ${PARTITIONS_KEY} holds ${JSON.stringify(e.string())}, not a number of partitions from 1 to ${MAX_BILLING_PARTITIONS}`);
      return n;
    }
    const existing = await existingPartitions(nats);
    const proposal = existing > 0 ? existing : configured;
    try {
      await state.create(PARTITIONS_KEY, String(proposal));
      return proposal;
    } catch (err) {
      // Another process decided first (its value is read next), or a real failure: again, a few times.
      if (attempt >= 4) throw err;
    }
  }
}

/** The partitions the partition consumers on the stream name: the highest index + 1 (0: none yet; one deleted by hand does not lower it). */
async function existingPartitions(nats: Nats): Promise<number> {
  const { stream, consumerPrefix } = nats.topology.billableParts;
  let count = 0;
  for await (const ci of nats.jsm.consumers.list(stream)) {
    const k = ci.name.slice(consumerPrefix.length);
    if (ci.name.startsWith(consumerPrefix) && /^\d+$/.test(k)) count = Math.max(count, Number(k) + 1);
  }
  return count;
}

export function stateBucket(nats: Nats): Promise<KV> {
  return ensure(nats, { bucket: nats.topology.buckets.billingState, options: { history: 1, storage: StorageType.File } });
}
