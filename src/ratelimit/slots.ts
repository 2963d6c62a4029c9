/**
 * Per-organization concurrency slots for analytics queries (spec 7.2, 8): a Redis sorted
 * set of leases per organization and mode. A query holds a slot from before its first
 * engine call until the engine is done with it (not merely until the HTTP answer: a query
 * answered 408 by the watchdog keeps its slot while the engine still runs it). The holder
 * renews its lease every third of the lease; a process that dies stops renewing and its
 * slot frees itself when the lease ends, so a crash cannot leak a slot.
 */
import { randomBytes } from 'node:crypto';
import type { RedisClient } from './connect.js';
import { LuaScript } from './scripts.js';
import { slotsKey } from './keys.js';
import type { Mode } from '../shared/mode.js';
import { ratelimitLog as log } from '../log.js';

export const DEFAULT_LEASE_MS = 15_000;

export interface Slot {
  /** Gives the slot back (idempotent; never throws: an unreachable Redis lets the lease end). */
  release(): Promise<void>;
}

export class ConcurrencySlots {
  private readonly acquireScript: LuaScript;
  private readonly renewScript: LuaScript;

  constructor(
    private readonly redis: RedisClient,
    private readonly prefix: string,
    private readonly leaseMs = DEFAULT_LEASE_MS,
  ) {
    this.acquireScript = new LuaScript(redis, 'acquire-slot', 1);
    this.renewScript = new LuaScript(redis, 'renew-slot', 1);
  }

  async load(): Promise<void> {
    await Promise.all([this.acquireScript.load(), this.renewScript.load()]);
  }

  key(orgId: string, mode: Mode): string {
    return slotsKey(this.prefix, orgId, mode);
  }

  /** A slot, or null when all `limit` slots are taken. Throws when Redis is unreachable. */
  async acquire(orgId: string, mode: Mode, limit: number): Promise<Slot | null> {
    const key = this.key(orgId, mode);
    const holder = randomBytes(12).toString('base64url');
    const [ok] = (await this.acquireScript.run([key], [limit, this.leaseMs, holder])) as [number, number];
    if (ok !== 1) return null;

    let released = false;
    const timer = setInterval(() => {
      this.renewScript.run([key], [this.leaseMs, holder]).then(
        (still) => {
          if (still !== 1 && !released) log.warn('analytics slot lease ended before the query did', { org: orgId });
        },
        (err: unknown) => log.warn('analytics slot renewal failed', { err }),
      );
    }, Math.max(50, Math.floor(this.leaseMs / 3)));
    timer.unref();

    return {
      release: async () => {
        if (released) return;
        released = true;
        clearInterval(timer);
        await this.redis.zrem(key, holder).catch((err: unknown) => log.warn('analytics slot release failed; the lease will end by itself', { err }));
      },
    };
  }
}
