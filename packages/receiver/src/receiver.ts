/**
 * One call per request: verify (spec 5.2), parse (2.4), sort out test deliveries and unknown
 * events (spec 6), deduplicate by business ids, and say which HTTP status to answer. The
 * framework glue (reading the RAW body, writing the status) is the caller's: see examples/.
 *
 *   const outcome = await receiver.receive(rawBody, req.headers['x-webhook-signature']);
 *   if (outcome.action === 'process') {
 *     try { await queue.add(outcome.event); } catch (err) { await outcome.release(); throw err; }
 *   }
 *   res.status(outcome.status) …
 *
 * Statuses: 401 for a delivery that does not verify (missing or malformed header, bad
 * signature, timestamp more than the tolerance away), 400 for a verified body that is not an
 * envelope, 200 otherwise — duplicates, test deliveries and unknown events included, so the
 * service does not retry them. Any non-2xx makes the service retry later. `receive` rejects
 * only when the store fails (or on a configuration mistake such as an empty secret): answer
 * 5xx then, and the service tries again later.
 */
import { type DedupeStore, DEFAULT_DEDUPE_TTL_MS, MemoryDedupeStore, dedupeKey } from './dedupe.js';
import { parseEnvelope } from './envelope.js';
import type { UnknownWebhookEnvelope, WebhookEvent } from './events.js';
import { type SignatureHeaderValue, type WebhookRefusal, DEFAULT_TOLERANCE_MS, verifyWebhook } from './verify.js';

export interface WebhookReceiverOptions {
  /** The organization's signing secret (`whsec_…`, shown once by rotate-secret). */
  secret: string | Uint8Array;
  /** Where seen business keys are kept; default an in-memory `MemoryDedupeStore`. */
  store?: DedupeStore;
  /** How long a key is remembered; default 72 hours. */
  dedupeTtlMs?: number;
  /** Largest accepted |now − t|; default five minutes (spec 5.2). */
  toleranceMs?: number;
  /** The clock, in ms since the epoch; default `Date.now`. */
  now?: () => number;
}

export type ReceiveOutcome =
  /** A first delivery: queue the work. Call `release()` if queueing failed, so a retry is let through. */
  | { action: 'process'; status: 200; event: WebhookEvent; key: string; release: () => Promise<void> }
  /** The same business event was seen before (a retry or a resend): nothing to do. */
  | { action: 'duplicate'; status: 200; event: WebhookEvent; key: string }
  /** `isTest: true` (synthetic ids): label or ignore it; not deduplicated. */
  | { action: 'test'; status: 200; event: WebhookEvent | UnknownWebhookEnvelope }
  /** An `event` this package does not know (new events may be added): ignore it. */
  | { action: 'ignored'; status: 200; event: UnknownWebhookEnvelope }
  /** Not verified: answer 401, do not look at the body. */
  | { action: 'refused'; status: 401; reason: WebhookRefusal; detail: string }
  /** Verified but not an envelope: answer 400. */
  | { action: 'invalid'; status: 400; detail: string };

export class WebhookReceiver {
  private readonly secret: string | Uint8Array;
  readonly store: DedupeStore;
  private readonly ttlMs: number;
  private readonly toleranceMs: number;
  private readonly now: () => number;

  constructor(opts: WebhookReceiverOptions) {
    if (opts.secret === undefined || opts.secret === null || opts.secret.length === 0) throw new TypeError('WebhookReceiver: secret is required');
    this.secret = opts.secret;
    this.store = opts.store ?? new MemoryDedupeStore();
    this.ttlMs = opts.dedupeTtlMs ?? DEFAULT_DEDUPE_TTL_MS;
    if (!Number.isFinite(this.ttlMs) || this.ttlMs <= 0) throw new RangeError('WebhookReceiver: dedupeTtlMs must be a positive number of milliseconds');
    this.toleranceMs = opts.toleranceMs ?? DEFAULT_TOLERANCE_MS;
    this.now = opts.now ?? Date.now;
  }

  /** `rawBody`: the request body exactly as received; `header`: the `x-webhook-signature` value. */
  async receive(rawBody: Uint8Array | string, header: SignatureHeaderValue): Promise<ReceiveOutcome> {
    const v = verifyWebhook(rawBody, header, this.secret, { nowMs: this.now(), toleranceMs: this.toleranceMs });
    if (!v.ok) return { action: 'refused', status: 401, reason: v.reason, detail: v.detail };
    const parsed = parseEnvelope(rawBody);
    if (!parsed.ok) return { action: 'invalid', status: 400, detail: parsed.detail };
    if (!parsed.known) return parsed.envelope.isTest ? { action: 'test', status: 200, event: parsed.envelope } : { action: 'ignored', status: 200, event: parsed.envelope };
    const event = parsed.envelope;
    if (event.isTest) return { action: 'test', status: 200, event };
    const key = dedupeKey(event);
    if (!(await this.store.claim(key, this.ttlMs))) return { action: 'duplicate', status: 200, event, key };
    return { action: 'process', status: 200, event, key, release: async () => void (await this.store.release(key)) };
  }
}
