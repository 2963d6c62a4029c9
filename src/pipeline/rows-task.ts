/**
 * The task the pipeline hands its rows worker (workers/rows.ts) and the worker's answer: the
 * pipeline names the worker file by URL only, so these types are the whole contract between
 * them (the worker imports them; the pipeline never imports the worker).
 */
import type { BatchMeta } from '../bus/batch.js';

export interface RowsTask {
  body: Uint8Array;
  meta: BatchMeta;
  /** Indexes of the batch's refused signals (the Billing-Skip header, ascending): no row, no billable line, no claim. */
  skip?: number[];
}

/**
 * A reference (`customer`, `attribution`) as the pipeline carries it: its kind's prefix and
 * its text — `i:<service id>` or `x:<externalId>` — so that the two kinds never meet (a
 * service id names a customer or product only by its id, an externalId only by its externalId).
 */
export const REF_ID_PREFIX = 'i:';
export const REF_EXTERNAL_PREFIX = 'x:';

export interface RowsResult {
  /**
   * One JSONEachRow line per signal kept (refused ones have none; no trailing newline), in
   * batch order. The identity columns (customer_id, external_customer_id, product_id,
   * external_product_id) are not in it: the pipeline puts them first once the references are
   * resolved (src/pipeline/identities.ts).
   */
  lines: string[];
  ids: string[];
  /** Dedupe-store key per signal, or null for keyless signals (never deduplicated). */
  claimKeys: (string | null)[];
  /** What the billing evaluator needs of each signal, one JSON object per signal (BillableLine). */
  billable: string[];
  /** Each signal's customer reference (`i:<id>` or `x:<externalId>`, as sent). */
  customers: string[];
  /** Each signal's product reference (`attribution`: `i:<id>` or `x:<externalId>`), '' for none. */
  products: string[];
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
  /**
   * The batch's customer references, each once (a batch names each customer many times), and
   * per signal the index of its own in `refs`: the billing partitioner resolves the references
   * without reading them out of the billable lines.
   */
  refs: string[];
  refOf: Uint16Array;
  /** The same for the product references ('' for a signal without `attribution`). */
  products: string[];
  productOf: Uint16Array;
}

/** `refs` and `refOf` of PackedRows from each signal's customer reference. */
export function distinctRefs(customers: ArrayLike<string>): { refs: string[]; refOf: Uint16Array } {
  const index = new Map<string, number>();
  const refs: string[] = [];
  const refOf = new Uint16Array(customers.length);
  for (let i = 0; i < customers.length; i++) {
    const c = customers[i]!;
    let k = index.get(c);
    if (k === undefined) {
      index.set(c, (k = refs.length));
      refs.push(c);
    }
    refOf[i] = k;
  }
  return { refs, refOf };
}
