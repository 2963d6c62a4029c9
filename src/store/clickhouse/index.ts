/**
 * ClickHouse over HTTP (@clickhouse/client): a ClickHouse server when CLICKHOUSE_URL is set,
 * and the embedded engine's host process otherwise (src/store/engine-host, which serves the
 * part of the HTTP interface this class uses). Rows go in as JSONEachRow text.
 */
import { Readable } from 'node:stream';
import { ClickHouseError, ClickHouseLogLevel, createClient, type ClickHouseClient } from '@clickhouse/client';
import { MAX_ENGINE_SESSIONS, type Config } from '../../config.js';
import type { SignalCounts, Store } from '../store.js';
import { COUNT_SQL, EXISTING_IN_SQL, INSERT_SETTINGS, compactColumns, schemaStatements, type BillingTable, type RowTable } from '../schema.js';
import { viewStatements } from '../views.js';
import { engineErrorOf } from '../engine-error.js';
import type { AnalyticsEngine, EngineOutput, QuerySettings } from '../engine.js';

/**
 * An error the client raised while reading an answer (an exception the server wrote into a
 * stream it had started): its code number decides the class, never the `type` the client read
 * from the message text.
 */
function engineError(err: unknown): unknown {
  const e = err as { code?: string; type?: string; message?: string };
  if (err instanceof ClickHouseError && /^\d+$/.test(String(e.code))) return engineErrorOf(Number(e.code), e.message ?? '');
  return err;
}

/**
 * Throws the engine's error when an answer is one (the client hands back error answers as
 * they are with `ignore_error_response`): the class is the `X-ClickHouse-Exception-Code`
 * header's number, the body only the reason. An error answer without that header is not the
 * engine's (a proxy's page): a plain error, the service's failure.
 */
async function refusal(r: { stream: NodeJS.ReadableStream; response_headers: Record<string, string | string[] | undefined>; http_status_code?: number }): Promise<void> {
  const header = r.response_headers['x-clickhouse-exception-code'];
  const status = r.http_status_code ?? 200;
  if (header === undefined && status >= 200 && status < 300) return;
  const chunks: Buffer[] = [];
  for await (const c of r.stream) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  const code = Number(Array.isArray(header) ? header[0] : header);
  if (header === undefined || !Number.isInteger(code) || code <= 0) throw new Error(`the engine answered HTTP ${status} without an exception code: ${text.slice(0, 200)}`);
  throw engineErrorOf(code, text);
}

/**
 * An answer's body read on demand: each `read` takes what the stream holds (at least one
 * chunk, waiting for it), and nothing more is read from the connection until the next one.
 * Errors (a broken connection, an exception the client found in the stream) reject `read`
 * in the engine's terms.
 */
function pull(stream: Readable): EngineOutput {
  const it = stream[Symbol.asyncIterator]();
  let closed = false;
  return {
    read: async () => {
      if (closed) return null;
      try {
        const r = await it.next();
        return r.done ? null : (r.value as Buffer);
      } catch (err) {
        throw engineError(err);
      }
    },
    close: () => {
      if (closed) return;
      closed = true;
      stream.destroy();
    },
  };
}

/** Where and as whom to connect. */
export interface ClickHouseConnection {
  url: string;
  /** Schema, inserts and the pipeline's reads. */
  writer: { username: string; password: string };
  /** Analytics queries: a read-only user whose current database holds only the views. */
  reader: { username: string; password: string };
  database: string;
  analyticsDatabase: string;
  analyticsTimeoutMs: number;
  /** The embedded engine's host: no HTTP compression, no server-only settings. */
  embedded: boolean;
}

export function serverConnection(cfg: Config): ClickHouseConnection {
  const writer = { username: cfg.clickhouseUser, password: cfg.clickhousePassword };
  return {
    url: cfg.clickhouseUrl!,
    writer,
    reader: cfg.analytics.user ? { username: cfg.analytics.user, password: cfg.analytics.password } : writer,
    database: cfg.clickhouseDatabase,
    analyticsDatabase: cfg.analytics.database,
    analyticsTimeoutMs: cfg.analytics.timeoutMs,
    embedded: false,
  };
}

export class ClickHouseStore implements Store {
  readonly kind: 'chdb' | 'clickhouse';
  private readonly client: ClickHouseClient;
  private readonly db: string;
  private readonly analyticsDb: string;
  /** Analytics queries run as a separate read-only user whose current database holds only the views. */
  private readonly reader: ClickHouseClient;
  readonly analytics: AnalyticsEngine;

  constructor(conn: ClickHouseConnection) {
    this.kind = conn.embedded ? 'chdb' : 'clickhouse';
    this.db = conn.database;
    this.analyticsDb = conn.analyticsDatabase;
    // The host: no compression on loopback, and no client log lines for the engine errors the
    // service already reports in its own words.
    const compression = conn.embedded ? { compression: { request: false, response: false }, log: { level: ClickHouseLogLevel.OFF } } : {};
    this.client = createClient({ url: conn.url, ...conn.writer, request_timeout: 60_000, ...compression });
    this.reader = createClient({
      url: conn.url,
      ...conn.reader,
      database: this.analyticsDb,
      request_timeout: conn.analyticsTimeoutMs + 10_000,
      // A connection for every statement the service may run at once: a result being read
      // holds its connection until its client has taken it, and a statement must never wait
      // for another's client to get one (it would run into its deadline waiting).
      max_open_connections: MAX_ENGINE_SESSIONS,
      ...compression,
    });
    // A server stops a read-only query whose client went away (the service's deadline);
    // the embedded engine's host is killed instead (src/store/engine-host/supervisor.ts).
    const stopSettings: Record<string, string> = conn.embedded ? {} : { cancel_http_readonly_queries_on_client_close: '1' };
    const reader = this.reader;
    const open = async (sql: string, settings: QuerySettings, stop?: AbortSignal): Promise<EngineOutput> => {
      try {
        // exec, not query: the output's bytes as they come, without decoding them to a string
        // and encoding them again (10,000 rows are ~600 KB).
        const r = await reader.exec({
          query: `${sql}\nFORMAT JSONCompact`,
          clickhouse_settings: { ...(settings as Record<string, string>), ...stopSettings },
          // An engine error is read here, by its code header, not by the client's parser,
          // which takes the class from the message text (and that quotes the caller's literals).
          ignore_error_response: true,
          ...(stop ? { abort_signal: stop } : {}),
        });
        await refusal(r);
        return pull(r.stream as Readable);
      } catch (err) {
        throw engineError(err);
      }
    };
    this.analytics = {
      open,
      select: async (sql, settings, stop, opts) => {
        // Read as it comes, and no further than maxBytes: a larger output is cut there (the
        // connection is closed, which stops a server's read-only query), so the service never
        // holds more of it than the cap and one chunk.
        const out = await open(sql, settings, stop);
        const max = opts?.maxBytes ?? Infinity;
        const chunks: Buffer[] = [];
        let n = 0;
        try {
          for (let c = await out.read(); c !== null; c = await out.read()) {
            chunks.push(c);
            n += c.length;
            if (n > max) break;
          }
        } finally {
          out.close();
        }
        return Buffer.concat(chunks, n);
      },
    };
  }

  async init(): Promise<void> {
    for (const sql of schemaStatements(this.db)) await this.client.command({ query: sql });
    for (const sql of viewStatements(this.db, this.analyticsDb)) await this.client.command({ query: sql });
  }

  insertSignals(rows: Buffer): Promise<void> {
    return this.insertInto('signals', rows);
  }

  insertCosts(rows: Buffer, columns?: readonly string[]): Promise<void> {
    return this.insertInto('costs', rows, columns);
  }


  insertUnpriced(rows: Buffer, columns?: readonly string[]): Promise<void> {
    return this.insertInto('unpriced', rows, columns);
  }

  async existingUnpricedIds(orgId: string, ids: string[]): Promise<Set<string>> {
    return this.existingIn('unpriced', orgId, ids);
  }

  async existingCostIds(orgId: string, ids: string[]): Promise<Set<string>> {
    return this.existingIn('costs', orgId, ids);
  }


  private async existingIn(table: RowTable, orgId: string, ids: string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const rs = await this.client.query({ query: EXISTING_IN_SQL(this.db, table), query_params: { org: orgId, ids }, format: 'JSONEachRow' });
    return new Set((await rs.json<{ signal_id: string }>()).map((x) => x.signal_id));
  }

  /** `columns` (billing tables only): JSONCompactEachRow rows in that order, the list checked against the table's columns first. */
  private async insertInto(table: RowTable, rows: Buffer, columns?: readonly string[]): Promise<void> {
    const query =
      columns && table !== 'signals'
        ? `INSERT INTO ${this.db}.${table} (${compactColumns(table as BillingTable, columns).join(', ')}) FORMAT JSONCompactEachRow`
        : `INSERT INTO ${this.db}.${table} FORMAT JSONEachRow`;
    try {
      const r = await this.client.exec({
        query,
        values: Readable.from([rows]),
        clickhouse_settings: INSERT_SETTINGS,
      });
      r.stream.resume();
      await new Promise<void>((resolve, reject) => r.stream.on('end', resolve).on('error', reject));
    } catch (err) {
      // The pipeline tells data errors from outages by the engine's code number (isDataError).
      throw engineError(err);
    }
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
