/**
 * A real 503: the service loses NATS (a TCP proxy cut), answers 503 QUEUE_UNAVAILABLE, and
 * the SDK keeps resending the same batches with the same keys, backing off, until NATS is
 * back; every signal is then stored exactly once.
 */
import t from 'tap';
import { SignalClient, type Signal } from '../../packages/sdk/src/index.js';
import { NATS_URL, ServiceProcess, cleanup, counts, createOrg, drained, http, isolation, sleep, waitFor } from '../helpers/service.js';
import { TcpProxy } from '../helpers/proxy.js';
import { HttpProxy } from '../helpers/http-proxy.js';

const natsTarget = new URL(NATS_URL);
const natsProxy = new TcpProxy(natsTarget.hostname, Number(natsTarget.port || 4222));
const iso = isolation('sdkoutage');
let svc: ServiceProcess;
let proxy: HttpProxy;

t.before(async () => {
  await natsProxy.start();
  svc = new ServiceProcess(iso, { NATS_URL: `nats://127.0.0.1:${natsProxy.port}`, PUBLISH_TIMEOUT_MS: '1000' });
  await svc.start();
  proxy = await new HttpProxy(svc.url).start();
});
t.teardown(async () => {
  await proxy.stop();
  await svc.stop();
  await natsProxy.cut();
  await cleanup(iso);
});

t.test('NATS down: 503 QUEUE_UNAVAILABLE resent with the same keys until it is back; stored once', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', initialBackoffMs: 200, maxBackoffMs: 1_000, maxAttempts: 100, maxRetryTimeMs: 60_000, flushIntervalMs: 20 });
  await natsProxy.cut();
  t.equal((await waitFor(() => http(svc.url, 'GET', '/readyz'), (r) => r.status === 503)).status, 503, 'the service knows NATS is gone');
  const receipts = [];
  for (let i = 0; i < 700; i++) receipts.push(await client.send({ eventName: 'sdk_outage', customer: { externalCustomerId: `cus_${i % 4}` }, data: { i } } satisfies Signal));
  await waitFor(async () => proxy.seen.filter((s) => s.status === 503).length, (n) => n >= 4, 20_000);
  await sleep(500);
  await natsProxy.start();
  t.match(await client.close(), { delivered: 700 }, 'delivered (a 503 "may or may not be stored": its resend may count duplicates)');
  const reqs = proxy.requests('/api/v2/signals/bulk');
  const refused = reqs.filter((r) => r.status === 503);
  t.ok(refused.length >= 4, `${refused.length} answers 503`);
  t.same([...new Set(refused.map((r) => JSON.parse(r.answer!).code))], ['QUEUE_UNAVAILABLE'], 'the service\'s own 503');
  t.ok(refused.every((r) => r.retryAfter === undefined), 'no Retry-After on a 503');
  // Every accepted request carried keys that some refused request carried before (the same batches, resent).
  const refusedKeys = new Set(refused.flatMap((r) => r.json.signals.map((s: Signal) => s.idempotencyKey)));
  const acceptedKeys = reqs.filter((r) => r.status === 202).flatMap((r) => r.json.signals.map((s: Signal) => s.idempotencyKey));
  t.equal(acceptedKeys.length, 700, 'each signal accepted once');
  t.ok(acceptedKeys.every((k: string) => refusedKeys.has(k)), 'with the keys it was first refused with');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 700, test: 0 });
});
