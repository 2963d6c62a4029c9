/**
 * Test harness: runs the real service (compiled, `node dist/src/main.js`) as a child
 * process with its own NATS prefix, Redis prefix and data directory, so tests never see
 * each other's data; `cleanup()` removes the streams, buckets, keys and files it made.
 *
 * Store modes. By default each service runs the embedded store (it forks its own engine
 * host). With `TEST_STORE=server` (the wrappers in test/server-store/ set it), each isolation
 * gets its own engine host TEST FRONT (src/store/engine-host/standalone.ts: the embedded
 * engine behind the ClickHouse HTTP interface subset the official client uses; not a
 * ClickHouse server), started before the isolation's first service and reused by every
 * service and restart of that isolation, and every service runs in server mode against it
 * (CLICKHOUSE_URL, CLICKHOUSE_USER/PASSWORD, CLICKHOUSE_ANALYTICS_USER/PASSWORD,
 * ANALYTICS_DATABASE from the front). `cleanup()` stops the front and removes its directory.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import type { Test } from 'tap';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const MAIN = path.join(ROOT, 'dist/src/main.js');
const STANDALONE = path.join(ROOT, 'dist/src/store/engine-host/standalone.js');
export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
export const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
export const OPERATOR_TOKEN = 'test-operator-token-0123456789';
export const TEST_WEBHOOK_KEY = '00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff';

export interface Isolation {
  natsPrefix: string;
  redisPrefix: string;
  dataDir: string;
}

export function isolation(name: string): Isolation {
  const id = `${name.replace(/[^A-Za-z0-9]/g, '')}${randomBytes(4).toString('hex')}`;
  return {
    natsPrefix: `T${id}`.slice(0, 32),
    redisPrefix: `test:${id}:`,
    dataDir: mkdtempSync(path.join(tmpdir(), `billing-${name}-`)),
  };
}

/** True when the services of this test file run in server mode against an engine host test front. */
export function serverStore(): boolean {
  return process.env.TEST_STORE === 'server';
}

/**
 * Tap options for a subtest that depends on the embedded store (the service's own engine
 * host child): skipped, with `reason`, when the file runs in server mode.
 */
export function embeddedOnly(reason: string): { skip?: string } {
  return serverStore() ? { skip: `embedded store only: ${reason}` } : {};
}

/** Tap options for a subtest of server mode only: skipped, with `reason`, on the embedded store. */
export function serverOnly(reason: string): { skip?: string } {
  return serverStore() ? {} : { skip: `server store only: ${reason}` };
}

interface Front {
  proc: ChildProcess;
  dir: string;
  env: Record<string, string>;
  stderr: string;
}

/** The test front of each isolation (by data directory), started once. */
const fronts = new Map<string, Promise<Front>>();

/** Starts the engine host test front on a fresh directory; resolves with the settings it prints. */
async function startFront(): Promise<Front> {
  const dir = mkdtempSync(path.join(tmpdir(), 'billing-front-'));
  const proc = spawn(process.execPath, [STANDALONE, '--dir', path.join(dir, 'chdb')], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  const reap = (): void => void proc.kill('SIGKILL');
  process.once('exit', reap);
  proc.once('exit', () => process.removeListener('exit', reap));
  const front: Front = { proc, dir, env: {}, stderr: '' };
  proc.stderr!.on('data', (b: Buffer) => (front.stderr = (front.stderr + b.toString()).slice(-10_000)));
  let out = '';
  return new Promise((resolve, reject) => {
    const fail = (e: Error): void => {
      proc.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
      reject(e);
    };
    const timer = setTimeout(() => fail(new Error(`engine host test front did not start:\n${front.stderr}`)), 60_000);
    // Read stdout to its end (the host inherits it), keeping only what the first line needs.
    proc.stdout!.on('data', (b: Buffer) => {
      if (front.env.CLICKHOUSE_URL) return;
      out += b.toString();
      const line = out.split('\n').find((l) => l.startsWith('{"testFront"'));
      if (!line || !out.slice(out.indexOf(line)).includes('\n')) return;
      clearTimeout(timer);
      const info = JSON.parse(line) as { testFront: boolean; env: Record<string, string> };
      if (info.testFront !== true || !info.env.CLICKHOUSE_URL) return fail(new Error(`not the test front's line: ${line}`));
      front.env = info.env;
      resolve(front);
    });
    proc.once('exit', (code, sig) => {
      clearTimeout(timer);
      if (!front.env.CLICKHOUSE_URL) fail(new Error(`engine host test front exited with ${sig ?? code}:\n${front.stderr}`));
    });
  });
}

/** The isolation's test front: started on first use, the same one afterwards (while it runs). */
async function frontFor(iso: Isolation): Promise<Front> {
  let p = fronts.get(iso.dataDir);
  if (!p) {
    p = startFront();
    fronts.set(iso.dataDir, p);
    p.catch(() => fronts.delete(iso.dataDir));
  }
  const front = await p;
  if (front.proc.exitCode !== null || front.proc.signalCode !== null) {
    throw new Error(`the engine host test front of ${iso.natsPrefix} has exited (${front.proc.signalCode ?? front.proc.exitCode}):\n${front.stderr}`);
  }
  return front;
}

/** Stops the isolation's test front, if it has one, and removes its directory. */
async function stopFront(iso: Isolation): Promise<void> {
  const p = fronts.get(iso.dataDir);
  if (!p) return;
  fronts.delete(iso.dataDir);
  const front = await p.catch(() => null);
  if (!front) return;
  const { proc } = front;
  if (proc.exitCode === null && proc.signalCode === null) {
    const exited = new Promise((r) => proc.once('exit', r));
    proc.kill('SIGTERM');
    await exited;
  }
  rmSync(front.dir, { recursive: true, force: true });
}

export class ServiceProcess {
  url = '';
  port = 0;
  proc: ChildProcess | null = null;
  output = '';

  constructor(
    readonly iso: Isolation,
    readonly env: Record<string, string> = {},
  ) {}

  /** Resolves when the service is ready (default), or as soon as it listens (`'listening'`). */
  async start(until: 'ready' | 'listening' = 'ready'): Promise<this> {
    this.output = '';
    const server = serverStore();
    const frontEnv = server ? (await frontFor(this.iso)).env : {};
    const proc = spawn(process.execPath, [MAIN], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH,
        PORT: '0',
        HOST: '127.0.0.1',
        OPERATOR_TOKEN,
        REDIS_URL,
        NATS_URL,
        NATS_PREFIX: this.iso.natsPrefix,
        REDIS_PREFIX: this.iso.redisPrefix,
        DATA_DIR: this.iso.dataDir,
        PIPELINE_FLUSH_MS: '50',
        LOG_LEVEL: 'info',
        // Webhooks: a fixed test key; receivers in tests listen on 127.0.0.1 over plain HTTP.
        WEBHOOK_ENCRYPTION_KEY: TEST_WEBHOOK_KEY,
        WEBHOOK_ALLOW_HTTP: 'true',
        WEBHOOK_ALLOWED_NETWORKS: '127.0.0.0/8',
        ...frontEnv,
        ...this.env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.proc = proc;
    // If the test process dies (a tap timeout, a crash), its services die with it.
    const reap = (): void => void proc.kill('SIGKILL');
    process.once('exit', reap);
    proc.once('exit', () => process.removeListener('exit', reap));
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`service did not start:\n${this.output}`)), 60_000);
      const onData = (b: Buffer): void => {
        this.output += b.toString();
        // A JSON log line (pino writes `msg` last) with that message and the port.
        const line = this.output.split('\n').find((l) => l.includes(`"msg":"${until}"`) && /"port":\d+/.test(l));
        const m = line ? /"port":(\d+)/.exec(line) : null;
        if (m) {
          clearTimeout(timer);
          resolve(Number(m[1]));
        }
      };
      proc.stdout!.on('data', onData);
      proc.stderr!.on('data', onData);
      proc.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`service exited with ${code}:\n${this.output}`));
      });
    });
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    if (server && until === 'ready' && ['all', 'pipeline'].includes(this.env.ROLE ?? 'all')) {
      // A wrapper that silently ran the embedded store would prove nothing: check the mode
      // (a process with the pipeline opens the store; `ready` names its kind).
      const ready = logLines(this, 'ready')[0];
      if (ready?.store !== 'clickhouse') throw new Error(`TEST_STORE=server but the service reports store ${JSON.stringify(ready?.store)}`);
    }
    return this;
  }

  /** Graceful stop (SIGTERM): flushes what the pipeline holds. */
  async stop(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGTERM');
    await exited;
  }

  async kill9(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGKILL');
    await exited;
  }
}

/** Removes everything an isolation created: streams and KV buckets, Redis keys, the data directory. */
export async function cleanup(iso: Isolation): Promise<void> {
  await stopFront(iso);
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    for await (const s of jsm.streams.list()) {
      const name = s.config.name;
      if (name.startsWith(iso.natsPrefix) || name.startsWith(`KV_${iso.natsPrefix}`)) await jsm.streams.delete(name);
    }
  } finally {
    await nc.close();
  }
  const redis = new Redis(REDIS_URL);
  try {
    const keys = await redis.keys(`${iso.redisPrefix}*`);
    if (keys.length > 0) await redis.del(...keys);
  } finally {
    redis.disconnect();
  }
  rmSync(iso.dataDir, { recursive: true, force: true });
}

/**
 * The usual set-up of an API test file: one service (ROLE=all unless `env` says otherwise)
 * with its own isolation, started before the tests and removed with all it made afterwards.
 */
/** The service's JSON log lines so far (pino: one object per line, fields in any order). */
export function logLines(svc: ServiceProcess, msg?: string): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const line of svc.output.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const o = JSON.parse(line) as Record<string, unknown>;
      if (msg === undefined || o.msg === msg) out.push(o);
    } catch {
      // a line cut by the pipe, or not ours
    }
  }
  return out;
}

export function useService(t: Test, name: string, env: Record<string, string> = {}): { iso: Isolation; svc: ServiceProcess } {
  const iso = isolation(name);
  const svc = new ServiceProcess(iso, env);
  t.before(() => svc.start().then(() => undefined));
  t.teardown(async () => {
    await svc.stop();
    await cleanup(iso);
  });
  return { iso, svc };
}

/** A service for one test: started now, stopped and its isolation cleaned at that test's teardown. */
export async function startService(t: Test, name: string, env: Record<string, string> = {}): Promise<{ iso: Isolation; svc: ServiceProcess }> {
  const iso = isolation(name);
  const svc = new ServiceProcess(iso, env);
  t.teardown(async () => {
    await svc.stop();
    await cleanup(iso);
  });
  await svc.start();
  return { iso, svc };
}

export interface HttpResult<T = any> {
  status: number;
  headers: Headers;
  body: T;
}

/** The body of an answer whose status is one of `expected`; any other answer throws, naming its status and body. */
export async function ok(r: Promise<{ status: number; body: any }>, expected: readonly number[] = [200, 201]): Promise<any> {
  const res = await r;
  if (!expected.includes(res.status)) throw new Error(`${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** An answer as sent: its status and its body text, unparsed. */
export interface RawAnswer {
  status: number;
  text: string;
}

/** POSTs an analytics query with `key`; `timeoutMs`, when given, aborts a request that takes longer. */
export async function queryRaw(base: string, key: string, query: string, timeoutMs?: number): Promise<RawAnswer> {
  const res = await fetch(`${base}/api/v2/analytics/query`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ query }),
    ...(timeoutMs === undefined ? {} : { signal: AbortSignal.timeout(timeoutMs) }),
  });
  return { status: res.status, text: await res.text() };
}

export async function http<T = any>(base: string, method: string, p: string, opts: { token?: string; body?: unknown; raw?: string } = {}): Promise<HttpResult<T>> {
  const headers: Record<string, string> = {};
  if (opts.token !== undefined) headers.authorization = `Bearer ${opts.token}`;
  let body: string | undefined;
  if (opts.raw !== undefined) body = opts.raw;
  else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers['content-type'] = 'application/json';
  }
  const res = await fetch(base + p, { method, headers, body });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON: keep the text so the assertion shows it */
  }
  return { status: res.status, headers: res.headers, body: parsed as T };
}

export interface TestOrg {
  id: string;
  live: string;
  test: string;
}

export async function createOrg(base: string, limits?: Record<string, number>): Promise<TestOrg> {
  const r = await http(base, 'POST', '/admin/v1/organizations', { token: OPERATOR_TOKEN, body: { name: 'test org' } });
  if (r.status !== 201) throw new Error(`create org: ${r.status} ${JSON.stringify(r.body)}`);
  const org = { id: r.body.id as string, live: r.body.apiKeys.live as string, test: r.body.apiKeys.test as string };
  if (limits) {
    const l = await http(base, 'PATCH', `/admin/v1/organizations/${org.id}/limits`, { token: OPERATOR_TOKEN, body: limits });
    if (l.status !== 200) throw new Error(`set limits: ${l.status} ${JSON.stringify(l.body)}`);
  }
  return org;
}

export function signal(i: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { eventName: 'api_call', customerId: `cus_${i % 7}`, data: { n: i, region: i % 2 ? 'eu' : 'us' }, ...extra };
}

export function batch(n: number, extra: (i: number) => Record<string, unknown> = () => ({})): { signals: Record<string, unknown>[] } {
  return { signals: Array.from({ length: n }, (_, i) => signal(i, extra(i))) };
}

export const sendBatch = (base: string, key: string, body: unknown): Promise<HttpResult> => http(base, 'POST', '/api/v2/signals/bulk', { token: key, body });

export async function counts(base: string, orgId: string): Promise<{ live: number; test: number }> {
  const r = await http(base, 'GET', `/admin/v1/organizations/${orgId}/stats`, { token: OPERATOR_TOKEN });
  if (r.status !== 200) throw new Error(`stats: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.signals;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls until `fn` returns a value that `done` accepts; returns the last value after the timeout. */
export async function waitFor<T>(fn: () => Promise<T>, done: (v: T) => boolean, timeoutMs = 20_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  let v = await fn();
  while (!done(v) && Date.now() < end) {
    await sleep(100);
    v = await fn();
  }
  return v;
}

/** Waits until the pipeline consumer has nothing pending or unacked, then a little more. */
export async function drained(iso: Isolation, timeoutMs = 60_000): Promise<void> {
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    const end = Date.now() + timeoutMs;
    for (;;) {
      const ci = await jsm.consumers.info(`${iso.natsPrefix}_SIGNALS`, 'pipeline');
      if (ci.num_pending === 0 && ci.num_ack_pending === 0) return;
      if (Date.now() > end) throw new Error(`pipeline not drained: ${ci.num_pending} pending, ${ci.num_ack_pending} unacked`);
      await sleep(100);
    }
  } finally {
    await nc.close();
  }
}
