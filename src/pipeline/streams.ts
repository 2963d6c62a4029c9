/**
 * The JetStream resources of the pipeline (names: src/bus/topology.ts), with their
 * configuration: its consumer of the signal stream, the dead-letter stream and the
 * idempotency bucket.
 */
import { AckPolicy, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { Config } from '../config.js';
import type { Nats } from '../bus/connection.js';
import { ensure } from '../bus/topology.js';
import { NS_PER_MS } from '../shared/time.js';

/** The durable consumer `pipeline` of the signal stream (PIPELINE_ACK_WAIT_MS, PIPELINE_MAX_ACK_PENDING). */
export async function ensurePipelineConsumer(nats: Nats, cfg: Config): Promise<void> {
  await ensure(nats, {
    of: nats.topology.signals.stream,
    consumer: {
      durable_name: nats.topology.signals.consumer,
      ack_policy: AckPolicy.Explicit,
      ack_wait: cfg.pipeline.ackWaitMs * NS_PER_MS,
      max_ack_pending: cfg.pipeline.maxAckPending,
      max_deliver: -1,
    },
  });
}

/**
 * Batches the analytics engine refused for their content (never for an outage) are moved
 * here with the reason, kept on disk for an operator, instead of blocking the pipeline.
 */
export async function ensureDeadLetterStream(nats: Nats): Promise<void> {
  // Created once and then left alone (an operator may have changed its limits), except that
  // its replicas are raised to NATS_REPLICAS.
  await ensure(nats, {
    existing: 'keep',
    stream: {
      name: nats.topology.deadLetters.stream,
      subjects: [nats.topology.deadLetters.subjects],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      max_msg_size: nats.maxPayload,
    },
  });
}

/** Idempotency claims (dedupe.ts), kept DEDUPE_WINDOW_DAYS. */
export function dedupeBucket(nats: Nats, cfg: Config): Promise<KV> {
  return ensure(nats, { bucket: nats.topology.buckets.dedupe, options: { history: 1, storage: StorageType.File, ttl: cfg.dedupeWindowDays * 24 * 3600 * 1000 } });
}
