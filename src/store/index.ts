/**
 * The analytics store: where accepted signals become rows. The service talks to ClickHouse
 * over HTTP in both modes (`clickhouse/`): to a ClickHouse server when CLICKHOUSE_URL is set,
 * otherwise to the embedded engine (chdb) run in a child process it supervises (`hosted/`,
 * `engine-host/`). `chdb/` opens the embedded engine in the calling process; only tests and
 * benchmarks use it directly.
 */
import type { Config } from '../config.js';

export type { SignalCounts, Store } from './store.js';
import type { Store } from './store.js';

export async function openStore(cfg: Config): Promise<Store> {
  if (cfg.clickhouseUrl) {
    const { ClickHouseStore, serverConnection } = await import('./clickhouse/index.js');
    return new ClickHouseStore(serverConnection(cfg));
  }
  const { HostedStore } = await import('./hosted/index.js');
  return new HostedStore(cfg);
}
