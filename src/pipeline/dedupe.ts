/**
 * Idempotency keys, deduplicated per organization and mode in a JetStream KV bucket on
 * disk (survives a restart of any process, Redis included, and of NATS itself).
 *
 * Key:   <orgId>.<mode>.<base64url sha256(idempotencyKey)>   (the organization is part of every key)
 * Value: the id of the signal that claimed it.
 *
 * The same bucket holds one mark per batch the pipeline has taken up (`takeBatch`):
 * Key:   <orgId>.<mode>.batch_<batchId>   (never a 43-character hash, so never a claim's key)
 * Value: the batch id.
 * TTL:   the dedupe window (DEDUPE_WINDOW_DAYS, at least 7 days from the first claim).
 *
 * Claiming before the row is written is safe because a claim names its signal: when the
 * message is redelivered after a crash, its signals find their own claims and are written
 * then (the lost-write trap of OpenMeter #5118 cannot happen: a claim is only ever spent
 * by the signal that owns it, and that signal's message is not acked until it is written).
 */
import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import type { KV } from '@nats-io/kv';

const enc = new TextEncoder();
const dec = new TextDecoder();
/** JetStream's error code for a failed Nats-Expected-Last-Subject-Sequence check. */
const WRONG_LAST_SEQUENCE = 10071;

/**
 * A claim is a publish to the bucket's subject `$KV.<bucket>.<key>` that JetStream accepts
 * only when the subject has no message yet (Nats-Expected-Last-Subject-Sequence: 0) — the
 * same compare-and-set as KV.create, in one request. Claims are never deleted (the bucket's
 * TTL removes them whole), so a refused claim always means another signal holds the key.
 */
export class IdempotencyClaims {
  private readonly subjectPrefix: string;

  constructor(
    private readonly kv: KV,
    private readonly nc: NatsConnection,
    bucket: string,
    private readonly timeoutMs = 10_000,
  ) {
    this.subjectPrefix = `$KV.${bucket}.`;
  }

  /**
   * true: this signal now holds the key; false: the subject's last message is not `lastSeq`
   * (0: none at all; or the sequence of a delete marker left by an operator's KV delete).
   */
  private async tryCreate(key: string, signalId: string, lastSeq: number): Promise<boolean> {
    const h = natsHeaders();
    h.set('Nats-Expected-Last-Subject-Sequence', String(lastSeq));
    const r = await this.nc.request(this.subjectPrefix + key, enc.encode(signalId), { headers: h, timeout: this.timeoutMs });
    const ack = JSON.parse(dec.decode(r.data)) as { seq?: number; error?: { err_code?: number; description?: string } };
    if (!ack.error) return true;
    if (ack.error.err_code === WRONG_LAST_SEQUENCE) return false;
    throw new Error(`idempotency claim refused: ${ack.error.description ?? JSON.stringify(ack.error)}`);
  }

  /**
   * For each signal, whether it should be written: keyless signals always; a keyed signal
   * when it owns the key. Within one batch the first occurrence of a key wins.
   */
  async claim(claimKeys: (string | null)[], ids: string[]): Promise<boolean[]> {
    return (await this.claimAll(claimKeys, ids)).keep;
  }

  /**
   * As `claim`, and `reclaimed`: whether some key was already held by this very signal — an
   * earlier delivery of the same batch claimed it, so rows of it may already be stored even if
   * JetStream presents this delivery as a first one (after a consumer leader failover in a
   * cluster, a delivery whose state was not replicated is handed out again as delivery 1).
   */
  async claimAll(claimKeys: (string | null)[], ids: string[]): Promise<{ keep: boolean[]; reclaimed: boolean }> {
    const keep = new Array<boolean>(claimKeys.length).fill(true);
    let reclaimed = false;
    const seen = new Set<string>();
    const pending: Promise<void>[] = [];
    for (let i = 0; i < claimKeys.length; i++) {
      const key = claimKeys[i];
      if (key == null) continue;
      if (seen.has(key)) {
        keep[i] = false;
        continue;
      }
      seen.add(key);
      pending.push(
        this.claimOne(key, ids[i]!).then((r) => {
          keep[i] = r !== 'other';
          if (r === 'reclaimed') reclaimed = true;
        }),
      );
    }
    await Promise.all(pending);
    return { keep, reclaimed };
  }

  /**
   * Marks a batch as taken up, before any of its rows can be inserted: true the first time,
   * false when some delivery of it got this far before (its rows may be stored, in part or
   * whole). The pipeline cannot rely on JetStream's redelivery flag for this: after a kill -9
   * of the process holding it, a message it had received (and possibly inserted) came back
   * to the next process with deliveryCount 1 (nats-server 2.9.10, test/api/crash.test.ts), so
   * "not redelivered" does not prove that no earlier delivery stored its rows. A mark deleted
   * by an operator counts as taken (the existing-row check then runs; it is never wrong).
   */
  takeBatch(orgId: string, mode: string, batchId: string): Promise<boolean> {
    return this.tryCreate(`${orgId}.${mode}.batch_${batchId}`, batchId, 0);
  }

  /** `claimed`: this signal took the key now; `reclaimed`: it held it already; `other`: another signal holds it. */
  private async claimOne(key: string, signalId: string): Promise<'claimed' | 'reclaimed' | 'other'> {
    let lastSeq = 0;
    for (let attempt = 0; attempt < 3; attempt++) {
      if (await this.tryCreate(key, signalId, lastSeq)) return 'claimed';
      const e = await this.kv.get(key);
      if (e && e.operation === 'PUT') return e.string() === signalId ? 'reclaimed' : 'other';
      // Deleted by an operator (a delete marker) or expired in between: claim again.
      lastSeq = e ? e.revision : 0;
    }
    throw new Error(`idempotency claim for ${key} did not settle`);
  }
}
