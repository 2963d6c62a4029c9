/**
 * Envelopes of the batch hops of the bus.
 *
 * Signals (ingress → pipeline): one accepted batch per message. Body: the request's own JSON
 * `{"signals": [...]}` bytes, unchanged (already validated; re-encoding 133 KB per batch on
 * the ingress hot path would only cost time). Headers carry what the ingress learned that is
 * not in the body. Subject: `topology.signals.subject(orgId)`; `Nats-Msg-Id` is the batch id.
 *
 * Billable (pipeline → billing evaluator): per accepted batch, one `BillableLine` per signal
 * it contributes, newline-separated, with the same headers.
 */
import { randomToken } from '../shared/random.js';
import type { Mode } from '../shared/mode.js';

export const H_ORG = 'Billing-Org';
export const H_MODE = 'Billing-Mode';
export const H_RECEIVED_AT = 'Billing-Received-At';
export const H_BATCH = 'Billing-Batch';

export interface BatchMeta {
  orgId: string;
  mode: Mode;
  receivedAtMs: number;
  batchId: string;
}

/**
 * Batch ids sort by time: `bat_` + 9 base-36 digits of milliseconds + 12 random characters.
 * Signal i of a batch has the id `sig_<same 21 characters>_<i>`.
 */
export function newBatchId(nowMs: number): string {
  return `bat_${nowMs.toString(36).padStart(9, '0')}${randomToken(12)}`;
}

export function signalIdPrefix(batchId: string): string {
  return `sig_${batchId.slice(4)}_`;
}

/** Exact texts of numbers by path, per signal of the batch (src/pipeline/exact-numbers.ts). */
export type ExactTexts = Record<string, string>;

/** A signal as the billable stream carries it (compact: it must fit NATS max_payload). */
export interface BillableLine {
  /** The customer's service id, resolved by the pipeline from `c` when it splits a batch by partition (src/billing/evaluator/partition.ts); absent: no such customer. */
  k?: string;
  i: string;
  e: string;
  /** The customer reference as sent, kind-prefixed: `i:<service id>` or `x:<externalId>` (src/pipeline/rows-task.ts). */
  c: string;
  u: string | null;
  t: number;
  d: Record<string, unknown>;
  /** Texts of numbers in `d` a double does not keep, by path, or false when withheld (src/pipeline/exact-numbers.ts); absent when none. */
  x?: ExactTexts | false;
}

/**
 * The indexes of a batch's refused signals (ascending, comma-separated: `3,17,42`), when it has
 * any: the pipeline builds no row, no billing line and no claim for them.
 */
export const H_SKIP = 'Billing-Skip';

/** The indexes a Billing-Skip header names (empty for none); throws for anything else. */
export function skipIndexes(value: string | undefined | null): number[] {
  if (!value) return [];
  const out = value.split(',').map((x) => {
    if (!/^\d{1,4}$/.test(x)) throw new Error(`${H_SKIP} ${JSON.stringify(value.slice(0, 80))} is not a list of signal indexes`);
    return Number(x);
  });
  for (let i = 1; i < out.length; i++) if (out[i]! <= out[i - 1]!) throw new Error(`${H_SKIP}: indexes must ascend`);
  return out;
}
