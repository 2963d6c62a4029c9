/**
 * Reads of a KV bucket kept in memory for as long as the bucket has not changed: before each
 * use the bucket's stream state is asked (`$JS.API.STREAM.INFO.<stream>`, one request), and
 * the entries kept are used only while that state — first and last sequence, message count —
 * is the one they were read under. Any write, delete or purge in the bucket changes it and
 * empties the cache; so an answer is never older than the state asked for, which was asked
 * after the call started: the same guarantee as reading every key at that moment.
 *
 * For a bucket read far more than it is written (the billing configuration: every evaluated
 * group reads its customers' documents; configuration changes are rare by comparison). When
 * writes are frequent it costs one request per use over reading every key.
 *
 * Calls that start in the same tick (the scopes of one evaluated group, read together) share
 * one state request; a later call asks again, so it never uses a state older than its start.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { KvEntry } from '@nats-io/kv';
import { replies } from './replies.js';
import type { KvReader } from './kv-read.js';

const dec = new TextDecoder();
const EMPTY = new Uint8Array(0);

/**
 * The stream state entries are valid under: `key` all of it, `last` its last sequence (states
 * only move forward); and `first`, its first sequence, and `created`, when the stream was made
 * (the claim log, pipeline/dedupe.ts, forgets what the window removed and finds a recreated log).
 */
export interface StreamState {
  key: string;
  last: number;
  first: number;
  created: string;
}

export class StreamStateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StreamStateError';
  }
}

/** The current state of a stream (one STREAM.INFO request through the connection's shared replies). */
export async function streamState(nc: NatsConnection, apiPrefix: string, stream: string, timeoutMs: number): Promise<StreamState> {
  const [a] = await replies(nc).requestAll(nc, [{ subject: `${apiPrefix}.STREAM.INFO.${stream}`, data: EMPTY }], timeoutMs);
  if (a instanceof Error) throw new StreamStateError(`stream ${stream} info: ${a.message}`);
  if (a!.headers?.hasError) throw new StreamStateError(`stream ${stream} info: status ${a!.headers.code} ${a!.headers.description}`);
  const r = JSON.parse(dec.decode(a!.data)) as { created?: string; state?: { messages?: number; first_seq?: number; last_seq?: number }; error?: { description?: string } };
  if (r.error || !r.state) throw new StreamStateError(`stream ${stream} info: ${r.error?.description ?? 'an answer without a state'}`);
  const { messages = 0, first_seq = 0, last_seq = 0 } = r.state;
  return { key: `${first_seq}.${last_seq}.${messages}`, last: last_seq, first: first_seq, created: r.created ?? '' };
}

/**
 * A reader answering as of one state of the bucket: `label` names that state (two views with
 * the same label answer every key alike), and `current()` says whether it is still the cache's
 * newest (answers read under a view no longer current are not kept).
 */
export interface FencedView extends KvReader {
  readonly label: string;
  current(): boolean;
}

export class FencedKvCache {
  private readonly entries = new Map<string, KvEntry | null>();
  private label = '';
  private last = -1;
  private pending: Promise<StreamState> | null = null;
  /** Uses answered from memory, and keys read. */
  hits = 0;
  misses = 0;

  /**
   * @param reader the bucket's reads (kv-read.ts)
   * @param state the bucket's stream state now (`streamState`)
   * @param max entries kept at most (the oldest go first)
   */
  constructor(
    private readonly reader: KvReader,
    private readonly state: () => Promise<StreamState>,
    private readonly max = 50_000,
  ) {}

  /** A reader answering as of now: the state asked (shared with calls of the same tick), the cache used under it. */
  async view(): Promise<FencedView> {
    if (!this.pending) {
      const p = this.state();
      this.pending = p;
      queueMicrotask(() => {
        if (this.pending === p) this.pending = null;
      });
    }
    const s = await this.pending;
    if (s.last > this.last || (s.last === this.last && s.key !== this.label)) {
      this.entries.clear();
      this.label = s.key;
      this.last = s.last;
    }
    // A state older than the cache's (answers crossing): read everything, keep nothing.
    const current = (): boolean => this.label === s.key;
    const getMany = async (keys: readonly string[]): Promise<(KvEntry | null)[]> => {
        const out: (KvEntry | null | undefined)[] = keys.map((k) => (current() ? this.entries.get(k) : undefined));
        const ask = keys.filter((_, i) => out[i] === undefined);
        this.hits += keys.length - ask.length;
        this.misses += ask.length;
        if (ask.length > 0) {
          const read = await this.reader.getMany(ask);
          // Read after the state was asked: at least as new as it. Kept only while it is still the cache's state.
          const keep = current();
          let j = 0;
          for (let i = 0; i < keys.length; i++) {
            if (out[i] !== undefined) continue;
            const e = read[j++] ?? null;
            out[i] = e;
            if (keep) this.remember(keys[i]!, e);
          }
        }
        return out as (KvEntry | null)[];
    };
    return { getMany, get: async (key) => (await getMany([key]))[0]!, label: s.key, current };
  }

  private remember(key: string, e: KvEntry | null): void {
    if (this.entries.size >= this.max && !this.entries.has(key)) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, e);
  }
}
