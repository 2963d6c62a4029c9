/**
 * piscina worker: turns one accepted batch (the JetStream message body) into ClickHouse
 * rows (JSONEachRow lines) and the idempotency claims the main thread must make.
 * Pure CPU work: no I/O, no chdb (chdb belongs to the main thread).
 */
import { createHash } from 'node:crypto';
import type { BatchMeta } from '../src/pipeline/message.js';
import { signalIdPrefix } from '../src/pipeline/message.js';
import { parseRfc3339 } from '../src/shared/time.js';
import { exactNumberTexts, type ExactTexts } from '../src/pipeline/exact-numbers.js';

export interface RowsTask {
  body: Uint8Array;
  meta: BatchMeta;
}

/**
 * The pipeline's form of RowsResult (`packed`): rows and billable lines as UTF-8 bytes, each
 * line ending in '\n', instead of one string per signal. The main thread then never holds
 * per-signal strings: a batch whose signals are all kept goes to the insert and to the billable
 * stream as these bytes (a structured clone of two byte arrays instead of 1,000 strings, and
 * no join and re-encoding of 10,000-row inserts there). JSON text never holds a raw newline,
 * so the '\n' bytes are exactly the line ends (src/pipeline/lines.ts).
 */
export interface PackedRows {
  rows: Uint8Array;
  billable: Uint8Array;
  ids: string[];
  claimKeys: (string | null)[];
}

export function packed(task: RowsTask): PackedRows {
  const r = rows(task);
  return { rows: joinLines(r.lines), billable: joinLines(r.billable), ids: r.ids, claimKeys: r.claimKeys };
}

/** The lines as UTF-8, each followed by '\n', written straight into one buffer (no joined string to flatten and encode). */
function joinLines(lines: string[]): Uint8Array {
  let cap = 0;
  for (const l of lines) cap += l.length;
  let buf = Buffer.allocUnsafeSlow(cap + lines.length + 1024);
  let off = 0;
  for (const l of lines) {
    // UTF-8 takes at most 3 bytes per UTF-16 unit.
    if (off + 3 * l.length + 1 > buf.length) {
      const bigger = Buffer.allocUnsafeSlow(Math.max(2 * buf.length, off + 3 * l.length + 1));
      buf.copy(bigger, 0, 0, off);
      buf = bigger;
    }
    off += buf.write(l, off);
    buf[off++] = 0x0a;
  }
  return buf.subarray(0, off);
}

export interface RowsResult {
  /** One JSONEachRow line per signal (no trailing newline), in batch order. */
  lines: string[];
  ids: string[];
  /** Dedupe-store key per signal, or null for keyless signals (never deduplicated). */
  claimKeys: (string | null)[];
  /** What the billing evaluator needs of each signal, one JSON object per signal (BillableLine). */
  billable: string[];
}

/** A signal as the billable stream carries it (compact: it must fit NATS max_payload). */
export interface BillableLine {
  i: string;
  e: string;
  c: string;
  u: string | null;
  t: number;
  d: Record<string, unknown>;
  /** Texts of numbers in `d` a double does not keep, by path, or false when withheld (src/pipeline/exact-numbers.ts); absent when none. */
  x?: ExactTexts | false;
}

interface Signal {
  eventName: string;
  customerId: string;
  unitId?: string | null;
  timestamp?: string | null;
  idempotencyKey?: string | null;
  data?: Record<string, unknown> | null;
}

/** 2^63: integers at or beyond this magnitude do not fit ClickHouse's Int64 (or, from 2^64, UInt64). */
const INT64_LIMIT = 9223372036854775808;

/**
 * JSON for the `data` column. JSON.stringify writes an integer-valued double such as -2^63 or
 * 2^64 as a plain integer literal ("-9223372036854776000"), which ClickHouse refuses outside
 * Int64/UInt64, and a batch the engine refuses would block the pipeline. Such numbers are
 * written in exponent form instead, which the engine reads as Float64 (the same value). Only
 * texts with a run of 19 digits take the slower path.
 */
export function dataJson(data: Record<string, unknown>): string {
  const fast = JSON.stringify(data);
  return /\d{19}/.test(fast) ? encode(data) : fast;
}

function encode(v: unknown): string {
  if (typeof v === 'number') return Number.isInteger(v) && Math.abs(v) >= INT64_LIMIT ? v.toExponential() : JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? 'null' : encode(x))).join(',')}]`;
  if (typeof v === 'object' && v !== null) {
    const parts: string[] = [];
    for (const [k, x] of Object.entries(v)) if (x !== undefined) parts.push(`${JSON.stringify(k)}:${encode(x)}`);
    return `{${parts.join(',')}}`;
  }
  return JSON.stringify(v);
}

export function dedupeKey(meta: BatchMeta, idempotencyKey: string): string {
  return `${meta.orgId}.${meta.mode}.${createHash('sha256').update(idempotencyKey).digest('base64url')}`;
}

export default function rows({ body, meta }: RowsTask): RowsResult {
  const text = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
  const parsed = JSON.parse(text) as { signals: Signal[] };
  const signals = parsed.signals;
  const exact = exactNumberTexts(text);
  const prefix = signalIdPrefix(meta.batchId);
  const live = meta.mode === 'live';
  const orgJson = JSON.stringify(meta.orgId);
  const batchJson = JSON.stringify(meta.batchId);
  const lines = new Array<string>(signals.length);
  const ids = new Array<string>(signals.length);
  const claimKeys = new Array<string | null>(signals.length);
  const billable = new Array<string>(signals.length);
  for (let i = 0; i < signals.length; i++) {
    const s = signals[i]!;
    const id = prefix + i;
    const ts = s.timestamp ? parseRfc3339(s.timestamp)! : meta.receivedAtMs;
    const key = s.idempotencyKey ?? null;
    ids[i] = id;
    claimKeys[i] = key === null ? null : dedupeKey(meta, key);
    const event = JSON.stringify(s.eventName);
    const customer = JSON.stringify(s.customerId);
    const unit = s.unitId == null ? 'null' : JSON.stringify(s.unitId);
    const data = s.data ? dataJson(s.data) : '{}';
    lines[i] =
      `{"org_id":${orgJson},"livemode":${live},"signal_id":"${id}","batch_id":${batchJson},` +
      `"event_name":${event},"customer_id":${customer},` +
      `"unit_id":${unit},"idempotency_key":${key === null ? 'null' : JSON.stringify(key)},` +
      `"timestamp":${ts},"received_at":${meta.receivedAtMs},"data":${data}}`;
    const x = exact?.[i] ?? null;
    billable[i] = `{"i":"${id}","e":${event},"c":${customer},"u":${unit},"t":${ts},"d":${data}${x === null ? '' : `,"x":${JSON.stringify(x)}`}}`;
  }
  return { lines, ids, claimKeys, billable };
}
