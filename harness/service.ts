/**
 * The one service harness of tests and benchmarks: runs the real service (compiled,
 * `node dist/src/main.js`) as a child process with its own NATS prefix, Redis prefix and data
 * directory (an `Isolation`), so runs never see each other's data; `cleanup()` removes
 * everything an isolation made (its engine host test front, streams and KV buckets, Redis keys
 * and data directory).
 *
 * Child processes. Every child runs in its own process group (`detached`): stopping it also
 * reaps what it forked (the engine host), and a test or benchmark that exits, is interrupted
 * (SIGINT) or terminated (SIGTERM, a tap timeout) takes its children's groups with it.
 *
 * Store modes (tests). By default each service runs the embedded store (it forks its own
 * engine host). With `TEST_STORE=server` (the wrappers in test/server-store/ set it), each
 * isolation gets its own engine host TEST FRONT (src/store/engine-host/standalone.ts: the
 * embedded engine behind the ClickHouse HTTP interface subset the official client uses; not a
 * ClickHouse server), started before the isolation's first service and reused by every
 * service and restart of that isolation, and every service runs in server mode against it
 * (CLICKHOUSE_URL, CLICKHOUSE_USER/PASSWORD, CLICKHOUSE_ANALYTICS_USER/PASSWORD,
 * ANALYTICS_DATABASE from the front). `cleanup()` stops the front and removes its directory.
 *
 * Users: test/helpers/service.ts (tap helpers on top) and the benchmarks (bench/lib/api.ts).
 * Run from source by tap (harness/service.ts) and compiled for benches (dist/harness/service.js).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { freePort } from './ports.js';
import { NODE_FLAGS } from '../src/shared/node-flags.js';

/** The repository root, from the source file (tap) or from its compiled copy in dist/harness. */
export const ROOT = fileURLToPath(new URL(fileURLToPath(import.meta.url).includes(`${path.sep}dist${path.sep}harness${path.sep}`) ? '../../' : '../', import.meta.url));
const MAIN = path.join(ROOT, 'dist/src/main.js');
const STANDALONE = path.join(ROOT, 'dist/src/store/engine-host/standalone.js');
export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
export const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
/** The operator token of test services (benchmarks pass their own). */
export const OPERATOR_TOKEN = 'test-operator-token-0123456789';
export const TEST_WEBHOOK_KEY = '00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- isolations

export interface Isolation {
  natsPrefix: string;
  redisPrefix: string;
  dataDir: string;
}

/** A fresh isolation named after `name`; `kind` picks the prefixes (`T…`/`test:` or `BENCH…`/`bench:`). */
export function isolation(name: string, kind: 'test' | 'bench' = 'test'): Isolation {
  const id = `${name.replace(/[^A-Za-z0-9]/g, '')}${randomBytes(4).toString('hex')}`;
  return {
    natsPrefix: `${kind === 'test' ? 'T' : 'BENCH'}${id}`.slice(0, 32),
    redisPrefix: `${kind}:${id}:`,
    dataDir: mkdtempSync(path.join(tmpdir(), `billing-${name}-`)),
  };
}

/**
 * Removes everything an isolation created: its engine host test front, its streams and KV
 * buckets, its Redis keys (SCAN, not KEYS) and its data directory. Returns what it removed.
 */
export async function cleanup(iso: Isolation): Promise<string[]> {
  const removed: string[] = [];
  await stopFront(iso);
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    const mine = (name: string): boolean => name.startsWith(iso.natsPrefix) || name.startsWith(`KV_${iso.natsPrefix}`);
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

// ---------------------------------------------------------------- child processes

const children = new Set<ChildProcess>();
const exitHooks: (() => Promise<void>)[] = [];
let interrupted = false;

/** SIGKILLs the process group of `proc` (the child and whatever it forked); quiet when gone. */
function killGroup(proc: ChildProcess, sig: NodeJS.Signals = 'SIGKILL'): void {
  if (proc.pid === undefined) return;
  try {
    process.kill(-proc.pid, sig);
  } catch {
    /* the group is gone */
  }
}

/** On Ctrl-C / SIGTERM: stop every child group, run the registered cleanups, exit. */
function onSignal(sig: NodeJS.Signals): void {
  if (interrupted) return;
  interrupted = true;
  process.stderr.write(`\n${sig}: stopping child processes and cleaning up…\n`);
  for (const c of children) killGroup(c);
  void (async () => {
    for (const hook of exitHooks.reverse()) await hook().catch(() => undefined);
    process.exit(130);
  })();
}
let hooked = false;
function hookProcess(): void {
  if (hooked) return;
  hooked = true;
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  process.once('exit', () => {
    for (const c of children) killGroup(c);
  });
}

/** Registers a cleanup that also runs when the run is interrupted (SIGINT, SIGTERM). */
export function onInterrupt(hook: () => Promise<void>): void {
  hookProcess();
  exitHooks.push(hook);
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Child {
  proc: ChildProcess;
  pid: number;
  /** Everything the child wrote on stdout and stderr (bounded). */
  output(): string;
  /** True once the child has exited. */
  exited(): boolean;
  /** Resolves with a match of `re` in the output, rejects when the child exits first or after `timeoutMs`. */
  waitFor(re: RegExp, timeoutMs: number): Promise<RegExpExecArray>;
  /** SIGTERM (to the child only: it stops its own children in order), SIGKILL after `graceMs` (default 30 s; Infinity: never); then reaps its group. */
  stop(graceMs?: number): Promise<Exit>;
  /** SIGKILL to the child only (a crash: what it forked sees its parent die), then waits for its exit. */
  kill9(): Promise<Exit>;
}

const MAX_OUTPUT = 4 * 1024 * 1024;

/**
 * SERVICE_ENV="PIPELINE_FLUSH_ROWS=20000 BILLING_PARTITIONS=4": settings added to (and
 * overriding) the environment of every started process, to measure a setting with a bench
 * without a build of its own. Unset: nothing added.
 */
export function serviceEnvOverrides(text = process.env.SERVICE_ENV): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of text?.split(/\s+/).filter(Boolean) ?? []) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new Error(`SERVICE_ENV: "${pair}" is not NAME=value`);
    out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}

/** Starts `node file args` in its own process group, its output collected. */
export function startChild(file: string, args: string[], env: Record<string, string | undefined>): Child {
  hookProcess();
  // The service's own Node options (src/shared/node-flags.ts), as users start it; then
  // SERVICE_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof": more for the started processes (profiling a bench).
  const nodeArgs = [...NODE_FLAGS, ...(process.env.SERVICE_NODE_ARGS?.split(' ').filter(Boolean) ?? [])];
  // SERVICE_CPUS="0": the started processes (and what they fork: the engine host) run on those
  // CPUs only (`taskset -c`, which execs the command: same pid), to measure what a core buys.
  const cpus = process.env.SERVICE_CPUS;
  const [cmd, argv] = cpus ? ['taskset', ['-c', cpus, process.execPath, ...nodeArgs, file, ...args]] : [process.execPath, [...nodeArgs, file, ...args]];
  const proc = spawn(cmd, argv, { cwd: ROOT, env: { ...env, ...serviceEnvOverrides() }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  children.add(proc);
  let out = '';
  const listeners = new Set<() => void>();
  // SERVICE_OUTPUT=/tmp/service.log: every started process's output is also appended there
  // (e.g. SERVICE_NODE_ARGS=--trace-gc, whose lines would otherwise stay in memory).
  const copy = process.env.SERVICE_OUTPUT;
  const onData = (b: Buffer): void => {
    if (copy) appendFileSync(copy, b);
    if (out.length < MAX_OUTPUT) out += b.toString();
    for (const l of listeners) l();
  };
  proc.stdout!.on('data', onData);
  proc.stderr!.on('data', onData);
  const exit = new Promise<Exit>((resolve) =>
    proc.once('exit', (code, signal) => {
      for (const l of listeners) l();
      resolve({ code, signal });
    }),
  );
  const exited = (): boolean => proc.exitCode !== null || proc.signalCode !== null;
  /** After the child's exit: SIGKILL what is left of its group (an engine host it forked). */
  const reap = async (): Promise<Exit> => {
    const r = await exit;
    killGroup(proc);
    children.delete(proc);
    return r;
  };
  return {
    proc,
    pid: proc.pid ?? -1,
    output: () => out,
    exited,
    waitFor: (re, timeoutMs) =>
      new Promise((resolve, reject) => {
        const check = (): void => {
          const m = re.exec(out);
          if (m) {
            done();
            resolve(m);
          } else if (exited()) {
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
      if (!exited()) {
        proc.kill('SIGTERM');
        // No timer for an unbounded grace (setTimeout would fire at once for Infinity).
        const t = Number.isFinite(graceMs) ? setTimeout(() => proc.kill('SIGKILL'), graceMs) : undefined;
        const r = await reap();
        clearTimeout(t);
        return r;
      }
      return reap();
    },
    kill9: async () => {
      if (!exited()) proc.kill('SIGKILL');
      return exit;
    },
  };
}

/** The environment every service of an isolation starts with (`extra` adds and overrides). */
function serviceEnv(iso: Isolation, extra: Record<string, string | undefined>): Record<string, string | undefined> {
  return {
    PATH: process.env.PATH,
    HOST: '127.0.0.1',
    REDIS_URL,
    NATS_URL,
    NATS_PREFIX: iso.natsPrefix,
    REDIS_PREFIX: iso.redisPrefix,
    DATA_DIR: iso.dataDir,
    ...extra,
  };
}

/** The service's JSON log lines in `output` (pino: one object per line, fields in any order). */
export function parseLogLines(output: string, msg?: string): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const line of output.split('\n')) {
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

// ---------------------------------------------------------------- engine host test front (TEST_STORE=server)

/** True when the services of this test file run in server mode against an engine host test front. */
export function serverStore(): boolean {
  return process.env.TEST_STORE === 'server';
}

interface Front {
  child: Child;
  dir: string;
  env: Record<string, string>;
}

/** The test front of each isolation (by data directory), started once. */
const fronts = new Map<string, Promise<Front>>();

/** Starts the engine host test front on a fresh directory; resolves with the settings it prints. */
async function startFront(): Promise<Front> {
  const dir = mkdtempSync(path.join(tmpdir(), 'billing-front-'));
  const child = startChild(STANDALONE, ['--dir', path.join(dir, 'chdb')], { ...process.env });
  try {
    const m = await child.waitFor(/^\{"testFront".*\n/m, 60_000);
    const info = JSON.parse(m[0]) as { testFront: boolean; env: Record<string, string> };
    if (info.testFront !== true || !info.env.CLICKHOUSE_URL) throw new Error(`not the test front's line: ${m[0]}`);
    return { child, dir, env: info.env };
  } catch (err) {
    await child.stop(0);
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`engine host test front did not start: ${(err as Error).message}`);
  }
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
  if (front.child.exited()) {
    const { proc } = front.child;
    throw new Error(`the engine host test front of ${iso.natsPrefix} has exited (${proc.signalCode ?? proc.exitCode}):\n${front.child.output().slice(-10_000)}`);
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
  await front.child.stop();
  rmSync(front.dir, { recursive: true, force: true });
}

// ---------------------------------------------------------------- the service, as tests run it

/** The service as tests run it: port 0, info logs, a fixed webhook key, fast pipeline flushes. */
export class ServiceProcess {
  url = '';
  port = 0;
  child: Child | null = null;

  constructor(
    readonly iso: Isolation,
    readonly env: Record<string, string> = {},
  ) {}

  get proc(): ChildProcess | null {
    return this.child?.proc ?? null;
  }

  /** Everything the current run wrote on stdout and stderr. */
  get output(): string {
    return this.child?.output() ?? '';
  }

  /** Resolves when the service is ready (default), or as soon as it listens (`'listening'`). */
  async start(until: 'ready' | 'listening' = 'ready'): Promise<this> {
    const server = serverStore();
    const frontEnv = server ? (await frontFor(this.iso)).env : {};
    const child = startChild(
      MAIN,
      [],
      serviceEnv(this.iso, {
        PORT: '0',
        OPERATOR_TOKEN,
        PIPELINE_FLUSH_MS: '50',
        LOG_LEVEL: 'info',
        // Webhooks: a fixed test key; receivers in tests listen on 127.0.0.1 over plain HTTP.
        WEBHOOK_ENCRYPTION_KEY: TEST_WEBHOOK_KEY,
        WEBHOOK_ALLOW_HTTP: 'true',
        WEBHOOK_ALLOWED_NETWORKS: '127.0.0.0/8',
        ...frontEnv,
        ...this.env,
      }),
    );
    this.child = child;
    // A JSON log line (pino writes `msg` last) with that message and the port.
    const m = await child.waitFor(new RegExp(`^.*"port":(\\d+).*"msg":"${until}".*$`, 'm'), 60_000).catch((err: Error) => {
      throw new Error(`service did not start: ${err.message}`);
    });
    this.port = Number(m[1]);
    this.url = `http://127.0.0.1:${this.port}`;
    if (server && until === 'ready' && ['all', 'pipeline'].includes(this.env.ROLE ?? 'all')) {
      // A wrapper that silently ran the embedded store would prove nothing: check the mode
      // (a process with the pipeline opens the store; `ready` names its kind).
      const ready = parseLogLines(this.output, 'ready')[0];
      if (ready?.store !== 'clickhouse') throw new Error(`TEST_STORE=server but the service reports store ${JSON.stringify(ready?.store)}`);
    }
    return this;
  }

  /** Graceful stop (SIGTERM): flushes what the pipeline holds; then reaps the process group. */
  async stop(): Promise<void> {
    await this.child?.stop(Infinity);
  }

  /** SIGKILL (a crash); what the service forked is reaped at the next stop() or cleanup. */
  async kill9(): Promise<void> {
    await this.child?.kill9();
  }
}

// ---------------------------------------------------------------- the service, as benchmarks run it

export interface HttpStatus {
  status: number;
  body: unknown;
}

async function getJson(url: string): Promise<HttpStatus> {
  const res = await fetch(url);
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* keep the text */
  }
  return { status: res.status, body };
}

/** Polls GET /readyz until it answers 200. */
export async function waitReady(baseUrl: string, timeoutMs: number, child?: Child): Promise<void> {
  const end = Date.now() + timeoutMs;
  let last = 'no answer';
  while (Date.now() < end) {
    if (child?.exited()) {
      throw new Error(`service exited (${child.proc.exitCode ?? child.proc.signalCode}) before it was ready:\n${child.output()}`);
    }
    try {
      const r = await getJson(`${baseUrl}/readyz`);
      if (r.status === 200) return;
      last = `${r.status} ${JSON.stringify(r.body)}`;
    } catch (err) {
      last = (err as Error).message;
    }
    await sleep(100);
  }
  throw new Error(`${baseUrl}/readyz not 200 within ${timeoutMs} ms (last: ${last})${child ? `\n${child.output()}` : ''}`);
}

export interface BenchServiceOptions {
  role: 'all' | 'ingress' | 'pipeline';
  operatorToken: string;
  iso: Isolation;
  /** Extra environment (e.g. STREAM_MAX_BYTES). */
  env?: Record<string, string>;
  /**
   * Listen on this port, which another service process already listens on (uWS sets
   * SO_REUSEPORT on Linux: the kernel spreads the connections over the processes). The port
   * must be a fixed one: Linux lets no second socket join a port handed out for port 0. Its
   * /readyz cannot be told from the others' there, so readiness is its own "ready" log line.
   */
  sharedPort?: number;
}

export interface BenchService {
  child: Child;
  url: string;
  port: number;
  /** Lines the service logged at warn, error or fatal level. */
  problems(): string[];
}

/** The service as benchmarks run it: a free port, warn logs, a throw-away webhook key; ready when /readyz says so. */
export async function startBenchService(opts: BenchServiceOptions): Promise<BenchService> {
  const port = opts.sharedPort ?? (await freePort());
  const child = startChild(
    MAIN,
    [],
    serviceEnv(opts.iso, {
      ROLE: opts.role,
      PORT: String(port),
      OPERATOR_TOKEN: opts.operatorToken,
      LOG_LEVEL: 'warn',
      // A throw-away key per run, so every role runs as deployed (without one the webhook routes
      // and the dispatcher are off, and the service warns about it).
      WEBHOOK_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      ...(opts.sharedPort !== undefined ? { LOG_LEVEL: 'info' } : {}),
      ...opts.env,
    }),
  );
  const url = `http://127.0.0.1:${port}`;
  try {
    if (opts.sharedPort !== undefined) await child.waitFor(/"msg":"ready"/, 120_000);
    else await waitReady(url, 120_000, child);
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
