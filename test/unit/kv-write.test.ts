/**
 * Batched compare-and-set KV writes (src/bus/kv-write.ts) against real JetStream: creates
 * (revision 0) and updates at the revision read return the new revisions `kv.get` then
 * reports; a write at a stale revision, or a create of an existing key, is a KvWriteConflict
 * naming the keys, while the other writes of the call are stored; a bucket with no stream
 * behind it is a KvWriteError.
 */
import t from 'tap';
import { scratchBucket } from '../helpers/bus.js';
import { KvWriteConflict, KvWriteError, PublishKvWriter, kvWriter } from '../../src/bus/kv-write.js';

const { nc, jsm, kv, name } = await scratchBucket(t, 'kvwrite');
const writer = kvWriter(kv, 5_000);

t.test('creates and updates at the revision read; the revisions are those kv.get reports', async (t) => {
  t.ok(writer instanceof PublishKvWriter, "a bucket opened by Kvm: writes through its connection's reply subscription");
  const [a, b] = await writer.writeMany([
    { key: 'x.a', value: '{"n":1}', revision: 0 },
    { key: 'x.b', value: new TextEncoder().encode('bytes'), revision: 0 },
  ]);
  t.equal((await kv.get('x.a'))?.revision, a);
  t.equal((await kv.get('x.b'))?.string(), 'bytes');
  const [a2] = await writer.writeMany([{ key: 'x.a', value: '{"n":2}', revision: a! }]);
  t.ok(a2! > a!, 'a new revision');
  t.same((await kv.get('x.a'))?.json(), { n: 2 });
});

t.test('a stale revision or a create of an existing key: a conflict naming them, the others stored', async (t) => {
  const [r] = await writer.writeMany([{ key: 'y.a', value: '1', revision: 0 }]);
  await writer.writeMany([{ key: 'y.a', value: '2', revision: r! }]);
  const err = await writer
    .writeMany([
      { key: 'y.a', value: 'stale', revision: r! },
      { key: 'y.b', value: 'fresh', revision: 0 },
      { key: 'y.a', value: 'again', revision: 0 },
    ])
    .catch((e: unknown) => e);
  t.ok(err instanceof KvWriteConflict, String(err));
  t.same((err as KvWriteConflict).keys, ['y.a', 'y.a']);
  t.equal((await kv.get('y.a'))?.string(), '2', 'the conflicting writes stored nothing');
  t.equal((await kv.get('y.b'))?.string(), 'fresh', 'the other write of the call was stored');
});

t.test('no stream behind the bucket: a KvWriteError, not a conflict', async (t) => {
  const gone = new PublishKvWriter(nc, `${name}_none`, 1_000);
  const err = await gone.writeMany([{ key: 'k', value: 'v', revision: 0 }]).catch((e: unknown) => e);
  t.ok(err instanceof KvWriteError, String(err));
});
