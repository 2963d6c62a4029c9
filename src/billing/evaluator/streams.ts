/**
 * The JetStream pieces of billing evaluation:
 *   <P>_BILLABLE_P  work queue, subject <P>.billable-p.<k>.<org>: per accepted batch and
 *                 partition k (partition.ts: hash of organization, mode and customer mod
 *                 BILLING_PARTITIONS), the signals it contributes to k (idempotency
 *                 duplicates excluded), published by the pipeline after the rows are
 *                 stored, with Nats-Msg-Id = <batch id>.p<k>.
 *   consumers `billing-p<k>`, one per partition, filter <P>.billable-p.<k>.>, each with
 *                 max_ack_pending 1: a partition's messages are evaluated one at a time in
 *                 stream order, whichever pipeline process takes them, so a customer's
 *                 balances and period totals have exactly one writer at a time; partitions
 *                 run in parallel.
 *   <P>_BILLABLE  the former single lane (subject <P>.billable.<org>, consumer `billing`):
 *                 what an older version left there is re-routed into the partitions on start
 *                 (consumer.ts, routeFormer).
 *   <P>_EVENTS    the bus of billing events, subject <P>.events.<org>.<mode>.<event>,
 *                 Nats-Msg-Id = the deterministic event id (one copy per event), kept 30
 *                 days; the webhook dispatcher (issue 6) reads it.
 *   <P>_billing_state  KV: the evaluator's running state per customer, the cap period
 *                 totals and the pin of each partition's batch in flight (consumer.ts).
 *   <P>_BILLING_ROWS   work queue: fact_cost / fact_credit_consumption / fact_unpriced rows per evaluated
 *                 batch (Nats-Msg-Id rows-<batch id>), inserted in bulk by rows.ts.
 */
import { AckPolicy, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { Nats } from '../../nats/connection.js';
import { isNotFound } from '../../nats/connection.js';
import { NS_PER_MS } from '../../shared/time.js';
import { billingLog } from '../../log.js';

const DAY_MS = 86_400_000;

export interface BillingNames {
  billableStream: string;
  billableSubjectPrefix: string;
  billingConsumer: string;
  partitionStream: string;
  partitionSubjectPrefix: string;
  partitionConsumerPrefix: string;
  eventStream: string;
  eventSubjectPrefix: string;
  stateBucket: string;
  rowsStream: string;
  rowsSubjectPrefix: string;
  rowsConsumer: string;
}

export function billingNames(prefix: string): BillingNames {
  return {
    billableStream: `${prefix}_BILLABLE`,
    billableSubjectPrefix: `${prefix}.billable`,
    billingConsumer: 'billing',
    partitionStream: `${prefix}_BILLABLE_P`,
    partitionSubjectPrefix: `${prefix}.billable-p`,
    partitionConsumerPrefix: 'billing-p',
    eventStream: `${prefix}_EVENTS`,
    eventSubjectPrefix: `${prefix}.events`,
    stateBucket: `${prefix}_billing_state`,
    rowsStream: `${prefix}_BILLING_ROWS`,
    rowsSubjectPrefix: `${prefix}.billing-rows`,
    rowsConsumer: 'billing-rows',
  };
}

/** The subject of partition k's billable messages of one organization. */
export const partitionSubject = (n: BillingNames, k: number, orgId: string): string => `${n.partitionSubjectPrefix}.${k}.${orgId}`;
export const partitionConsumer = (n: BillingNames, k: number): string => `${n.partitionConsumerPrefix}${k}`;

/**
 * Creates the billing streams and consumers and returns the number of partitions in use: the
 * one found (partition consumers already there: customers must keep their partition, so a
 * different BILLING_PARTITIONS is ignored and logged), else `partitions`.
 */
export async function ensureBillingStreams(nats: Nats, n: BillingNames, ackWaitMs: number, partitions: number): Promise<number> {
  // Created once and left alone, except that their replicas are raised to NATS_REPLICAS.
  const add = (name: string, config: Record<string, unknown>): Promise<void> => nats.ensureStream({ name, ...config }, 'keep');
  await add(n.billableStream, {
    subjects: [`${n.billableSubjectPrefix}.>`],
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
    max_msg_size: nats.maxPayload,
    // A batch re-published after a pipeline crash (same Nats-Msg-Id) is stored once.
    duplicate_window: DAY_MS * NS_PER_MS,
  });
  await add(n.partitionStream, {
    subjects: [`${n.partitionSubjectPrefix}.>`],
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
    max_msg_size: nats.maxPayload,
    // A batch's part re-published after a pipeline crash (same Nats-Msg-Id) is stored once.
    duplicate_window: DAY_MS * NS_PER_MS,
  });
  await add(n.eventStream, {
    subjects: [`${n.eventSubjectPrefix}.>`],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: 30 * DAY_MS * NS_PER_MS,
    // An event re-published by a replay (same deterministic id) is stored once.
    duplicate_window: DAY_MS * NS_PER_MS,
  });
  await add(n.rowsStream, {
    subjects: [`${n.rowsSubjectPrefix}.>`],
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
    max_msg_size: nats.maxPayload,
    duplicate_window: DAY_MS * NS_PER_MS,
  });
  // Both billing consumers take BILLING_ACK_WAIT_MS; an existing consumer is updated to it.
  const upsertConsumer = async (stream: string, config: { durable_name: string; ack_policy: AckPolicy; ack_wait: number; max_ack_pending: number; max_deliver: number; filter_subject?: string }): Promise<void> => {
    try {
      await nats.jsm.consumers.info(stream, config.durable_name);
    } catch (err) {
      if (!isNotFound(err)) throw err;
      await nats.jsm.consumers.add(stream, config);
      return;
    }
    await nats.jsm.consumers.update(stream, config.durable_name, config);
  };
  await upsertConsumer(n.rowsStream, { durable_name: n.rowsConsumer, ack_policy: AckPolicy.Explicit, ack_wait: ackWaitMs * NS_PER_MS, max_ack_pending: 1_000, max_deliver: -1 });
  await upsertConsumer(n.billableStream, {
    durable_name: n.billingConsumer,
    ack_policy: AckPolicy.Explicit,
    ack_wait: ackWaitMs * NS_PER_MS,
    max_ack_pending: 1,
    max_deliver: -1,
  });
  const existing = await existingPartitions(nats, n);
  const p = existing > 0 ? existing : partitions;
  if (existing > 0 && existing !== partitions) billingLog.warn('BILLING_PARTITIONS differs from the partitions in use; keeping those', { configured: partitions, inUse: existing });
  for (let k = 0; k < p; k++) {
    await upsertConsumer(n.partitionStream, {
      durable_name: partitionConsumer(n, k),
      ack_policy: AckPolicy.Explicit,
      ack_wait: ackWaitMs * NS_PER_MS,
      max_ack_pending: 1,
      max_deliver: -1,
      filter_subject: `${n.partitionSubjectPrefix}.${k}.>`,
    });
  }
  return p;
}

/** The number of partition consumers on the partition stream (0: none yet). */
async function existingPartitions(nats: Nats, n: BillingNames): Promise<number> {
  let count = 0;
  for await (const ci of nats.jsm.consumers.list(n.partitionStream)) if (ci.name.startsWith(n.partitionConsumerPrefix) && /^\d+$/.test(ci.name.slice(n.partitionConsumerPrefix.length))) count++;
  return count;
}

export function stateBucket(nats: Nats, n: BillingNames): Promise<KV> {
  return nats.kvBucket(n.stateBucket, { history: 1, storage: StorageType.File });
}
