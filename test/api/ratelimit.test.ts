/**
 * The 429 contract of spec section 7.2, with small buckets set through the operator API.
 */
import t from 'tap';
import { batch, counts, createOrg, drained, http, sendBatch, sleep, useService } from '../helpers/service.js';

// The refill test times the bucket between answers: an answer held by the ingress's back-pressure
// (a loaded test machine's billing lag, src/shared/backlog-gate.ts) would add its own wait, so
// this service never holds (the holds have their own tests: ingress-hold*.test.ts).
const { iso, svc } = useService(t, 'ratelimit', { INGRESS_HOLD_BACKLOG: '0', INGRESS_HOLD_BILLING_LAG_MS: '0' });

// Keyless: a keyed batch's 202 waits for the pipeline's answer about duplicates (0.1-1 s on a
// loaded test machine), which would shift the bucket's timing between answers as a hold does.
const marked = (n: number, tag: string) => batch(n, () => ({ eventName: tag }));

t.test('exact 429 contract; the refused batch is absent; tokens refill at the configured rate', async (t) => {
  const org = await createOrg(svc.url, { burst: 500, refillPerSecond: 100 });
  t.equal((await sendBatch(svc.url, org.live, marked(500, 'first'))).status, 202, 'a full burst fits');

  const r = await sendBatch(svc.url, org.live, marked(300, 'refused'));
  t.equal(r.status, 429);
  // ~0 tokens left, 300 needed at 100/s: the earliest time is 3 s (less a few ms of refill, rounded up).
  t.equal(r.headers.get('retry-after'), '3');
  t.same(r.body, { error: 'Too Many Requests', code: 'RATE_LIMIT_EXCEEDED', details: 'Too many requests. Retry after 3s.' });

  await sleep(3_000);
  const retriedAt = Date.now();
  const retried = await sendBatch(svc.url, org.live, marked(300, 'retried'));
  t.equal(retried.status, 202, 'after Retry-After seconds the same size fits');

  // Refill rate: an empty bucket once the retried batch took its tokens (after it was sent);
  // 2 s after that send, about 200 tokens.
  await sleep(Math.max(0, retriedAt + 2_000 - Date.now()));
  t.equal((await sendBatch(svc.url, org.live, marked(150, 'refill-a'))).status, 202, '150 of ~200 refilled tokens');
  const over = await sendBatch(svc.url, org.live, marked(100, 'refill-b'));
  t.equal(over.status, 429, 'but not 100 more');
  t.equal(over.headers.get('retry-after'), '1', '~50 missing at 100/s → 1 s');

  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 950, test: 0 }, 'only accepted batches are stored');
});

t.test('live and test buckets are independent; limits are per organization', async (t) => {
  const a = await createOrg(svc.url, { burst: 500, refillPerSecond: 0.01 });
  const b = await createOrg(svc.url, { burst: 500, refillPerSecond: 0.01 });
  t.equal((await sendBatch(svc.url, a.live, batch(500))).status, 202);
  t.equal((await sendBatch(svc.url, a.live, batch(1))).status, 429, 'live bucket empty');
  t.equal((await sendBatch(svc.url, a.test, batch(500))).status, 202, 'test bucket untouched');
  t.equal((await sendBatch(svc.url, a.test, batch(1))).status, 429, 'test bucket now empty too');
  t.equal((await sendBatch(svc.url, b.live, batch(500))).status, 202, 'another organization is unaffected');
  await drained(iso);
  t.same(await counts(svc.url, a.id), { live: 500, test: 500 });
});

t.test('legacy v1 shares the bucket and the pipeline', async (t) => {
  const org = await createOrg(svc.url, { burst: 500, refillPerSecond: 0.01 });
  const one = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: { event_name: 'legacy', customer_id: 'c1' } });
  t.equal(one.status, 202);
  t.match(one.body, { ingested: 1, duplicates: 0, failed: 0, errors: [], batchId: /^bat_/ });
  const arr = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: batch(499).signals });
  t.equal(arr.status, 202, 'v1 array takes the remaining 499');
  const v2 = await sendBatch(svc.url, org.live, batch(1));
  t.equal(v2.status, 429, 'v2 sees the tokens v1 took');
  const v1 = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: { event_name: 'legacy', customer_id: 'c1' } });
  t.equal(v1.status, 429);
  t.equal(v1.body.code, 'RATE_LIMIT_EXCEEDED');
  t.match(v1.headers.get('retry-after'), /^\d+$/);
  t.equal(v1.body.details, `Too many requests. Retry after ${v1.headers.get('retry-after')}s.`);
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 500, test: 0 });
});

t.test('a limit change applies to the next request', async (t) => {
  const org = await createOrg(svc.url, { burst: 500, refillPerSecond: 0.01 });
  t.equal((await sendBatch(svc.url, org.live, batch(500))).status, 202);
  t.equal((await sendBatch(svc.url, org.live, batch(100))).status, 429);
  await http(svc.url, 'PATCH', `/admin/v1/organizations/${org.id}/limits`, { token: 'test-operator-token-0123456789', body: { refillPerSecond: 100000 } });
  await sleep(50);
  t.equal((await sendBatch(svc.url, org.live, batch(100))).status, 202, 'faster refill takes effect');
});
