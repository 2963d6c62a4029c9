/**
 * Token buckets and analytics slots on a real Redis Cluster: 3 primaries (`redis-server
 * --cluster-enabled yes` ×3 on loopback ports, joined by `redis-cli --cluster create`),
 * never the machine's own Redis.
 *
 * - every key every script touches hashes to one slot per organization, for random ids
 *   (CLUSTER KEYSLOT, asked of the cluster itself);
 * - the Lua scripts touch no key but KEYS[1];
 * - NOSCRIPT on the node owning a key (the script was never loaded there, or flushed) is
 *   answered by running it there;
 * - the service configured with REDIS_CLUSTER_NODES keeps the 429 contract and the
 *   analytics concurrency limit for organizations whose keys live on different nodes.
 */
import t from 'tap';
import fc from 'fast-check';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { Cluster } from 'ioredis';
import { startCluster, type LocalCluster } from '../../bench/lib/redis-topology.js';
import { bucketKey, orgKeys, slotsKey } from '../../src/ratelimit/keys.js';
import { TokenBuckets } from '../../src/ratelimit/bucket.js';
import { ConcurrencySlots } from '../../src/ratelimit/slots.js';
import { LuaScript } from '../../src/ratelimit/scripts.js';
import { ServiceProcess, batch, cleanup, createOrg, http, isolation, sendBatch } from '../helpers/service.js';

let cluster: LocalCluster;
let client: Cluster;

t.before(async () => {
  cluster = await startCluster(3);
  client = new Cluster(cluster.addrs, { redisOptions: { maxRetriesPerRequest: 2 } });
  await new Promise<void>((resolve, reject) => {
    client.once('ready', resolve);
    client.once('error', reject);
  });
});
t.teardown(async () => {
  client?.disconnect();
  await cluster?.stop();
});

const keyslot = (key: string): Promise<number> => cluster.nodes[0]!.command<number>('CLUSTER', 'KEYSLOT', key);

/** The node (port) serving a slot, from CLUSTER SLOTS. */
async function ownerOf(slot: number): Promise<number> {
  const ranges = await cluster.nodes[0]!.command<[number, number, [string, number]][]>('CLUSTER', 'SLOTS');
  const r = ranges.find(([lo, hi]) => slot >= lo && slot <= hi);
  if (!r) throw new Error(`no node serves slot ${slot}`);
  return Number(r[2][1]);
}

t.test('every key of an organization hashes to one slot, for random organization ids and prefixes', async (t) => {
  const slotsSeen = new Set<number>();
  await fc.assert(
    fc.asyncProperty(fc.string({ minLength: 1, maxLength: 40, unit: 'binary' }), fc.stringMatching(/^[A-Za-z0-9:_-]{1,64}$/), async (org, prefix) => {
      const keys = orgKeys(prefix, org);
      const slots = await Promise.all(keys.map(keyslot));
      slotsSeen.add(slots[0]!);
      return slots.every((s) => s === slots[0]);
    }),
    { numRuns: 300 },
  );
  t.ok(slotsSeen.size > 100, `organizations spread over many slots (${slotsSeen.size} distinct of 300 ids)`);
  // The classes use exactly these keys.
  const tb = new TokenBuckets(client, 'p:');
  const cs = new ConcurrencySlots(client, 'p:');
  t.equal(tb.key('o', 'live'), bucketKey('p:', 'o', 'live'));
  t.equal(cs.key('o', 'test'), slotsKey('p:', 'o', 'test'));
  t.same(orgKeys('p:', 'o').sort(), ['p:analytics-slots:{o}:live', 'p:analytics-slots:{o}:test', 'p:bucket:{o}:live', 'p:bucket:{o}:test']);
});

t.test('the Lua scripts take one key each and touch no other', async (t) => {
  const dir = fileURLToPath(new URL('../../src/ratelimit/lua/', import.meta.url));
  const files = readdirSync(dir).filter((f) => f.endsWith('.lua'));
  t.ok(files.length >= 3);
  for (const f of files) {
    t.match(f, /-1\.lua$/, `${f} declares one key`);
    const src = readFileSync(dir + f, 'utf8').replace(/--\[\[[\s\S]*?\]\]/g, '').replace(/--.*$/gm, '');
    const calls = [...src.matchAll(/redis\.call\(\s*'([A-Z]+)'\s*(?:,\s*([^,)]+))?/g)];
    t.ok(calls.length > 0, `${f} calls Redis`);
    for (const [, cmd, first] of calls) {
      if (cmd === 'TIME') continue;
      t.equal(first?.trim(), 'KEYS[1]', `${f}: ${cmd} acts on KEYS[1]`);
    }
  }
});

t.test('NOSCRIPT on the node owning the key: the script runs there anyway', async (t) => {
  const prefix = `test:cl:${randomBytes(4).toString('hex')}:`;
  const tb = new TokenBuckets(client, prefix);
  const script = new LuaScript(client, 'take-tokens', 1);
  const cached = () => Promise.all(cluster.nodes.map((n) => n.command<number[]>('SCRIPT', 'EXISTS', script.sha).then((x) => x[0])));
  await Promise.all(cluster.nodes.map((n) => n.command('SCRIPT', 'FLUSH')));
  const owners = new Set<number>();
  for (let i = 0; i < 6; i++) owners.add(await ownerOf(await keyslot(tb.key(`org${i}`, 'live'))));
  t.ok(owners.size >= 2, `six organizations on ${owners.size} nodes`);
  // Never loaded anywhere: every first EVALSHA meets NOSCRIPT on the owning node.
  for (let i = 0; i < 6; i++) t.equal((await tb.take(`org${i}`, 'live', 10, { burst: 500, refillPerSecond: 1 })).allowed, true, `never loaded: org${i}`);
  const after = await cached();
  t.same(after, cluster.nodes.map((n) => (owners.has(n.port) ? 1 : 0)), 'EVAL cached the script exactly on the nodes owning the keys');
  // Loaded everywhere, then flushed on one node only.
  await tb.load();
  const victim = cluster.nodes.find((n) => owners.has(n.port))!;
  await victim.command('SCRIPT', 'FLUSH');
  for (let i = 0; i < 6; i++) t.equal((await tb.take(`org${i}`, 'live', 10, { burst: 500, refillPerSecond: 1 })).allowed, true, `flushed on ${victim.port}: org${i}`);
  t.same(await cached(), [1, 1, 1], 'cached again on the flushed node');
  await Promise.all(cluster.nodes.map((n) => n.command('SCRIPT', 'FLUSH')));
  await tb.load();
  const everywhere = await Promise.all(cluster.nodes.map((n) => n.command<number[]>('SCRIPT', 'EXISTS', script.sha)));
  t.same(everywhere, [[1], [1], [1]], 'load() registers it on every primary');
});

t.test('analytics slots on the cluster: the limit per organization, release', async (t) => {
  const cs = new ConcurrencySlots(client, `test:cl:${randomBytes(4).toString('hex')}:`, 10_000);
  const orgs = ['a', 'b', 'c', 'd', 'e', 'f'];
  const nodes = new Set(await Promise.all(orgs.map(async (o) => ownerOf(await keyslot(cs.key(o, 'live'))))));
  t.ok(nodes.size >= 2, `the organizations' keys are on ${nodes.size} nodes`);
  for (const o of orgs) {
    const held = [await cs.acquire(o, 'live', 2), await cs.acquire(o, 'live', 2)];
    t.ok(held.every((h) => h !== null), `${o}: two slots`);
    t.equal(await cs.acquire(o, 'live', 2), null, `${o}: the third is refused`);
    await held[0]!.release();
    const again = await cs.acquire(o, 'live', 2);
    t.not(again, null, `${o}: a release frees a slot`);
    await again!.release();
    await held[1]!.release();
    t.equal(await client.zcard(cs.key(o, 'live')), 0);
  }
});

t.test('the service on the cluster: 429 contract and analytics concurrency for organizations on several nodes', async (t) => {
  const iso = isolation('rediscluster');
  const svc = new ServiceProcess(iso, { REDIS_CLUSTER_NODES: cluster.addrs.map((a) => `${a.host}:${a.port}`).join(','), ANALYTICS_TIMEOUT_MS: '1500' });
  t.teardown(async () => {
    await svc.stop();
    const keys = (await Promise.all(client.nodes('master').map((n) => n.keys(`${iso.redisPrefix}*`)))).flat();
    for (const k of keys) await client.del(k);
    await cleanup(iso);
  });
  await svc.start();
  t.equal((await http(svc.url, 'GET', '/readyz')).status, 200, 'ready with the cluster');

  // Six organizations whose buckets are on at least two nodes: organization ids are random, so
  // six of them all hash to one of the three primaries now and then (1 time in 243); more are
  // made until two nodes hold some, and the first six of those kept.
  const orgs: Awaited<ReturnType<typeof createOrg>>[] = [];
  const owners: number[] = [];
  while ((orgs.length < 6 || new Set(owners).size < 2) && orgs.length < 30) {
    const o = await createOrg(svc.url, { burst: 500, refillPerSecond: 0.01, analyticsConcurrency: 1 });
    orgs.push(o);
    owners.push(await ownerOf(await keyslot(bucketKey(iso.redisPrefix, o.id, 'live'))));
  }
  if (orgs.length > 6) {
    // Keep the first five and one on another node than the first.
    const other = owners.findIndex((p) => p !== owners[0]);
    const keep = [0, 1, 2, 3, 4, other >= 5 ? other : 5];
    orgs.splice(0, orgs.length, ...keep.map((i) => orgs[i]!));
    owners.splice(0, owners.length, ...keep.map((i) => owners[i]!));
  }
  t.ok(new Set(owners).size >= 2, `buckets on ${new Set(owners).size} nodes (${owners.join(', ')})`);

  for (const [i, o] of orgs.entries()) {
    const ok = await sendBatch(svc.url, o.live, batch(500));
    t.equal(ok.status, 202, `org ${i}: 500 signals within the burst`);
    const no = await sendBatch(svc.url, o.live, batch(1));
    t.equal(no.status, 429, `org ${i}: one more is refused`);
    t.equal(no.body.code, 'RATE_LIMIT_EXCEEDED');
    t.ok(Number(no.headers.get('retry-after')) >= 1, `org ${i}: Retry-After`);
    t.equal(Math.floor(Number(await client.hget(bucketKey(iso.redisPrefix, o.id, 'live'), 'tokens'))), 0, `org ${i}: the bucket lives on the cluster`);
    t.equal((await sendBatch(svc.url, o.test, batch(500))).status, 202, `org ${i}: test mode has its own bucket`);
  }

  // Analytics: one slow query holds the only slot of two organizations on different nodes.
  const pair = [orgs[0]!, orgs[owners.findIndex((p) => p !== owners[0])]!];
  const slow = 'SELECT count() FROM numbers(1000000000) WHERE sipHash64(toString(number)) = 0';
  const q = (key: string, query: string) => http(svc.url, 'POST', '/api/v2/analytics/query', { token: key, body: { query } });
  const running = pair.map((o) => q(o.live, slow));
  await new Promise((r) => setTimeout(r, 400));
  for (const o of pair) {
    const second = await q(o.live, 'SELECT 1');
    t.equal(second.status, 429, 'a second query waits for the slot');
    t.equal(second.body.code, 'CONCURRENCY_LIMIT_EXCEEDED');
  }
  for (const r of await Promise.all(running)) t.equal(r.status, 408, 'the slow query hit the time limit');
  for (const o of pair) {
    const after = await (async () => {
      for (let i = 0; i < 50; i++) {
        const r = await q(o.live, 'SELECT 1');
        if (r.status === 200) return r;
        await new Promise((res) => setTimeout(res, 200));
      }
      return q(o.live, 'SELECT 1');
    })();
    t.equal(after.status, 200, 'the slot is free once the engine is done');
  }
  t.notMatch(svc.output, /"level":"error"/, 'no error logged');
});
