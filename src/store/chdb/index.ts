/**
 * Embedded ClickHouse (chdb) opened in the calling process. The service does not use it any
 * more (it reaches the embedded engine through its host process, src/store/engine-host);
 * tests and the analytics benchmark open a data directory with it directly.
 *
 * chdb must be used from one thread per process (two threads
 * crashed it), so the Session lives on the main thread of the one process that owns the
 * data directory; piscina workers only produce rows and hand them back. Session's async
 * calls run on libuv threads inside chdb, off the event loop.
 *
 * Two facts about chdb 3.4 shape this class (both checked, see docs/api.md "Analytics"):
 * - One session runs one statement at a time (a second call waits for the first), so
 *   calls are queued here in order.
 * - A statement that fails after it began writing its result leaves that partial output
 *   in the session, and chdb prepends it to the output of the *next* statement. After any
 *   failure the queue therefore runs a throw-away statement that swallows the leftover
 *   before anyone else's statement runs: no query ever sees another query's rows.
 *
 * The session's current database is the analytics database, which holds only the views;
 * every other statement here names its database explicitly.
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { Session } from 'chdb';
import type { Config } from '../../config.js';
import type { SignalCounts, Store } from '../store.js';
import { COUNT_SQL, EXISTING_IN_SQL, INSERT_SETTINGS, compactColumns, schemaStatements, type BillingTable, type RowTable } from '../schema.js';
import { viewStatements } from '../views.js';
import { checkInsertData } from '../insert-data.js';
import { settingsClause, type AnalyticsEngine, type QuerySettings } from '../engine.js';
import { storeLog as log } from '../../log.js';

const DRAIN_SQL = "SELECT 'drained'";

export class ChdbStore implements Store {
  readonly kind = 'chdb' as const;
  readonly analytics: AnalyticsEngine;
  private readonly session: Session;
  private readonly db: string;
  private readonly analyticsDb: string;
  private tail: Promise<unknown> = Promise.resolve();

  constructor(cfg: Config) {
    const dir = path.join(cfg.dataDir, 'chdb');
    mkdirSync(dir, { recursive: true });
    this.session = new Session(dir);
    this.db = cfg.clickhouseDatabase;
    this.analyticsDb = cfg.analytics.database;
    this.analytics = {
      select: async (sql: string, settings: QuerySettings) => {
        const u8 = (await this.run(() => this.session.queryAsync(`${sql}${settingsClause(settings)}`, { format: 'JSONCompact' }))).bytes();
        return Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength);
      },
    };
  }

  /** Runs one session call after the ones before it; after a failure, swallows the leftover output. */
  private run<T>(call: () => Promise<T>): Promise<T> {
    const result = this.tail.then(call);
    this.tail = result.then(
      () => undefined,
      () => this.session.queryAsync(DRAIN_SQL, { format: 'TSVRaw' }).then(
        () => undefined,
        (err: unknown) => log.error('chdb drain failed', { err }),
      ),
    );
    return result;
  }

  async init(): Promise<void> {
    for (const sql of schemaStatements(this.db)) await this.run(() => this.session.queryAsync(sql));
    for (const sql of [...viewStatements(this.db, this.analyticsDb), `USE ${this.analyticsDb}`]) {
      await this.run(() => this.session.queryAsync(sql));
    }
    const current = (await this.run(() => this.session.queryAsync('SELECT currentDatabase()', { format: 'TSVRaw' }))).text().trim();
    if (current !== this.analyticsDb) throw new Error(`chdb session is in database ${current}, expected ${this.analyticsDb}`);
  }

  async insertSignals(rows: Buffer): Promise<void> {
    checkInsertData(rows);
    await this.run(() => this.session.insert({ table: `${this.db}.signals`, values: rows, format: 'JSONEachRow', settings: INSERT_SETTINGS }));
  }

  existingSignalIds(orgId: string, ids: string[]): Promise<Set<string>> {
    return this.existingIn('signals', orgId, ids);
  }

  insertCosts(rows: Buffer, columns?: readonly string[]): Promise<void> {
    return this.insertBilling('costs', rows, columns);
  }


  insertUnpriced(rows: Buffer, columns?: readonly string[]): Promise<void> {
    return this.insertBilling('unpriced', rows, columns);
  }

  private async insertBilling(table: BillingTable, rows: Buffer, columns: readonly string[] | undefined): Promise<void> {
    const shape = columns ? { format: 'JSONCompactEachRow' as const, columns: compactColumns(table, columns) } : { format: 'JSONEachRow' as const };
    checkInsertData(rows);
    await this.run(() => this.session.insert({ table: `${this.db}.${table}`, values: rows, ...shape, settings: INSERT_SETTINGS }));
  }

  existingCostIds(orgId: string, ids: string[]): Promise<Set<string>> {
    return this.existingIn('costs', orgId, ids);
  }

  existingUnpricedIds(orgId: string, ids: string[]): Promise<Set<string>> {
    return this.existingIn('unpriced', orgId, ids);
  }


  private async existingIn(table: RowTable, orgId: string, ids: string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const r = await this.run(() => this.session.queryBindAsync(EXISTING_IN_SQL(this.db, table), { org: orgId, ids }, { format: 'JSONEachRow' }));
    return new Set(lines<{ signal_id: string }>(r.text()).map((x) => x.signal_id));
  }

  async countSignals(orgId: string): Promise<SignalCounts> {
    const r = await this.run(() => this.session.queryBindAsync(COUNT_SQL(this.db), { org: orgId }, { format: 'JSONEachRow' }));
    const out: SignalCounts = { live: 0, test: 0 };
    for (const x of lines<{ live: number; n: string | number }>(r.text())) out[x.live ? 'live' : 'test'] = Number(x.n);
    return out;
  }

  async ping(): Promise<void> {
    await this.run(() => this.session.queryAsync('SELECT 1'));
  }

  async close(): Promise<void> {
    await this.tail;
    this.session.close();
  }
}

function lines<T>(text: string): T[] {
  return text
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as T);
}
