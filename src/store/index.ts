/**
 * The analytics store: where accepted signals become rows. Two implementations with the
 * same behaviour: `chdb/` (embedded ClickHouse engine in this process, the default) and
 * `clickhouse/` (a ClickHouse server over HTTP, chosen by CLICKHOUSE_URL).
 */
import type { Config } from '../config.js';
import type { AnalyticsEngine } from '../analytics/engine.js';

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
    const { ClickHouseStore } = await import('./clickhouse/index.js');
    return new ClickHouseStore(cfg);
  }
  const { ChdbStore } = await import('./chdb/index.js');
  return new ChdbStore(cfg);
}
