/**
 * The ingress's Redis connection for one of the three topologies of REDIS_* settings:
 * one server (REDIS_URL), a primary found through Sentinel, or a Redis Cluster.
 *
 * Failures are quick by design: no offline queue and one retry per command, so while
 * Redis is unreachable (a primary being failed over, a cluster slot moving) a request
 * answers 503 RATE_LIMITER_UNAVAILABLE at once instead of waiting; the client reconnects
 * by itself (to the new primary the sentinels name, or along the cluster's new slot map).
 *
 * Auto-pipelining: the commands issued during one turn of the event loop (the token takes of
 * the requests whose bodies arrived together) leave in one write instead of one write each;
 * on a cluster, one write per node. A socket write was the largest cost of a take (8% of the
 * ingress's CPU under bench/ingest.ts). Each command still gets its own reply or error, so a
 * NOSCRIPT answer still reaches LuaScript.run, which resends that one command with EVAL.
 */
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { Config } from '../config.js';

export type RedisClient = Redis | Cluster;

/** Redis forgets nothing on a failover but a promoted replica may still refuse writes briefly. */
const reconnectOnReadonly = (err: Error): 2 | false => (err.message.startsWith('READONLY') ? 2 : false);

const COMMON: RedisOptions = {
  enableOfflineQueue: false,
  enableAutoPipelining: true,
  maxRetriesPerRequest: 1,
  lazyConnect: true,
  connectTimeout: 2_000,
  // Reconnect quickly and keep trying: the limiter must come back by itself.
  retryStrategy: (attempt) => Math.min(50 * attempt, 1_000),
  reconnectOnError: reconnectOnReadonly,
};

export function createRedis(cfg: Pick<Config, 'redisUrl' | 'redisTopology'>): RedisClient {
  const t = cfg.redisTopology;
  switch (t.kind) {
    case 'single':
      return new Redis(cfg.redisUrl, COMMON);
    case 'sentinel':
      return new Redis({
        ...COMMON,
        sentinels: t.sentinels,
        name: t.name,
        role: 'master',
        ...(t.password !== null ? { password: t.password } : {}),
        // Listen to the sentinels' +switch-master: move to the new primary as soon as it is named.
        failoverDetector: true,
        sentinelRetryStrategy: (attempt) => Math.min(100 * attempt, 1_000),
      });
    case 'cluster':
      return new Cluster(t.nodes, {
        enableOfflineQueue: false,
        enableAutoPipelining: true,
        lazyConnect: true,
        clusterRetryStrategy: (attempt) => Math.min(100 * attempt, 1_000),
        redisOptions: {
          ...COMMON,
          lazyConnect: undefined,
          ...(t.password !== null ? { password: t.password } : {}),
        },
      });
  }
}
