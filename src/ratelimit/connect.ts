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

/**
 * A watchdog for a connection that stays broken. ioredis reconnects by itself, and on this
 * machine it does within ~0.3 s of a Sentinel promotion, except in two cases it never leaves:
 *
 * - The connection ended. ioredis gives up for good (status `end`) when its connector's
 *   attempt fails rather than the connection: with Sentinel, the previous connection's
 *   +switch-master listener closes the connector while the reconnection is asking the
 *   sentinels for the new primary, and that attempt ends in "Connection is closed." (seen
 *   under load in test/cluster/redis-sentinel.test.ts: the ingress answered 503 until the end).
 *   So an `end` that nobody asked for (this watchdog was not stopped first) is followed by a
 *   new connect, and again each `everyMs` while the status stays `end`.
 * - Pings fail for `stuckMs` on end (a hung server accepts and never answers): the
 *   connection is dropped and made again, which asks the sentinels anew; no sooner than
 *   `stuckMs` after the last time.
 *
 * Nothing happens while pings succeed. For a cluster, ioredis's own slot refresh does this.
 * Stop the watchdog before closing the connection on purpose.
 */
export function watchRedis(
  redis: RedisClient,
  opts: { everyMs?: number; stuckMs?: number; onForce?: (failingMs: number) => void; onRevive?: () => void } = {},
): { stop(): void; forced(): number; revived(): number } {
  const everyMs = opts.everyMs ?? 1_000;
  const stuckMs = opts.stuckMs ?? 5_000;
  let failingSince: number | null = null;
  let lastForced = 0;
  let forced = 0;
  let revived = 0;
  let busy = false;
  let stopped = false;
  // A connection that ended is connected again; its failures go to the usual error events.
  const revive = (): void => {
    if (stopped || redis instanceof Cluster || redis.status !== 'end') return;
    revived++;
    opts.onRevive?.();
    redis.connect().catch(() => undefined);
  };
  const onEnd = (): void => void setTimeout(revive, Math.min(everyMs, 100)).unref();
  redis.on('end', onEnd);
  const timer = setInterval(() => {
    if (busy || redis instanceof Cluster) return;
    if (redis.status === 'end') return revive();
    busy = true;
    let timeout: NodeJS.Timeout | undefined;
    // A hung server never answers: a ping without an answer within `everyMs` failed too.
    Promise.race([redis.ping(), new Promise((_, reject) => (timeout = setTimeout(() => reject(new Error('no answer')), everyMs)))])
      .then(
        () => {
          failingSince = null;
        },
        () => {
          const now = Date.now();
          failingSince ??= now;
          if (now - failingSince >= stuckMs && now - lastForced >= stuckMs) {
            lastForced = now;
            forced++;
            opts.onForce?.(now - failingSince);
            // Destroyed, not ended: a hung server never acknowledges an end, and the connection
            // stays (ioredis #1314). The close then reconnects through the retry strategy.
            if (redis.stream && !redis.stream.destroyed) redis.stream.destroy();
            else redis.disconnect(true);
          }
        },
      )
      .finally(() => {
        clearTimeout(timeout);
        busy = false;
      });
  }, everyMs);
  timer.unref();
  return {
    stop: () => {
      stopped = true;
      clearInterval(timer);
      redis.off('end', onEnd);
    },
    forced: () => forced,
    revived: () => revived,
  };
}
