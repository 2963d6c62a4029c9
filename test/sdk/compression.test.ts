/**
 * SignalClient compression against the real service, which decodes `Content-Encoding: gzip`
 * (src/http/content-encoding.ts): `auto` and `gzip` send gzip and are stored. A proxy
 * answering 415 in the service's place checks what a server that refuses gzip gets: `auto`
 * falls back to identity for good, resending the same signals; `gzip` surfaces the refusal.
 */
import t from 'tap';
import { gzipSync } from 'node:zlib';
import { SignalClient, SignalApiError, type Signal } from '../../packages/sdk/src/index.js';
import { counts, createOrg, drained, useService } from '../helpers/service.js';
import { useHttpProxy, type Seen } from '../helpers/http-proxy.js';

const { iso, svc } = useService(t, 'sdkgzip');

const proxy = useHttpProxy(t, () => svc.url);
t.before(async () => {
  const org = await createOrg(svc.url);
  const res = await fetch(`${svc.url}/api/v2/signals/bulk`, {
    method: 'POST',
    headers: { authorization: `Bearer ${org.live}`, 'content-type': 'application/json', 'content-encoding': 'gzip' },
    body: gzipSync(JSON.stringify({ signals: [{ eventName: 'probe', customer: { externalCustomerId: 'c' } }] })),
  });
  if (res.status !== 202) throw new Error(`the service refused a gzip body: ${res.status} ${await res.text()}`);
});

const sig = (i: number): Signal => ({ eventName: 'sdk_gzip', customer: { externalCustomerId: `cus_${i % 3}` }, data: { i, note: 'the same words again and again compress well' } });
const bulk = (from: number): Seen[] => proxy.requests('/api/v2/signals/bulk').slice(from);
const enc = (s: Seen): string => String(s.headers['content-encoding'] ?? 'identity');

t.test("compression: 'none' sends identity bodies", async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'none' });
  const from = proxy.seen.length;
  for (let i = 0; i < 300; i++) await client.send(sig(i));
  t.same(await client.close(), { delivered: 300, duplicates: 0 });
  t.same(bulk(from).map(enc), ['identity']);
  t.equal(client.compressionInUse, 'none');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 300, test: 0 });
});

t.test("compression: 'auto' uses gzip, which the service takes", async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, flushIntervalMs: 60_000 });
  t.equal(client.compressionInUse, 'gzip', 'auto starts with gzip');
  const from = proxy.seen.length;
  for (let i = 0; i < 500; i++) await client.send(sig(i));
  t.same(await client.flush(), { delivered: 500, duplicates: 0 });
  for (let i = 500; i < 1000; i++) await client.send(sig(i));
  t.same(await client.close(), { delivered: 500, duplicates: 0 });
  const reqs = bulk(from);
  const first = reqs[0]!;
  t.equal(enc(first), 'gzip');
  t.ok(first.raw.length * 5 < Buffer.byteLength(JSON.stringify(first.json)), `compressed: ${first.raw.length} bytes for ${Buffer.byteLength(JSON.stringify(first.json))}`);
  t.same(reqs.map((r) => [enc(r), r.status]), [['gzip', 202], ['gzip', 202]], 'both batches gzip, accepted');
  t.equal(client.compressionInUse, 'gzip');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 1000, test: 0 }, 'each signal once');
});

t.test("compression: 'auto' leaves small bodies uncompressed", async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live });
  const from = proxy.seen.length;
  await client.send(sig(1));
  await client.close();
  t.same(bulk(from).map(enc), ['identity']);
  t.equal(client.compressionInUse, 'gzip', 'no verdict on gzip yet');
});

t.test("compression: 'gzip' is always gzip; a refusal is surfaced, not worked around", async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'gzip' });
  const from = proxy.seen.length;
  const r = await client.send(sig(1));
  const outcome = await r.delivered.then(
    (d) => d,
    (e: unknown) => e,
  );
  t.same(bulk(from).map(enc), ['gzip']);
  t.match(outcome, { batchId: /^bat_/ });
  await client.close();

  // A server that refuses gzip (the proxy answers 415 in its place): surfaced, not worked around.
  proxy.decide = (s) => (s.headers['content-encoding'] ? { kind: 'answer', status: 415, body: { error: 'Unsupported Media Type', code: 'UNSUPPORTED_CONTENT_ENCODING', details: 'Content-Encoding gzip is not accepted; accepted: identity' } } : { kind: 'forward' });
  const refusing = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compression: 'gzip' });
  const from2 = proxy.seen.length;
  const r2 = await refusing.send(sig(2));
  const refused = await r2.delivered.then(
    (d) => d,
    (e: unknown) => e,
  );
  t.same(bulk(from2).map((x) => [enc(x), x.status]), [['gzip', 415]], 'sent once, gzip, not resent as identity');
  t.type(refused, SignalApiError);
  t.match(refused, { status: 415 });
  await t.rejects(refusing.close(), { name: 'DeliveryError' });
});

t.test("compression: 'auto' falls back on a 415, whatever the code", async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: proxy.url, apiKey: org.live, compressMinBytes: 0 });
  proxy.decide = (s) =>
    s.headers['content-encoding'] ? { kind: 'answer', status: 415, body: { error: 'Unsupported Media Type', code: 'UNSUPPORTED_CONTENT_ENCODING', details: 'Content-Encoding gzip is not accepted; accepted: identity' } } : { kind: 'forward' };
  const from = proxy.seen.length;
  const r = await client.send(sig(1));
  t.match(await r.delivered, { batchId: /^bat_/ });
  await client.close();
  t.same(bulk(from).map((s) => [enc(s), s.status]), [['gzip', 415], ['identity', 202]]);
  t.equal(client.compressionInUse, 'none');
});
