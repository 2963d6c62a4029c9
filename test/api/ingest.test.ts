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
