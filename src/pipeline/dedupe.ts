/**
 * Idempotency keys, deduplicated per organization and mode, in a claim log on disk: the
 * JetStream stream `<P>_CLAIMS` (file storage, max age DEDUPE_WINDOW_DAYS), one subject per
 * organization and mode, `<P>.claims.<orgId>.<mode>`. Survives a restart of any process,
 * Redis included, and of NATS itself.
 *
 * A message of the log is one round of claims: lines `<claim> <owner>\n`, where a claim is
 * the base64url sha256 of an idempotency key (owner: the id of the signal that claimed it) or
 * `batch_<batchId>`, the mark of a batch the pipeline has taken up (owner: the batch id).
 * Every message is appended with Nats-Expected-Last-Subject-Sequence = the last sequence of
 * its subject this process has read: JetStream accepts it only when no other claim of that
 * organization and mode was appended since, so two processes (or two instances) can never
 * both take one key. A refused append reads what was appended since, decides again and
 * retries. So each process keeps an index of its organizations' claims in memory (compact,
 * about 50 bytes a claim: claim-index.ts; read from
 * the log when an organization is first seen, kept current by its own appends and by what a
 * refusal makes it read) and pays one append per round, not one JetStream write per key: a
 * round takes every batch of the organization waiting meanwhile (group commit).
 *
 * Claiming before the row is written is safe because a claim names its signal: when the
 * message is redelivered after a crash, its signals find their own claims and are written
 * then (the lost-write trap of OpenMeter #5118 cannot happen: a claim is only ever spent by
 * the signal that owns it, and that signal's message is not acked until it is written).
 *
 * The window: a claim counts while its message is in the log — DEDUPE_WINDOW_DAYS from its
 * append, by the server's clock (the stream's max age) — and the index forgets it once the
 * stream's first sequence has passed it (asked at most every `refreshMs`; a generation of
 * claims at a time, claim-index.ts: at most 6 hours later, never earlier), so no process's
 * clock decides it. A subject found to hold less than the index knows (its messages removed,
 * the stream recreated) is read again from the start: the index always mirrors the log.
 */
import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { replies, type Replies } from '../bus/replies.js';
import { ackOf, PublishError, WRONG_LAST_SEQUENCE } from '../bus/publish.js';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { NS_PER_MS } from '../shared/time.js';
import { claimsInMemory } from '../metrics/index.js';
import { streamState, type StreamState } from '../bus/kv-fenced.js';
import { streamMessage } from '../bus/stream-get.js';
import { ClaimIndex, type Holder } from './claim-index.js';

const enc = new TextEncoder();
/** Refused appends in a row (each after reading what was appended meanwhile) before a round gives up. */
const MAX_ATTEMPTS = 50;
/** Room for one claim line in an append (a 43-character claim, a space, an owner of up to ~40, a newline), for sizing rounds. */
const CLAIM_BYTES = 96;
/** An organization used within this long is never dropped from memory (`evict`). */
const IN_USE_MS = 60_000;
/** Claims kept in memory at most, over all organizations: beyond it, the least recently used idle ones are dropped (read again from the log when next seen). */
export const INDEX_MAX_CLAIMS = 4_000_000;

/** A claim's part of a key (`<orgId>.<mode>.<claim>`): base64url, or `batch_<id>` (a billing rows message's id has dots). */
const CLAIM = /^[-\w.]{1,256}$/;
const SCOPE_PART = /^[-\w]{1,128}$/;
const OWNER = /^\S{1,256}$/;

/** Where the claim log lives and how it is read. */
export interface ClaimLog {
  nc: NatsConnection;
  /** The JetStream API prefix (`$JS.API` unless a domain is used). */
  apiPrefix: string;
  /** The log's stream (`<P>_CLAIMS`). */
  stream: string;
  /** The subject of an organization and mode (`<P>.claims.<orgId>.<mode>`). */
  subject(scope: string): string;
  /** How often the stream's first sequence is asked, to forget claims the window has removed (default 10 s). */
  refreshMs?: number;
  /** The server's max_payload: an append stays well under it (default 1 MiB). */
  maxPayload?: number;
  /** Claims kept in memory at most over all organizations (default INDEX_MAX_CLAIMS; see `evict`). */
  maxClaims?: number;
  /** An organization used within this long is never dropped from memory (default IN_USE_MS). */
  inUseMs?: number;
  /** The `kind` label of the claims-in-memory gauge (none: not reported). */
  kind?: string;
  timeoutMs?: number;
}

interface Request {
  /** The claims (keyed signals only) and the owner each would name. */
  claims: string[];
  owners: string[];
  /** The batch mark's claim part and owner, or null. */
  mark: { claim: string; owner: string } | null;
  resolve(r: { keep: boolean[]; reclaimed: boolean; first: boolean }): void;
  reject(err: unknown): void;
  /** A lookup (`lookup`): claims nothing, answered with who holds each claim once the index has read the whole log. */
  lookup?: (held: Holder[]) => void;
}

/** One organization and mode: its claims as this process knows them. */
interface Scope {
  name: string;
  subject: string;
  /** The claims of its subject of the log, with their owners (claim-index.ts). */
  index: ClaimIndex;
  /** When a round last used it (ms). */
  usedAt: number;
  /** The last sequence of the subject read or appended (0: none). */
  lastSeq: number;
  loaded: Promise<void> | null;
  /** Times its index was emptied (a lookup beside the rounds checks it did not happen while it read). */
  resets: number;
  queue: Request[];
  running: boolean;
}

export class IdempotencyClaims {
  private readonly replies: Replies;
  private readonly scopes = new Map<string, Scope>();
  private readonly timeoutMs: number;
  /** Claims held in memory over all scopes (kept with every change of an index). */
  private claimsHeld = 0;

  constructor(private readonly log: ClaimLog) {
    this.replies = replies(log.nc);
    this.timeoutMs = log.timeoutMs ?? 10_000;
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
   * `claimAll` and, when `batch` is given, `takeBatch` of it, in the same round of its
   * organization and mode. Keys (`<orgId>.<mode>.<claim>`, workers/rows.ts dedupeKey) of
   * several organizations or modes are claimed in each one's round.
   */
  async claimBatch(
    claimKeys: (string | null)[],
    ids: string[],
    batch: { orgId: string; mode: string; batchId: string } | null,
  ): Promise<{ claims: { keep: boolean[]; reclaimed: boolean }; first: boolean }> {
    const keep = new Array<boolean>(claimKeys.length).fill(true);
    const parts = new Map<string, { at: number[]; claims: string[]; owners: string[]; mark: Request['mark'] }>();
    const partOf = (scope: string) => {
      let p = parts.get(scope);
      if (!p) parts.set(scope, (p = { at: [], claims: [], owners: [], mark: null }));
      return p;
    };
    for (let i = 0; i < claimKeys.length; i++) {
      const key = claimKeys[i];
      if (key == null) continue;
      const [scope, claim] = splitKey(key);
      const p = partOf(scope);
      p.at.push(i);
      p.claims.push(claim);
      p.owners.push(owner(ids[i]));
    }
    if (batch) partOf(scopeOf(batch.orgId, batch.mode)).mark = { claim: `batch_${checkClaim(batch.batchId)}`, owner: owner(batch.batchId) };
    let reclaimed = false;
    let first = true;
    await Promise.all(
      [...parts].map(async ([scope, p]) => {
        const r = await this.request(scope, { claims: p.claims, owners: p.owners, mark: p.mark });
        p.at.forEach((i, j) => (keep[i] = r.keep[j]!));
        if (r.reclaimed) reclaimed = true;
        if (p.mark) first = r.first;
      }),
    );
    return { claims: { keep, reclaimed }, first };
  }

  /**
   * Marks a batch as taken up, before any of its rows can be inserted: true the first time,
   * false when some delivery of it got this far before (its rows may be stored, in part or
   * whole). The pipeline cannot rely on JetStream's redelivery flag for this: after a kill -9
   * of the process holding it, a message it had received (and possibly inserted) came back
   * to the next process with deliveryCount 1 (nats-server 2.9.10, test/api/crash.test.ts), so
   * "not redelivered" does not prove that no earlier delivery stored its rows.
   */
  async takeBatch(orgId: string, mode: string, batchId: string): Promise<boolean> {
    return (await this.claimBatch([], [], { orgId, mode, batchId })).first;
  }

  /**
   * Who holds each claim (`<claim>` parts of `<orgId>.<mode>.<claim>` keys) of an organization
   * and mode, with `owners` the signals that would claim them: 'same' (that signal), 'other'
   * or 'none', as of the claim log after this call started. Claims nothing. The ingress's
   * `duplicates` (src/pipeline/dedupe-lookup.ts).
   *
   * Once the scope's index is read, a lookup does not wait for the scope's rounds: it reads
   * the log's messages after the index's last sequence without applying them (a round may be
   * deciding against the index at that moment, and its append must stay a compare-and-set
   * against what it decided on), and answers from those and the index. When the index was
   * emptied meanwhile (the log found recreated or cut), it waits its turn among the rounds and
   * reads the log up to its end.
   */
  async lookup(orgId: string, mode: string, claims: string[], owners: string[]): Promise<Holder[]> {
    const name = scopeOf(orgId, mode);
    claims.forEach(checkClaim);
    owners.forEach(owner);
    const s = this.scope(name);
    if (s.loaded !== null) {
      const held = await this.lookupAside(s, claims, owners).catch(() => null);
      if (held) return held;
    }
    return new Promise((resolve, reject) => {
      s.queue.push({ claims, owners, mark: null, resolve: () => undefined, reject, lookup: resolve });
      if (!s.running) void this.drain(s);
    });
  }

  /** `lookup` beside the rounds; null when the index was emptied while it read. */
  private async lookupAside(s: Scope, claims: string[], owners: string[]): Promise<Holder[] | null> {
    s.usedAt = Date.now();
    await this.refreshStream(false);
    await this.loaded(s);
    const resets = s.resets;
    // Claims appended after what the index holds (a later line of a claim replaces an earlier one, as in the index).
    const since = new Map<string, string>();
    for (let seq = s.lastSeq; ; ) {
      const m = await this.get(this.log.stream, { seq: seq + 1, next_by_subj: s.subject });
      if (!m) break;
      for (const line of m.text.split('\n')) {
        const sp = line.indexOf(' ');
        if (sp > 0) since.set(line.slice(0, sp), line.slice(sp + 1));
      }
      seq = m.seq;
    }
    if (s.resets !== resets) return null;
    // Claims whose messages the window removed are not held (as a round finds them).
    this.expire(s);
    return claims.map((claim, j) => {
      const o = since.get(claim);
      if (o !== undefined) return o === owners[j] ? 'same' : 'other';
      return s.index.heldBy(claim, owners[j]!);
    });
  }

  /** Lookups of one scope: the log read up to its end, then each claim's holder. */
  private async lookupRound(s: Scope, items: Request[]): Promise<Holder[][]> {
    s.usedAt = Date.now();
    await this.refreshStream(false);
    const fresh = s.loaded === null;
    await this.loaded(s);
    this.expire(s);
    // A scope just read is current; otherwise what was appended since its last read.
    if (!fresh) await this.catchUp(s);
    return items.map((r) => r.claims.map((claim, j) => s.index.heldBy(claim, r.owners[j]!)));
  }

  /** Claims of one organization and mode, in its next round. */
  private request(name: string, r: Omit<Request, 'resolve' | 'reject'>): Promise<{ keep: boolean[]; reclaimed: boolean; first: boolean }> {
    return new Promise((resolve, reject) => {
      const s = this.scope(name);
      s.queue.push({ ...r, resolve, reject });
      if (!s.running) void this.drain(s);
    });
  }

  private scope(name: string): Scope {
    let s = this.scopes.get(name);
    if (s) {
      // Most recently used last (the order `evict` drops them in).
      this.scopes.delete(name);
      this.scopes.set(name, s);
      return s;
    }
    s = { name, subject: this.log.subject(name), index: new ClaimIndex(), usedAt: 0, lastSeq: 0, loaded: null, resets: 0, queue: [], running: false };
    this.scopes.set(name, s);
    return s;
  }

  /** Runs a scope's rounds until its queue is empty; a failed round fails its requests only. */
  private async drain(s: Scope): Promise<void> {
    s.running = true;
    try {
      while (s.queue.length > 0) {
        if (s.queue[0]!.lookup) {
          let upTo = 0;
          while (upTo < s.queue.length && s.queue[upTo]!.lookup) upTo++;
          const lookups = s.queue.splice(0, upTo);
          try {
            const out = await this.lookupRound(s, lookups);
            lookups.forEach((r, i) => r.lookup!(out[i]!));
          } catch (err) {
            for (const r of lookups) r.reject(err);
          }
          continue;
        }
        // A round's append stays under half of max_payload (≈ 80 bytes a claim); one request always goes.
        const most = Math.max(1, Math.floor((this.log.maxPayload ?? 1024 * 1024) / 2 / CLAIM_BYTES));
        let n = 0;
        let take = 0;
        while (take < s.queue.length && !s.queue[take]!.lookup && (take === 0 || n + s.queue[take]!.claims.length + 1 <= most)) n += s.queue[take++]!.claims.length + 1;
        const round = s.queue.splice(0, take);
        try {
          const out = await this.round(s, round);
          round.forEach((r, i) => r.resolve(out[i]!));
        } catch (err) {
          // An append without an answer may be stored: the next round's append is then refused
          // and reads it (its claims name these requests' signals: a retry finds them its own).
          for (const r of round) r.reject(err);
        }
      }
    } finally {
      s.running = false;
      this.evict();
      if (this.log.kind) claimsInMemory.set({ kind: this.log.kind }, this.claimsHeld);
    }
  }

  /** One round: decide every request against the log, append what is new (compare-and-set), again after reading what a refusal reveals. */
  private async round(s: Scope, round: Request[]): Promise<{ keep: boolean[]; reclaimed: boolean; first: boolean }[]> {
    s.usedAt = Date.now();
    await this.refreshStream(false);
    for (let attempt = 0; ; attempt++) {
      await this.loaded(s);
      this.expire(s);
      const fresh = new Map<string, string>();
      /** Who holds `claim`: this round's fresh claims first, then the log (the index). */
      const holder = (claim: string, owner: string): Holder => {
        const f = fresh.get(claim);
        if (f !== undefined) return f === owner ? 'same' : 'other';
        return s.index.heldBy(claim, owner);
      };
      const out = round.map((r) => {
        let reclaimed = false;
        const keep = r.claims.map((claim, j) => {
          const held = holder(claim, r.owners[j]!);
          if (held === 'none') {
            fresh.set(claim, r.owners[j]!);
            return true;
          }
          if (held === 'other') return false;
          reclaimed = true;
          return true;
        });
        let first = true;
        if (r.mark) {
          if (holder(r.mark.claim, r.mark.owner) === 'none') fresh.set(r.mark.claim, r.mark.owner);
          else first = false;
        }
        return { keep, reclaimed, first };
      });
      if (fresh.size === 0) return out;
      const claims = [...fresh.keys()];
      const owners = [...fresh.values()];
      const seq = await this.append(s, claims, owners);
      if (seq > 0) {
        this.remember(s, seq, Date.now(), claims, owners);
        s.lastSeq = seq;
        return out;
      }
      if (attempt + 1 >= MAX_ATTEMPTS) throw new Error(`idempotency claims of ${s.name}: appended concurrently ${MAX_ATTEMPTS} times in a row`);
      // Refused: whether the log is still the one the index mirrors (not recreated), then what was appended since.
      await this.refreshStream(true);
      if (s.loaded) await this.catchUp(s);
    }
  }

  /** The scope's index read from the log, once (again after a failed read, or after the log was found recreated). */
  private async loaded(s: Scope): Promise<void> {
    if (!s.loaded) s.loaded = this.load(s);
    try {
      await s.loaded;
    } catch (err) {
      s.loaded = null; // read again by the next round
      throw err;
    }
  }

  /** Appends one round; its sequence, or 0 when the subject has messages this process has not read (the compare-and-set lost). */
  private async append(s: Scope, claims: string[], owners: string[]): Promise<number> {
    let body = '';
    for (let i = 0; i < claims.length; i++) body += `${claims[i]} ${owners[i]}\n`;
    const headers = natsHeaders();
    headers.set('Nats-Expected-Last-Subject-Sequence', String(s.lastSeq));
    const [r] = await this.replies.requestAll(this.log.nc, [{ subject: s.subject, data: enc.encode(body), headers }], this.timeoutMs);
    const ack = ackOf(r!, 'idempotency claims');
    if (!(ack instanceof Error)) return ack.seq;
    if (ack instanceof PublishError && ack.errCode === WRONG_LAST_SEQUENCE) return 0;
    throw new Error(`idempotency claims refused: ${ack.message}`);
  }

  /** Reads a scope's log from the start. */
  private async load(s: Scope): Promise<void> {
    this.forget(s);
    s.lastSeq = 0;
    const last = await this.get(this.log.stream, { last_by_subj: s.subject });
    if (last) await this.readAll(s, last.seq);
    await this.catchUp(s);
  }

  /**
   * Reads the scope's subject up to sequence `upTo` through a consumer of its own (ephemeral,
   * unacknowledged, deleted afterwards), a thousand messages a fetch: an organization's log
   * read message by message (one request each) took about 0.3 ms a message, so a busy one
   * held up its first batches after a restart for seconds. Whatever it misses (removed
   * meanwhile) or what came after, `catchUp` reads.
   */
  private async readAll(s: Scope, upTo: number): Promise<void> {
    const { jsm, js } = await this.admin();
    const info = await jsm.consumers.add(this.log.stream, {
      filter_subject: s.subject,
      ack_policy: AckPolicy.None,
      deliver_policy: DeliverPolicy.All,
      mem_storage: true,
      inactive_threshold: 60_000 * NS_PER_MS,
    });
    try {
      const consumer = await js.consumers.get(this.log.stream, info.name);
      for (let done = false; !done; ) {
        const batch = await consumer.fetch({ max_messages: 1_000, expires: 2_000 });
        let got = 0;
        for await (const m of batch) {
          got++;
          if (m.seq > upTo) {
            done = true;
            break;
          }
          this.apply(s, { seq: m.seq, text: m.string(), timeMs: Math.floor(m.info.timestampNanos / 1e6) });
          s.lastSeq = m.seq;
          if (m.seq === upTo || m.info.pending === 0) {
            done = true;
            break;
          }
        }
        if (got === 0) done = true;
      }
    } finally {
      await jsm.consumers.delete(this.log.stream, info.name).catch(() => undefined);
    }
  }

  private adminOf: Promise<{ jsm: JetStreamManager; js: JetStreamClient }> | null = null;
  private admin(): Promise<{ jsm: JetStreamManager; js: JetStreamClient }> {
    this.adminOf ??= (async () => {
      const opts = { apiPrefix: this.log.apiPrefix, timeout: this.timeoutMs };
      return { jsm: await jetstreamManager(this.log.nc, opts), js: jetstream(this.log.nc, opts) };
    })();
    this.adminOf.catch(() => (this.adminOf = null));
    return this.adminOf;
  }

  /**
   * Reads what was appended to the scope's subject after `lastSeq`. When nothing was, while an
   * append was refused: the subject's last message is not the one the index knows last. Before
   * it: the subject lost messages the index holds (the window removed them, an operator purged
   * them, the stream was recreated and its sequences started again): the index is emptied and
   * the subject read again from the start, so it holds exactly what the log holds.
   */
  private async catchUp(s: Scope): Promise<void> {
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      let read = 0;
      for (;;) {
        const m = await this.get(this.log.stream, { seq: s.lastSeq + 1, next_by_subj: s.subject });
        if (!m) break;
        this.apply(s, m);
        s.lastSeq = m.seq;
        read++;
      }
      if (read > 0) return;
      const last = await this.get(this.log.stream, { last_by_subj: s.subject });
      const seq = last ? last.seq : 0;
      if (seq === s.lastSeq) return;
      // Appended since the reads above: read it (and anything before it) in order.
      if (seq > s.lastSeq) continue;
      this.forget(s);
      s.lastSeq = 0;
      // The stream's first sequence as of now: a stale one (of a recreated stream) would drop what is read next.
      await this.refreshStream(true);
    }
    throw new Error(`idempotency claims of ${s.name}: the log's subject ${s.subject} kept changing while it was read`);
  }

  /** A message of the log into the index (a later claim of a key replaces an earlier one: the earlier one had ended). */
  private apply(s: Scope, m: LogMessage): void {
    const claims: string[] = [];
    const owners: string[] = [];
    for (const line of m.text.split('\n')) {
      if (line === '') continue;
      const sp = line.indexOf(' ');
      if (sp <= 0) continue;
      claims.push(line.slice(0, sp));
      owners.push(line.slice(sp + 1));
    }
    this.remember(s, m.seq, m.timeMs, claims, owners);
  }

  private remember(s: Scope, seq: number, atMs: number, claims: string[], owners: string[]): void {
    const before = s.index.size;
    for (let i = 0; i < claims.length; i++) s.index.add(seq, atMs, claims[i]!, owners[i]!);
    this.claimsHeld += s.index.size - before;
  }

  /** Forgets the claims of messages the log no longer holds (before the stream's first sequence; by generation: claim-index.ts). */
  private expire(s: Scope): void {
    const before = s.index.size;
    s.index.expireBefore(this.first);
    this.claimsHeld += s.index.size - before;
  }

  /**
   * The stream's first sequence (everything before it removed by the window) and its creation
   * time, asked at most every refreshMs (and at once after a refused append or a reload). A
   * stream created anew since (deleted and made again: its sequences start over) empties every
   * index and has each read again: an index of the stream it replaced is no mirror of this one.
   */
  private async refreshStream(force: boolean): Promise<void> {
    if (!force && Date.now() - this.firstAt < (this.log.refreshMs ?? 10_000)) return;
    this.firstAt = Date.now();
    let info: StreamState;
    try {
      info = await streamState(this.log.nc, this.log.apiPrefix, this.log.stream, this.timeoutMs);
    } catch (err) {
      this.firstAt = 0; // asked again next round; claims are kept meanwhile (never forgotten early)
      throw err;
    }
    if (this.created !== null && info.created !== this.created) {
      for (const s of this.scopes.values()) {
        this.forget(s);
        s.lastSeq = 0;
        s.loaded = null;
      }
    }
    this.created = info.created;
    this.first = info.first;
  }

  private first = 0;
  private firstAt = 0;
  private created: string | null = null;

  private forget(s: Scope): void {
    this.claimsHeld -= s.index.size;
    s.index.clear();
    s.resets++;
  }

  /**
   * Beyond maxClaims: drops organizations not used for inUseMs (none with work queued),
   * least recently used first; they are read again from the log when next seen. One in use is
   * kept whatever its size: dropping it would mean reading its log again for its next batch.
   */
  private evict(): void {
    const max = this.log.maxClaims ?? INDEX_MAX_CLAIMS;
    if (this.claimsHeld <= max) return;
    const now = Date.now();
    for (const s of this.scopes.values()) {
      if (this.claimsHeld <= max) return;
      if (s.running || s.queue.length > 0 || now - s.usedAt < (this.log.inUseMs ?? IN_USE_MS)) continue;
      this.forget(s);
      this.scopes.delete(s.name);
    }
  }

  /** One message of a stream (bus/stream-get.ts), as a message of the log; null when there is none. */
  private async get(stream: string, req: { seq: number; next_by_subj: string } | { last_by_subj: string }): Promise<LogMessage | null> {
    const m = await streamMessage(this.log.nc, this.log.apiPrefix, stream, req, this.timeoutMs);
    return m && { seq: m.seq, text: m.data.toString('utf8'), timeMs: timeOf(m.time) };
  }
}

interface LogMessage {
  seq: number;
  text: string;
  /** The message's time in the log (epoch ms). */
  timeMs: number;
}

/** An RFC 3339 time with up to nanoseconds, in epoch ms (only sorts claims into generations: claim-index.ts). */
function timeOf(t: string | undefined): number {
  const ms = t ? Date.parse(t.replace(/(\.\d{3})\d+/, '$1')) : NaN;
  return Number.isFinite(ms) ? ms : Date.now();
}

const scopeOf = (orgId: string, mode: string): string => `${checkPart(orgId)}.${checkPart(mode)}`;

/** `<orgId>.<mode>.<claim>` → the scope and the claim; throws for any other form (never "already claimed"). */
function splitKey(key: string): [string, string] {
  // A batch's keys share their scope: the last one checked is taken as it is.
  if (key.startsWith(lastScope.prefix)) return [lastScope.scope, checkClaim(key.slice(lastScope.prefix.length))];
  const a = key.indexOf('.');
  const b = a < 0 ? -1 : key.indexOf('.', a + 1);
  if (b < 0) throw new Error(`idempotency claims: ${JSON.stringify(key)} is not <orgId>.<mode>.<claim>`);
  const scope = scopeOf(key.slice(0, a), key.slice(a + 1, b));
  lastScope = { prefix: `${scope}.`, scope };
  return [scope, checkClaim(key.slice(b + 1))];
}
let lastScope = { prefix: '\u0000', scope: '' };

function checkPart(p: string): string {
  if (!SCOPE_PART.test(p)) throw new Error(`idempotency claims: ${JSON.stringify(p)} is not an organization id or mode`);
  return p;
}

function checkClaim(c: string): string {
  if (!CLAIM.test(c)) throw new Error(`idempotency claims: ${JSON.stringify(c)} is not a claim`);
  return c;
}

function owner(id: string | undefined): string {
  if (id === undefined || !OWNER.test(id)) throw new Error(`idempotency claims: ${JSON.stringify(id)} cannot own a claim`);
  return id;
}
