/**
 * Signal ingestion: `POST /api/v2/signals/bulk` and the legacy `POST /api/v1/usage`.
 *
 * Order of a request, and why: authenticate (before the body is read) → parse and
 * validate the whole batch (a bad batch costs no tokens) → take N tokens (429 when the
 * bucket cannot cover N) → publish to JetStream and wait for the stream's ack (the batch
 * is durable before we answer) → 202 (held a while when the pipeline of this process is
 * behind: src/shared/backlog-gate.ts). When the publish fails after the tokens were taken,
 * the tokens are given back and the answer is 503: the client retries with the same
 * idempotency keys and nothing is lost or double-counted.
 */
import { headers as natsHeaders } from '@nats-io/transport-node';
import { PublishError, publishDurable } from '../bus/publish.js';
import { ApiError, rateLimited } from '../errors.js';
import type { Nats } from '../bus/connection.js';
import type { Principal } from '../orgs/registry.js';
import type { TokenBuckets } from '../ratelimit/bucket.js';
import { H_BATCH, H_MODE, H_ORG, H_RECEIVED_AT, newBatchId } from '../bus/batch.js';
import { mayHaveSurrogates, validateBulk, validateV1 } from './validate.js';
import { fastBulkCount } from './fast-bulk.js';
import { parseJson } from '../http/json.js';
import type { Reply, Request } from '../http/route.js';
import { ingressLog as log } from '../log.js';
import { ingressAnswersHeld, signalsAccepted } from '../metrics/index.js';
import type { BacklogGate } from '../shared/backlog-gate.js';

export interface AcceptedBatch {
  /** Signals accepted into the pipeline (duplicates by idempotencyKey are skipped there). */
  accepted: number;
  /** Id of the batch; signal i of the batch has the id `sig_<batchId without "bat_">_<i>`. */
  batchId: string;
}

export class SignalIngress {
  constructor(
    private readonly nats: Nats,
    private readonly buckets: TokenBuckets,
    private readonly publishTimeoutMs: number,
    /** The pipeline of this process, when it has one (ROLE=all): answers wait while it is behind (src/shared/backlog-gate.ts). */
    private readonly backlog: BacklogGate | null = null,
  ) {}

  async bulk(req: Request, principal: Principal): Promise<Reply> {
    const receivedAt = Date.now();
    // The one-pass byte scanner answers for the common body; anything it is not sure of goes
    // through JSON.parse and the full validation, which give every error (fast-bulk.ts).
    const count = fastBulkCount(req.body, receivedAt) ?? validateBulk(parseJson(req.body), receivedAt, mayHaveSurrogates(req.body));
    const reply = await this.accept(principal, count, req.body, receivedAt);
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
    const signals = validateV1(parsed, receivedAt, mayHaveSurrogates(req.body));
    // Wrapped as text, not re-serialized: numbers keep the digits the sender wrote (a double
    // would not keep them all; src/pipeline/exact-numbers.ts reads them from this text).
    const [open, close] = Array.isArray(parsed) ? ['{"signals":', '}'] : ['{"signals":[', ']}'];
    return this.accept(principal, signals.length, Buffer.concat([Buffer.from(open), req.body, Buffer.from(close)]), receivedAt);
  }

  private async accept(p: Principal, count: number, body: Buffer, receivedAt: number): Promise<Reply> {
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
    let attempted = false;
    try {
      if (!this.nats.connected) throw new Error('not connected to NATS');
      const h = natsHeaders();
      h.set(H_ORG, p.org.id);
      h.set(H_MODE, p.mode);
      h.set(H_RECEIVED_AT, String(receivedAt));
      h.set(H_BATCH, batchId);
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
    signalsAccepted.inc({ mode: p.mode }, count);
    // Durable now; while the pipeline of this process is behind, the answer (only) waits.
    if (this.backlog && (await this.backlog.pass())) ingressAnswersHeld.inc();
    const body202: AcceptedBatch = { accepted: count, batchId };
    return { status: 202, body: body202 };
  }
}
