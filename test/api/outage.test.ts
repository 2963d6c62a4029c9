/**
 * Dependencies going away: NATS unreachable → 503 QUEUE_UNAVAILABLE with the tokens given
 * back; Redis unreachable → 503 RATE_LIMITER_UNAVAILABLE; readyz names what is down; both
 * recover on their own when the dependency returns. Never a 500.
 */
import t from 'tap';
import { NATS_URL, REDIS_URL, ServiceProcess, batch, cleanup, counts, createOrg, drained, http, isolation, sendBatch, waitFor } from '../helpers/service.js';
import { TcpProxy } from '../helpers/proxy.js';

const natsTarget = new URL(NATS_URL);
const redisTarget = new URL(REDIS_URL);
const natsProxy = new TcpProxy(natsTarget.hostname, Number(natsTarget.port || 4222));
const redisProxy = new TcpProxy(redisTarget.hostname, Number(redisTarget.port || 6379));
const iso = isolation('outage');
let svc: ServiceProcess;

t.before(async () => {
  await natsProxy.start();
  await redisProxy.start();
  svc = new ServiceProcess(iso, { NATS_URL: `nats://127.0.0.1:${natsProxy.port}`, REDIS_URL: `redis://127.0.0.1:${redisProxy.port}`, PUBLISH_TIMEOUT_MS: '1000' });
  await svc.start();
});
t.teardown(async () => {
  await svc.stop();
  await natsProxy.cut();
  await redisProxy.cut();
  await cleanup(iso);
});

const ready = () => http(svc.url, 'GET', '/readyz');

t.test('NATS unreachable: 503 with tokens given back, then recovery', async (t) => {
  const org = await createOrg(svc.url, { burst: 500, refillPerSecond: 0.001 });
  await natsProxy.cut();
  const down = await waitFor(ready, (r) => r.status === 503);
  t.equal(down.status, 503);
  t.same(down.body.down, ['nats'], 'readyz names NATS');
  t.equal(down.body.checks.redis, 'up');

  const r = await sendBatch(svc.url, org.live, batch(500));
  t.equal(r.status, 503);
  t.same(r.body, {
    error: 'Service Unavailable',
    code: 'QUEUE_UNAVAILABLE',
    details: 'the signal queue is unavailable; nothing was ingested and no tokens were used, retry later',
  });
  t.equal(r.headers.get('retry-after'), null, 'only the rate limiter sends Retry-After');

  await natsProxy.start();
  const up = await waitFor(ready, (x) => x.status === 200, 30_000);
  t.equal(up.status, 200, 'recovers when NATS is back');
  // The bucket holds 500 and refills at 0.001/s: this only fits if the failed request's tokens came back.
  const again = await sendBatch(svc.url, org.live, batch(500));
  t.equal(again.status, 202, 'tokens were given back');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 500, test: 0 }, 'the refused batch left nothing behind');
});

t.test('Redis unreachable: 503, nothing ingested, then recovery', async (t) => {
  const org = await createOrg(svc.url, { burst: 500, refillPerSecond: 0.001 });
  await redisProxy.cut();
  const down = await waitFor(ready, (r) => r.status === 503);
  t.same(down.body.down, ['redis'], 'readyz names Redis');
  const r = await sendBatch(svc.url, org.live, batch(10));
  t.equal(r.status, 503);
  t.same(r.body, {
    error: 'Service Unavailable',
    code: 'RATE_LIMITER_UNAVAILABLE',
    details: 'the rate limiter is unreachable; nothing was ingested, retry later',
  });
  await redisProxy.start();
  await waitFor(ready, (x) => x.status === 200, 30_000);
  const ok = await waitFor(() => sendBatch(svc.url, org.live, batch(10)), (x) => x.status === 202, 30_000);
  t.equal(ok.status, 202, 'accepts again once Redis is back');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 10, test: 0 });
});

t.test('NATS unreachable at start: health answers, the API says starting, then it carries on', async (t) => {
  const lateNats = new TcpProxy(natsTarget.hostname, Number(natsTarget.port || 4222));
  await lateNats.start();
  const port = lateNats.port;
  await lateNats.cut();
  const lateIso = isolation('outagestart');
  const late = new ServiceProcess(lateIso, { NATS_URL: `nats://127.0.0.1:${port}` });
  t.teardown(async () => {
    await late.stop();
    await lateNats.cut();
    await cleanup(lateIso);
  });
  await late.start('listening');
  t.same((await http(late.url, 'GET', '/healthz')).body, { status: 'ok' }, 'the process answers at once');
  const ready = await http(late.url, 'GET', '/readyz');
  t.equal(ready.status, 503);
  t.match(ready.body, { status: 'unavailable', checks: { nats: 'down: connecting' } });
  t.ok(ready.body.down.includes('nats'), 'readyz names NATS');
  t.equal(ready.body.checks.routes, 'down: routes are still being mounted', 'and that the process is still starting');
  const api = await http(late.url, 'POST', '/api/v2/signals/bulk', { token: 'sk_live_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', body: batch(1) });
  t.same(api.body, { error: 'Service Unavailable', code: 'SERVICE_STARTING', details: 'the service is starting (connecting to its dependencies); retry shortly' });
  t.equal(api.status, 503);

  await lateNats.start(port);
  const up = await waitFor(() => http(late.url, 'GET', '/readyz'), (r) => r.status === 200, 30_000);
  t.equal(up.status, 200, 'ready once NATS is reachable');
  t.equal(up.body.checks.routes, 'up', 'and started: every route mounted');
  const org = await createOrg(late.url);
  t.equal((await sendBatch(late.url, org.live, batch(10))).status, 202);
  await drained(lateIso);
  t.same(await counts(late.url, org.id), { live: 10, test: 0 });
  t.equal((await http(late.url, 'GET', '/api/v2/nope')).status, 404, 'unknown paths are 404 once started');
});
