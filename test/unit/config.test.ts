/**
 * Configuration (src/config.ts): defaults, --role on the command line, and one message per
 * bad value naming the variable, all reported together in one ConfigError.
 */
import t from 'tap';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { ConfigError, loadConfig, hasDispatcher, hasIngress, hasPipeline } from '../../src/config.js';

// CA files for WEBHOOK_CA_FILE: a real certificate (openssl CLI), a file without PEM, a file
// with a good and a corrupt certificate.
const caDir = mkdtempSync(path.join(os.tmpdir(), 'config-ca-'));
t.teardown(() => rmSync(caDir, { recursive: true, force: true }));
execFileSync('/usr/bin/openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=Config Test CA'], { cwd: caDir, stdio: 'pipe' });
const GOOD_PEM = path.join(caDir, 'ca.pem');
const NOT_PEM = path.join(caDir, 'not.pem');
const BAD_PEM = path.join(caDir, 'bad.pem');
writeFileSync(NOT_PEM, 'just text\n');
writeFileSync(BAD_PEM, `${readFileSync(GOOD_PEM, 'utf8')}\n-----BEGIN CERTIFICATE-----\nTm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n`);

const TOKEN = 'operator-token-0123456789';
const base = { OPERATOR_TOKEN: TOKEN };

/** loadConfig must throw a ConfigError; returns its problems. */
function problems(env: Record<string, string | undefined>, argv: string[] = []): string[] {
  try {
    loadConfig(env, argv);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  throw new Error(`expected a ConfigError for ${JSON.stringify(env)} ${argv.join(' ')}`);
}

t.test('defaults', async (t) => {
  const cfg = loadConfig(base, []);
  t.same(cfg, {
    role: 'all',
    host: '0.0.0.0',
    port: 8080,
    operatorToken: TOKEN,
    metricsToken: null,
    redisUrl: 'redis://127.0.0.1:6379',
    redisPrefix: 'billing:',
    redisTopology: { kind: 'single' },
    natsUrl: ['nats://127.0.0.1:4222'],
    natsPrefix: 'BILLING',
    natsReplicas: 1,
    clickhouseUrl: null,
    clickhouseUser: 'default',
    clickhousePassword: '',
    clickhouseDatabase: 'billing',
    analytics: { database: 'analytics', timeoutMs: 30_000, engineSessions: 8, maxMemoryBytes: 2 * 1024 ** 3, rateLimited: false, user: null, password: '' },
    billing: { ackWaitMs: 60_000, partitions: 8, inlineSignals: 2_048, faultPoint: null, faultAction: 'kill', faultPauseMs: 5_000, faultReleaseFile: null },
    webhooks: {
      encryptionKey: null, allowHttp: false, allowedNetworks: [], timeoutMs: 10_000, retryScheduleMs: [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000],
      caFile: null, extraCaPem: [], dnsServers: [], dispatcherAckWaitMs: 30_000,
    },
    dataDir: path.resolve(process.cwd(), '.data'),
    engineHostFault: null,
    dedupeWindowDays: 7,
    defaultLimits: { burst: 10_000, refillPerSecond: 1_000, analyticsConcurrency: 4 },
    maxBodyBytes: 1_000_000,
    publishTimeoutMs: 5_000,
    streamMaxBytes: 2 * 1024 ** 3,
    ingressHold: { backlogBatches: 256, maxMs: 1_000, billingLagMs: 500 },
    pipeline: {
      workers: Math.min(4, Math.max(1, os.availableParallelism())),
      flushRows: 10_000,
      flushMs: 200,
      flushIdleMs: 10,
      maxAckPending: 256,
      ackWaitMs: 60_000,
    },
    logLevel: 'info',
  });
  t.same(loadConfig({ ...base, PORT: '', ROLE: '', REDIS_URL: '' }, []).port, 8080, 'empty strings mean the default');
});

t.test('values are read', async (t) => {
  const cfg = loadConfig(
    {
      ...base,
      ROLE: 'ingress',
      HOST: '127.0.0.1',
      PORT: '0',
      REDIS_URL: 'rediss://cache:6380/2',
      REDIS_PREFIX: 'x:y_z-',
      NATS_URL: 'tls://nats:4222',
      NATS_PREFIX: 'P_1',
      CLICKHOUSE_URL: 'https://ch:8443',
      CLICKHOUSE_DATABASE: 'b_2',
      DATA_DIR: '/tmp/somewhere/../data',
      DEDUPE_WINDOW_DAYS: '3650',
      DEFAULT_BURST: '500',
      DEFAULT_REFILL_PER_SECOND: '0.5',
      DEFAULT_ANALYTICS_CONCURRENCY: '1',
      ANALYTICS_ENGINE_SESSIONS: '3',
      LOG_LEVEL: 'debug',
    },
    [],
  );
  t.equal(cfg.role, 'ingress');
  t.equal(cfg.host, '127.0.0.1');
  t.equal(cfg.port, 0);
  t.equal(cfg.redisUrl, 'rediss://cache:6380/2');
  t.equal(cfg.redisPrefix, 'x:y_z-');
  t.same(cfg.natsUrl, ['tls://nats:4222']);
  t.same(loadConfig({ ...base, NATS_URL: 'nats://a:4222, nats://b:4223,tls://c:4224' }, []).natsUrl, ['nats://a:4222', 'nats://b:4223', 'tls://c:4224'], 'NATS_URL may list the members of a cluster');
  for (const v of ['1', '3', '5'] as const) t.equal(loadConfig({ ...base, NATS_REPLICAS: v }, []).natsReplicas, Number(v), `NATS_REPLICAS=${v} is read`);
  t.equal(cfg.natsPrefix, 'P_1');
  t.equal(cfg.clickhouseUrl, 'https://ch:8443');
  t.equal(cfg.clickhouseDatabase, 'b_2');
  t.equal(cfg.dataDir, '/tmp/data');
  t.equal(cfg.dedupeWindowDays, 3650);
  t.same(cfg.defaultLimits, { burst: 500, refillPerSecond: 0.5, analyticsConcurrency: 1 });
  t.equal(cfg.analytics.engineSessions, 3);
  t.equal(loadConfig(base, []).analytics.engineSessions, 8, 'eight analytics sessions by default');
  t.equal(cfg.logLevel, 'debug');
  t.equal(loadConfig({ ...base, DEFAULT_REFILL_PER_SECOND: '0.001' }, []).defaultLimits.refillPerSecond, 0.001, 'the minimum refill rate is accepted');
  t.same(loadConfig({ ...base, BILLING_ACK_WAIT_MS: '2000', BILLING_PARTITIONS: '4', BILLING_INLINE_SIGNALS: '0', BILLING_FAULT_POINT: 'before-state-write', BILLING_FAULT_ACTION: 'pause', BILLING_FAULT_PAUSE_MS: '3000' }, []).billing, { ackWaitMs: 2_000, partitions: 4, inlineSignals: 0, faultPoint: 'before-state-write', faultAction: 'pause', faultPauseMs: 3_000, faultReleaseFile: null }, 'billing settings are read');
  t.same(loadConfig({ ...base, BILLING_FAULT_POINT: 'before-states', BILLING_FAULT_ACTION: 'stall', BILLING_FAULT_RELEASE_FILE: '/tmp/release' }, []).billing, { ackWaitMs: 60_000, partitions: 8, inlineSignals: 2_048, faultPoint: 'before-states', faultAction: 'stall', faultPauseMs: 5_000, faultReleaseFile: '/tmp/release' }, 'the stall and its release file are read');
  t.equal(loadConfig({ ...base, DEFAULT_REFILL_PER_SECOND: '1000000000' }, []).defaultLimits.refillPerSecond, 1e9, 'the maximum refill rate is accepted');
  t.equal(loadConfig(base, []).engineHostFault, null, 'no engine host fault by default');
  t.equal(loadConfig({ ...base, ENGINE_HOST_FAULT: 'lose-insert' }, []).engineHostFault, 'lose-insert', 'the test-only engine host fault is read');
});

t.test('Redis topology: Sentinel or Cluster', async (t) => {
  t.same(loadConfig({ ...base, REDIS_SENTINELS: '10.0.0.1:26379, sentinel-b:26380,[::1]:26381', REDIS_SENTINEL_NAME: 'mymaster' }, []).redisTopology, {
    kind: 'sentinel',
    sentinels: [{ host: '10.0.0.1', port: 26379 }, { host: 'sentinel-b', port: 26380 }, { host: '::1', port: 26381 }],
    name: 'mymaster',
    password: null,
  });
  t.same(loadConfig({ ...base, REDIS_CLUSTER_NODES: 'r1:7000,r2:7001', REDIS_PASSWORD: 'pw' }, []).redisTopology, {
    kind: 'cluster',
    nodes: [{ host: 'r1', port: 7000 }, { host: 'r2', port: 7001 }],
    password: 'pw',
  });
});

t.test('webhook delivery settings are read', async (t) => {
  const cfg = loadConfig({ ...base, WEBHOOK_CA_FILE: GOOD_PEM, WEBHOOK_DNS_SERVERS: ' 127.0.0.1:5353 , [::1]:53,10.0.0.2 ', WEBHOOK_TIMEOUT_MS: '1000', DISPATCHER_ACK_WAIT_MS: '2000' }, []);
  t.equal(cfg.webhooks.caFile, GOOD_PEM);
  t.same(cfg.webhooks.extraCaPem, [readFileSync(GOOD_PEM, 'utf8').trim()], 'the PEM certificate of the file');
  t.same(cfg.webhooks.dnsServers, ['127.0.0.1:5353', '[::1]:53', '10.0.0.2']);
  t.equal(cfg.webhooks.dispatcherAckWaitMs, 2_000);
  t.equal(loadConfig({ ...base, WEBHOOK_TIMEOUT_MS: '2000' }, []).webhooks.dispatcherAckWaitMs, 14_000, 'default: 2 × WEBHOOK_TIMEOUT_MS + 10 s');
});

t.test('--role on the command line overrides ROLE', async (t) => {
  t.equal(loadConfig({ ...base, ROLE: 'ingress' }, ['--role=pipeline']).role, 'pipeline');
  t.equal(loadConfig({ ...base, ROLE: 'ingress' }, ['--role', 'pipeline']).role, 'pipeline');
  t.equal(loadConfig({ ROLE: 'all' }, ['--other', 'x', '--role', 'pipeline']).role, 'pipeline', 'no token needed once the argv says pipeline');
  t.equal(loadConfig({ ...base, ROLE: 'pipeline' }, []).role, 'pipeline');
  t.equal(loadConfig({ ...base, ROLE: 'pipeline' }, ['--port=1']).role, 'pipeline', 'other flags are ignored');
  t.equal(loadConfig(base, ['--role=ingress', '--role=pipeline']).role, 'ingress', 'the first --role wins');
  t.same(problems(base, ['--role=bogus']), ['ROLE="bogus": must be one of all, ingress, pipeline, dispatcher'], 'a bad --role is named as ROLE');
  t.same(problems({ ...base, ROLE: 'pipeline' }, ['--role', 'bad']), ['ROLE="bad": must be one of all, ingress, pipeline, dispatcher']);
});

t.test('each bad value gives one message naming the variable', async (t) => {
  const cases: [Record<string, string>, string][] = [
    [{ ROLE: 'webhooks' }, 'ROLE="webhooks": must be one of all, ingress, pipeline, dispatcher'],
    [{ WEBHOOK_ENCRYPTION_KEY: 'short' }, 'WEBHOOK_ENCRYPTION_KEY: must be 32 bytes, as 64 hex characters or base64'],
    [{ WEBHOOK_TIMEOUT_MS: '50' }, 'WEBHOOK_TIMEOUT_MS=50: must be between 100 and 60000'],
    [{ WEBHOOK_ALLOW_HTTP: 'yes' }, 'WEBHOOK_ALLOW_HTTP="yes": must be one of true, false'],
    [{ WEBHOOK_DNS_SERVERS: '127.0.0.1:5353,nonsense' }, 'WEBHOOK_DNS_SERVERS="127.0.0.1:5353,nonsense": comma-separated DNS servers such as 10.0.0.2, 127.0.0.1:5353 or [::1]:53 (Invalid IP address: nonsense)'],
    [{ WEBHOOK_CA_FILE: '/nonexistent/ca.pem' }, 'WEBHOOK_CA_FILE="/nonexistent/ca.pem": cannot be read (ENOENT)'],
    [{ WEBHOOK_CA_FILE: NOT_PEM }, `WEBHOOK_CA_FILE=${JSON.stringify(NOT_PEM)}: contains no PEM certificate (-----BEGIN CERTIFICATE-----)`],
    [{ WEBHOOK_CA_FILE: BAD_PEM }, `WEBHOOK_CA_FILE=${JSON.stringify(BAD_PEM)}: certificate 2 of 2 is not a valid X.509 certificate`],
    [{ DISPATCHER_ACK_WAIT_MS: '999' }, 'DISPATCHER_ACK_WAIT_MS=999: must be between 1000 and 3600000'],
    [{ DISPATCHER_ACK_WAIT_MS: '10999' }, 'DISPATCHER_ACK_WAIT_MS=10999: must be at least WEBHOOK_TIMEOUT_MS + 1000 (11000), or an event would be handed out again while its attempt still runs'],
    [{ WEBHOOK_TIMEOUT_MS: '5000', DISPATCHER_ACK_WAIT_MS: '5999' }, 'DISPATCHER_ACK_WAIT_MS=5999: must be at least WEBHOOK_TIMEOUT_MS + 1000 (6000), or an event would be handed out again while its attempt still runs'],
    [{ WEBHOOK_RETRY_SCHEDULE_MS: '5,abc' }, 'WEBHOOK_RETRY_SCHEDULE_MS="5,abc": a comma-separated list of 1 to 50 delays in milliseconds, each from 10 to 604800000'],
    [{ ROLE: 'ALL' }, 'ROLE="ALL": must be one of all, ingress, pipeline, dispatcher'],
    [{ PORT: 'abc' }, 'PORT="abc": must be a whole number between 0 and 65535'],
    [{ PORT: '-1' }, 'PORT="-1": must be a whole number between 0 and 65535'],
    [{ PORT: '80.5' }, 'PORT="80.5": must be a whole number between 0 and 65535'],
    [{ PORT: '70000' }, 'PORT=70000: must be between 0 and 65535'],
    [{ REDIS_URL: 'http://127.0.0.1:6379' }, 'REDIS_URL="http://127.0.0.1:6379": must be a URL starting with redis:// or rediss://'],
    [{ REDIS_URL: '127.0.0.1:6379' }, 'REDIS_URL="127.0.0.1:6379": must be a URL starting with redis:// or rediss://'],
    [{ REDIS_URL: 'not a url' }, 'REDIS_URL="not a url": must be a URL starting with redis:// or rediss://'],
    [{ REDIS_SENTINELS: '10.0.0.1:26379' }, 'REDIS_SENTINEL_NAME: required with REDIS_SENTINELS (the name the sentinels monitor the primary under, e.g. mymaster)'],
    [{ REDIS_SENTINELS: '10.0.0.1', REDIS_SENTINEL_NAME: 'm' }, 'REDIS_SENTINELS="10.0.0.1": "10.0.0.1" is not host:port (a comma-separated list such as 10.0.0.1:26379,10.0.0.2:26379)'],
    [{ REDIS_SENTINELS: 'a:1,b:70000', REDIS_SENTINEL_NAME: 'm' }, 'REDIS_SENTINELS="a:1,b:70000": "b:70000" is not host:port (a comma-separated list such as 10.0.0.1:26379,10.0.0.2:26379)'],
    [{ REDIS_SENTINELS: 'a:1', REDIS_SENTINEL_NAME: 'my master' }, 'REDIS_SENTINEL_NAME="my master": letters, digits, ".", "_" or "-", 1 to 64 characters'],
    [{ REDIS_SENTINEL_NAME: 'mymaster' }, 'REDIS_SENTINEL_NAME: only meaningful with REDIS_SENTINELS (the sentinels to ask)'],
    [{ REDIS_CLUSTER_NODES: 'a:1,,b:2' }, 'REDIS_CLUSTER_NODES="a:1,,b:2": "" is not host:port (a comma-separated list such as 10.0.0.1:26379,10.0.0.2:26379)'],
    [{ REDIS_CLUSTER_NODES: 'a:1', REDIS_SENTINELS: 'b:2', REDIS_SENTINEL_NAME: 'm' }, 'REDIS_SENTINELS and REDIS_CLUSTER_NODES: set one of them, not both (Sentinel and Cluster are two different Redis deployments)'],
    [{ REDIS_PASSWORD: 'x' }, 'REDIS_PASSWORD: only used with REDIS_SENTINELS or REDIS_CLUSTER_NODES (with REDIS_URL alone, put the password in the URL: redis://:password@host:6379)'],
    [{ NATS_URL: 'redis://x' }, 'NATS_URL="redis://x": must be one URL or a comma-separated list of URLs, each starting with nats:// or tls://'],
    [{ NATS_URL: 'nats://a:4222,,nats://b:4222' }, 'NATS_URL="nats://a:4222,,nats://b:4222": must be one URL or a comma-separated list of URLs, each starting with nats:// or tls://'],
    [{ NATS_REPLICAS: '2' }, 'NATS_REPLICAS="2": must be one of 1, 3, 5'],
    [{ NATS_REPLICAS: '0' }, 'NATS_REPLICAS="0": must be one of 1, 3, 5'],
    [{ CLICKHOUSE_URL: 'ftp://x' }, 'CLICKHOUSE_URL="ftp://x": must be a URL starting with http:// or https://'],
    [{ REDIS_PREFIX: 'a b' }, 'REDIS_PREFIX="a b": letters, digits, ":", "_" or "-", 1 to 64 characters'],
    [{ NATS_PREFIX: 'A.B' }, 'NATS_PREFIX="A.B": letters, digits, "_" or "-", 1 to 32 characters'],
    [{ NATS_PREFIX: 'A'.repeat(33) }, `NATS_PREFIX="${'A'.repeat(33)}": letters, digits, "_" or "-", 1 to 32 characters`],
    [{ CLICKHOUSE_DATABASE: '1db' }, 'CLICKHOUSE_DATABASE="1db": a plain identifier (letters, digits, "_")'],
    [{ CLICKHOUSE_DATABASE: 'db; DROP' }, 'CLICKHOUSE_DATABASE="db; DROP": a plain identifier (letters, digits, "_")'],
    [{ DEDUPE_WINDOW_DAYS: '6' }, 'DEDUPE_WINDOW_DAYS=6: must be between 7 and 3650'],
    [{ DEDUPE_WINDOW_DAYS: '0' }, 'DEDUPE_WINDOW_DAYS=0: must be between 7 and 3650'],
    [{ DEFAULT_BURST: '499' }, 'DEFAULT_BURST=499: must be between 500 and 1000000000'],
    [{ DEFAULT_BURST: '1e4' }, 'DEFAULT_BURST="1e4": must be a whole number between 500 and 1000000000'],
    [{ DEFAULT_REFILL_PER_SECOND: '0' }, 'DEFAULT_REFILL_PER_SECOND="0": must be a number between 0.001 and 1000000000'],
    [{ DEFAULT_REFILL_PER_SECOND: '0.0009' }, 'DEFAULT_REFILL_PER_SECOND="0.0009": must be a number between 0.001 and 1000000000'],
    [{ DEFAULT_REFILL_PER_SECOND: '0.00001' }, 'DEFAULT_REFILL_PER_SECOND="0.00001": must be a number between 0.001 and 1000000000'],
    [{ DEFAULT_REFILL_PER_SECOND: '-5' }, 'DEFAULT_REFILL_PER_SECOND="-5": must be a number between 0.001 and 1000000000'],
    [{ DEFAULT_REFILL_PER_SECOND: 'fast' }, 'DEFAULT_REFILL_PER_SECOND="fast": must be a number between 0.001 and 1000000000'],
    [{ DEFAULT_REFILL_PER_SECOND: '1e3' }, 'DEFAULT_REFILL_PER_SECOND="1e3": must be a number between 0.001 and 1000000000'],
    [{ DEFAULT_REFILL_PER_SECOND: '1000000000.5' }, 'DEFAULT_REFILL_PER_SECOND="1000000000.5": must be a number between 0.001 and 1000000000'],
    [{ DEFAULT_ANALYTICS_CONCURRENCY: '0' }, 'DEFAULT_ANALYTICS_CONCURRENCY=0: must be between 1 and 1000'],
    [{ MAX_BODY_BYTES: '1000' }, 'MAX_BODY_BYTES=1000: must be between 65536 and 67108864'],
    [{ PIPELINE_WORKERS: '0' }, 'PIPELINE_WORKERS=0: must be between 1 and 256'],
    [{ PIPELINE_ACK_WAIT_MS: '999' }, 'PIPELINE_ACK_WAIT_MS=999: must be between 1000 and 3600000'],
    [{ BILLING_ACK_WAIT_MS: '999' }, 'BILLING_ACK_WAIT_MS=999: must be between 1000 and 3600000'],
    [{ BILLING_ACK_WAIT_MS: '2s' }, 'BILLING_ACK_WAIT_MS="2s": must be a whole number between 1000 and 3600000'],
    [{ BILLING_PARTITIONS: '0' }, 'BILLING_PARTITIONS=0: must be between 1 and 256'],
    [{ BILLING_INLINE_SIGNALS: '1000001' }, 'BILLING_INLINE_SIGNALS=1000001: must be between 0 and 1000000'],
    [{ BILLING_FAULT_POINT: 'somewhere' }, 'BILLING_FAULT_POINT="somewhere": must be one of before-states, after-pin, after-events, after-states, before-state-write, after-state-write'],
    [{ BILLING_FAULT_ACTION: 'crash' }, 'BILLING_FAULT_ACTION="crash": must be one of kill, pause, stall'],
    [{ BILLING_FAULT_PAUSE_MS: '5' }, 'BILLING_FAULT_PAUSE_MS=5: must be between 10 and 600000'],
    [{ ENGINE_HOST_FAULT: 'slow' }, 'ENGINE_HOST_FAULT="slow": must be one of lose-insert, slow-insert'],
    [{ LOG_LEVEL: 'trace' }, 'LOG_LEVEL="trace": must be one of debug, info, warn, error'],
    [{ ANALYTICS_TIMEOUT_MS: '30001' }, 'ANALYTICS_TIMEOUT_MS=30001: must be between 100 and 30000'],
    [{ ANALYTICS_ENGINE_SESSIONS: '1' }, 'ANALYTICS_ENGINE_SESSIONS=1: must be between 2 and 64'],
    [{ ANALYTICS_ENGINE_SESSIONS: '65' }, 'ANALYTICS_ENGINE_SESSIONS=65: must be between 2 and 64'],
    [{ ANALYTICS_ENGINE_SESSIONS: 'many' }, 'ANALYTICS_ENGINE_SESSIONS="many": must be a whole number between 2 and 64'],
    [{ ANALYTICS_RATE_LIMITED: 'yes' }, 'ANALYTICS_RATE_LIMITED="yes": must be one of true, false'],
    [{ ANALYTICS_DATABASE: 'a-b' }, 'ANALYTICS_DATABASE="a-b": a plain identifier (letters, digits, "_")'],
    [{ ANALYTICS_DATABASE: 'billing' }, 'ANALYTICS_DATABASE="billing": must differ from CLICKHOUSE_DATABASE (it holds only the analytics views)'],
    [{ ANALYTICS_DATABASE: 'system' }, 'ANALYTICS_DATABASE="system": system, information_schema, default are reserved'],
    [{ CLICKHOUSE_DATABASE: 'default' }, 'CLICKHOUSE_DATABASE="default": system, information_schema, default are reserved'],
  ];
  for (const [env, msg] of cases) {
    t.same(problems({ ...base, ...env }), [msg], JSON.stringify(env));
  }
});

t.test('OPERATOR_TOKEN: required for all and ingress, at least 16 characters', async (t) => {
  const msg = 'OPERATOR_TOKEN: required for roles all and ingress, at least 16 characters (protects /admin/v1)';
  t.same(problems({}), [msg], 'role all (default) without a token');
  t.same(problems({ ROLE: 'all' }), [msg]);
  t.same(problems({ ROLE: 'ingress' }), [msg]);
  t.same(problems({ ROLE: 'ingress', OPERATOR_TOKEN: '' }), [msg], 'empty token');
  t.same(problems({ ROLE: 'ingress', OPERATOR_TOKEN: 'x'.repeat(15) }), [msg], '15 characters is too short');
  t.equal(loadConfig({ ROLE: 'ingress', OPERATOR_TOKEN: 'x'.repeat(16) }, []).operatorToken, 'x'.repeat(16), '16 characters is enough');
  const p = loadConfig({ ROLE: 'pipeline' }, []);
  t.equal(p.role, 'pipeline', 'pipeline needs no token');
  t.equal(p.operatorToken, null);
  t.equal(loadConfig({}, ['--role', 'pipeline']).role, 'pipeline');
});

t.test('METRICS_TOKEN: optional; when set, at least 16 printable characters without spaces', async (t) => {
  const msg = 'METRICS_TOKEN: at least 16 printable characters without spaces when set (unset: GET /metrics is open)';
  t.equal(loadConfig(base, []).metricsToken, null, 'unset: /metrics is open');
  t.equal(loadConfig({ ...base, METRICS_TOKEN: '' }, []).metricsToken, null, 'empty is unset');
  t.equal(loadConfig({ ...base, METRICS_TOKEN: 'm'.repeat(16) }, []).metricsToken, 'm'.repeat(16));
  t.same(problems({ ...base, METRICS_TOKEN: 'm'.repeat(15) }), [msg], '15 characters is too short');
  t.same(problems({ ...base, METRICS_TOKEN: `${'m'.repeat(16)} x` }), [msg], 'a space');
  t.same(problems({ ...base, METRICS_TOKEN: `${'m'.repeat(16)}\u00e9` }), [msg], 'not ASCII');
  t.equal(loadConfig({ ROLE: 'dispatcher', METRICS_TOKEN: 'm'.repeat(16) }, []).metricsToken, 'm'.repeat(16), 'any role');
});

t.test('INGRESS_HOLD_BACKLOG, INGRESS_HOLD_MAX_MS and INGRESS_HOLD_BILLING_LAG_MS: whole numbers, 0 turns the hold off', async (t) => {
  t.same(loadConfig({ ...base, INGRESS_HOLD_BACKLOG: '0', INGRESS_HOLD_MAX_MS: '0', INGRESS_HOLD_BILLING_LAG_MS: '0' }, []).ingressHold, { backlogBatches: 0, maxMs: 0, billingLagMs: 0 });
  t.same(loadConfig({ ...base, INGRESS_HOLD_BACKLOG: '1000', INGRESS_HOLD_MAX_MS: '60000', INGRESS_HOLD_BILLING_LAG_MS: '3600000' }, []).ingressHold, { backlogBatches: 1000, maxMs: 60_000, billingLagMs: 3_600_000 });
  t.equal(problems({ ...base, INGRESS_HOLD_BILLING_LAG_MS: '3600001' }).filter((p) => p.startsWith('INGRESS_HOLD_BILLING_LAG_MS')).length, 1, 'over an hour');
  t.equal(problems({ ...base, INGRESS_HOLD_BACKLOG: '-1' }).filter((p) => p.startsWith('INGRESS_HOLD_BACKLOG')).length, 1, 'negative');
  t.equal(problems({ ...base, INGRESS_HOLD_MAX_MS: '60001' }).filter((p) => p.startsWith('INGRESS_HOLD_MAX_MS')).length, 1, 'over a minute');
  t.equal(problems({ ...base, INGRESS_HOLD_MAX_MS: 'soon' }).filter((p) => p.startsWith('INGRESS_HOLD_MAX_MS')).length, 1, 'not a number');
});

t.test('several bad values are reported together', async (t) => {
  let err: unknown;
  try {
    loadConfig({ ROLE: 'ingress', PORT: 'abc', REDIS_URL: 'http://x', DEDUPE_WINDOW_DAYS: '6', DEFAULT_BURST: '499', LOG_LEVEL: 'loud' }, []);
  } catch (e) {
    err = e;
  }
  t.type(err, ConfigError);
  const ps = (err as ConfigError).problems;
  t.equal(ps.length, 6, 'one message per bad value');
  for (const name of ['OPERATOR_TOKEN', 'PORT', 'REDIS_URL', 'DEDUPE_WINDOW_DAYS', 'DEFAULT_BURST', 'LOG_LEVEL']) {
    t.equal(ps.filter((p) => p.startsWith(name)).length, 1, `exactly one message names ${name}`);
  }
  t.match((err as ConfigError).message, /^invalid configuration:\n {2}- /);
  for (const p of ps) t.ok((err as ConfigError).message.includes(p), `the message lists ${p.split(/[=:]/)[0]}`);
});

t.test('role helpers', async (t) => {
  t.same([hasIngress('all'), hasIngress('ingress'), hasIngress('pipeline')], [true, true, false]);
  t.same([hasPipeline('all'), hasPipeline('ingress'), hasPipeline('pipeline')], [true, false, true]);
  t.same([hasDispatcher('all'), hasDispatcher('ingress'), hasDispatcher('pipeline'), hasDispatcher('dispatcher')], [true, false, false, true]);
});

t.test('an empty --role= is a configuration problem, not a silent default', async (t) => {
  // `--role=` yields '' which must not silently become the default 'all' (a pipeline host
  // would start the ingress too); it is refused like any other bad role.
  const msg = 'ROLE="": must be one of all, ingress, pipeline, dispatcher';
  t.same(problems({ ...base, ROLE: 'pipeline' }, ['--role=']), [msg], 'ROLE=pipeline with --role=');
  t.same(problems(base, ['--role=']), [msg], 'no ROLE with --role=');
  t.same(problems({ ROLE: 'pipeline' }, ['--role=']), [msg, 'OPERATOR_TOKEN: required for roles all and ingress, at least 16 characters (protects /admin/v1)'],
    'the refused role falls back to the default all, which then needs a token; both are reported');
  t.same(problems({ ...base, ROLE: 'pipeline' }, ['--role', '']), [msg], '--role "" (separate empty argument) is refused too');
  // `--role` as the last argument (no value) falls back to ROLE: fine
  t.equal(loadConfig({ ...base, ROLE: 'pipeline' }, ['--role']).role, 'pipeline');
  t.equal(loadConfig({ ...base, ROLE: '' }, []).role, 'all', 'an empty ROLE variable still means the default');
});
