import t from 'tap';
import { batch, counts, createOrg, drained, http, sendBatch, useService } from '../helpers/service.js';

const { iso, svc } = useService(t, 'ingest');

t.test('a batch of 500 is accepted and becomes 500 rows', async (t) => {
  const org = await createOrg(svc.url);
  const r = await sendBatch(svc.url, org.live, batch(500));
  t.equal(r.status, 202);
  t.same(Object.keys(r.body).sort(), ['batchId', 'duplicates', 'errors', 'failed', 'ingested']);
  t.match(r.body, { ingested: 500, duplicates: 0, failed: 0 });
  t.same(r.body.errors, []);
  t.match(r.body.batchId, /^bat_[0-9a-z]{9}[0-9A-Za-z]{12}$/);
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 500, test: 0 });
});

t.test('501 signals are refused whole', async (t) => {
  const org = await createOrg(svc.url);
  const r = await sendBatch(svc.url, org.live, batch(501));
  t.equal(r.status, 400);
  t.same(r.body, { error: 'Bad Request', code: 'BATCH_TOO_LARGE', details: 'signals: at most 500 signals per request, got 501' });
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 0, test: 0 });
});

t.test('healthz and readyz', async (t) => {
  t.same((await http(svc.url, 'GET', '/healthz')).body, { status: 'ok' });
  const r = await http(svc.url, 'GET', '/readyz');
  t.equal(r.status, 200);
  t.same(r.body.checks, { nats: 'up', redis: 'up', clickhouse: 'up', routes: 'up' });
});

t.test('concurrent large batches, some refused whole, some with one refused signal: every batch stores exactly its own valid signals (body buffers are reused, src/http/body-pool.ts)', async (t) => {
  const org = await createOrg(svc.url);
  const SIZE = 150;
  // ~33 KB each: above the pool's 16 KiB floor, so their buffers are lent and reused
  const good = (b: number): { signals: Record<string, unknown>[] } => ({ signals: Array.from({ length: SIZE }, (_, i) => ({ eventName: `ev_${b}`, customer: { externalCustomerId: `cus_${b}` }, data: { n: i, b, pad: 'p'.repeat(120) } })) });
  // Every signal without a customer: the whole request is refused.
  const bad = (b: number): unknown => ({ signals: good(b).signals.map((s) => ({ ...s, customer: undefined })) });
  // The last signal without a customer: refused alone, the other SIZE - 1 stored.
  const oneBad = (b: number): unknown => {
    const body = good(b);
    body.signals[SIZE - 1] = { eventName: `ev_${b}`, data: { n: SIZE - 1, b } };
    return body;
  };
  const BATCHES = 36;
  const kind = (b: number): 'good' | 'bad' | 'oneBad' => (b % 4 === 3 ? 'bad' : b % 4 === 1 ? 'oneBad' : 'good');
  const answers: { status: number; body: any }[] = [];
  for (let wave = 0; wave < BATCHES; wave += 6) {
    const sends = [];
    for (let b = wave; b < wave + 6; b++) {
      const body = kind(b) === 'bad' ? bad(b) : kind(b) === 'oneBad' ? oneBad(b) : good(b);
      sends.push(sendBatch(svc.url, org.live, body).then((r) => (answers[b] = r)));
    }
    await Promise.all(sends);
  }
  t.same(answers.map((r) => r.status), [...Array(BATCHES).keys()].map((b) => (kind(b) === 'bad' ? 400 : 202)), 'the batches with a valid signal accepted, the others refused');
  for (const [b, r] of answers.entries()) {
    if (kind(b) === 'bad') {
      t.match(r.body, { error: 'Bad Request', code: 'INVALID_SIGNAL', details: /^signals\[0\]\.customer: / }, `batch ${b}: refused whole`);
      t.equal(r.body.errors?.length, SIZE, `batch ${b}: every signal reported`);
    } else if (kind(b) === 'oneBad') {
      t.match(r.body, { ingested: SIZE - 1, duplicates: 0, failed: 1, errors: [{ index: SIZE - 1, code: 'INVALID_SIGNAL', field: 'customer', message: String }] }, `batch ${b}: the last signal refused alone`);
      t.equal(r.body.errors.length, 1);
    } else t.match(r.body, { ingested: SIZE, duplicates: 0, failed: 0 }, `batch ${b}`);
  }
  await drained(iso);
  const r = await http(svc.url, 'POST', '/api/v2/analytics/query', {
    token: org.live,
    body: { query: 'SELECT event_name, external_customer_id, count() AS c, sum(data.n::Int64) AS s, min(data.b::Int64) AS lo, max(data.b::Int64) AS hi FROM fact_signal GROUP BY event_name, external_customer_id ORDER BY event_name' },
  });
  t.equal(r.status, 200, JSON.stringify(r.body));
  const stored = (b: number): number => (kind(b) === 'oneBad' ? SIZE - 1 : SIZE);
  const want = [...Array(BATCHES).keys()]
    .filter((b) => kind(b) !== 'bad')
    .map((b) => [`ev_${b}`, `cus_${b}`, String(stored(b)), String((stored(b) * (stored(b) - 1)) / 2), String(b), String(b)])
    .sort((x, y) => (x[0]! < y[0]! ? -1 : 1));
  t.same(r.body.rows, want, 'each batch stored with its own valid signals only');
});
