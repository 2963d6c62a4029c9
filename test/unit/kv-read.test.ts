/**
 * Batched KV reads (src/bus/kv-read.ts) against the real JetStream KV: the answers equal
 * `kv.get`'s for present, missing, deleted and purged keys, many keys at once, the revision a
 * compare-and-set update needs, a bucket without its stream, no answer within the timeout.
 * The test makes its own buckets `TUNIT<random>_kvread…` and deletes their streams at the end.
 */
import t from 'tap';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { scratchBucket } from '../helpers/bus.js';
import { DirectKvReader, KvReadError, LeaderKvReader, kvReader } from '../../src/bus/kv-read.js';

const { nc, js, jsm, kv, name, scratch } = await scratchBucket(t, 'kvread');
const reader = kvReader(kv);

t.test('the bucket allows direct gets: the reader is the direct one', async (t) => {
  t.ok(reader instanceof DirectKvReader, 'a bucket made by Kvm on this server has allow_direct');
  t.equal((await jsm.streams.info(`KV_${name}`)).config.allow_direct, true);
});

t.test('present, missing, deleted and purged keys, in one call, as kv.get answers them', async (t) => {
  const r1 = await kv.put('a.present', '{"n":1}');
  const r2 = await kv.put('b.present', 'second');
  await kv.put('c.deleted', 'gone');
  await kv.delete('c.deleted');
  await kv.put('d.purged', 'gone too');
  await kv.purge('d.purged');
  await kv.put('e.empty', '');
  const got = await reader.getMany(['a.present', 'missing.key', 'b.present', 'c.deleted', 'd.purged', 'e.empty', 'a.present']);
  t.equal(got.length, 7, 'one answer per key, in order');
  t.equal(got[0]?.string(), '{"n":1}');
  t.same(got[0]?.json(), { n: 1 });
  t.equal(got[0]?.revision, r1, 'the revision is the message sequence kv.put returned');
  t.equal(got[0]?.key, 'a.present');
  t.equal(got[0]?.bucket, name);
  t.equal(got[0]?.operation, 'PUT');
  t.equal(got[1], null, 'never written: null');
  t.equal(got[2]?.string(), 'second');
  t.equal(got[2]?.revision, r2);
  t.equal(got[3], null, 'deleted: null');
  t.equal(got[4], null, 'purged: null');
  t.equal(got[5]?.length, 0, 'an empty value is a present key of length 0 (as kv.get)');
  t.equal(got[6]?.revision, r1, 'a key asked twice is answered twice');
  const viaKv = await kv.get('a.present');
  t.ok(Number.isFinite(got[0]?.created.getTime()), 'the creation time is a date');
  t.equal(got[0]?.created.getTime(), viaKv?.created.getTime(), 'the same creation time as kv.get');
  t.same(await reader.getMany([]), [], 'no keys: no answers');
  t.equal((await reader.get('b.present'))?.string(), 'second', 'get of one key');
  t.equal(await reader.get('missing.key'), null);
});

t.test('the revision read serves a compare-and-set update; a stale one is refused', async (t) => {
  await kv.put('cas.key', 'v1');
  const e = await reader.get('cas.key');
  const next = await kv.update('cas.key', 'v2', e!.revision);
  t.equal((await reader.get('cas.key'))?.revision, next, 'the new revision is read back');
  await t.rejects(kv.update('cas.key', 'v3', e!.revision), /wrong last sequence/i, 'the old revision is refused');
  t.equal((await reader.get('cas.key'))?.string(), 'v2');
});

t.test('many keys at once: 1,000 present and 1,000 missing, each its own value', async (t) => {
  const n = 1_000;
  const revs = new Map<string, number>();
  for (let i = 0; i < n; i += 100) {
    await Promise.all(Array.from({ length: 100 }, async (_, j) => revs.set(`many.${i + j}`, await kv.put(`many.${i + j}`, `value-${i + j}`))));
  }
  const keys = Array.from({ length: 2 * n }, (_, i) => (i % 2 === 0 ? `many.${i / 2}` : `absent.${i}`));
  const got = await reader.getMany(keys);
  let right = 0;
  keys.forEach((k, i) => {
    const e = got[i];
    if (i % 2 === 0 ? e?.string() === `value-${i / 2}` && e.revision === revs.get(k) : e === null) right++;
  });
  t.equal(right, 2 * n, 'every answer belongs to its own key');
});

t.test('keys that are not KV keys are refused before anything is sent', async (t) => {
  for (const bad of ['a.*', 'a.>', 'with space', '.lead', 'trail.', '']) {
    await t.rejects(reader.getMany(['a.present', bad]), KvReadError, JSON.stringify(bad));
  }
});

t.test('a bucket without its stream: no answer, the call rejects after the timeout', async (t) => {
  const gone = scratch('kvreadgone');
  // No timeout given: the JetStream client's (500 ms here), as kv.get uses.
  const kv2 = await new Kvm(jetstream(nc, { timeout: 500 })).create(gone, { history: 1 });
  const r = kvReader(kv2);
  await kv2.put('k', 'v');
  t.equal((await r.get('k'))?.string(), 'v');
  await jsm.streams.delete(`KV_${gone}`);
  await t.rejects(r.getMany(['k', 'other']), /no answer from JetStream within 500 ms .*is the bucket's stream there\?/);
});

t.test('no answer within the timeout: the call rejects; late answers are ignored', async (t) => {
  const silent = scratch('silent'); // never made: its gets go unanswered
  const held: { respond(data: Uint8Array): boolean }[] = [];
  const sub = nc.subscribe(`$JS.API.DIRECT.GET.KV_${silent}.>`, { callback: (_err, m) => void held.push(m) });
  t.teardown(() => sub.unsubscribe());
  await nc.flush();
  const r = new DirectKvReader(nc, silent, `KV_${silent}`, '$JS.API', 300);
  await t.rejects(r.getMany(['x', 'y']), /no answer from JetStream within 300 ms/);
  t.equal(held.length, 2, 'both gets were sent');
  for (const m of held) m.respond(new TextEncoder().encode('late'));
  await nc.flush();
  t.equal((await reader.get('a.present'))?.string(), '{"n":1}', "the connection's reads still work after the late answers");
});

t.test('a bucket without allow_direct is read with kv.get per key, same answers', async (t) => {
  const plain = scratch('kvreadplain');
  const kv3 = await new Kvm(js).create(plain, { history: 1 });
  await jsm.streams.update(`KV_${plain}`, { allow_direct: false });
  const bound = await new Kvm(js).open(plain);
  const r = kvReader(bound);
  t.notOk(r instanceof DirectKvReader, 'not the direct reader');
  const rev = await kv3.put('p', 'v');
  await kv3.put('d', 'x');
  await kv3.delete('d');
  const got = await r.getMany(['p', 'd', 'none']);
  t.equal(got[0]?.string(), 'v');
  t.equal(got[0]?.revision, rev);
  t.same(got.slice(1), [null, null], 'deleted and missing: null');
});

t.test('leader reads (LeaderKvReader): the same answers as direct gets, through the stream leader', async (t) => {
  const leader = kvReader(kv, undefined, { leader: true });
  t.ok(leader instanceof LeaderKvReader);
  const r1 = await kv.put('l.present', '{"n":2}');
  await kv.put('l.deleted', 'x');
  await kv.delete('l.deleted');
  await kv.put('l.purged', 'y');
  await kv.purge('l.purged');
  await kv.put('l.empty', '');
  const keys = ['l.present', 'l.missing', 'l.deleted', 'l.purged', 'l.empty'];
  const [viaLeader, viaDirect] = await Promise.all([leader.getMany(keys), reader.getMany(keys)]);
  t.same(viaLeader.map((e) => e && [e.string(), e.revision, e.key, e.length]), viaDirect.map((e) => e && [e.string(), e.revision, e.key, e.length]), 'value, revision, key and length alike');
  t.equal(viaLeader[0]?.revision, r1);
  t.same(viaLeader[0]?.json(), { n: 2 });
  t.equal(viaLeader[0]?.created.getTime(), viaDirect[0]?.created.getTime(), 'the same creation time');
  t.same(viaLeader.slice(1, 4), [null, null, null], 'missing, deleted, purged: null');
  await t.rejects(leader.getMany(['bad key']), KvReadError, 'a key that is not one');
  // The revision serves a compare-and-set.
  const next = await kv.update('l.present', 'v2', viaLeader[0]!.revision);
  t.equal((await leader.get('l.present'))?.revision, next);
});

t.test('leader reads of a bucket without its stream: a clear error, not a hang', async (t) => {
  const other = scratch('kvgone');
  const gone = await new Kvm(js).create(other, { history: 1 });
  const leader = kvReader(gone, 1_000, { leader: true });
  await jsm.streams.delete(`KV_${other}`);
  await t.rejects(leader.get('a'), KvReadError);
});

t.test('with markers: a deleted or purged key is its marker, whose revision a compare-and-set writes over', async (t) => {
  await kv.put('m.deleted', 'a');
  await kv.delete('m.deleted');
  await kv.put('m.purged', 'b');
  await kv.purge('m.purged');
  for (const r of [reader, kvReader(kv, undefined, { leader: true })]) {
    const [del, pur, none, live] = await r.getMany(['m.deleted', 'm.purged', 'm.none', 'a.present'], { markers: true });
    t.equal(del?.operation, 'DEL');
    t.equal(del?.length, 0);
    t.equal(pur?.operation, 'DEL', 'a purge marker too');
    t.equal(none, null, 'never written: still null');
    t.equal(live?.operation, 'PUT');
    t.same(await r.getMany(['m.deleted', 'm.purged']), [null, null], 'without markers: null, as before');
  }
  const [del] = await reader.getMany(['m.deleted'], { markers: true });
  const next = await kv.update('m.deleted', 'c', del!.revision);
  t.equal((await reader.get('m.deleted'))?.revision, next, "the marker's revision does");
});
