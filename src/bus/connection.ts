/**
 * One NATS connection per process, with the topology of its prefix (topology.ts: every
 * stream, subject, consumer and bucket name) and the resources of the first hops (the signal
 * stream, its dead letters and consumer, the organization and idempotency buckets, the
 * configuration buckets), each created through topology.ts's `ensure`.
 */
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, DiscardPolicy, RetentionPolicy, StorageType, jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { Config } from '../config.js';
import { natsLog as log } from '../log.js';
import { NS_PER_MS } from '../shared/time.js';
import { ensure, topology, type Topology } from './topology.js';


/**
 * Pull requests of every consumer this service runs expire after this long (idle heartbeat:
 * half of it). The client's default of 30 s means that after the consumer's leader moves to
 * another server of a cluster (the old one died), a process notices its pull went nowhere only
 * some 30 s later; with 5 s it pulls again within seconds. Idle cost: one pull every 5 s.
 */
export const PULL_EXPIRES_MS = 5_000;

export class Nats {
  connected = false;
  private constructor(
    readonly nc: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    readonly topology: Topology,
    /** NATS_REPLICAS: replicas of every stream and KV bucket this service creates. */
    readonly replicas: number,
  ) {}

  static async connect(cfg: Config): Promise<Nats> {
    const nc = await connect({
      servers: cfg.natsUrl,
      name: `billing-${cfg.role}-${process.pid}`,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      waitOnFirstConnect: true,
      // Publishes made while disconnected fail at once instead of queueing in memory.
      reconnectBufSize: 0,
      // Without this every request builds two Error objects with captured stacks; the
      // pipeline makes one request per idempotency claim (bench: +34% drain rate).
      noAsyncTraces: true,
    } as Parameters<typeof connect>[0]);
    const js = jetstream(nc, { timeout: cfg.publishTimeoutMs });
    const jsm = await jetstreamManager(nc, { timeout: cfg.publishTimeoutMs });
    if (cfg.natsReplicas > 1 && !nc.info?.cluster) {
      // A single server accepts a replica count on a stream update and reports it, yet keeps
      // one copy (nats-server 2.9): refuse rather than claim replication that is not there.
      const server = nc.getServer();
      await nc.close();
      throw new Error(`NATS_REPLICAS=${cfg.natsReplicas} needs a NATS JetStream cluster, but the server at ${server} is not part of one; use NATS_REPLICAS=1 or list the cluster's servers in NATS_URL`);
    }
    const n = new Nats(nc, js, jsm, topology(cfg.natsPrefix), cfg.natsReplicas);
    n.connected = true;
    void n.watchStatus();
    return n;
  }

  private async watchStatus(): Promise<void> {
    for await (const s of this.nc.status()) {
      if (s.type === 'disconnect') {
        this.connected = false;
        log.warn('nats disconnected');
      } else if (s.type === 'reconnect') {
        this.connected = true;
        log.info('nats reconnected');
      }
    }
  }

  /** Largest message the server accepts (bytes). */
  get maxPayload(): number {
    return this.nc.info?.max_payload ?? 1024 * 1024;
  }

  /** Creates (or updates) the signal stream: a work queue on disk, bounded in bytes. */
  async ensureSignalStream(cfg: Config): Promise<void> {
    const config = {
      name: this.topology.signals.stream,
      subjects: [this.topology.signals.subjects],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      discard: DiscardPolicy.New,
      max_bytes: cfg.streamMaxBytes,
      max_msg_size: this.maxPayload,
      // A batch re-published by the ingress within two minutes (same Nats-Msg-Id) is stored once.
      duplicate_window: 2 * 60 * 1000 * NS_PER_MS,
    };
    await ensure(this, { stream: config, existing: 'update' });
  }

  /**
   * Batches the analytics engine refused for their content (never for an outage) are moved
   * here with the reason, kept on disk for an operator, instead of blocking the pipeline.
   */
  async ensureDeadLetterStream(): Promise<void> {
    const config = {
      name: this.topology.deadLetters.stream,
      subjects: [this.topology.deadLetters.subjects],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      max_msg_size: this.maxPayload,
    };
    // Created once and then left alone (an operator may have changed its limits), except that
    // its replicas are raised to NATS_REPLICAS.
    await ensure(this, { stream: config, existing: 'keep' });
  }

  async ensurePipelineConsumer(cfg: Config): Promise<void> {
    const config = {
      durable_name: this.topology.signals.consumer,
      ack_policy: AckPolicy.Explicit,
      ack_wait: cfg.pipeline.ackWaitMs * NS_PER_MS,
      max_ack_pending: cfg.pipeline.maxAckPending,
      max_deliver: -1,
    };
    await ensure(this, { consumer: config, of: this.topology.signals.stream });
  }

  orgBucket(): Promise<KV> {
    return ensure(this, { bucket: this.topology.buckets.orgs, options: { history: 5, storage: StorageType.File } });
  }

  /**
   * Billing configuration documents, one per organization and mode (src/billing/config/store.ts):
   * on disk, only the latest revision kept (changes are compare-and-set on it).
   */
  billingBucket(): Promise<KV> {
    return ensure(this, { bucket: this.topology.buckets.billingConfig, options: { history: 1, storage: StorageType.File } });
  }

  /** Webhook settings and sealed signing secrets, one document per organization and mode (src/webhooks/store.ts). */
  webhookBucket(): Promise<KV> {
    return ensure(this, { bucket: this.topology.buckets.webhooks, options: { history: 1, storage: StorageType.File } });
  }

  dedupeBucket(cfg: Config): Promise<KV> {
    return ensure(this, { bucket: this.topology.buckets.dedupe, options: { history: 1, storage: StorageType.File, ttl: cfg.dedupeWindowDays * 24 * 3600 * 1000 } });
  }

  async close(): Promise<void> {
    try {
      await this.nc.drain();
    } catch {
      await this.nc.close();
    }
  }
}
