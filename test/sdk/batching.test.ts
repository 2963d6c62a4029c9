/**
 * SignalClient batching against the real service: requests of at most 500 signals and at
 * most the body limit (measured on the serialized JSON), refusals surfaced with the API's
 * {error, code, details}, a bad signal failing alone with its entry of the answer's `errors`,
 * duplicates counted, the official client's signal shape taken as it is.
 */
import t from 'tap';
import type { Paid } from '@paid-ai/paid-node';
import { SignalClient, InvalidSignalError, SignalApiError, SignalRejectedError, DeliveryError, type Delivered, type Signal } from '../../packages/sdk/src/index.js';
import { counts, createOrg, drained, http, useService } from '../helpers/service.js';
import { useHttpProxy } from '../helpers/http-proxy.js';

// The smallest body limit the service allows, so that byte-cut batches stay small.
const LIMIT = 64 * 1024;
const { iso, svc } = useService(t, 'sdkbatch', { MAX_BODY_BYTES: String(LIMIT) });

const proxy = useHttpProxy(t, () => svc.url);

const sig = (i: number, extra: Partial<Signal> = {}): Signal => ({ eventName: 'sdk_batch', customer: { externalCustomerId: `cus_${i % 5}` }, data: { i }, ...extra });

/** Number of signals per batch id, in order of first appearance. */
function sizes(ds: Delivered[]): number[] {
  const m = new Map<string, number>();
  for (const d of ds) m.set(d.batchId, (m.get(d.batchId) ?? 0) + 1);
  return [...m.values()];
}

t.test('splits at 500 signals; every signal gets its own key and id', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', flushIntervalMs: 60_000 });
  const before = proxy.requests('/api/v2/signals/bulk').length;
  const receipts = [];
  // Without data: 500 of these signals (about 123 bytes each with their key) fit the 64 KiB limit.
  for (let i = 0; i < 1203; i++) receipts.push(await client.send(sig(i, { data: undefined })));
  t.equal(await client.close().then((r) => r.delivered), 1203, 'close() flushed the rest');
  const ds = await Promise.all(receipts.map((r) => r.delivered));
  t.same(sizes(ds).sort((a, b) => b - a), [500, 500, 203], 'two full batches, the rest on close');
  const reqs = proxy.requests('/api/v2/signals/bulk').slice(before);
  t.same(reqs.map((r) => r.json.signals.length).sort((a: number, b: number) => b - a), [500, 500, 203]);
  const keys = new Set(receipts.map((r) => r.idempotencyKey));
  t.equal(keys.size, 1203, 'every signal got a distinct key');
  t.ok([...keys].every((k) => /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(k!)), 'random UUIDs');
  t.same(reqs.flatMap((r) => r.json.signals.map((s: Signal) => s.idempotencyKey)).sort(), [...keys].sort(), 'the keys went out with the signals');
  t.ok(ds.every((d) => d.signalId.startsWith(`sig_${d.batchId.slice(4)}_`)), 'signal ids name their batch');
  t.same(new Set(ds.map((d) => d.signalId)).size, 1203, 'and are distinct');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 1203, test: 0 });
});

t.test('a signal keeps its own idempotency key; the caller object is not changed', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: svc.url, apiKey: org.live });
  const mine = sig(1, { idempotencyKey: 'order-17' });
  const bare = sig(2);
  const a = await client.send(mine);
  const b = await client.send(bare);
  await client.close();
  t.equal(a.idempotencyKey, 'order-17');
  t.equal((await a.delivered).idempotencyKey, 'order-17');
  t.equal(bare.idempotencyKey, undefined, 'the key is added to what is sent, not to the caller object');
  t.ok(b.idempotencyKey);
});

t.test('stampTimestamps: signals without a timestamp carry the time of send(); others keep theirs', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', stampTimestamps: true });
  const before = Date.now();
  await client.send(sig(1));
  await client.send(sig(2, { timestamp: '2026-01-01T00:00:00Z' }));
  await client.send(sig(3, { timestamp: new Date('2026-01-02T00:00:00Z') }));
  const after = Date.now();
  t.same(await client.close(), { delivered: 3, duplicates: 0 });
  const sent = proxy.requests('/api/v2/signals/bulk').at(-1)!.json.signals.map((s: Signal) => s.timestamp);
  t.match(sent[0], /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  t.ok(Date.parse(sent[0]) >= before && Date.parse(sent[0]) <= after, 'the time of send()');
  t.same(sent.slice(1), ['2026-01-01T00:00:00Z', '2026-01-02T00:00:00.000Z'], 'given timestamps kept (a Date as its ISO string)');
});

t.test('autoIdempotencyKeys: false sends keyless signals keyless', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, autoIdempotencyKeys: false, compression: 'none' });
  const r = await client.send(sig(1));
  await client.close();
  t.equal(r.idempotencyKey, undefined);
  const last = proxy.requests('/api/v2/signals/bulk').at(-1)!;
  t.notOk('idempotencyKey' in last.json.signals[0], 'no key in the request');
});

t.test('splits at the body limit, measured on the serialized JSON; no 413', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', maxBodyBytes: LIMIT, flushIntervalMs: 60_000 });
  const before = proxy.requests('/api/v2/signals/bulk').length;
  // Sizes vary (multi-byte characters count as their UTF-8 bytes): 1.5 to 6 KB each.
  const signals = Array.from({ length: 60 }, (_, i) => sig(i, { data: { pad: 'é'.repeat(700 + ((i * 397) % 2300)) } }));
  const receipts = [];
  for (const s of signals) receipts.push(await client.send(s));
  await client.close();
  const reqs = proxy.requests('/api/v2/signals/bulk').slice(before);
  t.ok(reqs.length >= 3, `${reqs.length} requests`);
  t.ok(reqs.every((r) => r.status === 202), 'every request accepted');
  t.ok(reqs.every((r) => r.raw.length <= LIMIT), `every body ≤ ${LIMIT} bytes: ${reqs.map((r) => r.raw.length).join(', ')}`);
  // Each batch is as full as it can be: the next signal would not have fitted.
  const order = reqs.flatMap((r) => r.json.signals.map((s: Signal) => s.idempotencyKey));
  t.same(order, receipts.map((r) => r.idempotencyKey), 'in order');
  let next = 0;
  for (const r of reqs.slice(0, -1)) {
    next += r.json.signals.length;
    const following = Buffer.byteLength(JSON.stringify({ ...signals[next], idempotencyKey: receipts[next]!.idempotencyKey }));
    t.ok(r.raw.length + 1 + following > LIMIT, `batch of ${r.json.signals.length} is full (${r.raw.length} + ${following})`);
  }
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 60, test: 0 });
});

t.test('the byte limit is exact: a body of exactly maxBodyBytes goes as one request, one byte more as two', async (t) => {
  const org = await createOrg(svc.url);
  /** A signal whose JSON is exactly `n` bytes. */
  const sized = (key: string, n: number): Signal => {
    const base = { eventName: 'exact', customer: { externalCustomerId: 'c' }, idempotencyKey: key, data: { p: '' } };
    return { ...base, data: { p: 'x'.repeat(n - Buffer.byteLength(JSON.stringify(base))) } };
  };
  for (const extra of [0, 1]) {
    const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', maxBodyBytes: LIMIT, flushIntervalMs: 60_000 });
    const before = proxy.requests('/api/v2/signals/bulk').length;
    // {"signals":[ s1 , s2 , s3 , s4 , s5 ]} = 12 + 4 × 13,000 + 4 commas + s5 + 2 bytes (data is at most 16 KB a signal)
    const last = LIMIT - 18 - 4 * 13_000 + extra;
    for (let i = 0; i < 4; i++) await client.send(sized(`exact-${i}-${extra}`, 13_000));
    await client.send(sized(`exact-4-${extra}`, last));
    t.same(await client.close(), { delivered: 5, duplicates: 0 });
    const reqs = proxy.requests('/api/v2/signals/bulk').slice(before);
    t.same(reqs.map((r) => r.raw.length), extra === 0 ? [LIMIT] : [14 + 4 * 13_000 + 3, 14 + last], extra === 0 ? 'exactly the limit: one request' : 'one byte over: two');
    t.ok(reqs.every((r) => r.status === 202));
  }
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 10, test: 0 });
});

t.test('a server limit lower than maxBodyBytes: the 413 batch is split and still delivered', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', flushIntervalMs: 60_000 });
  const before = proxy.requests('/api/v2/signals/bulk').length;
  for (let i = 0; i < 40; i++) await client.send(sig(i, { data: { pad: 'x'.repeat(3000) } }));
  t.same(await client.close(), { delivered: 40, duplicates: 0 });
  const statuses = proxy.requests('/api/v2/signals/bulk').slice(before).map((r) => r.status);
  t.equal(statuses[0], 413, 'the 120 KB batch was too large for this server');
  t.ok(statuses.slice(1).every((s) => s === 202 || s === 413) && statuses.at(-1) === 202, statuses.join(','));
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 40, test: 0 });
});

t.test('BigInt values in data are sent as JSON integers with all their digits', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none' });
  const tricky = { eventName: 'big', customer: { externalCustomerId: 'c' }, data: { big: 9007199254740993n, nested: { neg: -18446744073709551615n }, text: '\u0000x:1', list: [1n, 2] } };
  const r = await client.send(tricky as unknown as Signal);
  t.match(await r.delivered, { batchId: /^bat_/ }, 'accepted by the service');
  await client.close();
  const raw = proxy.requests('/api/v2/signals/bulk').at(-1)!.raw.toString();
  t.match(raw, '"data":{"big":9007199254740993,"nested":{"neg":-18446744073709551615},"text":"\\u0000x:1","list":[1,2]}');
  t.equal(typeof tricky.data.big, 'bigint', 'the caller object is untouched');
});

t.test('a signal that cannot fit in any body is refused by send(); so is a non-object', async (t) => {
  const client = new SignalClient({ baseUrl: svc.url, apiKey: 'sk_live_x', maxBodyBytes: 1000 });
  await t.rejects(client.send(sig(1, { data: { pad: 'x'.repeat(1000) } })), InvalidSignalError);
  await t.rejects(client.send(null as unknown as Signal), { name: 'InvalidSignalError', message: /must be an object, got null/ });
  const circular: Record<string, unknown> = { n: 1n };
  circular.self = circular;
  await t.rejects(client.send(sig(1, { data: circular })), { name: 'InvalidSignalError', message: /cannot be serialized as JSON: .*circular/ });
  await t.rejects(client.send(sig(1, { data: { f: 1n, self: circular } })), { name: 'InvalidSignalError', message: /circular/ }, 'also with a BigInt inside');
  t.equal(client.bufferedSignals, 0);
  await client.close();
});

t.test('invalid signals fail alone with their entry of the answer; the rest of their request is delivered once, not resent', async (t) => {
  const org = await createOrg(svc.url);
  const errors: Error[] = [];
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', flushIntervalMs: 60_000, onError: (e) => errors.push(e) });
  const before = proxy.requests('/api/v2/signals/bulk').length;
  const receipts = [];
  for (let i = 0; i < 10; i++) receipts.push(await client.send(i === 3 || i === 7 ? sig(i, { customer: { externalCustomerId: '' } }) : sig(i)));
  const err = await client.close().catch((e: unknown) => e);
  t.type(err, DeliveryError);
  t.match(err, { delivered: 8, failed: 2, duplicates: 0 });
  t.same((err as DeliveryError).failures.map((f) => (f.signal as Signal).data), [{ i: 3 }, { i: 7 }]);
  const reqs = proxy.requests('/api/v2/signals/bulk').slice(before);
  t.same(reqs.map((r) => r.status), [202], 'one request: nothing resent');
  t.match(JSON.parse(reqs[0]!.answer!), { ingested: 8, duplicates: 0, failed: 2, errors: [{ index: 3, field: 'customer.externalCustomerId' }, { index: 7, field: 'customer.externalCustomerId' }] });
  const bad = await receipts[3]!.delivered.catch((e: unknown) => e);
  t.type(bad, SignalRejectedError);
  t.type(bad, SignalApiError, 'a SignalApiError too');
  t.match(bad, { status: 202, code: 'INVALID_SIGNAL', index: 3, field: 'customer.externalCustomerId', reason: String, batchId: /^bat_/, details: /^signals\[3\]\.customer\.externalCustomerId: / });
  t.match(await receipts[7]!.delivered.catch((e: unknown) => e), { name: 'SignalRejectedError', index: 7 });
  const good = await receipts[4]!.delivered;
  t.equal(good.batchId, (bad as SignalRejectedError).batchId, 'the valid signals of the same request are delivered');
  t.equal(good.signalId, `sig_${good.batchId.slice(4)}_4`, 'each keeps its index in the request');
  t.equal(errors.length, 2, 'onError once per failed signal');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 8, test: 0 });
});

t.test('a request whose every signal is invalid (400): each signal fails with its own error', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', flushIntervalMs: 60_000 });
  const before = proxy.requests('/api/v2/signals/bulk').length;
  const a = await client.send(sig(1, { eventName: '' }));
  const b = await client.send({ ...sig(2), timestamp: 'yesterday' });
  await t.rejects(client.close(), { name: 'DeliveryError', failed: 2, delivered: 0 });
  t.same(proxy.requests('/api/v2/signals/bulk').slice(before).map((r) => r.status), [400], 'one request, not retried');
  t.match(await a.delivered.catch((e: unknown) => e), { name: 'SignalRejectedError', status: 400, code: 'INVALID_SIGNAL', index: 0, field: 'eventName', batchId: null, details: /^signals\[0\]\.eventName: / });
  t.match(await b.delivered.catch((e: unknown) => e), { name: 'SignalRejectedError', status: 400, index: 1, field: 'timestamp', details: /^signals\[1\]\.timestamp: must be an RFC 3339/ });
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 0, test: 0 });
});

t.test('duplicates: a key repeated in a request is delivered and counted as a duplicate, stored once', async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', flushIntervalMs: 60_000 });
  const first = await client.send(sig(1, { idempotencyKey: 'order-1' }));
  const again = await client.send(sig(1, { idempotencyKey: 'order-1' }));
  await client.send(sig(2, { idempotencyKey: 'order-2' }));
  t.same(await client.flush(), { delivered: 3, duplicates: 1 });
  t.equal((await first.delivered).signalId.slice(-2), '_0');
  t.equal((await again.delivered).idempotencyKey, 'order-1');
  await drained(iso);
  await client.send(sig(2, { idempotencyKey: 'order-2' }));
  t.same(await client.close(), { delivered: 1, duplicates: 1 }, 'a key committed before the request came is a duplicate too');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 2, test: 0 });
});

t.test("the official client's Paid.Signal is a Signal: by customer id or externalId, with a product attribution", async (t) => {
  const org = await createOrg(svc.url);
  const customer = await http(svc.url, 'POST', '/api/v2/customers', { token: org.live, body: { externalId: 'paid-acme', name: 'Acme' } });
  t.equal(customer.status, 201);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none', flushIntervalMs: 60_000 });
  const byId: Paid.Signal = { eventName: 'paid_shape', customer: { customerId: customer.body.id }, attribution: { externalProductId: 'chat' }, data: { n: 1 }, idempotencyKey: 'p-1' };
  const byExternal: Paid.Signal = { eventName: 'paid_shape', customer: { externalCustomerId: 'paid-acme' }, timestamp: '2026-01-01T00:00:00Z', data: { n: 2 } };
  await client.send(byId);
  await client.send({ ...byExternal, unitId: 'root' });
  t.same(await client.close(), { delivered: 2, duplicates: 0 });
  const sent = proxy.requests('/api/v2/signals/bulk').at(-1)!.json.signals;
  t.same(sent[0], byId, 'sent as given');
  t.match(sent[1], { ...byExternal, unitId: 'root' });
  await drained(iso);
  const rows = await http(svc.url, 'POST', '/api/v2/analytics/query', {
    token: org.live,
    body: { query: "SELECT customer_id, external_customer_id, external_product_id FROM fact_signal WHERE event_name = 'paid_shape' ORDER BY data.n::Int64" },
  });
  t.equal(rows.status, 200, JSON.stringify(rows.body));
  t.same(rows.body.rows, [[customer.body.id, 'paid-acme', 'chat'], [customer.body.id, 'paid-acme', '']], 'both forms resolved to the one customer');
});

t.test('a refusal of the whole request (401) is not retried and reaches every signal', async (t) => {
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: 'sk_live_notakey', compression: 'none' });
  const before = proxy.requests('/api/v2/signals/bulk').length;
  const r = await client.send(sig(1));
  const e = await r.delivered.catch((x: unknown) => x);
  t.type(e, SignalApiError);
  t.match(e, { status: 401, code: 'UNAUTHORIZED', error: 'Unauthorized' });
  t.equal(proxy.requests('/api/v2/signals/bulk').length - before, 1, 'one request, no retry');
  await t.rejects(client.close(), { name: 'DeliveryError', failed: 1, delivered: 0 }, 'close() reports the failure that settled before it');
  t.same(await client.close(), { delivered: 0, duplicates: 0 }, 'and reports it once');
});

t.test('options are validated', async (t) => {
  t.throws(() => new SignalClient({ baseUrl: 'localhost:8080', apiKey: 'k' }), TypeError);
  t.throws(() => new SignalClient({ baseUrl: svc.url, apiKey: '' }), TypeError);
  t.throws(() => new SignalClient({ baseUrl: svc.url, apiKey: 'k', maxBatchSignals: 501 }), { name: 'RangeError', message: /maxBatchSignals must be a whole number from 1 to 500, got 501/ });
  t.throws(() => new SignalClient({ baseUrl: svc.url, apiKey: 'k', maxBufferedSignals: 0 }), RangeError);
  t.throws(() => new SignalClient({ baseUrl: svc.url, apiKey: 'k', compression: 'br' as 'gzip' }), RangeError);
  t.throws(() => new SignalClient({ baseUrl: svc.url, apiKey: 'k', flushIntervalMs: -1 }), RangeError);
});
