/**
 * Embedded ClickHouse (chdb). chdb must be used from one thread per process (two threads
 * crashed it), so the Session lives on the main thread of the one process that owns the
 * data directory; piscina workers only produce rows and hand them back. Session's async
 * calls run on libuv threads inside chdb, off the event loop.
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { Session } from 'chdb';
import type { Config } from '../../config.js';
import type { SignalCounts, Store } from '../index.js';
import { COUNT_SQL, EXISTING_IDS_SQL, INSERT_SETTINGS, schemaStatements } from '../schema.js';

export class ChdbStore implements Store {
  readonly kind = 'chdb' as const;
  private readonly session: Session;
  private readonly db: string;

  constructor(cfg: Config) {
    const dir = path.join(cfg.dataDir, 'chdb');
    mkdirSync(dir, { recursive: true });
    this.session = new Session(dir);
    this.db = cfg.clickhouseDatabase;
  }

  async init(): Promise<void> {
    for (const sql of schemaStatements(this.db)) await this.session.queryAsync(sql);
  }

  async insertSignals(rows: Buffer): Promise<void> {
    await this.session.insert({ table: `${this.db}.signals`, values: rows, format: 'JSONEachRow', settings: INSERT_SETTINGS });
  }

  async existingSignalIds(orgId: string, ids: string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const r = await this.session.queryBindAsync(EXISTING_IDS_SQL(this.db), { org: orgId, ids }, { format: 'JSONEachRow' });
    return new Set(lines<{ signal_id: string }>(r.text()).map((x) => x.signal_id));
  }

  async countSignals(orgId: string): Promise<SignalCounts> {
    const r = await this.session.queryBindAsync(COUNT_SQL(this.db), { org: orgId }, { format: 'JSONEachRow' });
    const out: SignalCounts = { live: 0, test: 0 };
    for (const x of lines<{ live: number; n: string | number }>(r.text())) out[x.live ? 'live' : 'test'] = Number(x.n);
    return out;
  }

  async ping(): Promise<void> {
    await this.session.queryAsync('SELECT 1');
  }

  async close(): Promise<void> {
    this.session.close();
  }
}

function lines<T>(text: string): T[] {
  return text
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as T);
}
