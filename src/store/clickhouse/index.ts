/**
 * A ClickHouse server over HTTP (@clickhouse/client), used when CLICKHOUSE_URL is set.
 * Rows go in as the same JSONEachRow text the embedded engine receives.
 */
import { Readable } from 'node:stream';
import { createClient, type ClickHouseClient } from '@clickhouse/client';
import type { Config } from '../../config.js';
import type { SignalCounts, Store } from '../index.js';
import { COUNT_SQL, EXISTING_IDS_SQL, INSERT_SETTINGS, schemaStatements } from '../schema.js';

export class ClickHouseStore implements Store {
  readonly kind = 'clickhouse' as const;
  private readonly client: ClickHouseClient;
  private readonly db: string;

  constructor(cfg: Config) {
    this.db = cfg.clickhouseDatabase;
    this.client = createClient({
      url: cfg.clickhouseUrl!,
      username: cfg.clickhouseUser,
      password: cfg.clickhousePassword,
      request_timeout: 60_000,
    });
  }

  async init(): Promise<void> {
    for (const sql of schemaStatements(this.db)) await this.client.command({ query: sql });
  }

  async insertSignals(rows: Buffer): Promise<void> {
    const r = await this.client.exec({
      query: `INSERT INTO ${this.db}.signals FORMAT JSONEachRow`,
      values: Readable.from([rows]),
      clickhouse_settings: INSERT_SETTINGS,
    });
    r.stream.resume();
    await new Promise<void>((resolve, reject) => r.stream.on('end', resolve).on('error', reject));
  }

  async existingSignalIds(orgId: string, ids: string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const rs = await this.client.query({ query: EXISTING_IDS_SQL(this.db), query_params: { org: orgId, ids }, format: 'JSONEachRow' });
    return new Set((await rs.json<{ signal_id: string }>()).map((x) => x.signal_id));
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
    await this.client.close();
  }
}
