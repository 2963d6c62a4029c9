/**
 * Analytics concurrency slots against the real Redis (src/ratelimit/slots.ts and the
 * acquire/renew Lua scripts): the limit, renewal of live holders, and slots of dead
 * holders freeing themselves.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { ConcurrencySlots } from '../../src/ratelimit/slots.js';
import { LuaScript } from '../../src/ratelimit/scripts.js';

const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
t.teardown(() => void redis.disconnect());

function slots(t: { teardown(fn: () => unknown): void }, leaseMs: number): ConcurrencySlots {
  const prefix = `test:unit:${randomBytes(6).toString('hex')}:`;
  t.teardown(async () => {
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
  });
  return new ConcurrencySlots(redis, prefix, leaseMs);
}

t.test('at most `limit` holders; a release frees a slot at once', async (t) => {
  const s = slots(t, 10_000);
  const held = await Promise.all([s.acquire('org_a', 'live', 3), s.acquire('org_a', 'live', 3), s.acquire('org_a', 'live', 3)]);
  t.ok(held.every((h) => h !== null));
  t.equal(await s.acquire('org_a', 'live', 3), null, 'the fourth is refused');
  t.not(await s.acquire('org_b', 'live', 1), null, 'another organization has its own slots');
  t.not(await s.acquire('org_a', 'test', 1), null, 'and so has the test mode');
  await held[0]!.release();
  await held[0]!.release();
  const again = await s.acquire('org_a', 'live', 3);
  t.not(again, null, 'released (twice: idempotent) → free');
  t.equal(await s.acquire('org_a', 'live', 3), null);
  for (const h of [...held.slice(1), again]) await h!.release();
});

t.test('concurrent acquirers never exceed the limit', async (t) => {
  const s = slots(t, 10_000);
  const got = await Promise.all(Array.from({ length: 50 }, () => s.acquire('org_c', 'live', 7)));
  t.equal(got.filter((g) => g !== null).length, 7);
  for (const g of got) await g?.release();
});

t.test('a live holder keeps its slot past the lease by renewing it', async (t) => {
  // A 1 s lease, renewed every third of it: a pause of the test process or Redis under 600 ms changes nothing.
  const s = slots(t, 1_000);
  const h = await s.acquire('org_d', 'live', 1);
  t.not(h, null);
  await sleep(3_500);
  t.equal(await s.acquire('org_d', 'live', 1), null, 'still held after three leases');
  await h!.release();
  const next = await s.acquire('org_d', 'live', 1);
  t.not(next, null);
  await next!.release();
});

t.test('the slot of a holder that died frees itself when its lease ends', async (t) => {
  const s = slots(t, 1_000);
  // What a crashed process leaves behind: a lease nobody renews.
  const acquire = new LuaScript(redis, 'acquire-slot', 1);
  t.same(await acquire.run([s.key('org_e', 'live')], [1, 1_000, 'dead-holder']), [1, 1]);
  t.equal(await s.acquire('org_e', 'live', 1), null, 'taken while the lease runs');
  await sleep(1_300);
  const h = await s.acquire('org_e', 'live', 1);
  t.not(h, null, 'free once the lease ended');
  await h!.release();
  t.ok((await redis.pttl(s.key('org_e', 'live'))) <= 1_000, 'the key itself expires');
});
