/**
 * The analytics helper: `POST /api/v2/analytics/query` with exact values. The API sends
 * 64-bit and wider integers and every decimal as JSON strings; here they become BigInt and
 * exact decimal strings (or the caller's decimal objects), chosen by `columns[].type`.
 */
import { SignalApiError } from './errors.js';
import { convertValue, needsConversion, parseType, type DecimalFactory } from './types.js';

export interface AnalyticsColumn {
  name: string;
  /** The ClickHouse type name, e.g. `UInt64`, `Nullable(Decimal(76, 24))`. */
  type: string;
}

export interface AnalyticsMeta {
  truncated: boolean;
  rowCount: number;
  elapsedMs: number;
}

export interface AnalyticsResult {
  columns: AnalyticsColumn[];
  /** Rows in the order of `columns`; wide integers as BigInt, decimals exact. */
  rows: unknown[][];
  meta: AnalyticsMeta;
}

export interface AnalyticsQueryOptions<D = string> {
  /** Turns each decimal's exact text into a value; default: the string itself. */
  decimal?: DecimalFactory<D>;
}

/** Converts a raw API answer (`{columns, rows, meta}`) into exact values. */
export function convertResult<D>(raw: { columns: AnalyticsColumn[]; rows: unknown[][]; meta: AnalyticsMeta }, decimal?: DecimalFactory<D>): AnalyticsResult {
  const dec = (decimal ?? ((s: string) => s)) as DecimalFactory<unknown>;
  const types = raw.columns.map((c) => parseType(c.type));
  const convert = types.map(needsConversion);
  if (!convert.some(Boolean)) return { columns: raw.columns, rows: raw.rows, meta: raw.meta };
  const rows = raw.rows.map((row) => row.map((v, i) => (convert[i] ? convertValue(v, types[i]!, dec) : v)));
  return { columns: raw.columns, rows, meta: raw.meta };
}

export function isAnalyticsBody(b: unknown): b is { columns: AnalyticsColumn[]; rows: unknown[][]; meta: AnalyticsMeta } {
  const o = b as Record<string, unknown> | null;
  return !!o && typeof o === 'object' && Array.isArray(o.columns) && Array.isArray(o.rows);
}

export { SignalApiError };
