/**
 * Deduplication by business identifiers (spec 6: "deduplicate by business identifiers in the
 * payload, not by delivery timestamp"). Deliveries are at least once: a retry after a timeout,
 * a redelivery after the service restarts, or a resend from the delivery log bring the same
 * event again, signed afresh. `dedupeKey` names what the event is about; a `DedupeStore`
 * remembers the keys it has seen for a while.
 *
 * Keys (a JSON array, so no separator can be confused with an id):
 * - credits depleted: customerId, orderLineAttributeId, creditsCurrencyId, signalId (a pool
 *   depletes at most once per signal)
 * - overage incurred: eventType, customerId, orderLineAttributeId, occurredAt (the payload has
 *   no signal id; `occurredAt` is fixed by the signal that crossed)
 * - credit cap reached: customer.id, breachedUnit.externalType and externalId,
 *   cap.creditsCurrencyId (lower case), period.start and end (once per cap and period)
 * - payment succeeded: payment.id; payment failed: payment.id and failureDate (a payment may
 *   fail several attempts, each its own event)
 * - invoice and checkout events: the object's id (with the event name: an invoice is created,
 *   then paid)
 * Every key starts with the event name.
 *
 * The store is a cache, not a ledger: it is there so that the common duplicates (retries,
 * resends) are dropped before they cost anything. Where a duplicate would do harm (credit a
 * customer twice), also make the work itself idempotent, e.g. a unique index on the key.
 */
import type { WebhookEvent } from './events.js';

/** The business key of a delivery; equal for every delivery of the same event. */
export function dedupeKey(e: WebhookEvent): string {
  const parts: (string | null)[] = [e.event];
  switch (e.event) {
    case 'billing-credits-depleted': {
      const c = e.data.credits;
      parts.push(c.customerId, c.orderLineAttributeId, c.creditsCurrencyId?.toLowerCase() ?? null, c.signalId);
      break;
    }
    case 'billing-overage-incurred': {
      const o = e.data.overage;
      parts.push(o.eventType, o.customerId, o.orderLineAttributeId, o.occurredAt);
      break;
    }
    case 'billing-credit-cap-reached': {
      const d = e.data;
      parts.push(d.customer.id, d.breachedUnit.externalType, d.breachedUnit.externalId, d.cap.creditsCurrencyId.toLowerCase(), d.period.start, d.period.end);
      break;
    }
    case 'billing-payment-succeeded':
      parts.push(e.data.payment.id);
      break;
    case 'billing-payment-failed':
      parts.push(e.data.payment.id, e.data.payment.failureDate);
      break;
    case 'billing-invoice-created':
    case 'billing-invoice-paid':
      parts.push(e.data.invoice.id);
      break;
    case 'billing-checkout-created':
    case 'billing-checkout-completed':
    case 'billing-checkout-expired':
      parts.push(e.data.checkout.id);
      break;
  }
  return JSON.stringify(parts);
}

/**
 * Where seen keys are kept. `claim` must be atomic: of two concurrent claims of one key,
 * exactly one gets `true`. Implement it on your own store (Redis `SET key 1 NX PX ttl`, a
 * database insert on a unique key) to share it between processes.
 */
export interface DedupeStore {
  /** Records `key` for `ttlMs` if it is not recorded; true when this call recorded it (first delivery). */
  claim(key: string, ttlMs: number): boolean | Promise<boolean>;
  /** Forgets `key` (its processing failed: let the next delivery through). */
  release(key: string): void | Promise<void>;
}

/**
 * Longer than the service's whole retry schedule (8 attempts over about 28 hours), so a late
 * retry is still recognised. Resends from the delivery log can come at any time: beyond the
 * TTL they are let through (make the work idempotent, see above).
 */
export const DEFAULT_DEDUPE_TTL_MS = 72 * 60 * 60 * 1000;

/**
 * In-process store: a bounded map, oldest entries evicted first (least recently claimed or
 * seen), each key expiring after its TTL. One process only; a restart forgets everything.
 */
export class MemoryDedupeStore implements DedupeStore {
  private readonly entries = new Map<string, number>(); // key → expiry (ms); Map order = recency
  readonly maxEntries: number;
  private readonly now: () => number;

  constructor(opts: { maxEntries?: number; now?: () => number } = {}) {
    const max = opts.maxEntries ?? 100_000;
    if (!Number.isSafeInteger(max) || max < 1) throw new RangeError('maxEntries must be a positive integer');
    this.maxEntries = max;
    this.now = opts.now ?? Date.now;
  }

  get size(): number {
    return this.entries.size;
  }

  claim(key: string, ttlMs: number): boolean {
    if (!Number.isFinite(ttlMs) || ttlMs <= 0) throw new RangeError('ttlMs must be a positive number of milliseconds');
    const now = this.now();
    const expiry = this.entries.get(key);
    this.entries.delete(key);
    if (expiry !== undefined && expiry > now) {
      this.entries.set(key, expiry); // seen again: most recent now
      return false;
    }
    this.entries.set(key, now + ttlMs);
    // Drop expired entries at the old end, then the oldest beyond the bound.
    for (const [k, exp] of this.entries) {
      if (this.entries.size > this.maxEntries || exp <= now) this.entries.delete(k);
      else break;
    }
    return true;
  }

  release(key: string): void {
    this.entries.delete(key);
  }
}

/**
 * The part of a Redis client this store uses, shaped like ioredis (`new Redis(url)`):
 * `set(key, '1', 'PX', ttl, 'NX')` answers `'OK'` when it set the key, null otherwise. For
 * node-redis, wrap it: `{ set: (k, v, _px, ttl, _nx) => client.set(k, v, { PX: ttl, NX: true }), del: (k) => client.del(k) }`.
 */
export interface RedisLikeClient {
  set(key: string, value: string, px: 'PX', ttlMs: number, nx: 'NX'): Promise<string | null>;
  del(key: string): Promise<number>;
}

/** Store in Redis, shared by every process of the receiver: one key per event, expiring with its TTL. */
export class RedisDedupeStore implements DedupeStore {
  readonly prefix: string;

  constructor(
    private readonly client: RedisLikeClient,
    opts: { prefix?: string } = {},
  ) {
    this.prefix = opts.prefix ?? 'webhook-dedupe:';
  }

  async claim(key: string, ttlMs: number): Promise<boolean> {
    if (!Number.isFinite(ttlMs) || ttlMs <= 0) throw new RangeError('ttlMs must be a positive number of milliseconds');
    return (await this.client.set(this.prefix + key, '1', 'PX', Math.ceil(ttlMs), 'NX')) === 'OK';
  }

  async release(key: string): Promise<void> {
    await this.client.del(this.prefix + key);
  }
}
