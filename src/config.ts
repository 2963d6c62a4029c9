/**
 * Configuration: every setting is read from the environment here, once, at start.
 * Nothing else in the service reads process.env (the billing-admin CLI, a separate program,
 * reads its own BILLING_URL and OPERATOR_TOKEN). Each bad value produces one clear
 * message; all messages are reported together and the process refuses to start.
 *
 * Every setting, its default and its meaning is listed in docs/operations.md ("Configuration").
 */
import os from 'node:os';
import path from 'node:path';
import { DEFAULT_RETRY_SCHEDULE_MS, compileAllowedNetworks, parseEncryptionKey } from './shared/webhook-settings.js';
import { LIMIT_BOUNDS } from './shared/org-limits.js';
import { readFileSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import { Resolver } from 'node:dns';

/** Points of the billing evaluator's commit order where the test-only fault hook can act. */
/** Test-only faults of the engine host (ENGINE_HOST_FAULT; src/store/engine-host/host.ts). */
export const ENGINE_HOST_FAULTS = ['lose-insert', 'slow-insert'] as const;
export type EngineHostFault = (typeof ENGINE_HOST_FAULTS)[number];
export const BILLING_FAULT_POINTS = ['before-states', 'after-pin', 'after-events', 'after-states', 'before-state-write', 'after-state-write'] as const;
export type BillingFaultPoint = (typeof BILLING_FAULT_POINTS)[number];
/** BILLING_PARTITIONS' upper bound (and of the number a deployment keeps: billing/evaluator/streams.ts). */
export const MAX_BILLING_PARTITIONS = 256;
/** BILLING_PARTITIONS' default (docs/decisions/0005-partitioned-billing.md: why 8). */
export const DEFAULT_BILLING_PARTITIONS = 8;
/**
 * BILLING_INLINE_SIGNALS' default: a group of up to this many signals (about 20 ms of CPU at
 * ~9 µs a signal) is evaluated on the evaluator's thread rather than on a worker (docs/decisions/
 * 0009-billing-groups-inline.md: the hop's waits cost more than the work).
 */
export const DEFAULT_BILLING_INLINE_SIGNALS = 2_048;

export type Role = 'all' | 'ingress' | 'pipeline' | 'dispatcher';
export const ROLES: readonly Role[] = ['all', 'ingress', 'pipeline', 'dispatcher'];

export interface Config {
  role: Role;
  host: string;
  port: number;
  operatorToken: string | null;
  /** GET /metrics wants it as a bearer token when set; unset: /metrics is open. */
  metricsToken: string | null;
  redisUrl: string;
  redisPrefix: string;
  /**
   * How the ingress reaches Redis: one server at REDIS_URL (`single`), the primary named
   * REDIS_SENTINEL_NAME as told by REDIS_SENTINELS (`sentinel`), or a Redis Cluster found
   * from REDIS_CLUSTER_NODES (`cluster`). REDIS_PASSWORD authenticates to the data nodes
   * in the last two (in `single` mode the password is part of REDIS_URL).
   */
  redisTopology: RedisTopology;
  /** NATS_URL: one server, or several comma-separated (members of one cluster). */
  natsUrl: string[];
  natsPrefix: string;
  /** NATS_REPLICAS: replicas of every stream and KV bucket the service creates (1, 3 or 5). */
  natsReplicas: 1 | 3 | 5;
  clickhouseUrl: string | null;
  clickhouseUser: string;
  clickhousePassword: string;
  clickhouseDatabase: string;
  analytics: {
    /** Database holding only the analytics views; the current database of every analytics query. */
    database: string;
    /** Engine time limit of one analytics query (spec: 30 s); past it the answer is 408. */
    timeoutMs: number;
    /**
     * Analytics statements run at once by this process (the fair queue's width), and the
     * embedded engine host's analytics sessions.
     */
    engineSessions: number;
    /** Engine memory limit of one analytics query. */
    maxMemoryBytes: number;
    /** Spec 8.3: when on, an analytics query takes one token from the organization's bucket. */
    rateLimited: boolean;
    /** Read-only ClickHouse server user for analytics queries (server mode only). */
    user: string | null;
    password: string;
  };
  dataDir: string;
  /**
   * Test-only fault of the engine host (src/store/engine-host/host.ts `ENGINE_HOST_FAULTS`):
   * `lose-insert` (the first signals insert of the first host loses its answer and is run
   * anyway 6 s later), `slow-insert` (the first signals insert of the first host waits 8 s,
   * then runs and answers), null (the default) for none.
   */
  engineHostFault: EngineHostFault | null;
  dedupeWindowDays: number;
  defaultLimits: { burst: number; refillPerSecond: number; analyticsConcurrency: number };
  maxBodyBytes: number;
  publishTimeoutMs: number;
  streamMaxBytes: number;
  /**
   * Back-pressure in a process running both the ingress and the pipeline (src/shared/backlog-gate.ts):
   * while the pipeline is more than `backlogBatches` batches behind, or the billing evaluator's
   * oldest uncommitted message was received more than `billingLagMs` ago, each 202 waits up to `maxMs`.
   */
  ingressHold: { backlogBatches: number; maxMs: number; billingLagMs: number };
  pipeline: {
    workers: number;
    flushRows: number;
    flushMs: number;
    flushIdleMs: number;
    maxAckPending: number;
    ackWaitMs: number;
  };
  billing: {
    /** Ack wait of the billing consumers (billable batches, billing rows): redelivery after a holder died. */
    ackWaitMs: number;
    /**
     * Partitions of the billable stream (src/billing/evaluator/partition.ts): customers are
     * spread over them by hash and each is evaluated one batch at a time, in order; the
     * partitions run in parallel. Fixed by the first start (existing partitions win).
     */
    partitions: number;
    /**
     * Groups of at most this many signals are evaluated on the evaluator's own thread, larger
     * ones on a worker thread (src/billing/evaluator/consumer.ts, step 4): 0 sends every group
     * to a worker.
     */
    inlineSignals: number;
    /**
     * Test-only fault hook of the billing evaluator (src/billing/evaluator/fault.ts): the point
     * of the commit order where it acts, null (the default) for none.
     */
    faultPoint: BillingFaultPoint | null;
    /** What the hook does there: `kill` (SIGKILL of this process), `pause` (log, wait faultPauseMs, go on) or `stall` (log, block the main thread faultPauseMs, go on). */
    faultAction: 'kill' | 'pause' | 'stall';
    faultPauseMs: number;
    /** With `stall`: a file whose existence ends the stall early (BILLING_FAULT_RELEASE_FILE), null for none. */
    faultReleaseFile: string | null;
  };
  webhooks: {
    /** WEBHOOK_ENCRYPTION_KEY: seals signing secrets at rest; null disables webhooks. */
    encryptionKey: Buffer | null;
    allowHttp: boolean;
    allowedNetworks: string[];
    timeoutMs: number;
    retryScheduleMs: number[];
    /** WEBHOOK_CA_FILE: PEM certificates trusted in addition to Node's default roots. */
    caFile: string | null;
    extraCaPem: string[];
    /** WEBHOOK_DNS_SERVERS: resolve receiver host names with these servers (empty: the system resolver). */
    dnsServers: string[];
    /** DISPATCHER_ACK_WAIT_MS: an unacknowledged event is handed out again after this. */
    dispatcherAckWaitMs: number;
  };
  logLevel: 'debug' | 'info' | 'warn' | 'error';
}

export interface HostPort {
  host: string;
  port: number;
}

export type RedisTopology =
  | { kind: 'single' }
  | { kind: 'sentinel'; sentinels: HostPort[]; name: string; password: string | null }
  | { kind: 'cluster'; nodes: HostPort[]; password: string | null };

/** `host:port,host:port` (IPv6 as `[::1]:26379`), or a sentence saying what is wrong. */
export function parseHostPorts(raw: string): HostPort[] | string {
  const out: HostPort[] = [];
  for (const part of raw.split(',').map((x) => x.trim())) {
    const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(part);
    const port = m ? Number(m[3]) : 0;
    if (!m || port < 1 || port > 65535) return `${JSON.stringify(part)} is not host:port (a comma-separated list such as 10.0.0.1:26379,10.0.0.2:26379)`;
    out.push({ host: m[1] ?? m[2]!, port });
  }
  return out;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n  - ${problems.join('\n  - ')}`);
  }
}

type Env = Record<string, string | undefined>;

/** Collects problems instead of throwing at the first one. */
class Reader {
  readonly problems: string[] = [];
  constructor(private readonly env: Env) {}

  str(name: string, def: string): string {
    const v = this.env[name];
    return v === undefined || v === '' ? def : v;
  }

  optional(name: string): string | null {
    const v = this.env[name];
    return v === undefined || v === '' ? null : v;
  }

  int(name: string, def: number, min: number, max: number): number {
    const raw = this.env[name];
    if (raw === undefined || raw === '') return def;
    if (!/^\d+$/.test(raw.trim())) {
      this.problems.push(`${name}=${JSON.stringify(raw)}: must be a whole number between ${min} and ${max}`);
      return def;
    }
    const n = Number(raw);
    if (n < min || n > max) {
      this.problems.push(`${name}=${raw}: must be between ${min} and ${max}`);
      return def;
    }
    return n;
  }

  num(name: string, def: number, min: number, max: number): number {
    const raw = this.env[name];
    if (raw === undefined || raw === '') return def;
    const n = Number(raw);
    if (!/^\d+(\.\d+)?$/.test(raw.trim()) || !(n >= min) || n > max) {
      this.problems.push(`${name}=${JSON.stringify(raw)}: must be a number between ${min} and ${max}`);
      return def;
    }
    return n;
  }

  oneOf<T extends string>(name: string, def: T, allowed: readonly T[], value?: string): T {
    const raw = value ?? this.env[name];
    if (raw === undefined || (raw === '' && value === undefined)) return def;
    if (!(allowed as readonly string[]).includes(raw)) {
      this.problems.push(`${name}=${JSON.stringify(raw)}: must be one of ${allowed.join(', ')}`);
      return def;
    }
    return raw as T;
  }

  url(name: string, def: string | null, protocols: string[]): string | null {
    const raw = this.optional(name) ?? def;
    if (raw === null) return null;
    try {
      const u = new URL(raw);
      if (!protocols.includes(u.protocol)) throw new Error('protocol');
      return raw;
    } catch {
      this.problems.push(`${name}=${JSON.stringify(raw)}: must be a URL starting with ${protocols.map((p) => `${p}//`).join(' or ')}`);
      return def;
    }
  }

  /** One URL or several comma-separated (e.g. the members of a NATS cluster). */
  urlList(name: string, def: string, protocols: string[]): string[] {
    const raw = this.optional(name) ?? def;
    const parts = raw.split(',').map((x) => x.trim());
    const bad = parts.filter((p) => {
      try {
        return !protocols.includes(new URL(p).protocol);
      } catch {
        return true;
      }
    });
    if (parts.length === 0 || bad.length > 0) {
      this.problems.push(`${name}=${JSON.stringify(raw)}: must be one URL or a comma-separated list of URLs, each starting with ${protocols.map((p) => `${p}//`).join(' or ')}`);
      return [def];
    }
    return parts;
  }

  prefix(name: string, def: string, pattern: RegExp, what: string): string {
    const v = this.str(name, def);
    if (!pattern.test(v)) {
      this.problems.push(`${name}=${JSON.stringify(v)}: ${what}`);
      return def;
    }
    return v;
  }
}

/** `--role=pipeline` or `--role pipeline` on the command line wins over ROLE. */
function roleFromArgv(argv: string[]): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a.startsWith('--role=')) return a.slice('--role='.length);
    if (a === '--role') return argv[i + 1];
  }
  return undefined;
}

/** The most ANALYTICS_ENGINE_SESSIONS may be: analytics statements one process runs in the engine at once. */
export const MAX_ENGINE_SESSIONS = 64;

export function loadConfig(env: Env = process.env, argv: string[] = process.argv.slice(2)): Config {
  const r = new Reader(env);
  const role = r.oneOf<Role>('ROLE', 'all', ROLES, roleFromArgv(argv));
  const operatorToken = r.optional('OPERATOR_TOKEN');
  if ((role === 'all' || role === 'ingress') && (operatorToken === null || operatorToken.length < 16)) {
    r.problems.push('OPERATOR_TOKEN: required for roles all and ingress, at least 16 characters (protects /admin/v1)');
  }
  const metricsToken = r.optional('METRICS_TOKEN');
  if (metricsToken !== null && (metricsToken.length < 16 || !/^[\x21-\x7e]+$/.test(metricsToken))) {
    r.problems.push('METRICS_TOKEN: at least 16 printable characters without spaces when set (unset: GET /metrics is open)');
  }
  const cores = Math.max(1, os.availableParallelism());
  const cfg: Config = {
    role,
    host: r.str('HOST', '0.0.0.0'),
    port: r.int('PORT', 8080, 0, 65535),
    operatorToken,
    metricsToken,
    redisUrl: r.url('REDIS_URL', 'redis://127.0.0.1:6379', ['redis:', 'rediss:'])!,
    redisPrefix: r.prefix('REDIS_PREFIX', 'billing:', /^[A-Za-z0-9:_-]{1,64}$/, 'letters, digits, ":", "_" or "-", 1 to 64 characters'),
    redisTopology: { kind: 'single' },
    natsUrl: r.urlList('NATS_URL', 'nats://127.0.0.1:4222', ['nats:', 'tls:']),
    natsPrefix: r.prefix('NATS_PREFIX', 'BILLING', /^[A-Za-z0-9_-]{1,32}$/, 'letters, digits, "_" or "-", 1 to 32 characters'),
    natsReplicas: Number(r.oneOf('NATS_REPLICAS', '1', ['1', '3', '5'] as const)) as 1 | 3 | 5,
    clickhouseUrl: r.url('CLICKHOUSE_URL', null, ['http:', 'https:']),
    clickhouseUser: r.str('CLICKHOUSE_USER', 'default'),
    clickhousePassword: r.str('CLICKHOUSE_PASSWORD', ''),
    clickhouseDatabase: r.prefix('CLICKHOUSE_DATABASE', 'billing', /^[A-Za-z_][A-Za-z0-9_]{0,62}$/, 'a plain identifier (letters, digits, "_")'),
    analytics: {
      database: r.prefix('ANALYTICS_DATABASE', 'analytics', /^[A-Za-z_][A-Za-z0-9_]{0,62}$/, 'a plain identifier (letters, digits, "_")'),
      timeoutMs: r.int('ANALYTICS_TIMEOUT_MS', 30_000, 100, 30_000),
      engineSessions: r.int('ANALYTICS_ENGINE_SESSIONS', 8, 2, MAX_ENGINE_SESSIONS),
      maxMemoryBytes: r.int('ANALYTICS_MAX_MEMORY_BYTES', 2 * 1024 ** 3, 64 * 1024 ** 2, 1024 ** 4),
      rateLimited: r.oneOf('ANALYTICS_RATE_LIMITED', 'false', ['true', 'false'] as const) === 'true',
      user: r.optional('CLICKHOUSE_ANALYTICS_USER'),
      password: r.str('CLICKHOUSE_ANALYTICS_PASSWORD', ''),
    },
    dataDir: path.resolve(r.str('DATA_DIR', path.join(process.cwd(), '.data'))),
    engineHostFault: r.optional('ENGINE_HOST_FAULT') === null ? null : r.oneOf('ENGINE_HOST_FAULT', 'lose-insert', ENGINE_HOST_FAULTS),
    dedupeWindowDays: r.int('DEDUPE_WINDOW_DAYS', 7, 7, 3650),
    defaultLimits: {
      burst: r.int('DEFAULT_BURST', 10_000, LIMIT_BOUNDS.burst.min, LIMIT_BOUNDS.burst.max),
      refillPerSecond: r.num('DEFAULT_REFILL_PER_SECOND', 1_000, LIMIT_BOUNDS.refillPerSecond.min, LIMIT_BOUNDS.refillPerSecond.max),
      analyticsConcurrency: r.int('DEFAULT_ANALYTICS_CONCURRENCY', 4, 1, 1000),
    },
    maxBodyBytes: r.int('MAX_BODY_BYTES', 1_000_000, 64 * 1024, 64 * 1024 * 1024),
    publishTimeoutMs: r.int('PUBLISH_TIMEOUT_MS', 5_000, 100, 120_000),
    streamMaxBytes: r.int('STREAM_MAX_BYTES', 2 * 1024 ** 3, 1024 ** 2, 1024 ** 4),
    ingressHold: {
      backlogBatches: r.int('INGRESS_HOLD_BACKLOG', 256, 0, 1_000_000),
      maxMs: r.int('INGRESS_HOLD_MAX_MS', 1_000, 0, 60_000),
      billingLagMs: r.int('INGRESS_HOLD_BILLING_LAG_MS', 500, 0, 3_600_000),
    },
    pipeline: {
      workers: r.int('PIPELINE_WORKERS', Math.min(4, cores), 1, 256),
      flushRows: r.int('PIPELINE_FLUSH_ROWS', 10_000, 1, 1_000_000),
      flushMs: r.int('PIPELINE_FLUSH_MS', 200, 1, 60_000),
      flushIdleMs: r.int('PIPELINE_FLUSH_IDLE_MS', 10, 1, 60_000),
      maxAckPending: r.int('PIPELINE_MAX_ACK_PENDING', 256, 1, 100_000),
      ackWaitMs: r.int('PIPELINE_ACK_WAIT_MS', 60_000, 1_000, 3_600_000),
    },
    billing: {
      ackWaitMs: r.int('BILLING_ACK_WAIT_MS', 60_000, 1_000, 3_600_000),
      partitions: r.int('BILLING_PARTITIONS', DEFAULT_BILLING_PARTITIONS, 1, MAX_BILLING_PARTITIONS),
      inlineSignals: r.int('BILLING_INLINE_SIGNALS', DEFAULT_BILLING_INLINE_SIGNALS, 0, 1_000_000),
      faultPoint: r.optional('BILLING_FAULT_POINT') === null ? null : r.oneOf<BillingFaultPoint>('BILLING_FAULT_POINT', 'after-pin', BILLING_FAULT_POINTS),
      faultAction: r.oneOf('BILLING_FAULT_ACTION', 'kill', ['kill', 'pause', 'stall'] as const),
      faultPauseMs: r.int('BILLING_FAULT_PAUSE_MS', 5_000, 10, 600_000),
      faultReleaseFile: r.optional('BILLING_FAULT_RELEASE_FILE'),
    },
    webhooks: {
      encryptionKey: null,
      allowHttp: r.oneOf('WEBHOOK_ALLOW_HTTP', 'false', ['true', 'false'] as const) === 'true',
      allowedNetworks: r.str('WEBHOOK_ALLOWED_NETWORKS', '').split(',').map((x) => x.trim()).filter((x) => x !== ''),
      timeoutMs: r.int('WEBHOOK_TIMEOUT_MS', 10_000, 100, 60_000),
      retryScheduleMs: [...DEFAULT_RETRY_SCHEDULE_MS],
      caFile: r.optional('WEBHOOK_CA_FILE'),
      extraCaPem: [],
      dnsServers: r.str('WEBHOOK_DNS_SERVERS', '').split(',').map((x) => x.trim()).filter((x) => x !== ''),
      dispatcherAckWaitMs: 0,
    },
    logLevel: r.oneOf('LOG_LEVEL', 'info', ['debug', 'info', 'warn', 'error'] as const),
  };
  cfg.redisTopology = redisTopology(r);
  const rawKey = r.optional('WEBHOOK_ENCRYPTION_KEY');
  if (rawKey !== null) {
    cfg.webhooks.encryptionKey = parseEncryptionKey(rawKey);
    if (!cfg.webhooks.encryptionKey) r.problems.push('WEBHOOK_ENCRYPTION_KEY: must be 32 bytes, as 64 hex characters or base64');
  }
  try {
    compileAllowedNetworks(cfg.webhooks.allowedNetworks);
  } catch (err) {
    r.problems.push(`WEBHOOK_ALLOWED_NETWORKS=${JSON.stringify(cfg.webhooks.allowedNetworks.join(','))}: ${(err as Error).message}`);
  }
  const schedule = r.optional('WEBHOOK_RETRY_SCHEDULE_MS');
  if (schedule !== null) {
    const parts = schedule.split(',').map((x) => Number(x.trim()));
    if (parts.length === 0 || parts.length > 50 || parts.some((x) => !Number.isInteger(x) || x < 10 || x > 7 * 86_400_000)) {
      r.problems.push(`WEBHOOK_RETRY_SCHEDULE_MS=${JSON.stringify(schedule)}: a comma-separated list of 1 to 50 delays in milliseconds, each from 10 to 604800000`);
    } else cfg.webhooks.retryScheduleMs = parts;
  }
  if (cfg.webhooks.caFile !== null) {
    const loaded = readCaFile(cfg.webhooks.caFile);
    if (typeof loaded === 'string') r.problems.push(`WEBHOOK_CA_FILE=${JSON.stringify(cfg.webhooks.caFile)}: ${loaded}`);
    else cfg.webhooks.extraCaPem = loaded;
  }
  if (cfg.webhooks.dnsServers.length > 0) {
    try {
      new Resolver().setServers(cfg.webhooks.dnsServers);
    } catch (err) {
      r.problems.push(`WEBHOOK_DNS_SERVERS=${JSON.stringify(cfg.webhooks.dnsServers.join(','))}: comma-separated DNS servers such as 10.0.0.2, 127.0.0.1:5353 or [::1]:53 (${(err as Error).message})`);
    }
  }
  const minAckWait = cfg.webhooks.timeoutMs + 1_000;
  cfg.webhooks.dispatcherAckWaitMs = r.int('DISPATCHER_ACK_WAIT_MS', cfg.webhooks.timeoutMs * 2 + 10_000, 1_000, 3_600_000);
  if (cfg.webhooks.dispatcherAckWaitMs < minAckWait) {
    r.problems.push(`DISPATCHER_ACK_WAIT_MS=${cfg.webhooks.dispatcherAckWaitMs}: must be at least WEBHOOK_TIMEOUT_MS + 1000 (${minAckWait}), or an event would be handed out again while its attempt still runs`);
  }
  const reserved = ['system', 'information_schema', 'default'];
  if (cfg.analytics.database.toLowerCase() === cfg.clickhouseDatabase.toLowerCase()) {
    r.problems.push(`ANALYTICS_DATABASE=${JSON.stringify(cfg.analytics.database)}: must differ from CLICKHOUSE_DATABASE (it holds only the analytics views)`);
  }
  for (const [name, v] of [['ANALYTICS_DATABASE', cfg.analytics.database], ['CLICKHOUSE_DATABASE', cfg.clickhouseDatabase]] as const) {
    if (reserved.includes(v.toLowerCase())) r.problems.push(`${name}=${JSON.stringify(v)}: ${reserved.join(', ')} are reserved`);
  }
  if (r.problems.length > 0) throw new ConfigError(r.problems);
  return cfg;
}

/** REDIS_SENTINELS + REDIS_SENTINEL_NAME, or REDIS_CLUSTER_NODES, or neither (REDIS_URL alone). */
function redisTopology(r: Reader): RedisTopology {
  const sentinels = r.optional('REDIS_SENTINELS');
  const name = r.optional('REDIS_SENTINEL_NAME');
  const nodes = r.optional('REDIS_CLUSTER_NODES');
  const password = r.optional('REDIS_PASSWORD');
  const list = (setting: string, raw: string): HostPort[] => {
    const parsed = parseHostPorts(raw);
    if (typeof parsed === 'string') {
      r.problems.push(`${setting}=${JSON.stringify(raw)}: ${parsed}`);
      return [];
    }
    return parsed;
  };
  if (sentinels !== null && nodes !== null) {
    r.problems.push('REDIS_SENTINELS and REDIS_CLUSTER_NODES: set one of them, not both (Sentinel and Cluster are two different Redis deployments)');
    return { kind: 'single' };
  }
  if (sentinels !== null) {
    if (name === null) r.problems.push('REDIS_SENTINEL_NAME: required with REDIS_SENTINELS (the name the sentinels monitor the primary under, e.g. mymaster)');
    else if (!/^[A-Za-z0-9._-]{1,64}$/.test(name)) r.problems.push(`REDIS_SENTINEL_NAME=${JSON.stringify(name)}: letters, digits, ".", "_" or "-", 1 to 64 characters`);
    return { kind: 'sentinel', sentinels: list('REDIS_SENTINELS', sentinels), name: name ?? '', password };
  }
  if (name !== null) r.problems.push('REDIS_SENTINEL_NAME: only meaningful with REDIS_SENTINELS (the sentinels to ask)');
  if (nodes !== null) return { kind: 'cluster', nodes: list('REDIS_CLUSTER_NODES', nodes), password };
  if (password !== null) r.problems.push('REDIS_PASSWORD: only used with REDIS_SENTINELS or REDIS_CLUSTER_NODES (with REDIS_URL alone, put the password in the URL: redis://:password@host:6379)');
  return { kind: 'single' };
}

/**
 * The PEM certificates of a CA file, each checked to parse as an X.509 certificate; or a
 * sentence saying what is wrong with the file.
 */
function readCaFile(file: string): string[] | string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    return `cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
  }
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) return 'contains no PEM certificate (-----BEGIN CERTIFICATE-----)';
  for (const [i, pem] of blocks.entries()) {
    try {
      new X509Certificate(pem);
    } catch {
      return `certificate ${i + 1} of ${blocks.length} is not a valid X.509 certificate`;
    }
  }
  return blocks;
}

export const hasIngress = (role: Role): boolean => role === 'all' || role === 'ingress';
export const hasPipeline = (role: Role): boolean => role === 'all' || role === 'pipeline';
export const hasDispatcher = (role: Role): boolean => role === 'all' || role === 'dispatcher';
