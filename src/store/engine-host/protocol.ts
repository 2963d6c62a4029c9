/**
 * The part of ClickHouse's HTTP interface that @clickhouse/client uses, as the engine host
 * serves it (see host.ts). Pure functions, no I/O:
 *
 *   POST /?query_id=…&database=…&<setting>=…&param_<name>=…   body = the statement, or, when
 *        the URL carries `query`, the statement is in the URL and the body is insert data.
 *   GET  /ping                                                  "Ok.\n"
 *
 * Answers: 200 with the output; errors as ClickHouse sends them — a non-2xx status, the
 * header X-ClickHouse-Exception-Code and the text "Code: N. DB::Exception: … (NAME)", which
 * the client turns into a ClickHouseError with `code` and `type`.
 *
 * Settings: only the names in ALLOWED_SETTINGS, appended by the host as a SETTINGS clause of
 * the statement; anything else is refused. Bound parameters (`param_<name>`, the text
 * ClickHouse would parse) become `SET param_<name> = '…'` statements run before the statement
 * on the same session: chdb's own bound-parameter call is serialized process-wide (it is not
 * isolated per connection in this libchdb), so it would make every lane wait for every other.
 */

import { errorCodeName } from '../error-codes.js';

export class HostError extends Error {
  constructor(
    readonly status: number,
    readonly code: number,
    readonly codeName: string,
    message: string,
  ) {
    super(message);
  }

  /** The body ClickHouse would send for this error. */
  text(): string {
    return `Code: ${this.code}. DB::Exception: ${this.message}. (${this.codeName})\n`;
  }
}

/**
 * Settings a statement may carry: the analytics limits, scope and output settings the service
 * sets (src/analytics/service.ts) and the insert settings (src/store/schema.ts). `readonly` is
 * accepted and not applied: analytics sessions are read-only (readonly = 2) for their whole
 * life, writer sessions are not.
 */
export const ALLOWED_SETTINGS: ReadonlySet<string> = new Set([
  'log_comment',
  'query_plan_filter_push_down',
  'enable_optimize_predicate_expression',
  'query_plan_merge_filters',
  'optimize_move_to_prewhere',
  'max_execution_time',
  'timeout_overflow_mode',
  'max_memory_usage',
  'os_thread_priority',
  'limit',
  'max_result_rows',
  'result_overflow_mode',
  'output_format_json_quote_64bit_integers',
  'output_format_json_quote_64bit_floats',
  'output_format_json_quote_decimals',
  'output_format_json_quote_denormals',
  'max_partitions_per_insert_block',
]);

/** Client-side parameters of the HTTP interface that are not settings. */
const RESERVED_PARAMS = new Set(['query', 'query_id', 'database', 'default_format', 'session_id']);

export interface ParsedRequest {
  queryId: string;
  /** The statement, without a trailing FORMAT clause. */
  sql: string;
  /** Output format: the statement's trailing FORMAT clause or default_format; TabSeparated otherwise. */
  format: string;
  /** `database` URL parameter, or null. */
  database: string | null;
  /** Insert data (the body when the statement is in the URL), or null. */
  insertData: Buffer | null;
  settings: [string, string][];
  params: [string, string][];
}

const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;
const TRAILING_FORMAT = /\s+FORMAT\s+([A-Za-z][A-Za-z0-9]*)\s*;?\s*$/i;

export function parseRequest(search: URLSearchParams, body: Buffer): ParsedRequest {
  const inUrl = search.get('query');
  let text = inUrl ?? body.toString('utf8');
  const insertData = inUrl !== null && body.length > 0 ? body : null;
  let format = search.get('default_format') ?? 'TabSeparated';
  if (insertData === null) {
    // Matched on the end of the text only: on the whole text, a long run of whitespace (inside
    // a literal) made the match quadratic (20,000 spaces: 0.45 s of the host's one thread).
    const trimmed = text.trimEnd();
    const from = Math.max(0, trimmed.length - 128);
    const m = TRAILING_FORMAT.exec(trimmed.slice(from));
    if (m) {
      format = m[1]!;
      text = trimmed.slice(0, from + m.index);
    }
  }
  if (text.trim() === '') throw new HostError(400, 62, 'SYNTAX_ERROR', 'Empty query');
  const settings: [string, string][] = [];
  const params: [string, string][] = [];
  for (const [k, v] of search) {
    if (RESERVED_PARAMS.has(k)) continue;
    if (k.startsWith('param_')) {
      const name = k.slice('param_'.length);
      if (!IDENT.test(name)) throw new HostError(400, 36, 'BAD_ARGUMENTS', `Bad query parameter name ${JSON.stringify(name)}`);
      params.push([name, v]);
      continue;
    }
    // Asked for by server mode (src/store/clickhouse) on analytics reads, when the standalone
    // test front (standalone.ts) stands in for a server: accepted and not applied as a setting.
    // The host cancels a streamed statement whose connection closes anyway (stream.ts); a
    // statement chdb is computing cannot be stopped (the supervisor kills the host instead).
    if (k === 'cancel_http_readonly_queries_on_client_close') continue;
    if (k === 'readonly' || k === 'enable_http_compression') {
      if (k === 'enable_http_compression' && v !== '0') throw new HostError(400, 115, 'UNKNOWN_SETTING', 'HTTP compression is not offered by the engine host');
      continue;
    }
    if (!ALLOWED_SETTINGS.has(k)) throw new HostError(400, 115, 'UNKNOWN_SETTING', `Setting ${k} is not accepted by the engine host`);
    settings.push([k, v]);
  }
  return { queryId: search.get('query_id') ?? '', sql: text, format, database: search.get('database'), insertData, settings, params };
}

/** A ClickHouse string literal. */
export function quote(s: string): string {
  return `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

/** A setting value as a literal: plain numbers as they are, anything else quoted. */
function settingLiteral(v: string): string {
  return /^-?\d+(\.\d+)?$/.test(v) ? v : quote(v);
}

export function settingsClause(settings: readonly [string, string][]): string {
  return settings.length === 0 ? '' : ` SETTINGS ${settings.map(([k, v]) => `${k} = ${settingLiteral(v)}`).join(', ')}`;
}

/** `SET param_<name> = '<text>'; ` for each bound parameter (the text is what ClickHouse parses for the declared type). */
export function paramStatements(params: readonly [string, string][]): string {
  return params.map(([k, v]) => `SET param_${k} = ${quote(v)}; `).join('');
}

/**
 * Empties the parameters again (`SET param_<name> = ''`), run on the session right after the
 * statement: a parameter set on a session stays set, and a later statement naming it without
 * sending it must not read another request's value.
 */
export function paramReset(params: readonly [string, string][]): string | undefined {
  return params.length === 0 ? undefined : params.map(([k]) => `SET param_${k} = ''`).join('; ');
}

export type InsertTarget = { table: string; format: 'JSONEachRow' } | { table: string; format: 'JSONCompactEachRow'; columns: string[] };

const NAME = '[A-Za-z_][A-Za-z0-9_]*';
const INSERT = new RegExp(`^\\s*INSERT\\s+INTO\\s+(${NAME}\\.${NAME})\\s+(?:\\(\\s*(${NAME}(?:\\s*,\\s*${NAME})*)\\s*\\)\\s+)?FORMAT\\s+(JSONEachRow|JSONCompactEachRow)\\s*$`, 'i');

/**
 * The target of the only inserts the host takes: `INSERT INTO db.t FORMAT JSONEachRow`, or
 * `INSERT INTO db.t (c1, c2, …) FORMAT JSONCompactEachRow` (a list of plain identifiers,
 * each once); a HostError otherwise. Rebuilt from the parts, never passed on as text.
 */
export function insertTarget(sql: string): InsertTarget {
  const m = INSERT.exec(sql);
  const refuse = (): HostError =>
    new HostError(400, 62, 'SYNTAX_ERROR', 'The engine host takes inserts only as INSERT INTO <db>.<table> FORMAT JSONEachRow, or INSERT INTO <db>.<table> (<columns>) FORMAT JSONCompactEachRow, with the rows in the body');
  if (!m) throw refuse();
  const format = m[3]!.toLowerCase() === 'jsoneachrow' ? 'JSONEachRow' : 'JSONCompactEachRow';
  if (format === 'JSONEachRow') {
    if (m[2] !== undefined) throw refuse();
    return { table: m[1]!, format };
  }
  if (m[2] === undefined) throw refuse();
  const columns = m[2].split(',').map((c) => c.trim());
  if (new Set(columns).size !== columns.length) throw refuse();
  return { table: m[1]!, format, columns };
}

/**
 * The exception code of an error chdb threw: its `clickhouseCode` (chdb reads it from the
 * engine's own leading `Code: N.`), else that leading number, else 1002 (UNKNOWN_EXCEPTION:
 * not an engine error). The name is the engine's name of that number; nothing is read from
 * the rest of the message, which may quote the caller's text.
 */
export function errorCode(err: unknown): { code: number; name: string } {
  const own = (err as { clickhouseCode?: unknown } | null)?.clickhouseCode;
  const lead = /^Code: (\d+)\./.exec(err instanceof Error ? err.message : String(err));
  const code = typeof own === 'number' && Number.isInteger(own) ? own : lead ? Number(lead[1]) : 1002;
  return { code, name: errorCodeName(code) || 'UNKNOWN_EXCEPTION' };
}

/** Basic credentials of a request, or null. */
export function basicAuth(header: string | undefined): { user: string; password: string } | null {
  if (!header || !header.startsWith('Basic ')) return null;
  const raw = Buffer.from(header.slice(6), 'base64').toString('utf8');
  const i = raw.indexOf(':');
  return i < 0 ? null : { user: raw.slice(0, i), password: raw.slice(i + 1) };
}
