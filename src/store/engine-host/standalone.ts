/**
 * TEST FRONT — NOT A CLICKHOUSE SERVER, NEVER FOR PRODUCTION.
 *
 * Starts the embedded engine's host (host.ts) on its own, outside a service process, so that
 * several service processes can share one store in tests: each points CLICKHOUSE_URL at it
 * (server mode, src/store/clickhouse). The engine belongs to one process (ARCHITECTURE.md,
 * fact 2), so a shared store needs a process of its own; production runs a ClickHouse server.
 *
 *   node dist/src/store/engine-host/standalone.js --dir <data dir> [--analytics-database analytics]
 *        [--analytics-sessions 4] [--writer-sessions 4] [--port 0]
 *
 * It prints one JSON line on stdout once the host serves, with the settings for the service:
 *   {"testFront":true,"url":…,"env":{"CLICKHOUSE_URL":…,"CLICKHOUSE_USER":"writer",
 *    "CLICKHOUSE_PASSWORD":…,"CLICKHOUSE_ANALYTICS_USER":"analytics",
 *    "CLICKHOUSE_ANALYTICS_PASSWORD":…,"ANALYTICS_DATABASE":…},"pid":…,"hostPid":…}
 * The host listens on 127.0.0.1 only; passwords are new on every start. The host's users map
 * to server mode's: `writer` is CLICKHOUSE_USER (schema, inserts, the pipeline's reads; its
 * database is `default`), `analytics` is CLICKHOUSE_ANALYTICS_USER (read-only sessions whose
 * current database is ANALYTICS_DATABASE). There is no supervisor: nothing stops a runaway
 * statement, and when the host dies this process exits with it. SIGTERM/SIGINT stop both.
 */
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import type { HostMessage, HostStart } from './host.js';

const HOST_FILE = new URL('./host.js', import.meta.url);

function arg(name: string, def: string | null): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = i >= 0 ? process.argv[i + 1] : undefined;
  if (v !== undefined) return v;
  if (def === null) {
    process.stderr.write(`usage: standalone.js --dir <data dir> [--analytics-database analytics] [--analytics-sessions 4] [--writer-sessions 4] [--port 0]\n  --${name} is required\n`);
    process.exit(2);
  }
  return def;
}

function int(name: string, def: number, min: number, max: number): number {
  const raw = arg(name, String(def));
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < min || n > max) {
    process.stderr.write(`--${name} ${JSON.stringify(raw)}: a whole number from ${min} to ${max}\n`);
    process.exit(2);
  }
  return n;
}

const analyticsDatabase = arg('analytics-database', 'analytics');
if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(analyticsDatabase)) {
  process.stderr.write(`--analytics-database ${JSON.stringify(analyticsDatabase)}: a plain identifier\n`);
  process.exit(2);
}
const start: HostStart = {
  type: 'start',
  dir: path.resolve(arg('dir', null)),
  analyticsDatabase,
  analyticsSessions: int('analytics-sessions', 4, 1, 64),
  writerSessions: int('writer-sessions', 4, 1, 64),
  writerPassword: randomBytes(24).toString('base64url'),
  analyticsPassword: randomBytes(24).toString('base64url'),
  port: int('port', 0, 0, 65535),
  fault: null,
};

process.title = 'billing-engine-host-test-front';
const child = fork(HOST_FILE, [], {
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  serialization: 'json',
  env: { ...process.env, UV_THREADPOOL_SIZE: String(start.analyticsSessions + start.writerSessions + 4) },
});
child.on('message', (m: HostMessage) => {
  if (m.type === 'failed') {
    process.stderr.write(`engine host could not start: ${m.message}\n`);
    return;
  }
  if (m.type !== 'listening') return;
  const url = `http://127.0.0.1:${m.port}`;
  const line = {
    testFront: true,
    note: 'the embedded engine host for tests; not a ClickHouse server, never for production',
    url,
    env: {
      CLICKHOUSE_URL: url,
      CLICKHOUSE_USER: 'writer',
      CLICKHOUSE_PASSWORD: start.writerPassword,
      CLICKHOUSE_ANALYTICS_USER: 'analytics',
      CLICKHOUSE_ANALYTICS_PASSWORD: start.analyticsPassword,
      ANALYTICS_DATABASE: start.analyticsDatabase,
    },
    pid: process.pid,
    hostPid: child.pid,
  };
  process.stdout.write(`${JSON.stringify(line)}\n`);
});
child.once('exit', (code, signal) => {
  process.stderr.write(`engine host exited (${signal ?? code})\n`);
  process.exit(code ?? 1);
});
const stop = (): void => {
  child.kill('SIGTERM');
  setTimeout(() => child.kill('SIGKILL'), 5_000).unref();
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
child.send(start);
