/**
 * The Redis watchdog (src/ratelimit/connect.ts watchRedis): a connection whose pings keep
 * failing — here a server that accepts connections and never answers, as a hung primary
 * does — is dropped and made again once it has failed for the set time; a healthy one is
 * never touched; a connection that ended (status `end`, where ioredis never reconnects by
 * itself) while the watchdog runs is connected again, and one closed after `stop()` is not.
 */
import t from 'tap';
import net from 'node:net';
import { Redis } from 'ioredis';
import { watchRedis } from '../../src/ratelimit/connect.js';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test('a connection that never answers is made again after the stuck time, and again only after as long', async (t) => {
  let connections = 0;
  const sockets: net.Socket[] = [];
  const silent = net.createServer((s) => {
    connections++;
    sockets.push(s);
  });
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  const port = (silent.address() as net.AddressInfo).port;
  const redis = new Redis({ port, host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 1, lazyConnect: true, retryStrategy: () => 100 });
  redis.on('error', () => undefined);
  redis.connect().catch(() => undefined);
  // How long the pings had been failing at each forced reconnect, by the watchdog's own clock
  // (a second Date.now() read here could fall a millisecond after the watchdog's and make 600 ms
  // look like 599: CI once failed so). The server never answers, so the failing run never ends.
  const forcedAfter: number[] = [];
  const w = watchRedis(redis, { everyMs: 100, stuckMs: 600, onForce: (failingMs) => forcedAfter.push(failingMs) });
  t.teardown(async () => {
    w.stop();
    redis.disconnect();
    for (const s of sockets) s.destroy();
    await new Promise((r) => silent.close(r));
  });
  for (let i = 0; i < 100 && w.forced() < 2; i++) await sleep(50);
  t.ok(w.forced() >= 2, `reconnected from scratch (${w.forced()} times)`);
  t.ok(forcedAfter[0]! >= 600, `not before the pings had failed for the stuck time (failing for ${forcedAfter[0]} ms)`);
  t.ok(forcedAfter[1]! - forcedAfter[0]! >= 600, `the next one no sooner than as long again (${forcedAfter[1]! - forcedAfter[0]!} ms)`);
  t.ok(connections >= 2, `each time a new connection (${connections})`);
});

t.test('a healthy connection is never made again', async (t) => {
  const redis = new Redis(REDIS_URL, { enableOfflineQueue: false, lazyConnect: true });
  await redis.connect();
  const w = watchRedis(redis, { everyMs: 50, stuckMs: 200 });
  t.teardown(() => {
    w.stop();
    redis.disconnect();
  });
  await sleep(1_000);
  t.equal(w.forced(), 0);
  t.equal(await redis.ping(), 'PONG');
});

t.test('a connection that ended is connected again; after stop() it stays closed', async (t) => {
  const redis = new Redis(REDIS_URL, { enableOfflineQueue: false, lazyConnect: true, retryStrategy: () => 50 });
  redis.on('error', () => undefined);
  await redis.connect();
  const w = watchRedis(redis, { everyMs: 100, stuckMs: 5_000 });
  t.teardown(() => {
    w.stop();
    redis.disconnect();
  });
  // ioredis's own end (what a failed Sentinel resolution leaves): no reconnection of its own.
  const ended = new Promise((r) => redis.once('end', r));
  redis.disconnect();
  await ended;
  for (let i = 0; i < 60 && redis.status !== 'ready'; i++) await sleep(50);
  t.equal(redis.status, 'ready', 'connected again');
  t.equal(w.revived(), 1, 'once');
  t.equal(await redis.ping(), 'PONG');
  t.equal(w.forced(), 0, 'no forced reconnection: the pings did not fail for the stuck time');

  w.stop();
  redis.disconnect();
  await sleep(400);
  t.equal(redis.status, 'end', 'closed on purpose after stop(): stays closed');
  t.equal(w.revived(), 1);
});
