/**
 * One NATS connection per process, and the names of everything this service keeps in
 * JetStream. Every name derives from NATS_PREFIX, so separate deployments (and separate
 * tests) never see each other's streams, consumers or buckets.
 */
import { connect, type NatsConnection } from '@nats-io/transport-node';
import {
  AckPolicy,
  DiscardPolicy,
  RetentionPolicy,
  StorageType,
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { Kvm, type KV, type KvOptions } from '@nats-io/kv';
import type { Config } from '../config.js';
import { natsLog as log } from '../log.js';
import { NS_PER_MS } from '../shared/time.js';


/**
 * Pull requests of every consumer this service runs expire after this long (idle heartbeat:
 * half of it). The client's default of 30 s means that after the consumer's leader moves to
 * another server of a cluster (the old one died), a process notices its pull went nowhere only
 * some 30 s later; with 5 s it pulls again within seconds. Idle cost: one pull every 5 s.
 */
export const PULL_EXPIRES_MS = 5_000;

export interface Names {
  signalStream: string;
  signalSubjectPrefix: string;
  deadLetterStream: string;
  deadLetterSubjectPrefix: string;
  pipelineConsumer: string;
  orgBucket: string;
  dedupeBucket: string;
  billingBucket: string;
  webhookBucket: string;
}

export function names(prefix: string): Names {
  return {
    signalStream: `${prefix}_SIGNALS`,
    signalSubjectPrefix: `${prefix}.signals`,
    deadLetterStream: `${prefix}_SIGNALS_DLQ`,
    deadLetterSubjectPrefix: `${prefix}.dlq`,
    pipelineConsumer: 'pipeline',
    orgBucket: `${prefix}_orgs`,
    dedupeBucket: `${prefix}_dedupe`,
    billingBucket: `${prefix}_billing`,
    webhookBucket: `${prefix}_webhooks`,
  };
}

export class Nats {
  connected = false;
  private constructor(
    readonly nc: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    readonly names: Names,
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
    const n = new Nats(nc, js, jsm, names(cfg.natsPrefix), cfg.natsReplicas);
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
      name: this.names.signalStream,
      subjects: [`${this.names.signalSubjectPrefix}.>`],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      discard: DiscardPolicy.New,
      max_bytes: cfg.streamMaxBytes,
      max_msg_size: this.maxPayload,
      // A batch re-published by the ingress within two minutes (same Nats-Msg-Id) is stored once.
      duplicate_window: 2 * 60 * 1000 * NS_PER_MS,
    };
    await this.ensureStream(config, 'update');
  }

  /**
   * Batches the analytics engine refused for their content (never for an outage) are moved
   * here with the reason, kept on disk for an operator, instead of blocking the pipeline.
   */
  async ensureDeadLetterStream(): Promise<void> {
    const config = {
      name: this.names.deadLetterStream,
      subjects: [`${this.names.deadLetterSubjectPrefix}.>`],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      max_msg_size: this.maxPayload,
    };
    // Created once and then left alone (an operator may have changed its limits), except that
    // its replicas are raised to NATS_REPLICAS.
    await this.ensureStream(config, 'keep');
  }

  /**
   * Creates a stream with NATS_REPLICAS replicas. An existing one is updated to `config`
   * (policy `update`) or left as it is (`keep`); either way, a stream with fewer replicas than
   * NATS_REPLICAS is raised to it, or startup stops with an error saying what to do.
   */
  async ensureStream(config: Record<string, unknown> & { name: string }, policy: 'update' | 'keep'): Promise<void> {
    const wanted = { ...config, num_replicas: this.replicas };
    let existing: { config: Record<string, unknown> };
    try {
      existing = (await this.jsm.streams.info(config.name)) as unknown as { config: Record<string, unknown> };
    } catch (err) {
      if (!isNotFound(err)) throw err;
      try {
        await this.jsm.streams.add(wanted as Parameters<JetStreamManager['streams']['add']>[0]);
      } catch (e) {
        throw new Error(
          `cannot create JetStream stream ${config.name} with ${this.replicas} replica(s) (NATS_REPLICAS=${this.replicas}): ${(e as Error).message}. ` +
            'NATS_REPLICAS must not exceed the number of JetStream servers of the cluster (1 for a single server).',
        );
      }
      return;
    }
    const have = Number(existing.config.num_replicas ?? 1);
    if (policy === 'update') {
      // Never lowers the replicas of a stream an operator raised by hand.
      await this.raise(config.name, have, { ...wanted, num_replicas: Math.max(have, this.replicas) });
    } else if (have < this.replicas) {
      await this.raise(config.name, have, { ...existing.config, num_replicas: this.replicas });
    }
  }

  /** Updates a stream's configuration, turning a refused replica change into a startup error that says what to do. */
  private async raise(stream: string, have: number, config: Record<string, unknown>): Promise<void> {
    try {
      await this.jsm.streams.update(stream, config as Parameters<JetStreamManager['streams']['update']>[1]);
    } catch (e) {
      if (have >= this.replicas) throw e;
      throw new Error(
        `JetStream stream ${stream} has ${have} replica(s) but NATS_REPLICAS=${this.replicas}, and raising them failed: ${(e as Error).message}. ` +
          `Run the service against a cluster of at least ${this.replicas} JetStream servers, raise them by hand (nats stream edit ${stream} --replicas ${this.replicas}), ` +
          `or set NATS_REPLICAS=${have}.`,
      );
    }
  }

  /**
   * Opens (creating it if needed) a KV bucket with NATS_REPLICAS replicas; an existing bucket
   * with fewer replicas is raised to it (its stream is KV_<bucket>).
   */
  async kvBucket(name: string, opts: Partial<KvOptions>): Promise<KV> {
    let kv: KV;
    try {
      kv = await new Kvm(this.js).create(name, { ...opts, replicas: this.replicas });
    } catch (e) {
      throw new Error(
        `cannot open JetStream KV bucket ${name} with ${this.replicas} replica(s) (NATS_REPLICAS=${this.replicas}): ${(e as Error).message}. ` +
          'NATS_REPLICAS must not exceed the number of JetStream servers of the cluster (1 for a single server).',
      );
    }
    await this.ensureStream({ name: `KV_${name}` }, 'keep');
    return kv;
  }

  async ensurePipelineConsumer(cfg: Config): Promise<void> {
    const config = {
      durable_name: this.names.pipelineConsumer,
      ack_policy: AckPolicy.Explicit,
      ack_wait: cfg.pipeline.ackWaitMs * NS_PER_MS,
      max_ack_pending: cfg.pipeline.maxAckPending,
      max_deliver: -1,
    };
    await upsert(
      () => this.jsm.consumers.info(this.names.signalStream, config.durable_name),
      () => this.jsm.consumers.update(this.names.signalStream, config.durable_name, config),
      () => this.jsm.consumers.add(this.names.signalStream, config),
    );
  }

  orgBucket(): Promise<KV> {
    return this.kvBucket(this.names.orgBucket, { history: 5, storage: StorageType.File });
  }

  /**
   * Billing configuration documents, one per organization and mode (src/billing/config/store.ts):
   * on disk, only the latest revision kept (changes are compare-and-set on it).
   */
  billingBucket(): Promise<KV> {
    return this.kvBucket(this.names.billingBucket, { history: 1, storage: StorageType.File });
  }

  /** Webhook settings and sealed signing secrets, one document per organization and mode (src/webhooks/store.ts). */
  webhookBucket(): Promise<KV> {
    return this.kvBucket(this.names.webhookBucket, { history: 1, storage: StorageType.File });
  }

  dedupeBucket(cfg: Config): Promise<KV> {
    return this.kvBucket(this.names.dedupeBucket, {
      history: 1,
      storage: StorageType.File,
      ttl: cfg.dedupeWindowDays * 24 * 3600 * 1000,
    });
  }

  async close(): Promise<void> {
    try {
      await this.nc.drain();
    } catch {
      await this.nc.close();
    }
  }
}

/** Updates what exists, adds what does not (streams and consumers). */
async function upsert(info: () => Promise<unknown>, update: () => Promise<unknown>, add: () => Promise<unknown>): Promise<void> {
  try {
    await info();
  } catch (err) {
    if (!isNotFound(err)) throw err;
    await add();
    return;
  }
  await update();
}

export function isNotFound(err: unknown): boolean {
  return err instanceof Error && /not found/i.test(err.message);
}
