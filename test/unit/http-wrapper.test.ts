/**
 * The uWS wrapper (src/http/wrap.ts): a handler whose `before` hook is asynchronous (an
 * API-key lookup that misses the cache) still receives the whole body; early answers and
 * the body limit work; a thrown non-API error becomes a 500 without internals; compressed
 * bodies (Content-Encoding) reach handlers decompressed and every refusal of one (415, 413,
 * 400) happens before the handler and after authentication. The header-section limit
 * (src/http/uws-limits.ts) differs by Node version: its test says which way it goes and runs
 * on each (scripts/test-lts.sh).
 */
import t from 'tap';
import zlib from 'node:zlib';
import { uWS, wrap } from '../../src/http/wrap.js';
import { ApiError } from '../../src/errors.js';
import { SUPPORTED_CODINGS } from '../../src/http/content-encoding.js';
import { MAX_HEADER_BYTES } from '../../src/http/uws-limits.js';

const app = uWS.App();
const slowBefore = (): Promise<undefined> => new Promise((r) => setTimeout(() => r(undefined), 150));
app.post('/echo', wrap((req) => ({ status: 200, body: { bytes: req.body.length, text: req.body.toString() } }), { body: true, before: slowBefore }));
app.post('/deny', wrap(() => ({ status: 200 }), { body: true, before: () => { throw new ApiError('UNAUTHORIZED', 'no'); } }));
app.post('/small', wrap((req) => ({ status: 200, body: { bytes: req.body.length } }), { body: true, maxBodyBytes: 100 }));
app.get('/boom', wrap(() => { throw new Error('secret /etc/path'); }));
app.get('/long/:id', wrap((req) => ({ status: 200, body: { bytes: req.url.length } })));
const port = await new Promise<number>((resolve) => app.listen('127.0.0.1', 0, (s) => resolve(uWS.us_socket_local_port(s))));
const base = `http://127.0.0.1:${port}`;
t.teardown(() => app.close());

t.test('an asynchronous before-hook does not lose the body', async (t) => {
  for (const text of ['{"a":1}', 'x'.repeat(300_000)]) {
    const r = await fetch(`${base}/echo`, { method: 'POST', body: text });
    t.equal(r.status, 200);
    const b = (await r.json()) as { bytes: number; text: string };
    t.equal(b.bytes, text.length);
    t.equal(b.text, text);
  }
});

t.test('an early answer from before-hook', async (t) => {
  const r = await fetch(`${base}/deny`, { method: 'POST', body: 'y'.repeat(200_000) });
  t.equal(r.status, 401);
  t.same(await r.json(), { error: 'Unauthorized', code: 'UNAUTHORIZED', details: 'no' });
});

t.test('body limit: declared and streamed', async (t) => {
  const ok = await fetch(`${base}/small`, { method: 'POST', body: 'z'.repeat(100) });
  t.same(await ok.json(), { bytes: 100 });
  const big = await fetch(`${base}/small`, { method: 'POST', body: 'z'.repeat(101) });
  t.equal(big.status, 413);
  t.equal(((await big.json()) as { code: string }).code, 'PAYLOAD_TOO_LARGE');
});

t.test('unexpected errors: 500 without internals', async (t) => {
  const r = await fetch(`${base}/boom`);
  t.equal(r.status, 500);
  const text = await r.text();
  t.notMatch(text, /secret|\/etc/);
  t.same(JSON.parse(text), { error: 'Internal Server Error', code: 'INTERNAL', details: 'An unexpected error occurred; it has been logged.' });
});

// Path parameters: decoded once, here; a malformed escape is 400 INVALID_PATH naming the parameter.
const app2 = uWS.App();
app2.get('/things/:thingId/parts/:partId', wrap((req) => ({ status: 200, body: { params: req.params } }), {}, '/things/:thingId/parts/:partId'));
app2.get('/guarded/:thingId', wrap(() => ({ status: 200 }), { before: () => { throw new ApiError('UNAUTHORIZED', 'no key'); } }, '/guarded/:thingId'));
const port2 = await new Promise<number>((resolve) => app2.listen('127.0.0.1', 0, (s) => resolve(uWS.us_socket_local_port(s))));
t.teardown(() => app2.close());

t.test('path parameters are decoded exactly once', async (t) => {
  const get = async (p: string) => {
    const r = await fetch(`http://127.0.0.1:${port2}${p}`);
    return { status: r.status, body: (await r.json()) as { params?: string[]; code?: string; details?: string } };
  };
  t.same((await get('/things/a%2Fb/parts/%2525ZZ')).body.params, ['a/b', '%25ZZ'], 'one decode: %2F is a slash inside the value, %2525 stays %25');
  t.same((await get('/things/%E2%82%AC/parts/x')).body.params, ['€', 'x']);
  for (const [p, name] of [['/things/%ZZ/parts/x', 'thingId'], ['/things/x/parts/%', 'partId'], ['/things/x/parts/%C0%AF', 'partId'], ['/things/%E0%A4%A/parts/%ZZ', 'thingId']] as const) {
    const r = await get(p);
    t.equal(r.status, 400, p);
    t.equal(r.body.code, 'INVALID_PATH', p);
    t.match(r.body.details, new RegExp(`^${name}: the path segment`), p);
  }
  const guarded = await get('/guarded/%ZZ');
  t.equal(guarded.status, 401, 'authentication answers before the path is judged');
});

// Compressed bodies: the wrapper is the one place bodies are read.
const json = Buffer.from(JSON.stringify({ signals: Array.from({ length: 200 }, (_, i) => ({ eventName: 'api_call', customer: { externalCustomerId: `cus_${i % 7}` }, data: { n: i } })) }));
const app3 = uWS.App();
let handled = 0;
const echo = wrap((req) => {
  handled++;
  return { status: 200, body: { bytes: req.body.length, sha: req.body.toString('base64').slice(0, 40) } };
}, { body: true, maxBodyBytes: 100_000 });
app3.post('/echo', echo);
app3.post('/guarded', wrap(() => ({ status: 200 }), { body: true, before: () => { throw new ApiError('UNAUTHORIZED', 'no key'); } }));
const port3 = await new Promise<number>((resolve) => app3.listen('127.0.0.1', 0, (s) => resolve(uWS.us_socket_local_port(s))));
const base3 = `http://127.0.0.1:${port3}`;
t.teardown(() => app3.close());

const post = async (p: string, body: Buffer, encoding?: string) => {
  const r = await fetch(base3 + p, { method: 'POST', body, headers: encoding === undefined ? {} : { 'content-encoding': encoding } });
  return { status: r.status, headers: r.headers, body: (await r.json()) as { bytes?: number; code?: string; details?: string } };
};

t.test('wrapper: compressed bodies reach the handler decompressed', async (t) => {
  const before = handled;
  t.same((await post('/echo', zlib.gzipSync(json), 'gzip')).body.bytes, json.length);
  t.same((await post('/echo', zlib.deflateSync(json), 'deflate')).body.bytes, json.length);
  t.same((await post('/echo', json, 'identity')).body.bytes, json.length);
  t.same((await post('/echo', json)).body.bytes, json.length);
  t.equal(handled, before + 4);
});

t.test('wrapper: every refusal happens before the handler', async (t) => {
  const before = handled;
  const unknown = await post('/echo', json, 'br');
  t.equal(unknown.status, 415);
  t.equal(unknown.body.code, 'UNSUPPORTED_CONTENT_ENCODING');
  t.match(unknown.body.details, '"br"');
  t.equal(unknown.headers.get('accept-encoding'), SUPPORTED_CODINGS.join(', '));

  const bomb = await post('/echo', zlib.gzipSync(Buffer.alloc(5_000_000)), 'gzip');
  t.equal(bomb.status, 413);
  t.equal(bomb.body.code, 'PAYLOAD_TOO_LARGE');
  t.match(bomb.body.details, 'once decompressed');

  // Incompressible data: the compressed body itself is over the limit, refused as received.
  const noise = zlib.gzipSync(Buffer.from(Array.from({ length: 150_000 }, () => Math.floor(Math.random() * 256))));
  const big = await post('/echo', noise, 'gzip');
  t.equal(big.status, 413);
  t.equal(big.body.details, 'request body larger than the limit of 100000 bytes');

  const corrupt = await post('/echo', Buffer.from('not gzip'), 'gzip');
  t.equal(corrupt.status, 400);
  t.equal(corrupt.body.code, 'INVALID_CONTENT_ENCODING');
  t.equal(handled, before, 'the handler never ran');
});

t.test('wrapper: authentication answers before the coding is judged', async (t) => {
  const r = await post('/guarded', json, 'br');
  t.equal(r.status, 401);
  t.equal(r.body.code, 'UNAUTHORIZED');
});

/** uwebsockets@3.0.6's binaries for Node 22 and 24 answer 431 over the limit; Node 20's has none. */
const HEADER_LIMIT = Number(process.versions.node.split('.')[0]) >= 22;

t.test(`header section by Node version: ${HEADER_LIMIT ? `431 past ${MAX_HEADER_BYTES} bytes` : 'no limit in uWS'} on Node ${process.versions.node}`, async (t) => {
  t.equal(process.env.UWS_HTTP_MAX_HEADERS_SIZE, String(MAX_HEADER_BYTES), 'set before uWS loaded');
  // Past uWS's own default (4 KiB), as a path with a few long ids is: the handler answers.
  const mid = await fetch(`${base}/long/${'a'.repeat(6000)}`);
  t.equal(mid.status, 200);
  t.same(await mid.json(), { bytes: 6006 });
  const past = await fetch(`${base}/long/${'a'.repeat(MAX_HEADER_BYTES)}`);
  if (HEADER_LIMIT) {
    t.equal(past.status, 431, 'uWS answers it itself, before any handler');
    t.match(await past.text(), 'Request Header Fields Too Large');
  } else {
    t.equal(past.status, 200, "Node 20's uWS build has no header-size limit");
    await past.arrayBuffer();
  }
});
