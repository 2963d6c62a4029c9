/**
 * The real service (`node dist/src/main.js`) as a child process for benchmarks, with its own
 * NATS prefix, Redis prefix and data directory; `cleanup()` removes the streams, KV buckets,
 * Redis keys and files it made. Also: child processes in general (started, stopped, and
 * killed if the benchmark itself is interrupted) and a small HTTP helper (free ports: ports.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { freePort } from './ports.js';
import { ROOT, sleep } from './report.js';

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
export const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const MAIN = path.join(ROOT, 'dist/src/main.js');

// ---------------------------------------------------------------- child processes

const children = new Set<ChildProcess>();
const exitHooks: (() => Promise<void>)[] = [];
let interrupted = false;

/** On Ctrl-C / SIGTERM: stop every child this benchmark started, run cleanups, exit. */
function onSignal(sig: NodeJS.Signals): void {
  if (interrupted) return;
  interrupted = true;
  process.stderr.write(`\n${sig}: stopping child processes and cleaning up…\n`);
  for (const c of children) c.kill('SIGKILL');
  void (async () => {
    for (const hook of exitHooks.reverse()) await hook().catch(() => undefined);
    process.exit(130);
  })();
}
process.once('SIGINT', onSignal);
process.once('SIGTERM', onSignal);
process.once('exit', () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

/** Registers a cleanup that also runs when the benchmark is interrupted. */
export function onInterrupt(hook: () => Promise<void>): void {
  exitHooks.push(hook);
}

export interface Child {
  proc: ChildProcess;
  pid: number;
  /** Everything the child wrote on stdout and stderr (bounded). */
  output(): string;
  /** Resolves with a line of output matching `re`, rejects when the child exits first or after `timeoutMs`. */
  waitFor(re: RegExp, timeoutMs: number): Promise<RegExpExecArray>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once the child has exited. */
  stop(graceMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const MAX_OUTPUT = 4 * 1024 * 1024;

export function startChild(file: string, args: string[], env: Record<string, string | undefined>): Child {
  // SERVICE_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof": node options for the started processes (profiling a bench).
  const nodeArgs = process.env.SERVICE_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const proc = spawn(process.execPath, [...nodeArgs, file, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(proc);
  let out = '';
  const listeners = new Set<() => void>();
  const onData = (b: Buffer): void => {
    if (out.length < MAX_OUTPUT) out += b.toString();
    for (const l of listeners) l();
  };
  proc.stdout!.on('data', onData);
  proc.stderr!.on('data', onData);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.once('exit', (code, signal) => {
      children.delete(proc);
      for (const l of listeners) l();
      resolve({ code, signal });
    }),
  );
  return {
    proc,
    pid: proc.pid ?? -1,
    output: () => out,
    waitFor: (re, timeoutMs) =>
      new Promise((resolve, reject) => {
        const check = (): void => {
          const m = re.exec(out);
          if (m) {
            done();
            resolve(m);
          } else if (proc.exitCode !== null || proc.signalCode !== null) {
            done();
            reject(new Error(`${path.basename(file)} exited (${proc.exitCode ?? proc.signalCode}) before printing ${re}:\n${out}`));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`${path.basename(file)} did not print ${re} within ${timeoutMs} ms:\n${out}`));
        }, timeoutMs);
        const done = (): void => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        listeners.add(check);
        check();
      }),
    stop: async (graceMs = 30_000) => {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        const t = setTimeout(() => proc.kill('SIGKILL'), graceMs);
        const r = await exited;
        clearTimeout(t);
        return r;
      }
      return exited;
    },
  };
}

// ---------------------------------------------------------------- HTTP

export interface HttpResult<T> {
  status: number;
  body: T;
}

export async function http<T = unknown>(url: string, method: string, token: string | null, body?: unknown): Promise<HttpResult<T>> {
  const headers: Record<string, string> = {};
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* keep the text */
  }
  return { status: res.status, body: parsed as T };
}

/** Polls GET /readyz until it answers 200. */
export async function waitReady(baseUrl: string, timeoutMs: number, child?: Child): Promise<void> {
  const end = Date.now() + timeoutMs;
  let last = 'no answer';
  while (Date.now() < end) {
    if (child && (child.proc.exitCode !== null || child.proc.signalCode !== null)) {
      throw new Error(`service exited (${child.proc.exitCode ?? child.proc.signalCode}) before it was ready:\n${child.output()}`);
    }
    try {
      const r = await http(`${baseUrl}/readyz`, 'GET', null);
      if (r.status === 200) return;
      last = `${r.status} ${JSON.stringify(r.body)}`;
    } catch (err) {
      last = (err as Error).message;
    }
    await sleep(100);
  }
  throw new Error(`${baseUrl}/readyz not 200 within ${timeoutMs} ms (last: ${last})${child ? `\n${child.output()}` : ''}`);
}

export interface BenchOrg {
  id: string;
  liveKey: string;
}

/** Creates an organization whose token bucket never refuses (1e9 burst, 1e9/s). */
export async function createUnlimitedOrg(baseUrl: string, operatorToken: string): Promise<BenchOrg> {
  const r = await http<{ id: string; apiKeys: { live: string } }>(`${baseUrl}/admin/v1/organizations`, 'POST', operatorToken, { name: 'bench' });
  if (r.status !== 201) throw new Error(`POST /admin/v1/organizations: ${r.status} ${JSON.stringify(r.body)}`);
  const org = { id: r.body.id, liveKey: r.body.apiKeys.live };
  const l = await http(`${baseUrl}/admin/v1/organizations/${org.id}/limits`, 'PATCH', operatorToken, { burst: 1_000_000_000, refillPerSecond: 1_000_000_000 });
  if (l.status !== 200) throw new Error(`PATCH /admin/v1/organizations/${org.id}/limits: ${l.status} ${JSON.stringify(l.body)}`);
  return org;
}

// ---------------------------------------------------------------- the service

export interface Isolation {
  natsPrefix: string;
  redisPrefix: string;
  dataDir: string;
}

export function isolation(): Isolation {
  const id = randomBytes(5).toString('hex');
  return {
    natsPrefix: `BENCH${id}`,
    redisPrefix: `bench:${id}:`,
    dataDir: mkdtempSync(path.join(tmpdir(), 'billing-bench-')),
  };
}

export interface ServiceOptions {
  role: 'all' | 'ingress' | 'pipeline';
  operatorToken: string;
  iso: Isolation;
  /** Extra environment (e.g. STREAM_MAX_BYTES). */
  env?: Record<string, string>;
}

export interface Service {
  child: Child;
  url: string;
  port: number;
  /** Lines the service logged at warn, error or fatal level. */
  problems(): string[];
}

export async function startService(opts: ServiceOptions): Promise<Service> {
  const port = await freePort();
  const child = startChild(MAIN, [], {
    PATH: process.env.PATH,
    ROLE: opts.role,
    HOST: '127.0.0.1',
    PORT: String(port),
    OPERATOR_TOKEN: opts.operatorToken,
    REDIS_URL,
    NATS_URL,
    NATS_PREFIX: opts.iso.natsPrefix,
    REDIS_PREFIX: opts.iso.redisPrefix,
    DATA_DIR: opts.iso.dataDir,
    LOG_LEVEL: 'warn',
    // A throw-away key per run, so every role runs as deployed (without one the webhook routes
    // and the dispatcher are off, and the service warns about it).
    WEBHOOK_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    ...opts.env,
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitReady(url, 120_000, child);
  } catch (err) {
    await child.stop(5_000);
    throw err;
  }
  return {
    child,
    url,
    port,
    problems: () =>
      child
        .output()
        .split('\n')
        .filter((l) => /"level":"(warn|error|fatal)"/.test(l) || (l.length > 0 && !l.startsWith('{'))),
  };
}

/** Removes what an isolation created: its streams and KV buckets, its Redis keys, its data directory. */
export async function cleanup(iso: Isolation): Promise<string[]> {
  const removed: string[] = [];
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    const mine = (name: string): boolean => name.startsWith(`${iso.natsPrefix}_`) || name.startsWith(`KV_${iso.natsPrefix}_`);
    const names: string[] = [];
    for await (const s of jsm.streams.list()) if (mine(s.config.name)) names.push(s.config.name);
    for (const name of names) {
      await jsm.streams.delete(name);
      removed.push(`stream ${name}`);
    }
  } finally {
    await nc.close();
  }
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    let cursor = '0';
    let n = 0;
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${iso.redisPrefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) n += await redis.del(...keys);
    } while (cursor !== '0');
    removed.push(`${n} redis key(s) ${iso.redisPrefix}*`);
  } finally {
    redis.disconnect();
  }
  rmSync(iso.dataDir, { recursive: true, force: true });
  removed.push(`dir ${iso.dataDir}`);
  return removed;
}

/** Bytes and messages held by the signal stream of an isolation (null when it does not exist). */
export async function streamState(natsPrefix: string): Promise<{ bytes: number; messages: number } | null> {
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(`${natsPrefix}_SIGNALS`);
    return { bytes: info.state.bytes, messages: info.state.messages };
  } catch {
    return null;
  } finally {
    await nc.close();
  }
}

export const OPERATOR_TOKEN = `bench-operator-${randomBytes(12).toString('hex')}`;
