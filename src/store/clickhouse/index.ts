/**
 * A ClickHouse server over HTTP (@clickhouse/client), used when CLICKHOUSE_URL is set.
 * Rows go in as the same JSONEachRow text the embedded engine receives.
 */
import { Readable } from 'node:stream';
import { createClient, type ClickHouseClient } from '@clickhouse/client';
import type { Config } from '../../config.js';
import type { SignalCounts, Store } from '../index.js';
import { COUNT_SQL, DECIMAL_TYPES_SQL, EXISTING_IN_SQL, INSERT_SETTINGS, decimalMigrations, schemaStatements, type RowTable } from '../schema.js';
import { viewStatements } from '../../analytics/views.js';
import { EngineError } from '../../analytics/engine-error.js';
import type { AnalyticsEngine } from '../../analytics/engine.js';

/** @clickhouse/client errors carry the code number and name; keep them for the API's mapping. */
function engineError(err: unknown): unknown {
  const e = err as { code?: string; type?: string; message?: string };
  if (err instanceof Error && typeof e.type === 'string' && typeof e.code === 'string') return new EngineError(e.type, Number(e.code), e.message ?? '');
  return err;
}

export class ClickHouseStore implements Store {
  readonly kind = 'clickhouse' as const;
  private readonly client: ClickHouseClient;
  private readonly db: string;
  private readonly analyticsDb: string;
  /** Analytics queries run as a separate read-only user whose current database holds only the views. */
  private readonly reader: ClickHouseClient;
  readonly analytics: AnalyticsEngine;

  constructor(cfg: Config) {
    this.db = cfg.clickhouseDatabase;
    this.analyticsDb = cfg.analytics.database;
    this.client = createClient({
      url: cfg.clickhouseUrl!,
      username: cfg.clickhouseUser,
      password: cfg.clickhousePassword,
      request_timeout: 60_000,
    });
    this.reader = createClient({
      url: cfg.clickhouseUrl!,
      username: cfg.analytics.user ?? cfg.clickhouseUser,
      password: cfg.analytics.user ? cfg.analytics.password : cfg.clickhousePassword,
      database: this.analyticsDb,
      request_timeout: cfg.analytics.timeoutMs + 10_000,
    });
    const reader = this.reader;
    this.analytics = {
      normalize: async (text) => {
        try {
          const rs = await reader.query({ query: 'SELECT formatQuerySingleLine({q:String}) AS q', query_params: { q: text }, format: 'JSONEachRow' });
          return (await rs.json<{ q: string }>())[0]!.q;
        } catch (err) {
          throw engineError(err);
        }
      },
      explainAst: async (sql) => {
        try {
          return await (await reader.query({ query: `EXPLAIN AST ${sql}`, format: 'TabSeparatedRaw' })).text();
        } catch (err) {
          throw engineError(err);
        }
      },
      select: async (sql, settings) => {
        try {
          return Buffer.from(await (await reader.query({ query: sql, format: 'JSONCompact', clickhouse_settings: settings as Record<string, string> })).text());
        } catch (err) {
          throw engineError(err);
        }
      },
    };
  }

  async init(): Promise<void> {
    for (const sql of schemaStatements(this.db)) await this.client.command({ query: sql });
    const types = await (await this.client.query({ query: DECIMAL_TYPES_SQL, query_params: { db: this.db }, format: 'JSONEachRow' })).json<{ table: string; name: string; type: string }>();
    for (const sql of decimalMigrations(this.db, types)) await this.client.command({ query: sql });
    for (const sql of viewStatements(this.db, this.analyticsDb)) await this.client.command({ query: sql });
  }

  insertSignals(rows: Buffer): Promise<void> {
    return this.insertInto('signals', rows);
  }

  insertCosts(rows: Buffer): Promise<void> {
    return this.insertInto('costs', rows);
  }

  insertConsumption(rows: Buffer): Promise<void> {
    return this.insertInto('credit_consumption', rows);
  }

  insertUnpriced(rows: Buffer): Promise<void> {
    return this.insertInto('unpriced', rows);
  }

  async existingUnpricedIds(orgId: string, ids: string[]): Promise<Set<string>> {
    return this.existingIn('unpriced', orgId, ids);
  }

  async existingCostIds(orgId: string, ids: string[]): Promise<Set<string>> {
    return this.existingIn('costs', orgId, ids);
  }

  async existingConsumptionIds(orgId: string, ids: string[]): Promise<Set<string>> {
    return this.existingIn('credit_consumption', orgId, ids);
  }

  private async existingIn(table: RowTable, orgId: string, ids: string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const rs = await this.client.query({ query: EXISTING_IN_SQL(this.db, table), query_params: { org: orgId, ids }, format: 'JSONEachRow' });
    return new Set((await rs.json<{ signal_id: string }>()).map((x) => x.signal_id));
  }

  private async insertInto(table: string, rows: Buffer): Promise<void> {
    const r = await this.client.exec({
      query: `INSERT INTO ${this.db}.${table} FORMAT JSONEachRow`,
      values: Readable.from([rows]),
      clickhouse_settings: INSERT_SETTINGS,
    });
    r.stream.resume();
    await new Promise<void>((resolve, reject) => r.stream.on('end', resolve).on('error', reject));
  }

  existingSignalIds(orgId: string, ids: string[]): Promise<Set<string>> {
    return this.existingIn('signals', orgId, ids);
  }

  async countSignals(orgId: string): Promise<SignalCounts> {
    const rs = await this.client.query({ query: COUNT_SQL(this.db), query_params: { org: orgId }, format: 'JSONEachRow' });
    const out: SignalCounts = { live: 0, test: 0 };
    for (const x of await rs.json<{ live: number; n: string }>()) out[x.live ? 'live' : 'test'] = Number(x.n);
    return out;
  }

  async ping(): Promise<void> {
    const r = await this.client.ping();
    if (!r.success) throw r.error;
  }

  async close(): Promise<void> {
    await this.reader.close();
    await this.client.close();
  }
}
