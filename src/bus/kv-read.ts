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
 * `kv.get` did. A bucket without `allow_direct` (made by another client, or changed by an operator) is read with
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
const enc = new TextEncoder();
const EMPTY = new Uint8Array(0);
/** JetStream's error code for "no message found". */
const NO_MESSAGE = 10037;

/** A read failed: the bucket's stream is missing or not answering direct gets, a status, or no answer in time. */
export class KvReadError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KvReadError';
  }
}

/** The last PUT of a key (or, asked for, its delete or purge marker), as a get returns it. */
class DirectEntry implements KvEntry {
  readonly delta = 0;
  constructor(
    readonly bucket: string,
    readonly key: string,
    readonly value: Uint8Array,
    readonly revision: number,
    private readonly timestamp: string,
    readonly operation: 'PUT' | 'DEL' = 'PUT',
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
  /**
   * The current entry of each key, in order; null for a key with no value (never written,
   * deleted, purged) — with `markers`, a deleted or purged key is its marker instead
   * (operation `DEL`, length 0, `revision` the marker's: what a compare-and-set over it names).
   */
  getMany(keys: readonly string[], opts?: { markers?: boolean }): Promise<(KvEntry | null)[]>;
  get(key: string): Promise<KvEntry | null>;
}

/**
 * The reader of `kv`: direct gets over `kv`'s connection when the bucket allows them (a
 * bucket opened by nats.js 3's Kvm on nats-server ≥ 2.9 does), otherwise `kv.get` per key.
 * With `leader`, gets answered by the stream's leader only (LeaderKvReader): what a reader
 * that must see every acknowledged write needs when the bucket has replicas.
 */
export function kvReader(kv: KV, timeoutMs?: number, opts: { leader?: boolean } = {}): KvReader {
  // The client's connection (JetStreamClient's implementation exposes it as `nc`); the
  // JetStream client's timeout by default (PUBLISH_TIMEOUT_MS in the service), as kv.get had.
  const s = kvStream(kv, timeoutMs, opts.leader);
  if (s && kv instanceof Bucket) return opts.leader ? new LeaderKvReader(s.nc, kv.bucket, s.stream, s.apiPrefix, s.timeoutMs) : new DirectKvReader(s.nc, kv.bucket, s.stream, s.apiPrefix, s.timeoutMs);
  return new PerKeyReader(kv);
}

/** The connection, stream and API prefix of a bucket read by direct gets (what `kvReader` uses), or null. */
export function kvStream(kv: KV, timeoutMs?: number, anyBucket = false): { nc: NatsConnection; stream: string; apiPrefix: string; timeoutMs: number } | null {
  if (!(kv instanceof Bucket) || (!kv.direct && !anyBucket)) return null;
  const nc = (kv.js as unknown as { nc?: NatsConnection }).nc;
  const opts = kv.js.getOptions();
  return nc ? { nc, stream: kv.stream, apiPrefix: opts.apiPrefix ?? '$JS.API', timeoutMs: timeoutMs ?? opts.timeout ?? KV_READ_TIMEOUT_MS } : null;
}

/**
 * Gets of many keys of one bucket, one request each under the connection's shared reply
 * subscription and one timer per call; how a key is asked and how its answer reads is the
 * subclass's.
 */
abstract class BatchedKvReader implements KvReader {
  private readonly replies: Replies;
  protected readonly subjectPrefix: string;

  constructor(
    private readonly nc: NatsConnection,
    protected readonly bucket: string,
    private readonly timeoutMs: number,
  ) {
    this.replies = replies(nc);
    this.subjectPrefix = `$KV.${bucket}.`;
  }

  protected abstract request(key: string): { subject: string; data: Uint8Array };
  protected abstract entry(key: string, a: Msg | Error, markers: boolean): KvEntry | null;

  async get(key: string): Promise<KvEntry | null> {
    return (await this.getMany([key]))[0]!;
  }

  async getMany(keys: readonly string[], opts: { markers?: boolean } = {}): Promise<(KvEntry | null)[]> {
    for (const k of keys) if (!VALID_KEY.test(k) || k.startsWith('.') || k.endsWith('.')) throw new KvReadError(`invalid KV key ${JSON.stringify(k)}`);
    const answers = await this.replies.requestAll(this.nc, keys.map((k) => this.request(k)), this.timeoutMs);
    return answers.map((a, i) => this.entry(keys[i]!, a, opts.markers === true));
  }
}

/** Direct gets of many keys of one bucket, one publish each, one shared reply subscription and one timer per call. */
export class DirectKvReader extends BatchedKvReader {
  private readonly getPrefix: string;

  /**
   * @param bucket the bucket's name (its keys' subjects are `$KV.<bucket>.<key>`)
   * @param stream the bucket's stream (`KV_<bucket>`)
   */
  constructor(nc: NatsConnection, bucket: string, stream: string, apiPrefix: string, timeoutMs = KV_READ_TIMEOUT_MS) {
    super(nc, bucket, timeoutMs);
    this.getPrefix = `${apiPrefix}.DIRECT.GET.${stream}.`;
  }

  protected request(key: string): { subject: string; data: Uint8Array } {
    return { subject: this.getPrefix + this.subjectPrefix + key, data: EMPTY };
  }

  protected entry(key: string, a: Msg | Error, markers: boolean): KvEntry | null {
    if (a instanceof Error) throw new KvReadError(`KV ${this.bucket} get ${key}: ${a.message}; is the bucket's stream there?`);
    const h = a.headers;
    if (!h) throw new KvReadError(`KV ${this.bucket} get ${key}: an answer without headers`);
    if (h.code === 404) return null;
    if (h.code !== 0 || h.hasError) {
      throw new KvReadError(`KV ${this.bucket} get ${key}: status ${h.code} ${h.description}`);
    }
    const marker = deleted(h);
    if (marker && !markers) return null;
    // A direct get by last subject names that subject; anything else is not this key's message.
    if (h.last('Nats-Subject') !== this.subjectPrefix + key) throw new KvReadError(`KV ${this.bucket} get ${key}: answered for ${h.last('Nats-Subject')}`);
    const seq = Number(h.last('Nats-Sequence'));
    if (!Number.isSafeInteger(seq) || seq <= 0) throw new KvReadError(`KV ${this.bucket} get ${key}: no sequence in the answer`);
    return marker ? new DirectEntry(this.bucket, key, EMPTY, seq, h.last('Nats-Time-Stamp'), 'DEL') : new DirectEntry(this.bucket, key, a.data, seq, h.last('Nats-Time-Stamp'));
  }
}

/**
 * Gets of many keys answered by the bucket stream's leader: `$JS.API.STREAM.MSG.GET.<stream>`
 * with `last_by_subj`, one request per key under the shared reply subscription, one timer
 * per call. A direct get may be answered by any replica, and a follower can be behind the
 * writes the leader has acknowledged (a replicated stream does not promise that a direct get
 * sees them); the billing evaluator's state must (consumer.ts: a key read behind its last
 * write would start a group from a state it has already left). The answer is JSON with the
 * message's headers and data in base64: dearer than a direct get's, so only where needed.
 */
export class LeaderKvReader extends BatchedKvReader {
  private readonly getSubject: string;

  constructor(nc: NatsConnection, bucket: string, stream: string, apiPrefix: string, timeoutMs = KV_READ_TIMEOUT_MS) {
    super(nc, bucket, timeoutMs);
    this.getSubject = `${apiPrefix}.STREAM.MSG.GET.${stream}`;
  }

  protected request(key: string): { subject: string; data: Uint8Array } {
    return { subject: this.getSubject, data: enc.encode(JSON.stringify({ last_by_subj: this.subjectPrefix + key })) };
  }

  protected entry(key: string, a: Msg | Error, markers: boolean): KvEntry | null {
    if (a instanceof Error) throw new KvReadError(`KV ${this.bucket} get ${key} (leader): ${a.message}; is the bucket's stream there?`);
    if (a.headers?.hasError) throw new KvReadError(`KV ${this.bucket} get ${key} (leader): status ${a.headers.code} ${a.headers.description}`);
    const r = JSON.parse(dec.decode(a.data)) as { message?: { subject?: string; seq?: number; hdrs?: string; data?: string; time?: string }; error?: { code?: number; err_code?: number; description?: string } };
    if (r.error) {
      if (r.error.err_code === NO_MESSAGE) return null; // (a missing stream is a 404 too: 10059, an error)
      throw new KvReadError(`KV ${this.bucket} get ${key} (leader): ${r.error.description ?? JSON.stringify(r.error)}`);
    }
    const m = r.message;
    if (!m || m.subject !== this.subjectPrefix + key) throw new KvReadError(`KV ${this.bucket} get ${key} (leader): answered for ${m?.subject}`);
    if (!Number.isSafeInteger(m.seq) || m.seq! <= 0) throw new KvReadError(`KV ${this.bucket} get ${key} (leader): no sequence in the answer`);
    if (m.hdrs && deletedHeaderBlock(Buffer.from(m.hdrs, 'base64').toString('utf8'))) return markers ? new DirectEntry(this.bucket, key, EMPTY, m.seq!, m.time ?? '', 'DEL') : null;
    return new DirectEntry(this.bucket, key, m.data ? new Uint8Array(Buffer.from(m.data, 'base64')) : EMPTY, m.seq!, m.time ?? '');
  }
}

/** Whether a NATS header block (`NATS/1.0\r\nName: value\r\n…`) marks a delete or purge, as `deleted` reads parsed headers. */
function deletedHeaderBlock(block: string): boolean {
  for (const line of block.split('\r\n').slice(1)) {
    const at = line.indexOf(':');
    if (at < 0) continue;
    const name = line.slice(0, at).trim().toLowerCase();
    const value = line.slice(at + 1).trim();
    if (name === 'kv-operation' && (value === 'DEL' || value === 'PURGE')) return true;
    if (name === 'nats-marker-reason') return true;
  }
  return false;
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

  getMany(keys: readonly string[], opts: { markers?: boolean } = {}): Promise<(KvEntry | null)[]> {
    return Promise.all(keys.map(async (k) => (opts.markers ? await this.kv.get(k) : await this.get(k))));
  }
}
