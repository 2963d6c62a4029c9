/**
 * The service's side of the engine host (host.ts): starts it, waits until it serves, restarts
 * it when it dies (at once after a deliberate kill, with a growing back-off after a crash),
 * and kills it on demand (SIGKILL) — the only way to stop a statement chdb is running.
 *
 * Every launch is a new generation with its own port and passwords. Callers take the current
 * generation with `current()`, which waits (up to a bound) while a launch is under way.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { log } from '../../log.js';
import type { HostMessage, HostStart } from './host.js';
import type { EngineHostFault } from '../../config.js';

const HOST_FILE = new URL('./host.js', import.meta.url);

export interface HostOptions {
  dir: string;
  analyticsDatabase: string;
  analyticsSessions: number;
  writerSessions: number;
  /** Test-only fault of the first generation (ENGINE_HOST_FAULT); null for none. */
  fault?: EngineHostFault | null;
}

export interface Generation {
  readonly n: number;
  readonly url: string;
  readonly pid: number;
  readonly writerPassword: string;
  readonly analyticsPassword: string;
  /** Settles when this generation's process has exited. */
  readonly exited: Promise<void>;
}

export class HostUnavailable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HostUnavailable';
  }
}

const BACKOFF_MS = [100, 250, 500, 1_000, 2_000, 5_000];

export class EngineHostSupervisor {
  private gen: Generation | null = null;
  private child: ChildProcess | null = null;
  private waiting: ((g: Generation) => void)[] = [];
  private stopped = false;
  private failures = 0;
  private n = 0;
  /** The next exit is one this supervisor asked for (restart at once, no back-off). */
  private deliberate = false;

  constructor(private readonly opts: HostOptions) {}

  /** Starts the first generation; resolves when it serves (rejects if it cannot start). */
  async start(): Promise<Generation> {
    const first = this.current(120_000);
    this.launch();
    return first;
  }

  /** The serving generation; waits for the next one for at most `waitMs`. */
  current(waitMs = 15_000): Promise<Generation> {
    if (this.gen) return Promise.resolve(this.gen);
    if (this.stopped) return Promise.reject(new HostUnavailable('the engine host is stopped'));
    return new Promise<Generation>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting = this.waiting.filter((w) => w !== take);
        reject(new HostUnavailable(`the engine host is not serving (waited ${waitMs} ms)`));
      }, waitMs);
      const take = (g: Generation): void => {
        clearTimeout(timer);
        resolve(g);
      };
      this.waiting.push(take);
    });
  }

  /** Whether a generation serves right now. */
  get serving(): Generation | null {
    return this.gen;
  }

  /**
   * Ends generation `n` now (SIGKILL) if it is still the serving one; a new one starts at once.
   * Returns whether it killed.
   */
  kill(n: number, reason: string): boolean {
    const g = this.gen;
    if (!g || g.n !== n || !this.child) return false;
    log.warn('killing the engine host', { reason, generation: n, hostPid: g.pid });
    this.deliberate = true;
    this.gen = null;
    this.child.kill('SIGKILL');
    return true;
  }

  private launch(): void {
    if (this.stopped) return;
    const n = ++this.n;
    const startedMs = Date.now();
    const writerPassword = randomBytes(24).toString('base64url');
    const analyticsPassword = randomBytes(24).toString('base64url');
    const child = fork(HOST_FILE, [], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'json',
      // chdb runs each async statement on a libuv worker thread: with Node's default of 4,
      // four running statements make every other session wait, whatever lane it is in
      // (measured: a SELECT 1 waited 2.6 s behind four long statements). One thread per
      // session, and a few for the rest of the process.
      env: { ...process.env, UV_THREADPOOL_SIZE: String(this.opts.analyticsSessions + this.opts.writerSessions + 4) },
    });
    this.child = child;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    let served = false;
    child.on('message', (m: HostMessage) => {
      if (m.type === 'failed') {
        log.warn('engine host could not start', { err: m.message, generation: n, hostPid: child.pid });
        return;
      }
      if (m.type !== 'listening' || served || this.child !== child) return;
      served = true;
      const g: Generation = { n, url: `http://127.0.0.1:${m.port}`, pid: child.pid!, writerPassword, analyticsPassword, exited };
      this.gen = g;
      log.info('engine host serving', { generation: n, hostPid: child.pid, port: m.port, startMs: Date.now() - startedMs });
      const w = this.waiting;
      this.waiting = [];
      for (const take of w) take(g);
    });
    child.once('exit', (code, signal) => {
      if (this.child === child) this.child = null;
      if (this.gen?.n === n) this.gen = null;
      if (this.stopped) return;
      const deliberate = this.deliberate;
      this.deliberate = false;
      if (deliberate) this.failures = 0;
      else {
        if (served && Date.now() - startedMs > 30_000) this.failures = 0;
        this.failures++;
        log.error('engine host exited', { code, signal, generation: n, hostPid: child.pid });
      }
      const delay = deliberate ? 0 : BACKOFF_MS[Math.min(this.failures - 1, BACKOFF_MS.length - 1)]!;
      setTimeout(() => this.launch(), delay).unref();
    });
    const start: HostStart = {
      type: 'start',
      dir: this.opts.dir,
      analyticsDatabase: this.opts.analyticsDatabase,
      analyticsSessions: this.opts.analyticsSessions,
      writerSessions: this.opts.writerSessions,
      writerPassword,
      analyticsPassword,
      port: 0,
      fault: n === 1 ? (this.opts.fault ?? null) : null,
    };
    child.send(start);
  }

  /** Stops the host (SIGTERM, SIGKILL after 5 s) and does not restart it. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.gen = null;
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGTERM');
    const force = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(force);
  }
}
