/**
 * A real 3-node NATS JetStream cluster for tests and drills (test/cluster/nats-cluster.test.ts,
 * bench/drills/nats-cluster.ts): three Debian `nats-server` processes on
 * loopback ports, each with its own store directory, routes to the other two and a shared
 * cluster name (ARCHITECTURE.md fact 11). Nodes can be killed with -9 and restarted on the same
 * ports and directories; `stop()` kills every node and removes the directories.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { freePort } from '../../harness/ports.js';
import { sleep } from './report.js';

interface Node {
  name: string;
  port: number;
  clusterPort: number;
  dir: string;
  proc: ChildProcess | null;
  output: string;
}

export const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

export class NatsCluster {
  readonly nodes: Node[] = [];
  readonly root: string;

  private constructor(readonly clusterName: string) {
    this.root = mkdtempSync(path.join(tmpdir(), 'billing-nats-cluster-'));
  }

  static async start(size = 3, clusterName = `billing-test-${process.pid}`): Promise<NatsCluster> {
    const c = new NatsCluster(clusterName);
    for (let i = 0; i < size; i++) {
      c.nodes.push({ name: `n${i + 1}`, port: await freePort(), clusterPort: await freePort(), dir: path.join(c.root, `n${i + 1}`), proc: null, output: '' });
    }
    for (let i = 0; i < size; i++) c.spawn(i);
    try {
      // Forming a cluster takes longer on a busy machine (a test suite running two files at once).
      await c.ready(60_000);
    } catch (err) {
      // Its processes would keep the caller's process alive (and a test file waiting for its timeout).
      await c.stop();
      throw err;
    }
    return c;
  }

  /** NATS_URL for the service: every member, comma-separated. */
  get url(): string {
    return this.nodes.map((n) => `nats://127.0.0.1:${n.port}`).join(',');
  }

  get servers(): string[] {
    return this.nodes.map((n) => `nats://127.0.0.1:${n.port}`);
  }

  indexOf(name: string): number {
    const i = this.nodes.findIndex((n) => n.name === name);
    if (i < 0) throw new Error(`no node named ${name}`);
    return i;
  }

  pid(i: number): number {
    return this.nodes[i]!.proc!.pid!;
  }

  private spawn(i: number): void {
    const n = this.nodes[i]!;
    const routes = this.nodes.filter((o) => o !== n).map((o) => `nats://127.0.0.1:${o.clusterPort}`).join(',');
    const proc = spawn(
      'nats-server',
      ['-a', '127.0.0.1', '-p', String(n.port), '-js', '-sd', n.dir, '--server_name', n.name, '--cluster_name', this.clusterName, '--cluster', `nats://127.0.0.1:${n.clusterPort}`, '--routes', routes],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    n.output = '';
    const keep = (b: Buffer): void => {
      n.output = (n.output + b.toString()).slice(-20_000);
    };
    proc.stdout!.on('data', keep);
    proc.stderr!.on('data', keep);
    const reap = (): void => void proc.kill('SIGKILL');
    process.once('exit', reap);
    proc.once('exit', () => process.removeListener('exit', reap));
    n.proc = proc;
  }

  /** Waits until JetStream answers through every running node (a meta leader is elected). */
  async ready(timeoutMs = 20_000): Promise<void> {
    const end = Date.now() + timeoutMs;
    for (const n of this.nodes) {
      if (!n.proc || n.proc.exitCode !== null || n.proc.signalCode !== null) continue;
      for (;;) {
        try {
          const nc = await connect({ servers: `nats://127.0.0.1:${n.port}`, timeout: 1_000 });
          try {
            const jsm = await jetstreamManager(nc, { timeout: 2_000 });
            await jsm.getAccountInfo();
            break;
          } finally {
            await nc.close();
          }
        } catch (err) {
          if (Date.now() > end) throw new Error(`nats node ${n.name} not ready: ${(err as Error).message}\n${n.output}`);
          await sleep(200);
        }
      }
    }
    // Every running node known to the meta leader: a stream with one replica per running node
    // can be placed (answering alone is not enough: "no suitable peers for placement").
    const running = this.nodes.filter((n) => n.proc && n.proc.exitCode === null && n.proc.signalCode === null).length;
    const nc = await connect({ servers: this.servers, timeout: 2_000 });
    try {
      const jsm = await jetstreamManager(nc, { timeout: 5_000 });
      const name = `CLUSTER_READY_${process.pid}`;
      for (;;) {
        try {
          await jsm.streams.add({ name, subjects: [`cluster-ready.${process.pid}`], num_replicas: running });
          await jsm.streams.delete(name);
          return;
        } catch (err) {
          await jsm.streams.delete(name).catch(() => undefined);
          if (Date.now() > end) throw new Error(`nats cluster not ready for ${running} replicas: ${(err as Error).message}`);
          await sleep(300);
        }
      }
    } finally {
      await nc.close();
    }
  }

  /** kill -9 of node i; resolves once the process is gone. */
  async kill9(i: number): Promise<number> {
    const p = this.nodes[i]!.proc!;
    const pid = p.pid!;
    if (p.exitCode === null && p.signalCode === null) {
      const exited = new Promise((r) => p.once('exit', r));
      p.kill('SIGKILL');
      await exited;
    }
    return pid;
  }

  /** Restarts node i on its ports and store directory. */
  async restart(i: number): Promise<void> {
    this.spawn(i);
    await this.ready();
  }

  /** A manager connected to the whole cluster (for stream info: `cluster.leader`). */
  async manager(): Promise<{ nc: NatsConnection; jsm: JetStreamManager }> {
    const nc = await connect({ servers: this.servers, maxReconnectAttempts: -1, reconnectTimeWait: 200 });
    return { nc, jsm: await jetstreamManager(nc, { timeout: 10_000 }) };
  }

  /**
   * A manager connected to node i alone, with short request timeouts: for watching the cluster
   * while another node is down (a connection to the whole cluster may sit on the dead node and
   * wait to reconnect).
   */
  async managerOn(i: number, timeoutMs = 2_000): Promise<{ nc: NatsConnection; jsm: JetStreamManager }> {
    const nc = await connect({ servers: `nats://127.0.0.1:${this.nodes[i]!.port}`, timeout: timeoutMs });
    return { nc, jsm: await jetstreamManager(nc, { timeout: timeoutMs }) };
  }

  async stop(): Promise<void> {
    for (let i = 0; i < this.nodes.length; i++) if (this.nodes[i]!.proc) await this.kill9(i);
    rmSync(this.root, { recursive: true, force: true });
  }
}
