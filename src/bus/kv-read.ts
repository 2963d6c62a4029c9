/**
 * Batched reads of one JetStream KV bucket. `kv.get` is one `nc.request` per key, and each
 * request costs a timer, a promise and an Error with a captured stack: the billing evaluator
 * reads hundreds of keys per batch (configuration documents, customer states, cap periods),
 * and those gets were its largest CPU cost. Here the gets of one call are JetStream direct
 * gets (`$JS.API.DIRECT.GET.<stream>.$KV.<bucket>.<key>`, empty body: the key's last message,
 * as `kv.get` asks it) published at once under the connection's one shared reply
 * subscription (replies.ts), with one timer for the call; answers are matched by their reply
 * subject. nats-server 2.9 has no multi-key batch get, so it is still one message per key,
 * without the per-request objects.
 *
 * Answers: a present key → an entry (KvEntry, so callers keep their code; `revision` is the
 * message's stream sequence, what a compare-and-set update names); no message (status 404),
 * or a delete or purge marker (`KV-Operation: DEL | PURGE`, or a server marker) → null; any
 * other status, or no answer within the timeout → the call rejects. A bucket whose stream is
 * missing gets no answer at all (nats-server 2.9 takes every `$JS.API.>` request and says
 * nothing about an unknown stream's direct get): the call rejects after the timeout, as
 * `kv.get` did. A bucket without `allow_direct` (buckets made by old clients) is read with
 * `kv.get` per key, correct and slower.
 */
import type { Msg, MsgHdrs, NatsConnection } from '@nats-io/transport-node';
import { Bucket, type KV, type KvEntry } from '@nats-io/kv';
import { replies, type Replies } from './replies.js';

/** Time to wait for all the answers of one call when neither the caller nor the JetStream client names one. */
export const KV_READ_TIMEOUT_MS = 10_000;

/** A KV key as nats.js accepts it (no wildcards, no empty tokens): a key that is not cannot be read by subject. */
const VALID_KEY = /^[-/=.\w]+$/;

const dec = new TextDecoder();
const EMPTY = new Uint8Array(0);

/** A read failed: the bucket's stream is missing or not answering direct gets, a status, or no answer in time. */
export class KvReadError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KvReadError';
  }
}

/** The last PUT of a key, as a direct get returns it. */
class DirectEntry implements KvEntry {
  readonly operation = 'PUT' as const;
  readonly delta = 0;
  constructor(
    readonly bucket: string,
    readonly key: string,
    readonly value: Uint8Array,
    readonly revision: number,
    private readonly timestamp: string,
  ) {}
  get rawKey(): string {
    return this.key;
  }
  get created(): Date {
    return new Date(Date.parse(this.timestamp));
  }
  get length(): number {
    return this.value.length;
  }
  json<T>(): T {
    return JSON.parse(dec.decode(this.value)) as T;
  }
  string(): string {
    return dec.decode(this.value);
  }
}

export interface KvReader {
  /** The current entry of each key, in order; null for a key with no value (never written, deleted, purged). */
  getMany(keys: readonly string[]): Promise<(KvEntry | null)[]>;
  get(key: string): Promise<KvEntry | null>;
}

/**
 * The reader of `kv`: direct gets over `kv`'s connection when the bucket allows them (a
 * bucket opened by nats.js 3's Kvm on nats-server ≥ 2.9 does), otherwise `kv.get` per key.
 */
export function kvReader(kv: KV, timeoutMs?: number): KvReader {
  // The client's connection (JetStreamClient's implementation exposes it as `nc`); the
  // JetStream client's timeout by default (PUBLISH_TIMEOUT_MS in the service), as kv.get had.
  const s = kvStream(kv, timeoutMs);
  if (s && kv instanceof Bucket) return new DirectKvReader(s.nc, kv.bucket, s.stream, s.apiPrefix, s.timeoutMs);
  return new PerKeyReader(kv);
}

/** The connection, stream and API prefix of a bucket read by direct gets (what `kvReader` uses), or null. */
export function kvStream(kv: KV, timeoutMs?: number): { nc: NatsConnection; stream: string; apiPrefix: string; timeoutMs: number } | null {
  if (!(kv instanceof Bucket) || !kv.direct) return null;
  const nc = (kv.js as unknown as { nc?: NatsConnection }).nc;
  const opts = kv.js.getOptions();
  return nc ? { nc, stream: kv.stream, apiPrefix: opts.apiPrefix ?? '$JS.API', timeoutMs: timeoutMs ?? opts.timeout ?? KV_READ_TIMEOUT_MS } : null;
}

/** Direct gets of many keys of one bucket, one publish each, one shared reply subscription and one timer per call. */
export class DirectKvReader implements KvReader {
  private readonly replies: Replies;
  private readonly getPrefix: string;
  private readonly subjectPrefix: string;

  /**
   * @param bucket the bucket's name (its keys' subjects are `$KV.<bucket>.<key>`)
   * @param stream the bucket's stream (`KV_<bucket>`)
   */
  constructor(
    private readonly nc: NatsConnection,
    private readonly bucket: string,
    stream: string,
    apiPrefix: string,
    private readonly timeoutMs = KV_READ_TIMEOUT_MS,
  ) {
    this.replies = replies(nc);
    this.subjectPrefix = `$KV.${bucket}.`;
    this.getPrefix = `${apiPrefix}.DIRECT.GET.${stream}.`;
  }

  async get(key: string): Promise<KvEntry | null> {
    return (await this.getMany([key]))[0]!;
  }

  async getMany(keys: readonly string[]): Promise<(KvEntry | null)[]> {
    for (const k of keys) if (!VALID_KEY.test(k) || k.startsWith('.') || k.endsWith('.')) throw new KvReadError(`invalid KV key ${JSON.stringify(k)}`);
    const answers = await this.replies.requestAll(
      this.nc,
      keys.map((k) => ({ subject: this.getPrefix + this.subjectPrefix + k, data: EMPTY })),
      this.timeoutMs,
    );
    return answers.map((a, i) => this.entry(keys[i]!, a));
  }

  private entry(key: string, a: Msg | Error): KvEntry | null {
    if (a instanceof Error) throw new KvReadError(`KV ${this.bucket} get ${key}: ${a.message}; is the bucket's stream there?`);
    const h = a.headers;
    if (!h) throw new KvReadError(`KV ${this.bucket} get ${key}: an answer without headers`);
    if (h.code === 404) return null;
    if (h.code !== 0 || h.hasError) {
      throw new KvReadError(`KV ${this.bucket} get ${key}: status ${h.code} ${h.description}`);
    }
    if (deleted(h)) return null;
    // A direct get by last subject names that subject; anything else is not this key's message.
    if (h.last('Nats-Subject') !== this.subjectPrefix + key) throw new KvReadError(`KV ${this.bucket} get ${key}: answered for ${h.last('Nats-Subject')}`);
    const seq = Number(h.last('Nats-Sequence'));
    if (!Number.isSafeInteger(seq) || seq <= 0) throw new KvReadError(`KV ${this.bucket} get ${key}: no sequence in the answer`);
    return new DirectEntry(this.bucket, key, a.data, seq, h.last('Nats-Time-Stamp'));
  }
}

/** A delete or purge marker (the KV client's), or a marker the server left (2.11+: Nats-Marker-Reason). */
function deleted(h: MsgHdrs): boolean {
  const op = h.last('KV-Operation');
  return op === 'DEL' || op === 'PURGE' || h.has('Nats-Marker-Reason');
}

/** `kv.get` per key, for a bucket that does not allow direct gets. */
class PerKeyReader implements KvReader {
  constructor(private readonly kv: KV) {}

  async get(key: string): Promise<KvEntry | null> {
    const e = await this.kv.get(key);
    return e && e.operation === 'PUT' ? e : null;
  }

  getMany(keys: readonly string[]): Promise<(KvEntry | null)[]> {
    return Promise.all(keys.map((k) => this.get(k)));
  }
}
