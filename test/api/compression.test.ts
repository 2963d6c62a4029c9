/**
 * Compressed request bodies through the real service (Content-Encoding, decoded by the one
 * body reader of src/http/wrap.ts): gzip and deflate batches ingested exactly; a bomb is a
 * 413 and the service's memory does not jump (its peak RSS, VmHWM of /proc/<pid>/status);
 * corrupt data 400, unknown codings 415 naming them; the rate limit still applies to the
 * decompressed batch; gzip on the analytics, billing configuration and webhook routes; and
 * every refusal changes nothing.
 *
 * zstd differs by Node version: node:zlib has it from Node 22.15 / 23.8 (so on the supported
 * lines, 22 and 24), not on Node 20, and the service detects it at start. Its test says which
 * behaviour it expects from the version it runs on, and runs on each (scripts/test-lts.sh).
 */
import t from 'tap';
import zlib from 'node:zlib';
import { readFileSync } from 'node:fs';
import { batch, counts, createOrg, drained, http, useService } from '../helpers/service.js';
import { SUPPORTED_CODINGS } from '../../src/http/content-encoding.js';

const { iso, svc } = useService(t, 'compression');

/** node:zlib's zstd functions, present on Node ≥ 22.15 / 23.8 only. */
const zstd = zlib as unknown as { zstdCompressSync?: (b: Buffer) => Buffer };
const [major, minor] = process.versions.node.split('.').map(Number) as [number, number];
/** Whether this Node has zstd, by its version alone (not by the service's own detection). */
const ZSTD_BY_VERSION = major > 23 || (major === 23 && minor >= 8) || (major === 22 && minor >= 15);

interface Answer {
  status: number;
  headers: Headers;
  body: any;
}

async function post(path: string, key: string, body: Buffer, encoding: string | null, method = 'POST'): Promise<Answer> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  if (encoding !== null) headers['content-encoding'] = encoding;
  const r = await fetch(svc.url + path, { method, headers, body });
  const text = await r.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* keep the text */
  }
  return { status: r.status, headers: r.headers, body: parsed };
}

const jsonOf = (v: unknown): Buffer => Buffer.from(JSON.stringify(v));
const BULK = '/api/v2/signals/bulk';

/** Peak and current resident memory of the service process, in bytes. */
function memory(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)![1]) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

t.test('gzip and deflate batches are ingested exactly; identity is fine', async (t) => {
  const org = await createOrg(svc.url);
  const b500 = jsonOf(batch(500, (i) => ({ idempotencyKey: `gz-${i}` })));
  const gz = zlib.gzipSync(b500);
  t.ok(gz.length * 5 < b500.length, `a 500-signal batch shrinks (${b500.length} → ${gz.length} bytes)`);
  const a = await post(BULK, org.live, gz, 'gzip');
  t.equal(a.status, 202, JSON.stringify(a.body));
  t.equal(a.body.ingested, 500);
  const b = await post(BULK, org.live, zlib.deflateSync(jsonOf(batch(120, (i) => ({ idempotencyKey: `df-${i}` })))), 'deflate');
  t.equal(b.body.ingested, 120, JSON.stringify(b.body));
  const c = await post(BULK, org.live, jsonOf(batch(30, (i) => ({ idempotencyKey: `id-${i}` }))), 'identity');
  t.equal(c.body.ingested, 30, JSON.stringify(c.body));
  const v1 = await post('/api/v1/usage', org.live, zlib.gzipSync(jsonOf(batch(7, (i) => ({ idempotencyKey: `v1-${i}` })).signals)), 'x-gzip');
  t.equal(v1.body.ingested, 7, `v1 usage, x-gzip: ${JSON.stringify(v1.body)}`);
  // The same gzipped batch again: same keys, skipped by the pipeline as usual.
  t.equal((await post(BULK, org.live, gz, 'gzip')).status, 202);
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 657, test: 0 });
});

t.test(`zstd by Node version: ${ZSTD_BY_VERSION ? 'accepted' : 'refused with 415'} on Node ${process.versions.node} (node:zlib has zstd from 22.15 / 23.8)`, async (t) => {
  t.equal(SUPPORTED_CODINGS.includes('zstd'), ZSTD_BY_VERSION, 'the service detects zstd from its runtime');
  const org = await createOrg(svc.url);
  const body = jsonOf(batch(11, (i) => ({ idempotencyKey: `zs-${i}` })));
  if (!ZSTD_BY_VERSION) {
    // Node 20: refused, naming why, like any coding the runtime cannot decode; the client falls back.
    const r = await post(BULK, org.live, body, 'zstd');
    t.equal(r.status, 415);
    t.equal(r.body.code, 'UNSUPPORTED_CONTENT_ENCODING');
    t.match(r.body.details, 'Content-Encoding "zstd" is not supported (this server runs on a Node.js without zstd in node:zlib)');
    t.equal(r.headers.get('accept-encoding'), 'gzip, deflate, identity');
    await drained(iso);
    t.same(await counts(svc.url, org.id), { live: 0, test: 0 });
    return;
  }
  // Node 22 / 24: ingested exactly, with the same limits and refusals as gzip.
  const zs = await post(BULK, org.live, zstd.zstdCompressSync!(body), 'zstd');
  t.equal(zs.status, 202, JSON.stringify(zs.body));
  t.equal(zs.body.ingested, 11);
  const upper = await post(BULK, org.live, zstd.zstdCompressSync!(jsonOf(batch(3, (i) => ({ idempotencyKey: `zs-up-${i}` })))), 'ZSTD');
  t.equal(upper.body.ingested, 3, `the coding's name is case-insensitive: ${JSON.stringify(upper.body)}`);
  const bomb = zstd.zstdCompressSync!(Buffer.alloc(100_000_000));
  t.ok(bomb.length < 1_000_000, `bomb: ${bomb.length} bytes compressed`);
  const big = await post(BULK, org.live, bomb, 'zstd');
  t.equal(big.status, 413);
  t.equal(big.body.details, 'request body larger than the limit of 1000000 bytes once decompressed (Content-Encoding: zstd)');
  const corrupt = await post(BULK, org.live, Buffer.from('not zstd at all'), 'zstd');
  t.equal(corrupt.status, 400);
  t.equal(corrupt.body.code, 'INVALID_CONTENT_ENCODING');
  t.match(corrupt.body.details, /^the body is not valid zstd data \(Content-Encoding: zstd\): /);
  const br = await post(BULK, org.live, body, 'br');
  t.equal(br.status, 415);
  t.equal(br.headers.get('accept-encoding'), 'gzip, deflate, zstd, identity', 'a 415 lists zstd among the accepted codings');
  t.equal((await post(BULK, org.live, zstd.zstdCompressSync!(body), 'zstd')).status, 202, 'the same batch again: skipped by the pipeline as usual');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 14, test: 0 });
});

t.test('a bomb is a 413, the service does not inflate it, and nothing is ingested', async (t) => {
  const org = await createOrg(svc.url);
  // 100 MB of zeros is ~100 KB of gzip: under the 1 MB limit as received.
  const bomb = zlib.gzipSync(Buffer.alloc(100_000_000));
  t.ok(bomb.length < 1_000_000, `bomb: ${bomb.length} bytes compressed`);
  const pid = svc.proc!.pid!;
  const before = memory(pid);
  const answers = await Promise.all(Array.from({ length: 8 }, () => post(BULK, org.live, bomb, 'gzip')));
  const after = memory(pid);
  for (const r of answers) {
    t.equal(r.status, 413);
    t.equal(r.body.code, 'PAYLOAD_TOO_LARGE');
    t.equal(r.body.details, 'request body larger than the limit of 1000000 bytes once decompressed (Content-Encoding: gzip)');
  }
  // Inflated, 8 bombs would be 800 MB; stopped at the limit, at most 8 × ~1 MB.
  const grew = after.hwm - before.hwm;
  t.ok(grew < 64 * 1024 * 1024, `peak RSS grew by ${Math.round(grew / 1e6)} MB (from ${Math.round(before.hwm / 1e6)} MB; RSS now ${Math.round(after.rss / 1e6)} MB)`);
  // A bomb that is also a valid batch prefix: still nothing.
  const sneaky = zlib.gzipSync(Buffer.concat([Buffer.from('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{"pad":"'), Buffer.alloc(2_000_000, 'a'), Buffer.from('"}}]}')]));
  t.equal((await post(BULK, org.live, sneaky, 'gzip')).status, 413);
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 0, test: 0 });
});

t.test('corrupt data is 400, unknown codings 415; nothing ingested', async (t) => {
  const org = await createOrg(svc.url);
  const gz = zlib.gzipSync(jsonOf(batch(50)));
  const truncated = await post(BULK, org.live, gz.subarray(0, gz.length - 12), 'gzip');
  t.equal(truncated.status, 400);
  t.same(truncated.body, { error: 'Bad Request', code: 'INVALID_CONTENT_ENCODING', details: 'the body is not valid gzip data (Content-Encoding: gzip): unexpected end of file' });
  const plainSaidGzip = await post(BULK, org.live, jsonOf(batch(50)), 'gzip');
  t.equal(plainSaidGzip.status, 400);
  t.match(plainSaidGzip.body.details, 'incorrect header check');
  const gzipSaidNothing = await post(BULK, org.live, gz, null);
  t.equal(gzipSaidNothing.status, 400);
  t.equal(gzipSaidNothing.body.code, 'INVALID_JSON', 'a gzipped body without the header is just bad JSON');

  // (zstd: its own test above, by Node version)
  for (const coding of ['br', 'compress', 'gzip, gzip']) {
    const r = await post(BULK, org.live, gz, coding);
    t.equal(r.status, 415, coding);
    t.equal(r.body.error, 'Unsupported Media Type');
    t.equal(r.body.code, 'UNSUPPORTED_CONTENT_ENCODING', coding);
    t.match(r.body.details, `Content-Encoding ${JSON.stringify(coding)}`, coding);
    t.equal(r.headers.get('accept-encoding'), SUPPORTED_CODINGS.join(', '), 'the 415 lists what is accepted');
  }
  const noKey = await fetch(svc.url + BULK, { method: 'POST', headers: { 'content-encoding': 'br' }, body: gz });
  t.equal(noKey.status, 401, 'authentication first');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 0, test: 0 });
});

t.test('a rate-limited gzipped batch ingests nothing; an invalid one takes no tokens', async (t) => {
  const org = await createOrg(svc.url, { burst: 500, refillPerSecond: 0.001 });
  const invalid = await post(BULK, org.live, zlib.gzipSync(jsonOf(batch(500, () => ({ customer: { externalCustomerId: '' } })))), 'gzip');
  t.equal(invalid.status, 400, 'every signal invalid: the request is refused whole');
  t.equal(invalid.body.code, 'INVALID_SIGNAL');
  t.match(invalid.body.details, /^signals\[0\]\.customer\.externalCustomerId: /);
  t.equal(invalid.body.errors?.length, 500, 'each signal reported');
  const first = await post(BULK, org.live, zlib.gzipSync(jsonOf(batch(500, (i) => ({ idempotencyKey: `rl-a-${i}` })))), 'gzip');
  t.equal(first.status, 202, 'the whole bucket: the invalid batch took no tokens');
  const second = await post(BULK, org.live, zlib.gzipSync(jsonOf(batch(1, () => ({ idempotencyKey: 'rl-b' })))), 'gzip');
  t.equal(second.status, 429);
  t.equal(second.body.code, 'RATE_LIMIT_EXCEEDED');
  t.ok(Number(second.headers.get('retry-after')) >= 1);
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 500, test: 0 });
});

t.test('gzip on the analytics, billing configuration and webhook routes', async (t) => {
  const org = await createOrg(svc.url);
  const q = await post('/api/v2/analytics/query', org.live, zlib.gzipSync(jsonOf({ query: 'SELECT 41 + 1 AS n' })), 'gzip');
  t.equal(q.status, 200, JSON.stringify(q.body));
  t.same(q.body.rows, [[42]]);

  const created = await post('/api/v2/customers', org.live, zlib.gzipSync(jsonOf({ externalId: 'acme', name: 'Acme' })), 'gzip');
  t.equal(created.status, 201, JSON.stringify(created.body));
  t.equal(created.body.externalId, 'acme');
  const plan = await post('/api/v2/plans', org.live, zlib.deflateSync(jsonOf({ name: 'Pro' })), 'deflate');
  t.equal(plan.status, 201, JSON.stringify(plan.body));

  const list = async () => (await http(svc.url, 'GET', '/api/v2/customers', { token: org.live })).body;
  const plans = async () => (await http(svc.url, 'GET', '/api/v2/plans', { token: org.live })).body;
  const beforeC = await list();
  const beforeP = await plans();
  t.equal((await post('/api/v2/customers', org.live, Buffer.from('garbage'), 'gzip')).status, 400);
  t.equal((await post('/api/v2/customers', org.live, zlib.gzipSync(jsonOf({ externalId: 'x'.repeat(200_000) })), 'gzip')).status, 413, 'the route limit (64 KiB) applies decompressed');
  t.equal((await post('/api/v2/plans', org.live, zlib.gzipSync(jsonOf({ name: 'Max' })), 'br')).status, 415);
  t.same(await list(), beforeC, 'customers unchanged');
  t.same(await plans(), beforeP, 'plans unchanged');

  const hooks = async () => (await http(svc.url, 'GET', '/api/v2/webhooks', { token: org.live })).body;
  const beforeW = await hooks();
  t.equal((await post('/api/v2/webhooks/billing-payment-failed', org.live, zlib.gzipSync(jsonOf({ enabled: true })).subarray(0, 10), 'gzip', 'PATCH')).status, 400);
  t.equal((await post('/api/v2/webhooks/billing-payment-failed', org.live, zlib.gzipSync(jsonOf({ enabled: true })), 'br', 'PATCH')).status, 415);
  t.same(await hooks(), beforeW, 'webhooks unchanged');
  const patched = await post('/api/v2/webhooks/billing-payment-failed', org.live, zlib.gzipSync(jsonOf({ url: 'http://127.0.0.1:9/compressed', enabled: true })), 'gzip', 'PATCH');
  t.equal(patched.status, 200, JSON.stringify(patched.body));
  t.match(patched.body, { url: 'http://127.0.0.1:9/compressed', enabled: true });
});
