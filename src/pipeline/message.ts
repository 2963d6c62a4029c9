/**
 * The JetStream message that carries one accepted batch from the ingress to the pipeline.
 * Body: the request's own JSON `{"signals": [...]}` bytes, unchanged (already validated;
 * re-encoding 133 KB per batch on the ingress hot path would only cost time).
 * Headers carry what the ingress learned that is not in the body.
 * Subject: `<prefix>.signals.<orgId>`; `Nats-Msg-Id` is the batch id.
 */
import { randomToken } from '../orgs/keys.js';
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
