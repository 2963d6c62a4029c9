/**
 * The pipeline's side of the dedupe lookup (src/bus/dedupe-lookup.ts): every pipeline process
 * answers in one queue group, so one of them answers each request. It tells the ingress which
 * signals of a batch are repeats — of a key earlier in the same request, or of a key the claim
 * log already holds for a signal of another batch — without claiming anything: the claims stay
 * the pipeline's own (consumer.ts), which decide what is stored. The index of the organization
 * and mode first reads what was appended to the log since it last read it (dedupe.ts `lookup`),
 * so a key claimed before the request arrived is found whichever process claimed it.
 * The keys are hashed here, not in the ingress (sha256 of 500 keys is a quarter of a
 * millisecond, about half of what the ingress spends on a batch).
 */
import { hash } from 'node:crypto';
import type { Msg, Subscription } from '@nats-io/transport-node';
import type { Nats } from '../bus/connection.js';
import { H_BATCH, H_MODE, H_ORG, signalIdPrefix } from '../bus/batch.js';
import { answerBody, keyText, lookupKeys } from '../bus/dedupe-lookup.js';
import type { IdempotencyClaims } from './dedupe.js';
import { pipelineLog as log } from '../log.js';

const BATCH_ID = /^bat_[0-9a-z]{21}$/i;

export class DedupeLookups {
  private sub: Subscription | null = null;

  constructor(
    private readonly nats: Nats,
    private readonly claims: IdempotencyClaims,
  ) {}

  start(): Promise<void> {
    this.sub = this.nats.nc.subscribe(this.nats.topology.dedupeLookup, {
      queue: 'pipeline',
      callback: (err, m) => {
        if (!err) void this.answer(m);
      },
    });
    return Promise.resolve();
  }

  /** The repeats among a batch's keys (one line per signal: its key's JSON string or nothing), ascending. */
  async repeats(orgId: string, mode: string, batchId: string, body: Uint8Array): Promise<number[]> {
    const keys = lookupKeys(body);
    const prefix = signalIdPrefix(batchId);
    const seen = new Set<string>();
    const repeats: number[] = [];
    const at: number[] = [];
    const claims: string[] = [];
    const owners: string[] = [];
    keys.forEach((k, i) => {
      if (k === null) return;
      const t = keyText(k);
      if (seen.has(t)) {
        repeats.push(i);
        return;
      }
      seen.add(t);
      at.push(i);
      // The claim the pipeline makes for this key (workers/rows.ts dedupeKey: the sha256 of its UTF-8).
      claims.push(hash('sha256', k, 'base64url'));
      owners.push(prefix + i);
    });
    if (claims.length > 0) {
      const held = await this.claims.lookup(orgId, mode, claims, owners);
      // 'same': this very signal claimed it (the pipeline took the batch up already): not a repeat.
      at.forEach((i, j) => {
        if (held[j] === 'other') repeats.push(i);
      });
    }
    return repeats.sort((a, b) => a - b);
  }

  private async answer(m: Msg): Promise<void> {
    let reply: string;
    try {
      const orgId = m.headers?.get(H_ORG) ?? '';
      const mode = m.headers?.get(H_MODE) ?? '';
      const batchId = m.headers?.get(H_BATCH) ?? '';
      if (!orgId || (mode !== 'live' && mode !== 'test') || !BATCH_ID.test(batchId)) throw new Error('lookup lacks its organization, mode or batch');
      reply = answerBody(await this.repeats(orgId, mode, batchId, m.data));
    } catch (err) {
      log.warn('dedupe lookup not answered; the ingress counts repeats inside the request only', { err });
      reply = `!${err instanceof Error ? err.message : String(err)}`;
    }
    try {
      m.respond(reply);
    } catch {
      // The connection is closing: the ingress times out and counts repeats inside the request.
    }
  }

  async stop(): Promise<void> {
    const sub = this.sub;
    this.sub = null;
    if (sub) await sub.drain().catch(() => sub.unsubscribe());
  }
}
