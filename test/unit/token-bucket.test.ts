/**
 * Token buckets against the real Redis (src/ratelimit/lua/take-tokens-1.lua through
 * src/ratelimit/bucket.ts). Every test uses its own key prefix and deletes its keys.
 */
import t from 'tap';
import fc from 'fast-check';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { TokenBuckets, retryAfterSeconds } from '../../src/ratelimit/bucket.js';
import { parseLimits } from '../../src/admin/routes.js';
import type { ApiError } from '../../src/errors.js';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const redis = new Redis(REDIS_URL, { lazyConnect: false, maxRetriesPerRequest: 2 });
t.teardown(() => void redis.disconnect());

/** A bucket set with its own prefix; its keys are removed when the test ends. */
function buckets(t: { teardown(fn: () => unknown): void }): { tb: TokenBuckets; prefix: string } {
  const prefix = `test:unit:${randomBytes(6).toString('hex')}:`;
  t.teardown(async () => {
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
  });
  return { tb: new TokenBuckets(redis, prefix), prefix };
}

t.test('retryAfterSeconds: earliest whole second, never 0', async (t) => {
  t.equal(retryAfterSeconds(1), 1);
  t.equal(retryAfterSeconds(0), 1, 'a refusal never says 0');
  t.equal(retryAfterSeconds(999_999), 1);
  t.equal(retryAfterSeconds(1_000_000), 1);
  t.equal(retryAfterSeconds(1_000_001), 2);
  t.equal(retryAfterSeconds(2_500_000), 3);
  t.equal(retryAfterSeconds(3_000_000), 3);
});

t.test('a fresh bucket allows exactly burst tokens, then refuses', async (t) => {
  const { tb } = buckets(t);
  const limits = { burst: 500, refillPerSecond: 0.001 };
  let allowed = 0;
  for (let i = 0; i < 500; i += 50) {
    const r = await tb.take('org1', 'live', 50, limits);
    t.equal(r.allowed, true, `take #${i / 50 + 1} of 50 allowed`);
    allowed += 50;
  }
  t.equal(allowed, 500);
  const r = await tb.take('org1', 'live', 1, limits);
  t.equal(r.allowed, false, 'the 501st token is refused');
  t.equal(r.tokensLeft, 0);
  // the other mode and another org have their own full buckets
  t.equal((await tb.take('org1', 'test', 500, limits)).allowed, true, 'test mode is a separate bucket');
  t.equal((await tb.take('org2', 'live', 500, limits)).allowed, true, 'another org is a separate bucket');
});

t.test('one take of exactly burst tokens on a fresh bucket', async (t) => {
  const { tb } = buckets(t);
  const r = await tb.take('o', 'live', 1000, { burst: 1000, refillPerSecond: 0.01 });
  t.same(r, { allowed: true, tokensLeft: 0 });
});

t.test('all or nothing: a refused take leaves the tokens unchanged', async (t) => {
  const { tb } = buckets(t);
  const limits = { burst: 1000, refillPerSecond: 0.001 };
  t.same(await tb.take('o', 'live', 700, limits), { allowed: true, tokensLeft: 300 });
  const refused = await tb.take('o', 'live', 301, limits);
  t.equal(refused.allowed, false, '301 > 300 refused');
  t.equal(refused.tokensLeft, 300, 'reports the 300 left');
  t.same(await tb.take('o', 'live', 300, limits), { allowed: true, tokensLeft: 0 }, 'the 300 are still there');
  t.equal((await tb.take('o', 'live', 1, limits)).allowed, false);
});

t.test('Retry-After is the earliest whole second, and waiting that long is enough', async (t) => {
  const { tb } = buckets(t);
  const limits = { burst: 500, refillPerSecond: 100 };
  const t0 = performance.now();
  t.equal((await tb.take('o', 'live', 500, limits)).allowed, true);
  const r = await tb.take('o', 'live', 250, limits);
  const elapsed = performance.now() - t0;
  t.equal(r.allowed, false);
  if (r.allowed) return;
  // What refilled between the two takes (100/s): nothing on an idle machine, more on a busy one.
  t.ok(r.tokensLeft <= 1 + (elapsed / 1000) * 100, `almost nothing left (${r.tokensLeft} after ${Math.round(elapsed)} ms)`);
  if (r.tokensLeft < 50) t.equal(r.retryAfterSeconds, 3, '250 tokens at 100/s from under 50 = more than 2 s → 3');
  await sleep(r.retryAfterSeconds * 1000);
  const after = await tb.take('o', 'live', 250, limits);
  t.equal(after.allowed, true, 'allowed after waiting Retry-After seconds');
});

t.test('Retry-After for a tiny deficit is 1, for a large one rounds up', async (t) => {
  const { tb } = buckets(t);
  // 10 tokens/s: the 10-token deficit takes 1 s to refill, so the check holds on a busy
  // machine (at 1,000/s, 10 ms between the two calls refilled it; at 100/s, 100 ms).
  const limits = { burst: 10_000, refillPerSecond: 10 };
  t.equal((await tb.take('o', 'live', 10_000, limits)).allowed, true);
  const small = await tb.take('o', 'live', 10, limits);
  t.equal(small.allowed, false);
  if (!small.allowed) t.equal(small.retryAfterSeconds, 1);
  const large = await tb.take('o', 'live', 9_500, limits);
  t.equal(large.allowed, false);
  // 9,500 tokens at 10/s from a few tokens: between 949 and 950 s → 950
  if (!large.allowed) t.equal(large.retryAfterSeconds, 950);
});

t.test('refill at the configured rate', async (t) => {
  const { tb } = buckets(t);
  const limits = { burst: 1000, refillPerSecond: 200 };
  const t0 = performance.now();
  t.equal((await tb.take('o', 'live', 1000, limits)).allowed, true);
  const t1 = performance.now();
  await sleep(1100);
  // ~220 tokens now: 250 is refused (all or nothing), 200 is allowed
  const t2 = performance.now();
  const tooMany = await tb.take('o', 'live', 250, limits);
  const t3 = performance.now();
  const minRefill = Math.floor(((t2 - t1) / 1000) * 200);
  const maxRefill = Math.floor(((t3 - t0) / 1000) * 200);
  t.ok(tooMany.tokensLeft >= minRefill && tooMany.tokensLeft <= maxRefill, `${minRefill} ≤ tokens after ~1.1 s (${tooMany.tokensLeft}) ≤ ${maxRefill}`);
  if (maxRefill < 250) {
    t.equal(tooMany.allowed, false, '250 > ~220 refused');
    if (!tooMany.allowed) t.equal(tooMany.retryAfterSeconds, 1);
  } else {
    t.comment(`machine too slow (slept ${t3 - t0} ms): 250 may legitimately have been allowed`);
  }
  const ok = await tb.take('o', 'live', 200, limits);
  const maxRefill4 = Math.floor(((performance.now() - t0) / 1000) * 200);
  t.equal(ok.allowed, true, '200 allowed');
  if (maxRefill < 250) t.ok(ok.tokensLeft >= minRefill - 200 && ok.tokensLeft <= maxRefill4 - 200, `~20 left (${ok.tokensLeft}; at most ${maxRefill4 - 200} by the clock)`);
});

t.test('refill never goes above burst', async (t) => {
  const { tb } = buckets(t);
  const limits = { burst: 500, refillPerSecond: 100_000 };
  t.equal((await tb.take('o', 'live', 1, limits)).allowed, true);
  await sleep(50); // would refill 5,000 tokens uncapped
  t.equal((await tb.take('o', 'live', 501, limits).catch((e: unknown) => e)) instanceof RangeError, true);
  const r = await tb.take('o', 'live', 500, limits);
  t.equal(r.allowed, true);
  t.equal(r.tokensLeft, 0, 'capped at burst: 500 taken leaves 0');
});

t.test('refund gives tokens back, never above burst', async (t) => {
  const { tb, prefix } = buckets(t);
  const limits = { burst: 1000, refillPerSecond: 0.001 };
  t.same(await tb.take('o', 'live', 800, limits), { allowed: true, tokensLeft: 200 });
  await tb.refund('o', 'live', 300, limits);
  t.equal(Math.floor(Number(await redis.hget(`${prefix}bucket:{o}:live`, 'tokens'))), 500, '200 + 300');
  t.equal((await tb.take('o', 'live', 501, limits)).allowed, false, 'not more than 500');
  await tb.refund('o', 'live', 5000, limits);
  t.equal(Number(await redis.hget(`${prefix}bucket:{o}:live`, 'tokens')), 1000, 'capped at burst');
  t.same(await tb.take('o', 'live', 1000, limits), { allowed: true, tokensLeft: 0 });
  t.equal((await tb.take('o', 'live', 1, limits)).allowed, false);
  // a refund on a bucket that does not exist yet (full) stays at burst
  await tb.refund('fresh', 'test', 10, limits);
  t.equal(Number(await redis.hget(`${prefix}bucket:{fresh}:test`, 'tokens')), 1000);
  t.same(await tb.take('fresh', 'test', 1000, limits), { allowed: true, tokensLeft: 0 });
  t.equal((await tb.take('fresh', 'test', 1, limits)).allowed, false);
});

t.test('cost > burst throws RangeError and takes nothing', async (t) => {
  const { tb } = buckets(t);
  const limits = { burst: 500, refillPerSecond: 0.001 };
  await t.rejects(tb.take('o', 'live', 501, limits), RangeError);
  await t.rejects(tb.take('o', 'live', 501, limits), { message: 'cost 501 exceeds burst 500' });
  t.same(await tb.take('o', 'live', 500, limits), { allowed: true, tokensLeft: 0 }, 'bucket untouched');
  // even when the bucket is empty, the answer is RangeError (never a Retry-After)
  await t.rejects(tb.take('o', 'live', 501, limits), RangeError);
});

t.test('the key expires (PTTL > 0 after a take), about when the bucket would be full', async (t) => {
  const { tb, prefix } = buckets(t);
  const limits = { burst: 1000, refillPerSecond: 100 };
  await tb.take('o', 'live', 500, limits);
  const pttl = await redis.pttl(`${prefix}bucket:{o}:live`);
  t.ok(pttl > 0, `PTTL ${pttl} > 0`);
  // 500 tokens at 100/s = 5 s to full, plus a second of slack
  t.ok(pttl > 5_000 && pttl <= 6_000, `PTTL ${pttl} ≈ 6,000 ms`);
  t.equal(tb.key('o', 'live'), `${prefix}bucket:{o}:live`);
  // a refused take writes nothing (and does not extend the TTL to infinity)
  await tb.take('o', 'live', 900, limits);
  t.ok((await redis.pttl(`${prefix}bucket:{o}:live`)) > 0);
});

t.test('NOSCRIPT recovery: after SCRIPT FLUSH the next take still works', async (t) => {
  const { tb } = buckets(t);
  const limits = { burst: 500, refillPerSecond: 0.001 };
  await tb.load();
  t.same(await tb.take('o', 'live', 100, limits), { allowed: true, tokensLeft: 400 });
  await redis.script('FLUSH');
  t.same(await tb.take('o', 'live', 100, limits), { allowed: true, tokensLeft: 300 }, 'reloaded and ran');
  await redis.script('FLUSH');
  await tb.refund('o', 'live', 200, limits);
  t.same(await tb.take('o', 'live', 500, limits), { allowed: true, tokensLeft: 0 }, 'refund after a flush worked too');
  // a bucket set that never loaded explicitly loads on first use
  const { tb: lazy } = buckets(t);
  t.same(await lazy.take('o', 'live', 1, limits), { allowed: true, tokensLeft: 499 });
});

t.test('property: decisions equal a model bucket when refill is negligible', async (t) => {
  const { tb } = buckets(t);
  const burst = 1_000_000;
  const limits = { burst, refillPerSecond: 1 };
  const cost = fc.oneof(fc.integer({ min: 1, max: burst }), fc.integer({ min: 1, max: 300_000 }), fc.integer({ min: 1, max: 1000 }));
  let run = 0;
  let refusals = 0;
  await fc.assert(
    fc.asyncProperty(fc.array(cost, { minLength: 1, maxLength: 12 }), async (costs) => {
      const org = `model${run++}`;
      let model = burst;
      const t0 = performance.now();
      for (const c of costs) {
        const r = await tb.take(org, 'live', c, limits);
        const expect = c <= model;
        if (expect) model -= c;
        else refusals++;
        if (r.allowed !== expect || r.tokensLeft !== model) {
          // refill of 1 token/s only matters if the sequence took ≥ 1 s
          if (performance.now() - t0 < 900) {
            throw new Error(`cost ${c}: real ${JSON.stringify(r)} vs model allowed=${expect} tokens=${model} (costs ${costs})`);
          }
        }
      }
    }),
    { numRuns: 30 },
  );
  t.ok(refusals > 0, `the runs exercised refusals (${refusals})`);
});

t.test('property: allowed tokens ≤ burst + rate × elapsed', async (t) => {
  const { tb } = buckets(t);
  const burst = 1000;
  const rate = 2000;
  const limits = { burst, refillPerSecond: rate };
  let run = 0;
  let refusals = 0;
  await fc.assert(
    fc.asyncProperty(fc.array(fc.integer({ min: 1, max: burst }), { minLength: 1, maxLength: 25 }), async (costs) => {
      const org = `sum${run++}`;
      let sum = 0;
      const t0 = performance.now();
      for (const c of costs) {
        const r = await tb.take(org, 'live', c, limits);
        if (r.allowed) sum += c;
        else if (!(r.retryAfterSeconds >= 1)) throw new Error(`refusal with Retry-After ${r.retryAfterSeconds}`);
        else refusals++;
      }
      const elapsedS = (performance.now() - t0) / 1000;
      const bound = burst + rate * elapsedS + 1e-6;
      if (sum > bound) throw new Error(`allowed ${sum} > ${bound} for ${costs}`);
      if (sum < costs[0]!) throw new Error('the first take on a fresh bucket (cost ≤ burst) must be allowed');
    }),
    { numRuns: 30 },
  );
  t.ok(refusals > 0, `the runs exercised refusals (${refusals})`);
});

// The admin API's minimum refill rate (0.001/s) keeps the script's integer replies and PEXPIRE
// argument in range even with the largest burst: waitMicros ≤ burst × 1e6 / rate = 1e18 < 2^63
// and the TTL ≤ burst × 1000 / rate + 1000 = 1e15 + 1000 ms.
t.test('tiny refill rates: refused by the admin API below 0.001/s, sane at the minimum', async (t) => {
  for (const rate of [0.0009999, 0.0005, 0.00001, 1e-12, Number.MIN_VALUE]) {
    const e = (() => {
      try {
        parseLimits({ burst: 1_000_000_000, refillPerSecond: rate });
      } catch (err) {
        return err as ApiError;
      }
      return null;
    })();
    t.equal(e?.code, 'INVALID_LIMITS', `refillPerSecond ${rate} refused`);
    t.equal(e?.details, `refillPerSecond: must be a number between 0.001 and 1000000000, got ${JSON.stringify(rate)}`);
  }

  const { tb, prefix } = buckets(t);
  const limits = parseLimits({ burst: 1_000_000_000, refillPerSecond: 0.001 }) as { burst: number; refillPerSecond: number };
  t.same(limits, { burst: 1_000_000_000, refillPerSecond: 0.001 }, 'the minimum rate with the largest burst is accepted');

  // take 6e8, then 5e8 with 4e8 left: refused with the time 1e8 tokens take at 0.001/s
  t.same(await tb.take('a', 'live', 600_000_000, limits), { allowed: true, tokensLeft: 400_000_000 }, 'take 6e8 of 1e9');
  const pttl = await redis.pttl(`${prefix}bucket:{a}:live`);
  t.ok(pttl > 6e14 - 60_000 && pttl <= 6e14 + 1000, `PEXPIRE set: PTTL ${pttl} ≈ 6e8 tokens / 0.001 per s = 6e14 ms`);
  const refused = await tb.take('a', 'live', 500_000_000, limits);
  t.equal(refused.allowed, false, 'take 5e8 with 4e8 left is refused (not a RangeError)');
  if (!refused.allowed) {
    t.equal(refused.tokensLeft, 400_000_000, '4e8 left');
    t.ok(Number.isFinite(refused.retryAfterSeconds) && refused.retryAfterSeconds > 0, `Retry-After ${refused.retryAfterSeconds} is positive and finite`);
    t.ok(Number.isInteger(refused.retryAfterSeconds), 'a whole number of seconds');
    // 1e8 tokens at 0.001/s = 1e11 s (less the refill of the few ms since the first take)
    t.ok(refused.retryAfterSeconds >= 1e11 - 100 && refused.retryAfterSeconds <= 1e11, `Retry-After ${refused.retryAfterSeconds} ≈ 1e11 s`);
  }
  t.equal(Math.floor(Number(await redis.hget(`${prefix}bucket:{a}:live`, 'tokens'))), 400_000_000, 'the refusal took nothing');

  // the extremes: drain the whole burst (largest TTL), then ask for all of it (largest wait)
  t.same(await tb.take('b', 'live', 1_000_000_000, limits), { allowed: true, tokensLeft: 0 }, 'take the whole 1e9 burst');
  const fullPttl = await redis.pttl(`${prefix}bucket:{b}:live`);
  t.ok(fullPttl > 1e15 - 60_000 && fullPttl <= 1e15 + 1000, `PEXPIRE of the largest TTL set: PTTL ${fullPttl} ≈ 1e15 ms`);
  const all = await tb.take('b', 'live', 1_000_000_000, limits);
  t.equal(all.allowed, false, 'the whole burst again: refused');
  if (!all.allowed) t.ok(all.retryAfterSeconds > 1e12 - 100 && all.retryAfterSeconds <= 1e12, `Retry-After ${all.retryAfterSeconds} ≈ 1e12 s`);
  await t.rejects(tb.take('b', 'live', 1_000_000_001, limits), RangeError, 'cost > burst is still a RangeError');
  // a refund on the drained bucket works and re-arms the TTL
  await tb.refund('b', 'live', 1000, limits);
  t.equal(Math.floor(Number(await redis.hget(`${prefix}bucket:{b}:live`, 'tokens'))), 1000, 'refund of 1000 on an empty bucket');
  t.same(await tb.take('b', 'live', 1000, limits), { allowed: true, tokensLeft: 0 });
  t.ok((await redis.pttl(`${prefix}bucket:{b}:live`)) > 1e15 - 60_000, 'the TTL is set again after the take');
});
