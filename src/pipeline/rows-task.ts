/**
 * The task the pipeline hands its rows worker (workers/rows.ts) and the worker's answer: the
 * pipeline names the worker file by URL only, so these types are the whole contract between
 * them (the worker imports them; the pipeline never imports the worker).
 */
import type { BatchMeta } from '../bus/batch.js';

export interface RowsTask {
  body: Uint8Array;
  meta: BatchMeta;
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
