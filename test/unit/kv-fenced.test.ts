/**
 * Reads kept while a bucket is unchanged (src/bus/kv-fenced.ts), against real JetStream: a
 * key read once is answered from memory while the bucket's stream state is the same; any
 * write (to any key), delete or stream purge makes the next use read again and see it; calls
 * of one tick share one state request, a later call asks again; an answer under a state older
 * than the cache's is neither taken from nor kept in it.
 */
import t from 'tap';
import { scratchBucket } from '../helpers/bus.js';
import { kvReader, kvStream, type KvReader } from '../../src/bus/kv-read.js';
import { FencedKvCache, streamState, type StreamState } from '../../src/bus/kv-fenced.js';

const { nc, jsm, kv, name } = await scratchBucket(t, 'kvfenced');
const s = kvStream(kv)!;

/** The bucket's reader, counting the keys it is asked for. */
function counting(): { reader: KvReader; asked: string[] } {
  const inner = kvReader(kv);
  const asked: string[] = [];
  return {
    asked,
    reader: {
      getMany: (keys) => (asked.push(...keys), inner.getMany(keys)),
      get: (key) => (asked.push(key), inner.get(key)),
    },
  };
}

t.test('answers from memory while the bucket is unchanged; any change, delete or purge reads again', async (t) => {
  const { reader, asked } = counting();
  let states = 0;
  const cache = new FencedKvCache(reader, () => (states++, streamState(s.nc, s.apiPrefix, s.stream, 5_000)));
  await kv.put('a', '1');
  await kv.put('b', '1');
  const read = async (keys: string[]) => (await (await cache.view()).getMany(keys)).map((e) => e?.string() ?? null);

  t.same(await read(['a', 'b', 'none']), ['1', '1', null]);
  t.same(asked, ['a', 'b', 'none']);
  t.same(await read(['a', 'none']), ['1', null], 'again, unchanged');
  t.same(asked, ['a', 'b', 'none'], 'from memory: nothing read (an absent key included)');

  await kv.put('other', 'x');
  t.same(await read(['a']), ['1']);
  t.same(asked.slice(3), ['a'], 'a write to another key: read again');
  await kv.put('a', '2');
  t.same(await read(['a']), ['2'], 'its own change seen');
  await kv.delete('b');
  t.same(await read(['b']), [null], 'a delete seen');
  await kv.put('c', '1');
  t.same(await read(['c']), ['1']);
  await jsm.streams.purge(`KV_${name}`, { filter: `$KV.${name}.c` });
  t.same(await read(['c']), [null], 'a purge of the stream (no new message) seen');

  const before = states;
  const [v1, v2] = await Promise.all([cache.view(), cache.view()]);
  t.equal(states - before, 1, 'two calls of one tick: one state request');
  await cache.view();
  t.equal(states - before, 2, 'a later call asks again');
  t.ok(v1 && v2);
});

t.test('an answer under an older state than the cache holds is not taken from the cache, nor kept', async (t) => {
  const { reader, asked } = counting();
  await kv.put('d', 'old');
  const queue: StreamState[] = [{ key: 'new', last: 10, first: 1, created: 'c' }, { key: 'old', last: 9, first: 1, created: 'c' }, { key: 'new', last: 10, first: 1, created: 'c' }];
  const cache = new FencedKvCache(reader, async () => queue.shift()!);
  const newer = await cache.view();
  t.same((await newer.getMany(['d'])).map((e) => e?.string()), ['old']);
  const older = await cache.view();
  await kv.put('d', 'changed');
  t.same((await older.getMany(['d'])).map((e) => e?.string()), ['changed'], 'read, not answered from the newer state’s entries');
  t.same(asked, ['d', 'd']);
  const again = await cache.view();
  t.same((await again.getMany(['d'])).map((e) => e?.string()), ['old'], "the newer state's entry is what the cache holds (the fake state says nothing changed)");
  t.same(asked, ['d', 'd'], "and the older state's answer was not kept over it");
});
