/**
 * SignalClient retries (spec 7.2) against the real service: a real token bucket's 429s are
 * waited out for at least Retry-After and every signal is stored exactly once; a lost 202
 * and a 503 are resent with the same keys and counted once (and, without keys, twice: the
 * control that shows the count can tell); repeated failures back off exponentially; the
 * retry budget ends in a rejection carrying the last answer.
 */
import t from 'tap';
import { SignalClient, RetriesExhaustedError, SignalApiError, NetworkError, type Signal } from '../../packages/sdk/src/index.js';
import { counts, createOrg, drained, useService } from '../helpers/service.js';
import { HttpProxy, useHttpProxy, type Seen } from '../helpers/http-proxy.js';

const { iso, svc } = useService(t, 'sdkretry');

const proxy = useHttpProxy(t, () => svc.url);

const sig = (i: number): Signal => ({ eventName: 'sdk_retry', customer: { externalCustomerId: `cus_${i % 3}` }, data: { i } });
const bulk = (from: number): Seen[] => proxy.requests('/api/v2/signals/bulk').slice(from);
const keysOf = (s: Seen): string[] => s.json.signals.map((x: Signal) => x.idempotencyKey);

t.test('a real bucket: every 429 is waited out for at least Retry-After; every signal stored once', async (t) => {
  const org = await createOrg(svc.url, { burst: 500, refillPerSecond: 250 });
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', maxConcurrentRequests: 1, flushIntervalMs: 10 });
  const from = proxy.seen.length;
  for (let i = 0; i < 1500; i++) await client.send(sig(i));
  t.same(await client.close(), { delivered: 1500, duplicates: 0 });
  const reqs = bulk(from);
  const limited = reqs.filter((r) => r.status === 429);
  t.ok(limited.length >= 1, `met ${limited.length} 429s`);
  for (const r of limited) {
    t.match(r.retryAfter, /^\d+$/, 'the service sent Retry-After');
    const next = reqs[reqs.indexOf(r) + 1]!;
    const waited = next.receivedAt - r.answeredAt!;
    t.ok(waited >= Number(r.retryAfter) * 1000, `waited ${waited} ms after Retry-After: ${r.retryAfter}`);
    t.same(keysOf(next), keysOf(r), 'the same batch with the same keys');
  }
  t.equal(reqs.filter((r) => r.status === 202).length, 3, 'three batches accepted');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 1500, test: 0 }, 'exactly once');
});

t.test('several batches in flight meet the bucket together: all delivered exactly once', async (t) => {
  const org = await createOrg(svc.url, { burst: 500, refillPerSecond: 400 });
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', maxConcurrentRequests: 4, maxBatchSignals: 200, flushIntervalMs: 5 });
  const from = proxy.seen.length;
  for (let i = 0; i < 1600; i++) await client.send(sig(i));
  t.same(await client.close(), { delivered: 1600, duplicates: 0 });
  const reqs = bulk(from);
  t.ok(reqs.some((r) => r.status === 429), 'rate limited');
  // The bucket is the organization's: once a 429 reached the client, no request left before its Retry-After.
  const firstLimited = reqs.find((r) => r.status === 429)!;
  // Requests the client sent before it read that 429 can reach the proxy later on a loaded
  // machine (the proxy and the client share this process's event loop): 900 ms of slack. Still
  // under the Retry-After (≥ 1 s): a client that did not pause keeps sending (4 at a time,
  // answered in milliseconds), so some of its requests land between the slack and Retry-After.
  const sentLater = reqs.filter((r) => r.receivedAt > firstLimited.answeredAt! + 900);
  t.ok(sentLater.length > 0, `${sentLater.length} requests after the first 429`);
  t.ok(sentLater.every((r) => r.receivedAt - firstLimited.answeredAt! >= Number(firstLimited.retryAfter) * 1000), 'the whole client paused');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 1600, test: 0 });
});

t.test('a lost 202: the resend with the same keys is counted once; keyless, it is counted twice', async (t) => {
  for (const autoIdempotencyKeys of [true, false]) {
    const org = await createOrg(svc.url);
    const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', autoIdempotencyKeys, initialBackoffMs: 20 });
    const from = proxy.seen.length;
    let lost = 0;
    proxy.decide = (s) => (s.path.startsWith('/api/v2/signals/bulk') && lost++ === 0 ? { kind: 'forward-then-drop' } : { kind: 'forward' });
    for (let i = 0; i < 50; i++) await client.send(sig(i));
    // The resend's answer counts as duplicates the keys already committed when it arrived: 0 to 50, by timing.
    t.match(await client.close(), { delivered: 50 });
    const reqs = bulk(from);
    t.same(reqs.map((r) => r.status), [0, 202], 'the service took the first request; its answer never came; resent');
    t.same(reqs[1]!.raw, reqs[0]!.raw, 'byte for byte the same body');
    await drained(iso);
    t.same(await counts(svc.url, org.id), { live: autoIdempotencyKeys ? 50 : 100, test: 0 }, autoIdempotencyKeys ? 'auto keys: once' : 'no keys: twice (spec 7.2 rule 6)');
  }
});

t.test('503 (here a proxy standing in for an unreachable queue): resent with the same keys after a backoff', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', initialBackoffMs: 100 });
  const from = proxy.seen.length;
  let n = 0;
  const unavailable = { error: 'Service Unavailable', code: 'QUEUE_UNAVAILABLE', details: 'may or may not be stored' };
  proxy.decide = (s) => {
    if (!s.path.startsWith('/api/v2/signals/bulk')) return { kind: 'forward' };
    n++;
    if (n === 1) return { kind: 'forward-then', status: 503, body: unavailable }; // stored, but the client is told 503
    if (n <= 4) return { kind: 'answer', status: 503, body: unavailable };
    return { kind: 'forward' };
  };
  for (let i = 0; i < 20; i++) await client.send(sig(i));
  t.match(await client.close(), { delivered: 20 }, 'delivered (the stored first attempt may be counted as duplicates)');
  const reqs = bulk(from);
  t.same(reqs.map((r) => r.status), [503, 503, 503, 503, 202]);
  t.ok(reqs.every((r) => r.raw.equals(reqs[0]!.raw)), 'every attempt carried the same signals and keys');
  // Equal jitter: the n-th wait is at least initialBackoffMs · 2^(n−1) / 2.
  const gaps = reqs.slice(1).map((r, i) => r.receivedAt - reqs[i]!.answeredAt!);
  gaps.forEach((g, i) => t.ok(g >= 50 * 2 ** i, `wait ${i + 1}: ${g} ms ≥ ${50 * 2 ** i} ms`));
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 20, test: 0 }, 'stored once although the first attempt was stored');
});

t.test('repeated 429s back off exponentially on top of Retry-After (never a tight loop)', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', initialBackoffMs: 100 });
  const from = proxy.seen.length;
  let n = 0;
  proxy.decide = (s) =>
    s.path.startsWith('/api/v2/signals/bulk') && n++ < 4
      ? { kind: 'answer', status: 429, headers: { 'retry-after': '0' }, body: { error: 'Too Many Requests', code: 'RATE_LIMIT_EXCEEDED', details: 'Too many requests. Retry after 0s.' } }
      : { kind: 'forward' };
  await client.send(sig(1));
  t.same(await client.close(), { delivered: 1, duplicates: 0 });
  const reqs = bulk(from);
  t.same(reqs.map((r) => r.status), [429, 429, 429, 429, 202]);
  const gaps = reqs.slice(1).map((r, i) => r.receivedAt - reqs[i]!.answeredAt!);
  gaps.forEach((g, i) => t.ok(g >= 50 * 2 ** i, `wait ${i + 1}: ${g} ms ≥ ${50 * 2 ** i} ms`));
});

t.test('a 429 without RATE_LIMIT_EXCEEDED (no Retry-After) is told apart by its code and backed off', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', initialBackoffMs: 40 });
  const from = proxy.seen.length;
  let n = 0;
  proxy.decide = (s) =>
    s.path.startsWith('/api/v2/signals/bulk') && n++ < 2
      ? { kind: 'answer', status: 429, body: { error: 'Too Many Requests', code: 'CONCURRENCY_LIMIT_EXCEEDED', details: 'Too many requests. Retry after 1s.' } }
      : { kind: 'forward' };
  await client.send(sig(1));
  t.same(await client.close(), { delivered: 1, duplicates: 0 });
  const reqs = bulk(from);
  t.same(reqs.map((r) => r.status), [429, 429, 202]);
  const gaps = reqs.slice(1).map((r, i) => r.receivedAt - reqs[i]!.answeredAt!);
  t.ok(gaps[0]! >= 20 && gaps[0]! < 900, `backoff (${gaps[0]} ms), not the Retry-After path's one-second floor`);
});

t.test('maxAttempts: the batch rejects with the last answer; every attempt had the same keys', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', maxAttempts: 3, initialBackoffMs: 10 });
  const from = proxy.seen.length;
  proxy.decide = () => ({ kind: 'answer', status: 503, body: { error: 'Service Unavailable', code: 'RATE_LIMITER_UNAVAILABLE', details: 'the rate limiter is unreachable' } });
  const r = await client.send(sig(1));
  const e = await r.delivered.catch((x: unknown) => x);
  t.type(e, RetriesExhaustedError);
  t.equal((e as RetriesExhaustedError).attempts, 3);
  t.type((e as RetriesExhaustedError).lastError, SignalApiError);
  t.match((e as RetriesExhaustedError).lastError, { status: 503, code: 'RATE_LIMITER_UNAVAILABLE', error: 'Service Unavailable' });
  const reqs = bulk(from);
  t.equal(reqs.length, 3);
  t.same(new Set(reqs.map((q) => keysOf(q)[0])).size, 1, 'one key throughout');
  await t.rejects(client.close(), { name: 'DeliveryError', failed: 1 });
});

t.test('maxRetryTimeMs: a Retry-After past the budget rejects at once instead of waiting', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', maxRetryTimeMs: 2_000 });
  proxy.decide = () => ({ kind: 'answer', status: 429, headers: { 'retry-after': '30' }, body: { error: 'Too Many Requests', code: 'RATE_LIMIT_EXCEEDED', details: 'Too many requests. Retry after 30s.' } });
  const started = Date.now();
  const r = await client.send(sig(1));
  const e = await r.delivered.catch((x: unknown) => x);
  t.ok(Date.now() - started < 1_500, 'did not wait 30 s');
  t.type(e, RetriesExhaustedError);
  t.match((e as RetriesExhaustedError).lastError, { status: 429, code: 'RATE_LIMIT_EXCEEDED', retryAfterSeconds: 30 });
  await client.close().catch(() => undefined);
});

t.test('network errors (nothing listening) are retried, then rejected as NetworkError', async (t) => {
  const dead = await new HttpProxy('http://127.0.0.1:1').start();
  const port = dead.port;
  await dead.stop();
  const client = new SignalClient({ baseUrl: `http://127.0.0.1:${port}`, apiKey: 'sk_live_x', maxAttempts: 3, initialBackoffMs: 10 });
  const r = await client.send(sig(1));
  const e = await r.delivered.catch((x: unknown) => x);
  t.type(e, RetriesExhaustedError);
  t.type((e as RetriesExhaustedError).lastError, NetworkError);
  t.match((e as RetriesExhaustedError).lastError.message, /ECONNREFUSED/);
  await client.close().catch(() => undefined);
});
