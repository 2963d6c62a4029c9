/**
 * One NATS connection per process, with the topology of its prefix (topology.ts: every
 * stream, subject, consumer and bucket name). Each stage creates its own resources through
 * topology.ts's `ensure`.
 */
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import type { Config } from '../config.js';
import { natsLog as log } from '../log.js';
import { topology, type Topology } from './topology.js';

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

  async close(): Promise<void> {
    try {
      await this.nc.drain();
    } catch {
      await this.nc.close();
    }
  }
}
