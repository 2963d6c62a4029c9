/**
 * Local Redis deployments on loopback for the failover tests and drills: a 3-primary Redis
 * Cluster, and a primary + replica watched by 3 sentinels. Real `redis-server` processes
 * (Debian's; `redis-server --sentinel` for the sentinels) on free ports, each in its own
 * temporary directory; `stop()` kills them and removes the directories. They never touch
 * the machine's own Redis on 6379. Processes left running when this process exits are
 * killed (SIGKILL) from an exit hook.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freePort } from '../../harness/ports.js';

const run = promisify(execFile);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export interface HostPort {
  host: string;
  port: number;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of live) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
});

/** One redis-server (or sentinel) process. */
export class RedisProcess {
  proc: ChildProcess | null = null;
  output = '';

  constructor(
    readonly port: number,
    readonly dir: string,
    private readonly args: string[],
  ) {}

  get addr(): string {
    return `127.0.0.1:${this.port}`;
  }

  async start(): Promise<this> {
    this.output = '';
    const proc = spawn('redis-server', this.args, { cwd: this.dir, stdio: ['ignore', 'pipe', 'pipe'] });
    live.add(proc);
    proc.once('exit', () => live.delete(proc));
    const keep = (b: Buffer): void => {
      if (this.output.length < 200_000) this.output += b.toString();
    };
    proc.stdout!.on('data', keep);
    proc.stderr!.on('data', keep);
    this.proc = proc;
    const end = Date.now() + 15_000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`redis-server on ${this.port} exited (${proc.exitCode}):\n${this.output}`);
      const c = new Redis({ port: this.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      c.on('error', () => undefined);
      try {
        await c.connect();
        await c.ping();
        return this;
      } catch {
        if (Date.now() > end) throw new Error(`redis-server on ${this.port} did not answer PING:\n${this.output}`);
        await sleep(50);
      } finally {
        c.disconnect();
      }
    }
  }

  get running(): boolean {
    return this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** SIGKILL: no shutdown, no goodbye to the replicas (a crash). */
  async kill9(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGKILL');
    await exited;
  }

  /** A short-lived client to this process. */
  async command<T = unknown>(...args: (string | number)[]): Promise<T> {
    const c = new Redis({ port: this.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 2_000 });
    c.on('error', () => undefined);
    try {
      await c.connect();
      return (await c.call(String(args[0]), ...args.slice(1))) as T;
    } finally {
      c.disconnect();
    }
  }
}

function serverArgs(port: number, dir: string, extra: string[]): string[] {
  return ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--daemonize', 'no', '--logfile', '', ...extra];
}

// ---------------------------------------------------------------- cluster

export interface LocalCluster {
  nodes: RedisProcess[];
  addrs: HostPort[];
  stop(): Promise<void>;
}

/** `size` primaries (no replicas), slots spread by `redis-cli --cluster create`; resolves once cluster_state is ok everywhere. */
export async function startCluster(size = 3): Promise<LocalCluster> {
  const root = mkdtempSync(path.join(tmpdir(), 'billing-redis-cluster-'));
  const nodes: RedisProcess[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(nodes.map((n) => n.kill9()));
    rmSync(root, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < size; i++) {
      const port = await freePort();
      const dir = path.join(root, `n${i}`);
      mkdirSync(dir);
      nodes.push(await new RedisProcess(port, dir, serverArgs(port, dir, ['--cluster-enabled', 'yes', '--cluster-config-file', path.join(dir, 'nodes.conf'), '--cluster-node-timeout', '2000'])).start());
    }
    await run('redis-cli', ['--cluster', 'create', ...nodes.map((n) => n.addr), '--cluster-replicas', '0', '--cluster-yes'], { timeout: 30_000 });
    const end = Date.now() + 30_000;
    for (;;) {
      const states = await Promise.all(nodes.map((n) => n.command<string>('CLUSTER', 'INFO')));
      if (states.every((s) => s.includes('cluster_state:ok'))) break;
      if (Date.now() > end) throw new Error(`cluster not ok within 30 s:\n${states.join('\n')}`);
      await sleep(100);
    }
    return { nodes, addrs: nodes.map((n) => ({ host: '127.0.0.1', port: n.port })), stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

// ---------------------------------------------------------------- sentinel

export const SENTINEL_NAME = 'billingmaster';

export interface LocalSentinelSet {
  /** Data nodes: [0] starts as primary, [1] as its replica. */
  servers: RedisProcess[];
  sentinels: RedisProcess[];
  sentinelAddrs: HostPort[];
  name: string;
  /** The primary's port as the sentinels name it now (asks each reachable sentinel; the majority answer). */
  primaryPort(): Promise<number>;
  /** The data node that is primary now. */
  primary(): Promise<RedisProcess>;
  /**
   * Fails the primary over and waits until the sentinels name the other node and it reports
   * role:master in INFO replication. `kill`: SIGKILL of the primary (a crash), then the
   * killed node restarts as a replica of the new primary (so the next round has a replica
   * again). `sentinel`: SENTINEL FAILOVER (a planned switch: the old primary is demoted to a
   * replica, its clients' writes answered READONLY). Returns when it switched (ms after the
   * fault) and the ports before and after.
   */
  failover(how?: 'kill' | 'sentinel'): Promise<{ from: number; to: number; switchedAfterMs: number }>;
  /**
   * Every `+switch-master` the sentinels announced since the start (time seen, message
   * "<name> <old ip> <old port> <new ip> <new port>"), one entry per switch however many
   * sentinels announced it: the switches this process asked for and any the sentinels made
   * on their own (a primary that stalled past down-after-milliseconds on a loaded machine).
   */
  switches(): { at: number; message: string }[];
  stop(): Promise<void>;
}

export async function startSentinelSet(opts: { downAfterMs?: number; failoverTimeoutMs?: number } = {}): Promise<LocalSentinelSet> {
  const downAfter = opts.downAfterMs ?? 1_000;
  const failoverTimeout = opts.failoverTimeoutMs ?? 5_000;
  const root = mkdtempSync(path.join(tmpdir(), 'billing-redis-sentinel-'));
  const servers: RedisProcess[] = [];
  const sentinels: RedisProcess[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all([...servers, ...sentinels].map((n) => n.kill9()));
    rmSync(root, { recursive: true, force: true });
  };
  const dataNode = async (i: number, replicaOf: number | null): Promise<RedisProcess> => {
    const port = await freePort();
    const dir = path.join(root, `data${i}`);
    mkdirSync(dir);
    return new RedisProcess(port, dir, serverArgs(port, dir, replicaOf === null ? [] : ['--replicaof', '127.0.0.1', String(replicaOf)]));
  };
  try {
    servers.push(await (await dataNode(0, null)).start());
    servers.push(await (await dataNode(1, servers[0]!.port)).start());
    await waitUntil(async () => (await servers[1]!.command<string>('INFO', 'replication')).includes('master_link_status:up'), 15_000, 'replica linked to the primary');
    for (let i = 0; i < 3; i++) {
      const port = await freePort();
      const dir = path.join(root, `sentinel${i}`);
      mkdirSync(dir);
      const conf = path.join(dir, 'sentinel.conf');
      writeFileSync(
        conf,
        [
          `port ${port}`,
          'bind 127.0.0.1',
          `dir ${dir}`,
          `sentinel monitor ${SENTINEL_NAME} 127.0.0.1 ${servers[0]!.port} 2`,
          `sentinel down-after-milliseconds ${SENTINEL_NAME} ${downAfter}`,
          `sentinel failover-timeout ${SENTINEL_NAME} ${failoverTimeout}`,
          `sentinel parallel-syncs ${SENTINEL_NAME} 1`,
          '',
        ].join('\n'),
      );
      sentinels.push(await new RedisProcess(port, dir, [conf, '--sentinel']).start());
    }
    // Every sentinel must know the replica and the other sentinels before a failover can be voted.
    await waitUntil(
      async () => {
        const seen = await Promise.all(sentinels.map((s) => s.command<unknown[]>('SENTINEL', 'MASTER', SENTINEL_NAME).then(flat)));
        return seen.every((m) => Number(m['num-slaves']) >= 1 && Number(m['num-other-sentinels']) >= 2);
      },
      30_000,
      'sentinels discovering the replica and each other',
    );
  } catch (err) {
    await stop();
    throw err;
  }

  const switches: { at: number; message: string }[] = [];
  const listeners = sentinels.map((sn) => {
    const sub = new Redis({ port: sn.port, host: '127.0.0.1', maxRetriesPerRequest: 0, retryStrategy: () => 200 });
    sub.on('error', () => undefined);
    void sub.subscribe('+switch-master').catch(() => undefined);
    sub.on('message', (_channel: string, message: string) => {
      if (!switches.some((x) => x.message === message && Date.now() - x.at < 10_000)) switches.push({ at: Date.now(), message });
    });
    return sub;
  });
  const stopAll = stop;
  const stopWithListeners = async (): Promise<void> => {
    for (const l of listeners) l.disconnect();
    await stopAll();
  };

  const primaryPort = async (): Promise<number> => {
    const votes = new Map<number, number>();
    for (const s of sentinels) {
      if (!s.running) continue;
      const a = await s.command<[string, string] | null>('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', SENTINEL_NAME).catch(() => null);
      if (a) votes.set(Number(a[1]), (votes.get(Number(a[1])) ?? 0) + 1);
    }
    const best = [...votes.entries()].sort((a, b) => b[1] - a[1])[0];
    if (!best) throw new Error('no sentinel answers');
    return best[0];
  };
  const primary = async (): Promise<RedisProcess> => {
    const port = await primaryPort();
    const p = servers.find((s) => s.port === port);
    if (!p) throw new Error(`the sentinels name ${port}, not one of ours`);
    return p;
  };
  return {
    servers,
    sentinels,
    sentinelAddrs: sentinels.map((s) => ({ host: '127.0.0.1', port: s.port })),
    name: SENTINEL_NAME,
    primaryPort,
    primary,
    async failover(how = 'kill') {
      const old = await primary();
      const other = servers.find((s) => s !== old)!;
      await waitUntil(async () => (await other.command<string>('INFO', 'replication')).includes('master_link_status:up'), 30_000, 'replica in sync before the fault');
      const killedAt = Date.now();
      if (how === 'kill') await old.kill9();
      else await sentinels[0]!.command('SENTINEL', 'FAILOVER', SENTINEL_NAME);
      await waitUntil(
        async () => (await primaryPort()) === other.port && (await other.command<string>('INFO', 'replication')).includes('role:master'),
        60_000,
        'sentinels promoting the replica',
        20,
      );
      const switchedAfterMs = Date.now() - killedAt;
      if (how === 'kill') {
        // The old primary comes back as a replica of the new one (the sentinels would also
        // reconfigure it; saying so at start avoids a moment with two primaries).
        const idx = servers.indexOf(old);
        servers[idx] = await new RedisProcess(old.port, old.dir, serverArgs(old.port, old.dir, ['--replicaof', '127.0.0.1', String(other.port)])).start();
      } else {
        await waitUntil(async () => (await old.command<string>('INFO', 'replication')).includes('role:slave'), 30_000, 'the old primary demoted to a replica');
      }
      return { from: old.port, to: other.port, switchedAfterMs };
    },
    switches: () => [...switches],
    stop: stopWithListeners,
  };
}

function flat(a: unknown[]): Record<string, string> {
  const o: Record<string, string> = {};
  for (let i = 0; i + 1 < a.length; i += 2) o[String(a[i])] = String(a[i + 1]);
  return o;
}

async function waitUntil(check: () => Promise<boolean>, timeoutMs: number, what: string, everyMs = 100): Promise<void> {
  const end = Date.now() + timeoutMs;
  let last: unknown = null;
  for (;;) {
    try {
      if (await check()) return;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${(last as Error).message})` : ''}`);
    await sleep(everyMs);
  }
}
