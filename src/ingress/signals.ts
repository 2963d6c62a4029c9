/**
 * Signal ingestion: `POST /api/v2/signals/bulk` and the legacy `POST /api/v1/usage`.
 *
 * Order of a request, and why: authenticate (before the body is read) → parse the request
 * and judge each signal (a request refused whole, or one whose every signal is refused,
 * costs no tokens) → take N tokens, N = the request's signals (429 when the bucket cannot
 * cover N) → publish to JetStream, the refused signals' indexes in the Billing-Skip header,
 * and wait for the stream's ack (the batch is durable before we answer); meanwhile ask the
 * pipeline which signals repeat an idempotency key (src/bus/dedupe-lookup.ts) → 202 (held a
 * while when the pipeline of this process is behind: src/shared/backlog-gate.ts). When the
 * publish fails after the tokens were taken, the tokens are given back and the answer is 503:
 * the client retries with the same idempotency keys and nothing is lost or double-counted.
 */
import { headers as natsHeaders } from '@nats-io/transport-node';
import { PublishError, publishDurable } from '../bus/publish.js';
import { replies } from '../bus/replies.js';
import { ApiError, rateLimited } from '../errors.js';
import type { Nats } from '../bus/connection.js';
import type { Principal } from '../orgs/registry.js';
import type { TokenBuckets } from '../ratelimit/bucket.js';
import { H_BATCH, H_MODE, H_ORG, H_RECEIVED_AT, H_SKIP, newBatchId } from '../bus/batch.js';
import { allRefused, mayHaveSurrogates, validateBulk, validateV1, type SignalError } from './validate.js';
import { fastBulk } from './fast-bulk.js';
import { v1Body, v1DataTexts } from './v1-body.js';
import { lookupBody, lookupBodyOf, parseAnswer, repeatsInRanges } from '../bus/dedupe-lookup.js';
import { parseJson } from '../http/json.js';
import type { Reply, Request } from '../http/route.js';
import { ingressLog as log } from '../log.js';
import { ingressAnswersHeld, signalsAccepted } from '../metrics/index.js';
import type { BacklogGate } from '../shared/backlog-gate.js';

export interface AcceptedBatch {
  /** Valid signals that are not duplicates. */
  ingested: number;
  /**
   * Valid signals that repeat an earlier idempotencyKey of the organization and mode: exact for
   * repeats inside the request and for keys already claimed when the request arrived; when no
   * pipeline answered the lookup in time, the repeats inside the request only.
   */
  duplicates: number;
  /** Refused signals (listed in `errors`). */
  failed: number;
  errors: SignalError[];
  /** Id of the batch; signal i of the batch has the id `sig_<batchId without "bat_">_<i>`. */
  batchId: string;
}

/** How long the ingress waits for the pipeline's answer to a dedupe lookup (it runs beside the publish, which is waited for anyway). */
const LOOKUP_TIMEOUT_MS = 2_000;

const enc = new TextEncoder();

/**
 * A request judged: its signals, the refused ones, and the valid ones' keys (null: no key) as
 * ranges of `src` (quotes included; -1: none), read while the request's body is still its own.
 */
interface Judged {
  count: number;
  errors: SignalError[];
  keys: { src: Uint8Array; ranges: Int32Array } | null;
}

/** After a lookup found no pipeline process listening, the ingress asks none for this long (counting the repeats inside each request itself). */
const QUIET_AFTER_NO_RESPONDERS_MS = 1_000;

/** The keys of parsed signals (refused ones skipped), or null when none has a key. */
function keysOfParsed(signals: readonly unknown[], errors: readonly SignalError[]): Judged['keys'] {
  const refused = new Set(errors.map((e) => e.index));
  let any = false;
  const keys = signals.map((s, i) => {
    if (refused.has(i) || s === null) return null;
    const k = (s as { idempotencyKey?: unknown }).idempotencyKey;
    if (typeof k !== 'string') return null;
    any = true;
    return enc.encode(JSON.stringify(k));
  });
  if (!any) return null;
  // The lookup body itself is their source: line i is signal i's key.
  const src = lookupBody(keys);
  const ranges = new Int32Array(2 * keys.length);
  let at = 0;
  keys.forEach((k, i) => {
    ranges[2 * i] = k ? at : -1;
    at += k ? k.length : 0;
    ranges[2 * i + 1] = at;
    at++;
  });
  return { src, ranges };
}

export class SignalIngress {
  constructor(
    private readonly nats: Nats,
    private readonly buckets: TokenBuckets,
    private readonly publishTimeoutMs: number,
    /** The pipeline of this process, when it has one (ROLE=all): answers wait while it is behind (src/shared/backlog-gate.ts). */
    private readonly backlog: BacklogGate | null = null,
    private readonly lookupTimeoutMs = LOOKUP_TIMEOUT_MS,
  ) {}

  async bulk(req: Request, principal: Principal): Promise<Reply> {
    const receivedAt = Date.now();
    // The one-pass byte scanner answers for the common body (every signal valid); anything it
    // is not sure of goes through JSON.parse and the full validation, which give every error (fast-bulk.ts).
    const fast = fastBulk(req.body, receivedAt);
    let judged: Judged;
    if (fast) {
      let keyed = false;
      for (let i = 0; i < fast.count && !keyed; i++) keyed = fast.keys[2 * i] !== -1;
      judged = { count: fast.count, errors: [], keys: keyed ? { src: req.body, ranges: fast.keys } : null };
    } else {
      const v = validateBulk(parseJson(req.body), receivedAt, mayHaveSurrogates(req.body), req.body);
      if (v.errors.length === v.count) throw allRefused(v.errors, (i) => `signals[${i}]`);
      judged = { count: v.count, errors: v.errors, keys: keysOfParsed(v.signals, v.errors) };
    }
    const reply = await this.accept(principal, judged, req.body, receivedAt);
    // The stream acked the batch, so the NATS client has written it: it packs every pending
    // publish into one new buffer before the socket write, and an unsent publish (while
    // disconnected) would have had no ack. Nothing refers to the body now. (Not on failure:
    // a publish still queued for a reconnect refers to it.)
    req.recycleBody?.();
    return reply;
  }

  async v1(req: Request, principal: Principal): Promise<Reply> {
    const receivedAt = Date.now();
    const parsed = parseJson(req.body);
    const v = validateV1(parsed, receivedAt, mayHaveSurrogates(req.body), req.body);
    if (v.errors.length === v.count) throw allRefused(v.errors, (i) => (v.array ? `[${i}]` : 'signal'));
    // Mapped to the v2 shape as text: each `data` is the request's own text of it (v1-body.ts).
    const body = v1Body(v.signals, v1DataTexts(req.body.toString('utf8')));
    return this.accept(principal, { count: v.count, errors: v.errors, keys: keysOfParsed(v.signals, v.errors) }, body, receivedAt);
  }

  /** Until when no lookup is sent (performance.now()): none found a pipeline process listening a moment ago. */
  private quietUntil = 0;

  /** Asks the pipeline which signals are repeats; null when none answered (no responders, timeout, or it could not tell). */
  private async lookup(p: Principal, batchId: string, body: Buffer, count: number): Promise<number[] | null> {
    try {
      const h = natsHeaders();
      h.set(H_ORG, p.org.id);
      h.set(H_MODE, p.mode);
      h.set(H_BATCH, batchId);
      // Through the connection's shared reply subscription (bus/replies.ts): no timer, promise
      // and Error of the client's own per request.
      const nc = this.nats.nc;
      const [m] = await replies(nc).requestAll(nc, [{ subject: this.nats.topology.dedupeLookup, data: body, headers: h }], this.lookupTimeoutMs);
      // An Error (no answer in time) or a status (503: no pipeline process listens).
      if (!m || m instanceof Error) return null;
      if (m.headers?.hasError) {
        if (m.headers.code === 503) this.quietUntil = performance.now() + QUIET_AFTER_NO_RESPONDERS_MS;
        return null;
      }
      return parseAnswer(m.data, count);
    } catch {
      return null;
    }
  }

  private async accept(p: Principal, judged: Judged, body: Buffer, receivedAt: number): Promise<Reply> {
    const { count, errors } = judged;
    const limits = p.org.limits;
    let take;
    try {
      take = await this.buckets.take(p.org.id, p.mode, count, limits);
    } catch (err) {
      log.error('rate limiter unavailable', { err });
      throw new ApiError('RATE_LIMITER_UNAVAILABLE', 'the rate limiter is unreachable; nothing was ingested, retry later');
    }
    if (!take.allowed) throw rateLimited(take.retryAfterSeconds);

    const batchId = newBatchId(receivedAt);
    // Beside the publish: the pipeline's answer costs no time of its own.
    const keys = judged.keys;
    const repeats = keys && this.nats.connected && performance.now() >= this.quietUntil ? this.lookup(p, batchId, lookupBodyOf(keys.src, keys.ranges, count), count) : null;
    let attempted = false;
    try {
      if (!this.nats.connected) throw new Error('not connected to NATS');
      const h = natsHeaders();
      h.set(H_ORG, p.org.id);
      h.set(H_MODE, p.mode);
      h.set(H_RECEIVED_AT, String(receivedAt));
      h.set(H_BATCH, batchId);
      if (errors.length > 0) h.set(H_SKIP, errors.map((e) => e.index).join(','));
      attempted = true;
      await publishDurable(this.nats.nc, this.nats.topology.signals.subject(p.org.id), body, h, batchId, this.publishTimeoutMs);
    } catch (err) {
      log.warn('publish failed; tokens given back', { err, org: p.org.id });
      await this.buckets.refund(p.org.id, p.mode, count, limits).catch((e: unknown) => log.error('token refund failed', { err: e }));
      // Never sent (not connected), or refused by the stream: certainly not stored. Otherwise
      // (no answer in time, connection lost while waiting) the outcome is unknown, since the
      // ack may be what was lost: say so, so that the client resends with the same
      // idempotency keys (spec 7.2 rule 6).
      const definite = !attempted || err instanceof PublishError;
      throw new ApiError(
        'QUEUE_UNAVAILABLE',
        definite
          ? 'the signal queue is unavailable; nothing was ingested and no tokens were used, retry later'
          : 'the signal queue did not confirm the batch in time; it may or may not be stored, resend it with the same idempotency keys',
      );
    }
    const valid = count - errors.length;
    signalsAccepted.inc({ mode: p.mode }, valid);
    let duplicates = 0;
    if (keys) {
      // No pipeline answered: the repeats inside the request, which the ingress sees itself.
      const found = (await repeats) ?? repeatsInRanges(keys.src, keys.ranges, count);
      duplicates = found.length;
    }
    // Durable now; while the pipeline of this process is behind, the answer (only) waits.
    if (this.backlog && (await this.backlog.pass())) ingressAnswersHeld.inc();
    const body202: AcceptedBatch = { ingested: valid - duplicates, duplicates, failed: errors.length, errors, batchId };
    return { status: 202, body: body202 };
  }
}
