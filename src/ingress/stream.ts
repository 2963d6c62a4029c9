/**
 * The signal stream the ingress publishes accepted batches to (names: src/bus/topology.ts):
 * a work queue on disk, bounded in bytes (STREAM_MAX_BYTES); the pipeline consumes it.
 */
import { DiscardPolicy, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import type { Config } from '../config.js';
import type { Nats } from '../bus/connection.js';
import { ensure } from '../bus/topology.js';
import { NS_PER_MS } from '../shared/time.js';

/**
 * Creates the signal stream, and updates an existing one to this process's settings when
 * `owner` (an ingress: `ROLE=ingress` or `all`, which publishes to it). The other roles create it
 * when it does not exist yet and leave an existing one alone: a pipeline or dispatcher process
 * without STREAM_MAX_BYTES set would otherwise put the ingress's bound back to the default
 * every time it started (the bound the ingress answers 503 at).
 */
export async function ensureSignalStream(nats: Nats, cfg: Config, owner: boolean): Promise<void> {
  await ensure(nats, {
    existing: owner ? 'update' : 'keep',
    stream: {
      name: nats.topology.signals.stream,
      subjects: [nats.topology.signals.subjects],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      discard: DiscardPolicy.New,
      max_bytes: cfg.streamMaxBytes,
      max_msg_size: nats.maxPayload,
      // A batch re-published by the ingress within two minutes (same Nats-Msg-Id) is stored once.
      duplicate_window: 2 * 60 * 1000 * NS_PER_MS,
    },
  });
}
