/**
 * Entry point. One code base, four roles (ROLE or --role):
 *   all         (default) everything in one process
 *   ingress     HTTP API: auth, validation, token buckets, publish to JetStream; the
 *               organization, webhook, external-event, billing configuration and analytics routes
 *   pipeline    JetStream consumer → piscina workers → ClickHouse, and the billing evaluator
 *               (billable stream → events stream, on the same worker pool) and its rows
 *   dispatcher  events stream → webhook deliveries
 * Every role serves GET /healthz, GET /readyz and GET /metrics on PORT; the routes of each
 * role are in the route table (src/routes.ts).
 */
import { createRedis, watchRedis } from './ratelimit/connect.js';
import { kvReader } from './bus/kv-read.js';
import { ConfigError, hasDispatcher, hasIngress, hasPipeline, loadConfig, type Config } from './config.js';
import { configureLog, log } from './log.js';
import { Nats } from './bus/connection.js';
import { OrgRegistry, orgBucket } from './orgs/registry.js';
import { TokenBuckets } from './ratelimit/bucket.js';
import { SignalIngress } from './ingress/signals.js';
import { BacklogGate } from './shared/backlog-gate.js';
import { AdminApi } from './admin/routes.js';
import { Server, listen } from './http/server.js';
import { RouteTable } from './routes.js';
import { openStore, type Store } from './store/index.js';
import { Pipeline, maxInflight } from './pipeline/consumer.js';
import { Identities } from './pipeline/identities.js';
import { DedupeLookups } from './pipeline/dedupe-lookup.js';
import { ensureDeadLetterStream, ensurePipelineConsumer, idempotencyClaims } from './pipeline/streams.js';
import { ensureSignalStream } from './ingress/stream.js';
import { uWS } from './http/wrap.js';
import { isMain } from './is-main.js';
import { missingNodeFlags } from './shared/node-flags.js';
import { restoreFastStringPrototype } from './shared/fast-prototypes.js';
import { ConcurrencySlots } from './ratelimit/slots.js';
import { AnalyticsService } from './analytics/service.js';
import { createWorkerPool } from './shared/worker-pool.js';
import { BillingEvaluator } from './billing/evaluator/consumer.js';
import { FaultHook } from './billing/evaluator/fault.js';
import { BillingRowsInserter } from './billing/evaluator/rows.js';
import { CustomerStates } from './billing/evaluator/customer-state.js';
import { BillablePartitioner, type PreparedBatch } from './billing/evaluator/partition.js';
import type { BatchMeta } from './bus/batch.js';
import { Members, memberId, membersBucket } from './billing/evaluator/members.js';
import { randomToken } from './shared/random.js';
import { WebhookStore, webhookBucket } from './webhooks/store.js';
import { DeliveryLog } from './webhooks/delivery-log.js';
import { WebhookApi } from './webhooks/api.js';
import { Dispatcher } from './webhooks/dispatcher.js';
import { Deliverer } from './webhooks/deliver.js';
import { dnsServersResolver } from './webhooks/ssrf.js';
import { ensureBillingStreams, stateBucket } from './billing/evaluator/streams.js';
import { BillingConfigStore, billingConfigBucket } from './billing/config/store.js';
import { BillingConfigApi } from './billing/config/api.js';
import { startDefaultMetrics, watchConsumer } from './metrics/index.js';

export interface Running {
  port: number;
  stop(): Promise<void>;
}

export async function start(cfg: Config): Promise<Running> {
  // Every module is loaded by now, ioredis included (it slows String.prototype down: fast-prototypes.ts).
  restoreFastStringPrototype();
  configureLog({ level: cfg.logLevel, role: cfg.role });
  const missing = missingNodeFlags();
  if (missing.length > 0) log.warn('started without the service\'s Node options (src/shared/node-flags.ts): it runs, with more CPU per signal; start it with them', { missing });
  startDefaultMetrics();
  const closers: (() => Promise<void> | void)[] = [];
  let nats: Nats | null = null;
  let store: Store | null = null;
  let admin: AdminApi | undefined;
  let pipeline: Pipeline<PreparedBatch<BatchMeta>> | null = null;
  let lookups: DedupeLookups | null = null;
  let evaluator: BillingEvaluator | null = null;
  let members: Members | null = null;
  let dispatcher: Dispatcher | null = null;
  let billingRows: BillingRowsInserter | null = null;
  let pool: ReturnType<typeof createWorkerPool> | null = null;
  let analyticsDeps: { slots: ConcurrencySlots; buckets: TokenBuckets } | null = null;

  // Readiness of every dependency of this role, answering from the first moment.
  const checks: Record<string, () => Promise<void>> = {
    nats: async () => {
      if (!nats) throw new Error('connecting');
      if (!nats.connected) throw new Error('not connected');
      await nats.nc.flush();
    },
  };
  // Listen first: /healthz and /readyz answer while the dependencies are still connecting.
  const server = new Server({ metricsToken: cfg.metricsToken, readiness: { checks } });
  const routes = new RouteTable(server, cfg.operatorToken);
  if (hasIngress(cfg.role)) checks.redis = async () => Promise.reject(new Error('connecting'));
  if (hasPipeline(cfg.role)) checks.clickhouse = async () => Promise.reject(new Error('starting'));
  const { port, socket } = await listen(server.app, cfg.host, cfg.port);
  log.info('listening', { port, node: process.version });

  try {
    nats = await Nats.connect(cfg);
    closers.push(() => nats!.close());
    if (cfg.maxBodyBytes + 16 * 1024 > nats.maxPayload) {
      throw new ConfigError([`MAX_BODY_BYTES=${cfg.maxBodyBytes}: the NATS server accepts messages of at most ${nats.maxPayload} bytes; use at most ${nats.maxPayload - 16 * 1024}`]);
    }
    await ensureSignalStream(nats, cfg, hasIngress(cfg.role));
    // Shared by the roles of this process, each made once on first use.
    const n = nats;
    const topology = n.topology;
    const once = <T>(make: () => Promise<T>): (() => Promise<T>) => {
      let made: Promise<T> | null = null;
      return () => (made ??= make());
    };
    const billingState = once(() => stateBucket(n));
    const billingStreams = once(async () => ensureBillingStreams(n, await billingState(), hasPipeline(cfg.role) ? cfg.billing.ackWaitMs : null, cfg.billing.partitions));
    const deliveryLog = once(async () => {
      const l = new DeliveryLog(n);
      await l.ensure();
      return l;
    });
    const webhookStore = once(async () => new WebhookStore(await webhookBucket(n)));
    const configStore = once(async () => new BillingConfigStore(await billingConfigBucket(n), n.maxPayload, undefined, n.replicas > 1));
    // Consumer lag, read from JetStream when /metrics is scraped (src/metrics).
    const watchLag = (kind: string, stream: string, consumer: string): void => {
      closers.push(
        watchConsumer(kind, consumer, async () => {
          const ci = await n.jsm.consumers.info(stream, consumer);
          return { pending: ci.num_pending, ackPending: ci.num_ack_pending };
        }),
      );
    };
    // One deliverer (URL check + the one attempt function) for test deliveries and the dispatcher.
    const deliverer = new Deliverer({
      policy: { allowHttp: cfg.webhooks.allowHttp, allowedNetworks: cfg.webhooks.allowedNetworks },
      timeoutMs: cfg.webhooks.timeoutMs,
      extraCaPem: cfg.webhooks.extraCaPem,
      ...(cfg.webhooks.dnsServers.length > 0 ? { resolver: dnsServersResolver(cfg.webhooks.dnsServers) } : {}),
    });

    // The ingress and the pipeline in one process share its cores: the ingress holds its answers while the pipeline is behind.
    const backlog = hasIngress(cfg.role) && hasPipeline(cfg.role) ? new BacklogGate(cfg.ingressHold.backlogBatches, cfg.ingressHold.maxMs, { billingLagMs: cfg.ingressHold.billingLagMs }) : null;
    if (backlog) closers.push(() => backlog.releaseAll());
    if (hasIngress(cfg.role)) {
      const redis = createRedis(cfg);
      redis.on('error', (err) => log.warn('redis error', { err: err.message }));
      await redis.connect().catch((err: Error) => log.warn('redis not reachable yet', { err: err.message }));
      const watchdog = watchRedis(redis, {
        onForce: (ms) => log.warn('redis unreachable for a while: reconnecting from scratch', { failingMs: ms }),
        onRevive: () => log.warn('redis connection ended: connecting again'),
      });
      closers.push(() => {
        watchdog.stop();
        void redis.disconnect();
      });
      checks.redis = async () => {
        await redis.ping();
      };
      const buckets = new TokenBuckets(redis, cfg.redisPrefix);
      await buckets.load().catch((err: Error) => log.warn('lua scripts not loaded yet', { err: err.message }));
      const slots = new ConcurrencySlots(redis, cfg.redisPrefix);
      await slots.load().catch((err: Error) => log.warn('lua scripts not loaded yet', { err: err.message }));
      analyticsDeps = { slots, buckets };
      const registry = new OrgRegistry(await orgBucket(nats), cfg.defaultLimits);
      await registry.start();
      const partitions = await billingStreams();
      // With replicas, read from the leader (as the evaluator does): the key and the pin must not come from followers at different points.
      const stateKv = await billingState();
      const ackFloor = async (k: number): Promise<number> => (await n.jsm.consumers.info(topology.billableParts.stream, topology.billableParts.consumer(k))).ack_floor.stream_seq;
      const customerStates = new CustomerStates(stateKv, kvReader(stateKv, undefined, { leader: nats.replicas > 1 }), partitions, ackFloor);
      routes.mountIngress({
        registry,
        signals: new SignalIngress(nats, buckets, cfg.publishTimeoutMs, backlog),
        maxBodyBytes: cfg.maxBodyBytes,
        admin: (admin = new AdminApi(registry)),
        webhooks: new WebhookApi(await webhookStore(), await deliveryLog(), nats, {
          key: cfg.webhooks.encryptionKey,
          deliverer,
          publishTimeoutMs: cfg.publishTimeoutMs,
        }),
        externalEvents: { nats, publishTimeoutMs: cfg.publishTimeoutMs },
        billing: new BillingConfigApi(await configStore(), (orgId, mode, customerId) => customerStates.consumed(orgId, mode, customerId)),
      });
    }

    if (hasPipeline(cfg.role)) {
      store = await openStore(cfg);
      await store.init();
      const s = store;
      checks.clickhouse = () => s.ping();
      routes.mountStore(store, admin);
      await ensureDeadLetterStream(nats);
      await ensurePipelineConsumer(nats, cfg);
      const partitions = await billingStreams();
      const configs = await configStore();
      // fact_signal's identity columns and the billing partitions resolve references alike (by kind, src/pipeline/identities.ts).
      const identities = new Identities((orgId, mode, customers, products) => configs.resolveIdentities(orgId, mode, customers, products));
      const partitioner = new BillablePartitioner(
        nats,
        async (orgId, mode, refs) => {
          const found = await identities.resolve(orgId, mode, refs, []);
          return new Map(refs.map((ref, i) => [ref, found.customers[i]?.id ?? null]));
        },
        partitions,
      );
      // One worker pool for the process: the pipeline's rows (workers/rows.ts) and the
      // evaluator's evaluations (workers/billing.ts) run on it.
      pool = createWorkerPool(cfg.pipeline.workers, 2 * maxInflight(cfg.pipeline.workers));
      const claims = await idempotencyClaims(nats, cfg, 'signals');
      pipeline = new Pipeline<PreparedBatch<BatchMeta>>(cfg, nats, store, claims, pool, partitioner, backlog, identities);
      lookups = new DedupeLookups(nats, claims);
      await lookups.start();
      evaluator = new BillingEvaluator(nats, configs, await billingState(), pool, {
        publishTimeoutMs: cfg.publishTimeoutMs,
        ackWaitMs: cfg.billing.ackWaitMs,
        partitions,
        inlineSignals: cfg.billing.inlineSignals,
        ...(backlog ? { lag: (ms: number) => backlog.reportBillingLag(ms) } : {}),
        fault: new FaultHook(cfg.billing.faultPoint, cfg.billing.faultAction, cfg.billing.faultPauseMs, cfg.billing.faultReleaseFile),
      });
      await pipeline.start();
      // Partitions shared out between the pipeline processes (members.ts).
      await evaluator.start(true);
      const ev = evaluator;
      members = new Members(await membersBucket(nats), memberId(randomToken(8)), partitions, (mine) => ev.assign(mine));
      await members.start();
      billingRows = new BillingRowsInserter(nats, store, await idempotencyClaims(nats, cfg, 'rows'), cfg.publishTimeoutMs);
      await billingRows.start();
      watchLag('SIGNALS', topology.signals.stream, topology.signals.consumer);
      for (let k = 0; k < partitions; k++) watchLag('BILLABLE', topology.billableParts.stream, topology.billableParts.consumer(k));
      watchLag('BILLING_ROWS', topology.billingRows.stream, topology.billingRows.consumer);
    }

    if (analyticsDeps) {
      // The engine is in reach when this process owns it (ROLE=all) or it is a server.
      let engineStore = store;
      if (!engineStore && cfg.clickhouseUrl) {
        engineStore = await openStore(cfg);
        const s = engineStore;
        closers.push(() => s.close());
        checks.clickhouse = () => s.ping();
      }
      routes.mountAnalytics(
        engineStore
          ? new AnalyticsService(engineStore.analytics, analyticsDeps.slots, analyticsDeps.buckets, {
              timeoutMs: cfg.analytics.timeoutMs,
              maxMemoryBytes: cfg.analytics.maxMemoryBytes,
              engineSessions: cfg.analytics.engineSessions,
              rateLimited: cfg.analytics.rateLimited,
              internalNames: [cfg.clickhouseDatabase, cfg.analytics.database],
              analyticsDatabase: cfg.analytics.database,
            })
          : null,
      );
    }
    if (hasDispatcher(cfg.role)) {
      if (!cfg.webhooks.encryptionKey) {
        log.warn('webhook deliveries are off: WEBHOOK_ENCRYPTION_KEY is not set');
      } else {
        await billingStreams();
        dispatcher = new Dispatcher(nats, await webhookStore(), await deliveryLog(), {
          key: cfg.webhooks.encryptionKey,
          deliverer,
          retryScheduleMs: cfg.webhooks.retryScheduleMs,
          ackWaitMs: cfg.webhooks.dispatcherAckWaitMs,
        });
        await dispatcher.start();
        watchLag('EVENTS', topology.events.stream, topology.events.consumer);
      }
    }
  } catch (err) {
    uWS.us_listen_socket_close(socket);
    throw err;
  }
  server.markReady();
  // What this role serves, once per start: what an operator checks a deployment's roles by (and test/api/docs-routes.test.ts reads).
  log.info('routes', { routes: server.routes() });
  log.info('ready', { port, store: store?.kind ?? null });

  let stopping: Promise<void> | null = null;
  return {
    port,
    stop: () =>
      (stopping ??= (async () => {
        uWS.us_listen_socket_close(socket);
        if (dispatcher) await dispatcher.stop();
        if (members) await members.stop();
        if (evaluator) await evaluator.stop();
        if (billingRows) await billingRows.stop();
        if (lookups) await lookups.stop();
        if (pipeline) await pipeline.stop();
        if (pool) await pool.destroy();
        if (store) await store.close();
        for (const c of closers.reverse()) await c();
        server.app.close();
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
    else log.fatal('failed to start', { err });
    process.exit(err instanceof ConfigError ? 2 : 1);
  });
}
