/**
 * SignalClient memory bound and shutdown against the real service: while requests are held
 * up, at most `maxBufferedSignals` signals are taken and `send()` waits for room; `close()`
 * flushes what is buffered and refuses new signals, including sends still waiting for room.
 */
import t from 'tap';
import { SignalClient, ClientClosedError, type Receipt, type Signal } from '../../packages/sdk/src/index.js';
import { counts, createOrg, drained, sleep, useService } from '../helpers/service.js';
import { useHttpProxy } from '../helpers/http-proxy.js';

const { iso, svc } = useService(t, 'sdkbp');

const proxy = useHttpProxy(t, () => svc.url);

const sig = (i: number): Signal => ({ eventName: 'sdk_bp', customer: { externalCustomerId: `cus_${i % 3}` }, data: { i } });

function gate(): { until: Promise<void>; open: () => void } {
  let open!: () => void;
  const until = new Promise<void>((r) => (open = r));
  return { until, open };
}

t.test('at most maxBufferedSignals are held; send() waits for room, first come first served', async (t) => {
  const org = await createOrg(svc.url);
  const held = gate();
  proxy.decide = (s) => (s.path.startsWith('/api/v2/signals/bulk') ? { kind: 'hold', until: held.until } : { kind: 'forward' });
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', maxBufferedSignals: 50, maxBatchSignals: 10, maxConcurrentRequests: 2, flushIntervalMs: 10 });
  const order: number[] = [];
  const sends: Promise<Receipt>[] = [];
  for (let i = 0; i < 120; i++) sends.push(client.send(sig(i)).then((r) => (order.push(i), r)));
  await sleep(300);
  t.equal(order.length, 50, 'exactly maxBufferedSignals sends resolved while nothing is delivered');
  t.equal(client.bufferedSignals, 50);
  t.same(order, Array.from({ length: 50 }, (_, i) => i), 'the first fifty');
  held.open();
  const receipts = await Promise.all(sends);
  t.same(order, Array.from({ length: 120 }, (_, i) => i), 'the waiting sends resolved in order as room came');
  t.same(await client.close(), { delivered: 120, duplicates: 0 });
  t.equal(client.bufferedSignals, 0);
  t.equal(new Set((await Promise.all(receipts.map((r) => r.delivered))).map((d) => d.signalId)).size, 120);
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 120, test: 0 });
});

t.test('the bound holds while batches are retried (429s)', async (t) => {
  const org = await createOrg(svc.url, { burst: 500, refillPerSecond: 300 });
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', maxBufferedSignals: 600, flushIntervalMs: 10 });
  let peak = 0;
  const from = proxy.seen.length;
  const sends = [];
  for (let i = 0; i < 1500; i++) {
    sends.push(client.send(sig(i)));
    peak = Math.max(peak, client.bufferedSignals);
  }
  const watch = setInterval(() => (peak = Math.max(peak, client.bufferedSignals)), 5);
  await Promise.all(sends);
  t.same(await client.close(), { delivered: 1500, duplicates: 0 });
  clearInterval(watch);
  t.ok(peak <= 600, `peak ${peak} ≤ 600`);
  t.ok(proxy.seen.slice(from).some((s) => s.status === 429), 'the bucket pushed back');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 1500, test: 0 });
});

t.test('close() flushes the open batch at once, then refuses new signals and waiting sends', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', flushIntervalMs: 3_600_000, maxBufferedSignals: 7 });
  for (let i = 0; i < 7; i++) await client.send(sig(i));
  const waiting = client.send(sig(7)).then(() => null, (e: unknown) => e);
  const from = proxy.seen.length;
  t.same(await client.close(), { delivered: 7, duplicates: 0 }, 'the seven buffered signals went out without waiting for the interval');
  t.type(await waiting, ClientClosedError, 'a send waiting for room is refused');
  await t.rejects(client.send(sig(8)), ClientClosedError);
  t.equal(proxy.seen.length - from, 1, 'one request');
  t.same(await client.close(), { delivered: 0, duplicates: 0 }, 'closing again is harmless');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 7, test: 0 });
});

t.test('flush() sends now and waits for what was queued; the interval sends on its own', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', flushIntervalMs: 150 });
  const a = await client.send(sig(1));
  const started = Date.now();
  const d = await a.delivered;
  t.ok(Date.now() - started >= 100, 'sent by the interval');
  t.match(d, { batchId: /^bat_/ });
  await client.send(sig(2));
  t.same(await client.flush(), { delivered: 2, duplicates: 0 }, 'flush counts since the previous flush');
  await client.close();
});
