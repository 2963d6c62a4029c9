/**
 * The request-body pool (src/http/body-pool.ts): exact sizes, reuse of released buffers by
 * size class, and the rules that keep a buffer from ever serving two requests at once — only
 * buffers it lent are taken back, each once; small bodies are not pooled; the free lists are
 * bounded. (That the ingress releases a body only after the stream's ack is checked end to end
 * in test/api/ingest.test.ts.)
 */
import t from 'tap';
import { BodyPool, POOL_MIN_BYTES } from '../../src/http/body-pool.js';

t.test('sizes: exact length, small bodies not pooled', async (t) => {
  const pool = new BodyPool();
  t.equal(pool.acquire(POOL_MIN_BYTES - 1), null, 'below the floor: the caller allocates');
  const a = pool.acquire(132_009)!;
  t.equal(a.length, 132_009, 'exactly the size asked');
  t.equal(a.buffer.byteLength, 262_144, 'backed by a power-of-two buffer of its own');
  const b = pool.acquire(POOL_MIN_BYTES)!;
  t.equal(b.length, POOL_MIN_BYTES);
  t.not(a.buffer, b.buffer, 'two lent buffers never share memory');
});

t.test('a released buffer serves the next request of its size class, once', async (t) => {
  const pool = new BodyPool();
  const a = pool.acquire(100_000)!;
  const ab = a.buffer;
  pool.release(a);
  t.equal(pool.freeByteCount, 131_072, 'held as free');
  pool.release(a);
  t.equal(pool.freeByteCount, 131_072, 'a second release is ignored');
  const b = pool.acquire(70_000)!;
  t.equal(b.buffer, ab, 'same class (65,537..131,072): reused');
  t.equal(b.length, 70_000);
  const c = pool.acquire(70_000)!;
  t.not(c.buffer, ab, 'while lent it is not handed out again');
  t.equal(pool.freeByteCount, 0);
  const d = pool.acquire(200_000)!;
  t.not(d.buffer, ab, 'another class: a new buffer');
  // a view of a lent buffer releases it (the reader may hand out a subarray)
  pool.release(b.subarray(0, 10));
  t.equal(pool.freeByteCount, 131_072, 'released through a view of it');
  pool.release(b);
  t.equal(pool.freeByteCount, 131_072, 'and not twice through the buffer itself');
});

t.test('only its own buffers: foreign ones, and buffers of Node\'s slab, are ignored', async (t) => {
  const pool = new BodyPool();
  pool.release(Buffer.alloc(100_000));
  pool.release(Buffer.allocUnsafe(100)); // a view of Node's shared slab: must never be pooled
  pool.release(new BodyPool().acquire(100_000)!);
  t.equal(pool.freeByteCount, 0, 'nothing taken');
});

t.test('bounded: per class and in bytes', async (t) => {
  const pool = new BodyPool({ perClass: 2, maxFreeBytes: 3 * 65_536 });
  const lent = Array.from({ length: 5 }, () => pool.acquire(60_000)!);
  for (const b of lent) pool.release(b);
  t.equal(pool.freeByteCount, 2 * 65_536, 'at most 2 kept for the class');
  const big = [pool.acquire(100_000)!, pool.acquire(100_000)!];
  for (const b of big) pool.release(b);
  t.equal(pool.freeByteCount, 2 * 65_536, 'a 131,072-byte buffer would pass the byte bound: dropped');
  const again = [pool.acquire(60_000)!, pool.acquire(60_000)!, pool.acquire(60_000)!];
  t.ok(again[0]!.buffer !== again[1]!.buffer && again[1]!.buffer !== again[2]!.buffer, 'distinct buffers');
  t.equal(pool.freeByteCount, 0, 'both free ones handed out, the third allocated');
});
