/**
 * The analytics store: where accepted signals become rows. The service talks to ClickHouse
 * over HTTP in both modes (`clickhouse/`): to a ClickHouse server when CLICKHOUSE_URL is set,
 * otherwise to the embedded engine (chdb) run in a child process it supervises (`hosted/`,
 * `engine-host/`). `chdb/` opens the embedded engine in the calling process; only tests and
 * benchmarks use it directly.
 */
import type { Config } from '../config.js';
import type { AnalyticsEngine } from './engine.js';

export interface SignalCounts {
  live: number;
  test: number;
}

export interface Store {
  readonly kind: 'chdb' | 'clickhouse';
  /** Creates the database and tables when missing and widens old decimal columns (idempotent). */
  init(): Promise<void>;
  /** Inserts rows given as JSONEachRow text (one JSON object per line). */
  insertSignals(rows: Buffer): Promise<void>;
  /** Which of these signal ids of an organization are already stored. */
  existingSignalIds(orgId: string, ids: string[]): Promise<Set<string>>;
  countSignals(orgId: string): Promise<SignalCounts>;
  /** Billing rows (JSONEachRow): one per priced signal, one per credit consumption. */
  insertCosts(rows: Buffer): Promise<void>;
  insertConsumption(rows: Buffer): Promise<void>;
  /** Rows of signals an attribute applies to that were not priced, with the reason. */
  insertUnpriced(rows: Buffer): Promise<void>;
  /** Which of these signal ids of an organization already have a cost / consumption / unpriced row. */
  existingCostIds(orgId: string, ids: string[]): Promise<Set<string>>;
  existingConsumptionIds(orgId: string, ids: string[]): Promise<Set<string>>;
  existingUnpricedIds(orgId: string, ids: string[]): Promise<Set<string>>;
  /** The engine as the analytics operations use it (read-only, in the analytics database). */
  readonly analytics: AnalyticsEngine;
  ping(): Promise<void>;
  close(): Promise<void>;
}

export async function openStore(cfg: Config): Promise<Store> {
  if (cfg.clickhouseUrl) {
    const { ClickHouseStore, serverConnection } = await import('./clickhouse/index.js');
    return new ClickHouseStore(serverConnection(cfg));
  }
  const { HostedStore } = await import('./hosted/index.js');
  return new HostedStore(cfg);
}
