/**
 * piscina worker: turns one accepted batch (the JetStream message body) into ClickHouse
 * rows (JSONEachRow lines) and the idempotency claims the main thread must make.
 * Pure CPU work: no I/O, no chdb (chdb belongs to the main thread).
 */
import { hash } from 'node:crypto';
import { move, transferableSymbol, valueSymbol } from 'piscina';
import { H_SKIP, signalIdPrefix, type BatchMeta } from '../src/bus/batch.js';
import { parseRfc3339 } from '../src/shared/time.js';
import { exactNumbers } from '../src/pipeline/exact-numbers.js';
import { distinctRefs, REF_EXTERNAL_PREFIX, REF_ID_PREFIX, type PackedRows, type RowsResult, type RowsTask } from '../src/pipeline/rows-task.js';
import { packedFromBytes } from '../src/pipeline/rows-bytes.js';
export type { PackedRows, RowsResult, RowsTask };

/**
 * The pipeline's form of the batch's rows: written from the body's bytes where that gives the
 * very bytes of the lines below (src/pipeline/rows-bytes.ts), otherwise from its parsed signals.
 */
export function packed(task: RowsTask): PackedRows {
  const fast = packedFromBytes(task.body, task.meta, dedupeKey, task.skip);
  if (fast) return fast;
  const r = rows(task);
  const products = distinctRefs(r.products);
  return { rows: joinLines(r.lines), billable: joinLines(r.billable), ids: r.ids, claimKeys: r.claimKeys, ...distinctRefs(r.customers), products: products.refs, productOf: products.refOf };
}

/**
 * `packed` as the pipeline's worker pool runs it: its byte arrays (each in an ArrayBuffer of
 * its own) moved to the main thread instead of copied there.
 */
export function packedMoved(task: RowsTask): PackedRows {
  const p = packed(task);
  const moved = { [transferableSymbol]: [p.rows.buffer, p.billable.buffer, p.refOf.buffer, p.productOf.buffer], [valueSymbol]: p };
  return move(moved as never) as unknown as PackedRows;
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


interface Signal {
  eventName: string;
  customer: { customerId?: string; externalCustomerId?: string };
  attribution?: { productId?: string; externalProductId?: string } | null;
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

/** The claim of an idempotency key (its text, or that text's UTF-8 bytes). */
export function dedupeKey(meta: BatchMeta, idempotencyKey: string | Uint8Array): string {
  // One-shot hashing: no Hash object per key (a batch has up to 500 keys).
  return `${meta.orgId}.${meta.mode}.${hash('sha256', idempotencyKey, 'base64url')}`;
}

/** A reference as the pipeline carries it (rows-task.ts): its kind's prefix and its text. */
const refOf = (id: string | undefined, external: string | undefined): string => (id !== undefined ? REF_ID_PREFIX + id : REF_EXTERNAL_PREFIX + external!);

export default function rows({ body, meta, skip = [] }: RowsTask): RowsResult {
  const text = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
  const parsed = JSON.parse(text) as { signals: (Signal | null)[] };
  const signals = parsed.signals;
  const exact = exactNumbers(text);
  const prefix = signalIdPrefix(meta.batchId);
  const live = meta.mode === 'live';
  const orgJson = JSON.stringify(meta.orgId);
  const batchJson = JSON.stringify(meta.batchId);
  const kept = signals.length - skip.length;
  const lines = new Array<string>(kept);
  const ids = new Array<string>(kept);
  const claimKeys = new Array<string | null>(kept);
  const billable = new Array<string>(kept);
  const customers = new Array<string>(kept);
  const products = new Array<string>(kept);
  let n = 0;
  let next = 0;
  for (let i = 0; i < signals.length; i++) {
    // A refused signal (Billing-Skip) may be anything: it is not read.
    if (next < skip.length && skip[next] === i) {
      next++;
      continue;
    }
    const s = signals[i]!;
    const id = prefix + i;
    const ts = s.timestamp ? parseRfc3339(s.timestamp)! : meta.receivedAtMs;
    const key = s.idempotencyKey ?? null;
    ids[n] = id;
    const customer = refOf(s.customer.customerId, s.customer.externalCustomerId);
    customers[n] = customer;
    products[n] = s.attribution ? refOf(s.attribution.productId, s.attribution.externalProductId) : '';
    claimKeys[n] = key === null ? null : dedupeKey(meta, key);
    const event = JSON.stringify(s.eventName);
    const unit = s.unitId == null ? 'null' : JSON.stringify(s.unitId);
    // A number beyond the double's range is stored as the string of its text (exact-numbers.ts), not dropped.
    const data = s.data ? dataJson(exact?.data[i] ?? s.data) : '{}';
    lines[n] =
      `{"org_id":${orgJson},"livemode":${live},"signal_id":"${id}","batch_id":${batchJson},` +
      `"event_name":${event},` +
      `"unit_id":${unit},"idempotency_key":${key === null ? 'null' : JSON.stringify(key)},` +
      `"timestamp":${ts},"received_at":${meta.receivedAtMs},"data":${data}}`;
    const x = exact?.texts[i] ?? null;
    billable[n] = `{"i":"${id}","e":${event},"c":${JSON.stringify(customer)},"u":${unit},"t":${ts},"d":${data}${x === null ? '' : `,"x":${JSON.stringify(x)}`}}`;
    n++;
  }
  if (n !== kept) throw new Error(`batch ${meta.batchId}: ${H_SKIP} names indexes the batch does not have`);
  return { lines, ids, claimKeys, billable, customers, products };
}
