/**
 * Entry point. One code base, several roles (ROLE or --role):
 *   all       (default) everything in one process
 *   ingress   HTTP API: auth, validation, token buckets, publish to JetStream
 *   pipeline  JetStream consumer → piscina workers → ClickHouse
 * Every role serves GET /healthz and GET /readyz on PORT.
 */
import { Redis } from 'ioredis';
import { ConfigError, hasIngress, hasPipeline, loadConfig, type Config } from './config.js';
import { log, setLogLevel } from './log.js';
import { Nats } from './nats/connection.js';
import { OrgRegistry } from './orgs/registry.js';
import { TokenBuckets } from './ratelimit/bucket.js';
import { SignalIngress } from './ingress/signals.js';
import { AdminApi } from './admin/routes.js';
import { buildApp, listen, type ServerDeps } from './ingress/server.js';
import { openStore, type Store } from './store/index.js';
import { Pipeline } from './pipeline/consumer.js';
import { uWS } from './ingress/http.js';
import { isMain } from './is-main.js';

export interface Running {
  port: number;
  stop(): Promise<void>;
}

export async function start(cfg: Config): Promise<Running> {
  setLogLevel(cfg.logLevel);
  const closers: (() => Promise<void> | void)[] = [];
  const deps: ServerDeps = { operatorToken: cfg.operatorToken, maxBodyBytes: cfg.maxBodyBytes, readiness: { checks: {} } };

  const nats = await Nats.connect(cfg);
  closers.push(() => nats.close());
  deps.readiness.checks.nats = async () => {
    if (!nats.connected) throw new Error('not connected');
    await nats.nc.flush();
  };
  if (cfg.maxBodyBytes + 16 * 1024 > nats.maxPayload) {
    throw new ConfigError([`MAX_BODY_BYTES=${cfg.maxBodyBytes}: the NATS server accepts messages of at most ${nats.maxPayload} bytes; use at most ${nats.maxPayload - 16 * 1024}`]);
  }
  await nats.ensureSignalStream(cfg);

  if (hasIngress(cfg.role)) {
    const redis = new Redis(cfg.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1, lazyConnect: true });
    redis.on('error', (err) => log.warn('redis error', { err: err.message }));
    await redis.connect().catch((err: Error) => log.warn('redis not reachable yet', { err: err.message }));
    closers.push(() => void redis.disconnect());
    deps.readiness.checks.redis = async () => {
      await redis.ping();
    };
    const buckets = new TokenBuckets(redis, cfg.redisPrefix);
    await buckets.load().catch((err: Error) => log.warn('lua scripts not loaded yet', { err: err.message }));
    const registry = new OrgRegistry(await nats.orgBucket(), cfg.defaultLimits);
    await registry.start();
    deps.ingress = { registry, signals: new SignalIngress(nats, buckets, cfg.publishTimeoutMs), admin: new AdminApi(registry) };
  }

  let store: Store | null = null;
  let pipeline: Pipeline | null = null;
  if (hasPipeline(cfg.role)) {
    store = await openStore(cfg);
    await store.init();
    deps.store = store;
    const s = store;
    deps.readiness.checks.clickhouse = () => s.ping();
    await nats.ensureDeadLetterStream();
    await nats.ensurePipelineConsumer(cfg);
    pipeline = new Pipeline(cfg, nats, store, await nats.dedupeBucket(cfg));
    await pipeline.start();
  }

  const app = buildApp(deps);
  const { port, socket } = await listen(app, cfg.host, cfg.port);
  log.info('listening', { role: cfg.role, port, store: store?.kind ?? null });

  let stopping: Promise<void> | null = null;
  return {
    port,
    stop: () =>
      (stopping ??= (async () => {
        uWS.us_listen_socket_close(socket);
        if (pipeline) await pipeline.stop();
        if (store) await store.close();
        for (const c of closers.reverse()) await c();
        app.close();
      })()),
  };
}

async function main(): Promise<void> {
  let cfg: Config;
  try {
    cfg = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const running = await start(cfg);
  const shutdown = (sig: string): void => {
    log.info('shutting down', { signal: sig });
    const force = setTimeout(() => process.exit(1), 30_000);
    force.unref();
    running.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error('shutdown failed', { err });
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

if (isMain(import.meta.url)) {
  main().catch((err: unknown) => {
    if (err instanceof ConfigError) process.stderr.write(`${err.message}\n`);
    else log.error('failed to start', { err });
    process.exit(err instanceof ConfigError ? 2 : 1);
  });
}
