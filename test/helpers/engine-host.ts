/**
 * A compiled engine host (dist/, as the API tests run the compiled service) under its own
 * supervisor on a fresh data directory, and ClickHouse clients for it; everything is closed and
 * removed when test `t` ends.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Test } from 'tap';
import { ClickHouseLogLevel, createClient, type ClickHouseClient } from '@clickhouse/client';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const { EngineHostSupervisor } = (await import(pathToFileURL(path.join(ROOT, 'dist/src/store/engine-host/supervisor.js')).href)) as typeof import('../../src/store/engine-host/supervisor.js');

export interface TestHost {
  sup: InstanceType<typeof EngineHostSupervisor>;
  /** A client of the host at `url` (extra options such as request_timeout go to createClient). */
  client(url: string, username: string, password: string, database?: string, extra?: { request_timeout?: number }): ClickHouseClient;
}

export function engineHost(t: Test, name: string, sessions: { analyticsSessions: number; writerSessions: number }): TestHost {
  const dir = mkdtempSync(path.join(tmpdir(), `billing-${name}-`));
  const sup = new EngineHostSupervisor({ dir, analyticsDatabase: 'an', ...sessions });
  const clients: ClickHouseClient[] = [];
  t.teardown(async () => {
    for (const c of clients) await c.close();
    await sup.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    sup,
    client: (url, username, password, database, extra) => {
      const c = createClient({ url, username, password, ...(database ? { database } : {}), compression: { request: false, response: false }, log: { level: ClickHouseLogLevel.OFF }, ...extra });
      clients.push(c);
      return c;
    },
  };
}
