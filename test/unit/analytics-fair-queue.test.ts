/**
 * The process-wide analytics queue: a width, a per-organization share, turns across
 * organizations, and waits bounded by the request's deadline.
 */
import t from 'tap';
import { FairQueue } from '../../src/analytics/fair-queue.js';
import { ApiError } from '../../src/errors.js';

const far = () => Date.now() + 60_000;

t.test('one organization holds at most half of the places; another starts at once', async (t) => {
  const q = new FairQueue(4);
  t.equal(q.share, 2);
  const a1 = await q.acquire('A:live', 'A', far());
  await q.acquire('A:test', 'A', far());
  let a3Granted = false;
  const a3 = q.acquire('A:live', 'A', far()).then((r) => ((a3Granted = true), r));
  const b1 = await q.acquire('B:live', 'B', far());
  t.same(q.load, { running: 3, waiting: 1 }, 'A waits at its share while a place is free for B');
  await Promise.resolve();
  t.notOk(a3Granted);
  b1();
  t.notOk(a3Granted, 'a place freed by B does not go to A beyond its share');
  a1();
  await a3;
  t.ok(a3Granted, 'a place freed by A goes to A');
});

t.test('free places go to the waiting organizations in turn', async (t) => {
  const q = new FairQueue(2);
  const order: string[] = [];
  const a = await q.acquire('A:live', 'A', far());
  const b = await q.acquire('B:live', 'B', far());
  const wait = (key: string, group: string, tag: string) => q.acquire(key, group, far()).then((r) => (order.push(tag), r));
  const pending = [wait('A:live', 'A', 'A2'), wait('A:live', 'A', 'A3'), wait('A:live', 'A', 'A4'), wait('C:live', 'C', 'C1'), wait('D:live', 'D', 'D1')] as const;
  a();
  b();
  const r1 = await pending[0];
  const r2 = await pending[3];
  t.same(order, ['A2', 'C1'], 'A at its share: the next place goes to C');
  r1();
  r2();
  await pending[4];
  await pending[1];
  t.same(order, ['A2', 'C1', 'D1', 'A3'], 'D is served before A’s backlog continues');
  (await pending[1])();
  (await pending[4])();
  await pending[2];
  t.same(order, ['A2', 'C1', 'D1', 'A3', 'A4']);
});

t.test('a wait ends with 408 at the deadline and leaves the queue', async (t) => {
  const q = new FairQueue(2);
  const hold = await q.acquire('A:live', 'A', far());
  const started = Date.now();
  const err = await q.acquire('A:live', 'A', Date.now() + 100).catch((e: unknown) => e);
  t.ok(err instanceof ApiError && err.code === 'QUERY_TIMEOUT', 'QUERY_TIMEOUT');
  t.ok(Date.now() - started >= 90, 'not before the deadline');
  t.same(q.load, { running: 1, waiting: 0 });
  hold();
  hold();
  t.same(q.load, { running: 0, waiting: 0 }, 'a release counts once');
});
