/**
 * The JetStream resources of the pipeline (names: src/bus/topology.ts), with their
 * configuration: its consumer of the signal stream, the dead-letter stream and the claim log.
 */
import { AckPolicy, DiscardPolicy, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import type { Config } from '../config.js';
import type { Nats } from '../bus/connection.js';
import { ensure } from '../bus/topology.js';
import { NS_PER_MS } from '../shared/time.js';
import { IdempotencyClaims } from './dedupe.js';

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

const dedupeWindowMs = (cfg: Config): number => cfg.dedupeWindowDays * 24 * 3600 * 1000;

/**
 * The claim log `<P>_CLAIMS` (dedupe.ts): on disk, each message kept DEDUPE_WINDOW_DAYS (its
 * limits follow the setting on every start).
 */
export async function ensureClaimLog(nats: Nats, cfg: Config): Promise<void> {
  await ensure(nats, {
    existing: 'update',
    stream: {
      name: nats.topology.claims.stream,
      subjects: [nats.topology.claims.subjects],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      discard: DiscardPolicy.Old,
      max_age: dedupeWindowMs(cfg) * NS_PER_MS,
      max_msg_size: nats.maxPayload,
    },
  });
}

/**
 * The idempotency claims of one kind (the pipeline's `signals`, the billing rows inserter's
 * `rows`), the claim log ensured.
 */
export async function idempotencyClaims(nats: Nats, cfg: Config, kind: 'signals' | 'rows'): Promise<IdempotencyClaims> {
  await ensureClaimLog(nats, cfg);
  return new IdempotencyClaims({
    nc: nats.nc,
    apiPrefix: nats.js.getOptions().apiPrefix ?? '$JS.API',
    stream: nats.topology.claims.stream,
    subject: (scope) => {
      const [orgId, mode] = scope.split('.') as [string, string];
      return nats.topology.claims.subject(kind, orgId, mode);
    },
    maxPayload: nats.maxPayload,
    kind,
    timeoutMs: cfg.publishTimeoutMs,
  });
}
