/**
 * What every store implementation offers (clickhouse/, hosted/, chdb/), apart from how it is
 * opened (index.ts's openStore): implementations import this, index.ts imports them.
 */
import type { AnalyticsEngine } from './engine.js';

export interface SignalCounts {
  live: number;
  test: number;
}

export interface Store {
  readonly kind: 'chdb' | 'clickhouse';
  /** Creates the database, tables and views when missing (idempotent). */
  init(): Promise<void>;
  /** Inserts rows given as JSONEachRow text (one JSON object per line). */
  insertSignals(rows: Buffer): Promise<void>;
  /** Which of these signal ids of an organization are already stored. */
  existingSignalIds(orgId: string, ids: string[]): Promise<Set<string>>;
  countSignals(orgId: string): Promise<SignalCounts>;
  /**
   * Billing rows: one per priced signal, with its credit draw if any. Without `columns`,
   * JSONEachRow (one object per line); with them, JSONCompactEachRow (one array per line,
   * values in that column order: a list checked by schema.ts `compactColumns`).
   */
  insertCosts(rows: Buffer, columns?: readonly string[]): Promise<void>;
  /** Rows of signals an attribute applies to that were not priced, with the reason. */
  insertUnpriced(rows: Buffer, columns?: readonly string[]): Promise<void>;
  /** Which of these signal ids of an organization already have a cost / unpriced row. */
  existingCostIds(orgId: string, ids: string[]): Promise<Set<string>>;
  existingUnpricedIds(orgId: string, ids: string[]): Promise<Set<string>>;
  /** The engine as the analytics operations use it (read-only, in the analytics database). */
  readonly analytics: AnalyticsEngine;
  ping(): Promise<void>;
  close(): Promise<void>;
}
