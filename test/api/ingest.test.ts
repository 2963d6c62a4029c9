import t from 'tap';
import { batch, counts, createOrg, drained, http, sendBatch, useService } from '../helpers/service.js';

const { iso, svc } = useService(t, 'ingest');

t.test('a batch of 500 is accepted and becomes 500 rows', async (t) => {
  const org = await createOrg(svc.url);
  const r = await sendBatch(svc.url, org.live, batch(500));
  t.equal(r.status, 202);
  t.equal(r.body.accepted, 500);
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

t.test('concurrent large batches, some refused: every accepted batch is stored with its own content (body buffers are reused, src/http/body-pool.ts)', async (t) => {
  const org = await createOrg(svc.url);
  const SIZE = 150;
  // ~33 KB each: above the pool's 16 KiB floor, so their buffers are lent and reused
  const good = (b: number): unknown => ({ signals: Array.from({ length: SIZE }, (_, i) => ({ eventName: `ev_${b}`, customerId: `cus_${b}`, data: { n: i, b, pad: 'p'.repeat(120) } })) });
  const bad = (b: number): unknown => {
    const body = good(b) as { signals: Record<string, unknown>[] };
    body.signals[SIZE - 1] = { eventName: `ev_${b}` }; // no customerId: refused whole
    return body;
  };
  const BATCHES = 36;
  const statuses: number[] = [];
  for (let wave = 0; wave < BATCHES; wave += 6) {
    const sends = [];
    for (let b = wave; b < wave + 6; b++) sends.push(sendBatch(svc.url, org.live, b % 4 === 3 ? bad(b) : good(b)).then((r) => (statuses[b] = r.status)));
    await Promise.all(sends);
  }
  const accepted = [...Array(BATCHES).keys()].filter((b) => b % 4 !== 3);
  t.same(statuses, [...Array(BATCHES).keys()].map((b) => (b % 4 === 3 ? 400 : 202)), 'the good ones accepted, the bad ones refused');
  await drained(iso);
  const r = await http(svc.url, 'POST', '/api/v2/analytics/query', {
    token: org.live,
    body: { query: 'SELECT event_name, customer_id, count() AS c, sum(data.n::Int64) AS s, min(data.b::Int64) AS lo, max(data.b::Int64) AS hi FROM fact_signal GROUP BY event_name, customer_id ORDER BY event_name' },
  });
  t.equal(r.status, 200, JSON.stringify(r.body));
  const want = accepted.map((b) => [`ev_${b}`, `cus_${b}`, String(SIZE), String((SIZE * (SIZE - 1)) / 2), String(b), String(b)]).sort((x, y) => (x[0]! < y[0]! ? -1 : 1));
  t.same(r.body.rows, want, 'each batch stored whole, its own signals only');
});
