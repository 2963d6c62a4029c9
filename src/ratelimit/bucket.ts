/**
 * Per-organization, per-mode token buckets in Redis (spec section 8): a request with N
 * signals takes N tokens or none; a refused request learns the earliest whole second at
 * which the bucket can cover it (the Retry-After value).
 */
import type { RedisClient } from './connect.js';
import { LuaScript } from './scripts.js';
import { bucketKey } from './keys.js';
import type { Mode } from '../shared/mode.js';

export interface BucketLimits {
  burst: number;
  refillPerSecond: number;
}

export type TakeResult =
  | { allowed: true; tokensLeft: number }
  | { allowed: false; tokensLeft: number; retryAfterSeconds: number };

/** Whole seconds a client must wait, from the script's microseconds (never 0 for a refusal). */
export function retryAfterSeconds(waitMicros: number): number {
  return Math.max(1, Math.ceil(waitMicros / 1_000_000));
}

export class TokenBuckets {
  private readonly script: LuaScript;

  constructor(
    redis: RedisClient,
    private readonly prefix: string,
  ) {
    this.script = new LuaScript(redis, 'take-tokens', 1);
  }

  load(): Promise<void> {
    return this.script.load();
  }

  key(orgId: string, mode: Mode): string {
    return bucketKey(this.prefix, orgId, mode);
  }

  async take(orgId: string, mode: Mode, cost: number, limits: BucketLimits): Promise<TakeResult> {
    const reply = (await this.script.run([this.key(orgId, mode)], [cost, limits.burst, limits.refillPerSecond])) as number[];
    const [allowed, tokensLeft, waitMicros] = reply as [number, number, number];
    if (allowed === 1) return { allowed: true, tokensLeft };
    if (waitMicros < 0) throw new RangeError(`cost ${cost} exceeds burst ${limits.burst}`);
    return { allowed: false, tokensLeft, retryAfterSeconds: retryAfterSeconds(waitMicros) };
  }

  /** Gives tokens back after a request that took them failed (capped at burst). */
  async refund(orgId: string, mode: Mode, tokens: number, limits: BucketLimits): Promise<void> {
    await this.script.run([this.key(orgId, mode)], [-tokens, limits.burst, limits.refillPerSecond]);
  }
}
