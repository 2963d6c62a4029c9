/**
 * Idempotency keys, deduplicated per organization and mode in a JetStream KV bucket on
 * disk (survives a restart of any process, Redis included, and of NATS itself).
 *
 * Key:   <orgId>.<mode>.<base64url sha256(idempotencyKey)>   (the organization is part of every key)
 * Value: the id of the signal that claimed it.
 * TTL:   the dedupe window (DEDUPE_WINDOW_DAYS, at least 7 days from the first claim).
 *
 * Claiming before the row is written is safe because a claim names its signal: when the
 * message is redelivered after a crash, its signals find their own claims and are written
 * then (the lost-write trap of OpenMeter #5118 cannot happen: a claim is only ever spent
 * by the signal that owns it, and that signal's message is not acked until it is written).
 */
import type { KV } from '@nats-io/kv';

const enc = new TextEncoder();

function isAlreadyExists(err: unknown): boolean {
  return err instanceof Error && /wrong last sequence|key exists|already exists/i.test(err.message);
}

export class IdempotencyClaims {
  constructor(private readonly kv: KV) {}

  /**
   * For each signal, whether it should be written: keyless signals always; a keyed signal
   * when it owns the key. Within one batch the first occurrence of a key wins.
   */
  async claim(claimKeys: (string | null)[], ids: string[]): Promise<boolean[]> {
    const keep = new Array<boolean>(claimKeys.length).fill(true);
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
      pending.push(this.claimOne(key, ids[i]!).then((owned) => void (keep[i] = owned)));
    }
    await Promise.all(pending);
    return keep;
  }

  private async claimOne(key: string, signalId: string): Promise<boolean> {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        await this.kv.create(key, enc.encode(signalId));
        return true;
      } catch (err) {
        if (!isAlreadyExists(err)) throw err;
      }
      const e = await this.kv.get(key);
      if (e && e.operation === 'PUT') return e.string() === signalId;
      // The claim expired or was removed between the two calls: claim again.
    }
    throw new Error(`idempotency claim for ${key} did not settle`);
  }
}
