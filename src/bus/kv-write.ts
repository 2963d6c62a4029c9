/**
 * Batched compare-and-set writes to one JetStream KV bucket, the counterpart of kv-read.ts.
 * `kv.update` / `kv.create` are one `nc.request` each (a timer, a promise and an Error with a
 * captured stack per call); the billing evaluator writes a key per customer and cap period it
 * changes. Here a write is a publish to the key's subject `$KV.<bucket>.<key>` with
 * `Nats-Expected-Last-Subject-Sequence: <revision>` — exactly the check `kv.update` makes
 * (revision 0: the key has no message yet, as `kv.create` asks for a key never written) —
 * published at once under the connection's one shared reply subscription (replies.ts), one
 * timer per call.
 *
 * Every write of a call is sent; the call resolves with each key's new revision when all were
 * stored, and rejects with KvWriteConflict naming the keys whose revision differed, or
 * KvWriteError for anything else (no answer in time, a refusal). Writes are independent: on a
 * rejection some of the others may have been stored (callers write keys whose values make a
 * repeated write harmless, consumer.ts).
 */
import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { Bucket, type KV } from '@nats-io/kv';
import { replies, type Replies } from './replies.js';
import { ackOf, PublishError, WRONG_LAST_SEQUENCE } from './publish.js';

export const KV_WRITE_TIMEOUT_MS = 10_000;

const enc = new TextEncoder();

export interface KvWrite {
  key: string;
  value: string | Uint8Array;
  /** The revision the key must be at (0: the key has never been written). */
  revision: number;
}

/** A write's revision check failed: another writer got there first. */
export class KvWriteConflict extends Error {
  constructor(readonly keys: string[]) {
    super(`KV compare-and-set failed for ${keys.length} key(s): ${keys.slice(0, 3).join(', ')}${keys.length > 3 ? ', …' : ''}`);
    this.name = 'KvWriteConflict';
  }
}

export class KvWriteError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KvWriteError';
  }
}

export interface KvWriter {
  /** The new revision of each key, in order. */
  writeMany(writes: readonly KvWrite[]): Promise<number[]>;
}

/** The writer of `kv` over its own connection, or one `kv.update`/`kv.create` per key when the connection is not reachable. */
export function kvWriter(kv: KV, timeoutMs?: number): KvWriter {
  if (kv instanceof Bucket) {
    const nc = (kv.js as unknown as { nc?: NatsConnection }).nc;
    const opts = kv.js.getOptions();
    if (nc) return new PublishKvWriter(nc, kv.bucket, timeoutMs ?? opts.timeout ?? KV_WRITE_TIMEOUT_MS);
  }
  return new PerKeyWriter(kv);
}

export class PublishKvWriter implements KvWriter {
  private readonly replies: Replies;
  private readonly subjectPrefix: string;

  constructor(
    private readonly nc: NatsConnection,
    private readonly bucket: string,
    private readonly timeoutMs = KV_WRITE_TIMEOUT_MS,
  ) {
    this.replies = replies(nc);
    this.subjectPrefix = `$KV.${bucket}.`;
  }

  async writeMany(writes: readonly KvWrite[]): Promise<number[]> {
    const answers = await this.replies.requestAll(
      this.nc,
      writes.map((w) => {
        const headers = natsHeaders();
        headers.set('Nats-Expected-Last-Subject-Sequence', String(w.revision));
        return { subject: this.subjectPrefix + w.key, data: typeof w.value === 'string' ? enc.encode(w.value) : w.value, headers };
      }),
      this.timeoutMs,
    );
    const conflicts: string[] = [];
    let failure: string | null = null;
    const out = answers.map((a, i) => {
      const key = writes[i]!.key;
      const ack = ackOf(a, this.subjectPrefix + key);
      if (!(ack instanceof Error)) return ack.seq;
      if (ack instanceof PublishError && ack.errCode === WRONG_LAST_SEQUENCE) conflicts.push(key);
      else failure ??= `KV ${this.bucket} write ${key}: ${ack.message}`;
      return 0;
    });
    if (failure !== null) throw new KvWriteError(failure);
    if (conflicts.length > 0) throw new KvWriteConflict(conflicts);
    return out;
  }
}

/** `kv.update` / `kv.create` per key. */
class PerKeyWriter implements KvWriter {
  constructor(private readonly kv: KV) {}

  async writeMany(writes: readonly KvWrite[]): Promise<number[]> {
    const conflicts: string[] = [];
    const out = await Promise.all(
      writes.map(async (w) => {
        try {
          return w.revision === 0 ? await this.kv.create(w.key, w.value) : await this.kv.update(w.key, w.value, w.revision);
        } catch (err) {
          if (/wrong last sequence|key exists/i.test((err as Error).message)) {
            conflicts.push(w.key);
            return 0;
          }
          throw err;
        }
      }),
    );
    if (conflicts.length > 0) throw new KvWriteConflict(conflicts);
    return out;
  }
}
