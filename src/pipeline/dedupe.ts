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
import { headers as natsHeaders, type Msg, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import type { KV } from '@nats-io/kv';
import { replies, type Replies } from '../bus/replies.js';
import { ackOf, PublishError, WRONG_LAST_SEQUENCE } from '../bus/publish.js';

const enc = new TextEncoder();
/** The answer to a claim: true accepted, false refused (the subject's last sequence differs); throws on anything else. */
function claimAnswer(r: Msg | Error): boolean {
  const ack = ackOf(r, 'an idempotency claim');
  if (!(ack instanceof Error)) return true;
  if (ack instanceof PublishError && ack.errCode === WRONG_LAST_SEQUENCE) return false;
  throw new Error(`idempotency claim refused: ${ack.message}`);
}

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
    this.replies = replies(nc);
  }

  private readonly replies: Replies;

  /** The claim message for `key` (a publish to the bucket's subject, accepted only when the subject's last sequence is `lastSeq`). */
  private claimMsg(key: string, value: string, lastSeq: number, h0: MsgHdrs | null): { subject: string; data: Uint8Array; headers: MsgHdrs } {
    let headers = h0;
    if (!headers) {
      headers = natsHeaders();
      headers.set('Nats-Expected-Last-Subject-Sequence', String(lastSeq));
    }
    return { subject: this.subjectPrefix + key, data: enc.encode(value), headers };
  }

  /**
   * true: this signal now holds the key; false: the subject's last message is not `lastSeq`
   * (0: none at all; or the sequence of a delete marker left by an operator's KV delete).
   */
  private async tryCreate(key: string, value: string, lastSeq: number): Promise<boolean> {
    const [r] = await this.replies.requestAll(this.nc, [this.claimMsg(key, value, lastSeq, null)], this.timeoutMs);
    return claimAnswer(r!);
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
    return (await this.claimBatch(claimKeys, ids, null)).claims;
  }

  /**
   * `claimAll` and, when `batch` is given, `takeBatch` of it, with every first attempt published
   * at once (one timer, answers collected as they come). Only a refused claim (a repeat, rare)
   * takes the slower path of reading the key.
   */
  async claimBatch(
    claimKeys: (string | null)[],
    ids: string[],
    batch: { orgId: string; mode: string; batchId: string } | null,
  ): Promise<{ claims: { keep: boolean[]; reclaimed: boolean }; first: boolean }> {
    const keep = new Array<boolean>(claimKeys.length).fill(true);
    const seen = new Set<string>();
    const idx: number[] = [];
    const fresh = natsHeaders();
    fresh.set('Nats-Expected-Last-Subject-Sequence', '0');
    const msgs: { subject: string; data: Uint8Array; headers: MsgHdrs }[] = [];
    for (let i = 0; i < claimKeys.length; i++) {
      const key = claimKeys[i];
      if (key == null) continue;
      if (seen.has(key)) {
        keep[i] = false;
        continue;
      }
      seen.add(key);
      idx.push(i);
      msgs.push(this.claimMsg(key, ids[i]!, 0, fresh));
    }
    if (batch) msgs.push(this.claimMsg(batchKey(batch.orgId, batch.mode, batch.batchId), batch.batchId, 0, fresh));
    // Every answer is read (and any failure thrown) before a slow path starts.
    const accepted = (await this.replies.requestAll(this.nc, msgs, this.timeoutMs)).map(claimAnswer);
    let reclaimed = false;
    const slow: Promise<void>[] = [];
    for (let j = 0; j < idx.length; j++) {
      if (accepted[j]) continue;
      const i = idx[j]!;
      slow.push(
        this.settleRefused(claimKeys[i]!, ids[i]!).then((r) => {
          keep[i] = r !== 'other';
          if (r === 'reclaimed') reclaimed = true;
        }),
      );
    }
    const first = batch ? accepted[idx.length]! : true;
    await Promise.all(slow);
    return { claims: { keep, reclaimed }, first };
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
    return this.tryCreate(batchKey(orgId, mode, batchId), batchId, 0);
  }

  /** A first claim of `key` was refused: `reclaimed` when this signal holds it already, `other` when another does; claims again when the key was deleted or expired in between. */
  private async settleRefused(key: string, signalId: string): Promise<'claimed' | 'reclaimed' | 'other'> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const e = await this.kv.get(key);
      if (e && e.operation === 'PUT') return e.string() === signalId ? 'reclaimed' : 'other';
      // Deleted by an operator (a delete marker) or expired in between: claim again.
      if (await this.tryCreate(key, signalId, e ? e.revision : 0)) return 'claimed';
    }
    throw new Error(`idempotency claim for ${key} did not settle`);
  }
}

const batchKey = (orgId: string, mode: string, batchId: string): string => `${orgId}.${mode}.batch_${batchId}`;
