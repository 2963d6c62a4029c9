import t from 'tap';
import { batch, counts, createOrg, drained, http, sendBatch, sleep, useService } from '../helpers/service.js';

const { iso, svc } = useService(t, 'idem');

const keyed = (n: number, prefix: string) => batch(n, (i) => ({ idempotencyKey: `${prefix}-${i}` }));

t.test('same key twice → one row; keyless twice → two rows', async (t) => {
  const org = await createOrg(svc.url);
  const one = { signals: [{ eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'order-1' }] };
  t.equal((await sendBatch(svc.url, org.live, one)).status, 202);
  t.equal((await sendBatch(svc.url, org.live, one)).status, 202, 'a duplicate is accepted, then skipped');
  const keyless = { signals: [{ eventName: 'e', customer: { externalCustomerId: 'c' } }] };
  await sendBatch(svc.url, org.live, keyless);
  await sendBatch(svc.url, org.live, keyless);
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 3, test: 0 });
});

t.test('the same key in two organizations → two rows', async (t) => {
  const a = await createOrg(svc.url);
  const b = await createOrg(svc.url);
  const body = { signals: [{ eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'shared-key' }] };
  await sendBatch(svc.url, a.live, body);
  await sendBatch(svc.url, b.live, body);
  await drained(iso);
  t.same(await counts(svc.url, a.id), { live: 1, test: 0 });
  t.same(await counts(svc.url, b.id), { live: 1, test: 0 });
});

t.test('live and test mode are separate data sets', async (t) => {
  const org = await createOrg(svc.url);
  const body = { signals: [{ eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'k' }] };
  await sendBatch(svc.url, org.live, body);
  await sendBatch(svc.url, org.test, body);
  await sendBatch(svc.url, org.test, body);
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 1, test: 1 });
});

t.test('duplicates within one batch, across batches, through v1 and v2', async (t) => {
  const org = await createOrg(svc.url);
  const body = { signals: [
    { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'a' },
    { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'a' },
    { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'b' },
  ] };
  const first = await sendBatch(svc.url, org.live, body);
  t.equal(first.status, 202);
  t.match(first.body, { ingested: 2, duplicates: 1, failed: 0, errors: [], batchId: /^bat_/ }, 'the repeat inside the request is counted as a duplicate');
  await drained(iso);
  // v1 field names (the official client's README), one key already committed, one new.
  const v1 = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: { event_name: 'e', customer_id: 'c', idempotency_key: 'b' } });
  t.match(v1.body, { ingested: 0, duplicates: 1, failed: 0, errors: [] }, 'a key committed before the request is a duplicate');
  await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: { event_name: 'e', customer_id: 'c', idempotency_key: 'c' } });
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 3, test: 0 }, 'a, b, c once each');
});

t.test('a client retrying after 429 with the same keys is counted once', async (t) => {
  const org = await createOrg(svc.url, { burst: 500, refillPerSecond: 500 });
  t.equal((await sendBatch(svc.url, org.live, keyed(400, 'first'))).status, 202);
  const again = keyed(400, 'second');
  let r = await sendBatch(svc.url, org.live, again);
  let attempts = 1;
  while (r.status === 429) {
    await sleep(Number(r.headers.get('retry-after')) * 1000);
    r = await sendBatch(svc.url, org.live, again);
    attempts++;
  }
  t.equal(r.status, 202);
  t.ok(attempts >= 2, 'was rate limited at least once');
  // The client lost the 202 and resends: duplicates are skipped.
  await sleep(1_000);
  t.equal((await sendBatch(svc.url, org.live, again)).status, 202);
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 800, test: 0 });
});

t.test('many concurrent batches repeating the same keys → each key once', async (t) => {
  const org = await createOrg(svc.url, { burst: 100000 });
  const bodies = Array.from({ length: 10 }, () => keyed(500, 'storm'));
  const rs = await Promise.all(bodies.map((b) => sendBatch(svc.url, org.live, b)));
  t.same(rs.map((r) => r.status), Array(10).fill(202));
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 500, test: 0 });
});

t.test('deduplication survives a restart of the service (no dedupe state in Redis or in memory)', async (t) => {
  const org = await createOrg(svc.url);
  const body = { signals: [{ eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'before-restart' }] };
  t.equal((await sendBatch(svc.url, org.live, body)).status, 202);
  await drained(iso);
  await svc.stop();
  await svc.start();
  const again = await sendBatch(svc.url, org.live, body);
  t.equal(again.status, 202, 'the API key still works after the restart');
  t.match(again.body, { ingested: 0, duplicates: 1, failed: 0 }, 'and the key committed before it is answered as a duplicate');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 1, test: 0 });
});
