/**
 * Compressed request bodies (src/http/content-encoding.ts): the codings accepted, the
 * limit applied to the decompressed size with the decompressor stopped early on a bomb,
 * corrupt data refused, unknown codings refused with 415 naming them. No uWS here, so this
 * file also runs on a Node.js whose node:zlib has zstd (where uWS may not load); the
 * wrapper's part is in http-wrapper.test.ts.
 *
 * zstd differs by Node version (node:zlib has it from Node 22.15 / 23.8: on 22 and 24, not on
 * Node 20): the tests below say which way they go, and the suite runs on each
 * (scripts/test-lts.sh).
 */
import t from 'tap';
import zlib from 'node:zlib';
import { DECODE_CHUNK_BYTES, SUPPORTED_CODINGS, ZSTD_AVAILABLE, decodeBody, parseContentEncoding, type DecodeProbe } from '../../src/http/content-encoding.js';
import { ApiError } from '../../src/errors.js';
import { rejection } from '../helpers/rejection.js';

/** node:zlib's zstd functions, present on Node ≥ 22.15 / 23.8 only. */
const zstd = zlib as unknown as { zstdCompressSync?: (b: Buffer) => Buffer };

const [major, minor] = process.versions.node.split('.').map(Number) as [number, number];
/** Whether this Node has zstd, by its version alone. */
const ZSTD_BY_VERSION = major > 23 || (major === 23 && minor >= 8) || (major === 22 && minor >= 15);

t.test(`zstd by Node version: ${ZSTD_BY_VERSION ? 'detected' : 'absent'} on Node ${process.versions.node}`, async (t) => {
  t.equal(ZSTD_AVAILABLE, ZSTD_BY_VERSION, 'detection follows the runtime');
  t.same(SUPPORTED_CODINGS, ZSTD_BY_VERSION ? ['gzip', 'deflate', 'zstd', 'identity'] : ['gzip', 'deflate', 'identity']);
});

const json = Buffer.from(JSON.stringify({ signals: Array.from({ length: 200 }, (_, i) => ({ eventName: 'api_call', customer: { externalCustomerId: `cus_${i % 7}` }, data: { n: i } })) }));

const refused = (p: Promise<unknown>): Promise<ApiError> => rejection(p, ApiError);

t.test('parseContentEncoding', async (t) => {
  for (const h of ['', 'identity', ' IDENTITY ', 'identity, identity']) t.equal(parseContentEncoding(h), 'identity', JSON.stringify(h));
  for (const h of ['gzip', 'GZip', 'x-gzip', ' gzip ', 'gzip, identity']) t.equal(parseContentEncoding(h), 'gzip', JSON.stringify(h));
  t.equal(parseContentEncoding('deflate'), 'deflate');
  for (const h of ['br', 'compress', 'gzip, br', 'gzip, gzip', 'x'.repeat(300), ...(ZSTD_AVAILABLE ? [] : ['zstd'])]) {
    const e = parseContentEncoding(h);
    if (!(e instanceof ApiError)) {
      t.fail(`${h} should be refused`);
      continue;
    }
    t.equal(e.code, 'UNSUPPORTED_CONTENT_ENCODING', h);
    t.equal(e.status, 415);
    t.match(e.details, /Content-Encoding "/, 'names the coding');
    t.ok(e.details.length < 200, 'a long header is shortened in details');
    t.same(e.headers, { 'Accept-Encoding': SUPPORTED_CODINGS.join(', ') });
  }
  t.match((parseContentEncoding('br') as ApiError).details, 'Content-Encoding "br" is not supported; accepted: gzip, deflate');
  t.match((parseContentEncoding('gzip, br') as ApiError).details, 'stacked codings are not supported');
  if (ZSTD_AVAILABLE) t.equal(parseContentEncoding('zstd'), 'zstd');
  else t.match((parseContentEncoding('zstd') as ApiError).details, 'without zstd in node:zlib');
});

t.test('decodeBody: every coding gives back the exact bytes', async (t) => {
  t.equal(await decodeBody(json, 'identity', 10), json, 'identity is not even limited here (the reader limits it)');
  t.same(await decodeBody(zlib.gzipSync(json), 'gzip', json.length), json, 'exactly at the limit is fine');
  t.same(await decodeBody(zlib.deflateSync(json), 'deflate', 1e6), json, 'deflate (zlib format, RFC 9110)');
  t.same(await decodeBody(zlib.deflateRawSync(json), 'deflate', 1e6), json, 'deflate sent raw, as some clients do');
  t.same(await decodeBody(Buffer.concat([zlib.gzipSync(json.subarray(0, 100)), zlib.gzipSync(json.subarray(100))]), 'gzip', 1e6), json, 'gzip members concatenated');
  t.equal((await decodeBody(Buffer.alloc(0), 'gzip', 1e6)).length, 0, 'an empty body has nothing to decode');
  if (ZSTD_AVAILABLE) t.same(await decodeBody(zstd.zstdCompressSync!(json), 'zstd', 1e6), json, 'zstd');
  else t.comment(`zstd: not in this runtime's node:zlib (Node ${process.versions.node})`);
});

t.test('decodeBody: one byte over the limit once decompressed is 413', async (t) => {
  const e = await refused(decodeBody(zlib.gzipSync(json), 'gzip', json.length - 1));
  t.equal(e.code, 'PAYLOAD_TOO_LARGE');
  t.equal(e.details, `request body larger than the limit of ${json.length - 1} bytes once decompressed (Content-Encoding: gzip)`);
});

t.test('decodeBody: a bomb is stopped at the limit plus one chunk', async (t) => {
  const limit = 1_000_000;
  for (const [coding, bomb] of [
    ['gzip', zlib.gzipSync(Buffer.alloc(50_000_000))],
    ['deflate', zlib.deflateSync(Buffer.alloc(50_000_000))],
    ...(ZSTD_AVAILABLE ? [['zstd', zstd.zstdCompressSync!(Buffer.alloc(50_000_000))] as const] : []),
  ] as const) {
    t.ok(bomb.length < 60_000, `${coding}: 50 MB of zeros is ${bomb.length} bytes compressed`);
    const probe: DecodeProbe = { produced: 0 };
    const e = await refused(decodeBody(bomb, coding, limit, probe));
    t.equal(e.code, 'PAYLOAD_TOO_LARGE', coding);
    // Give a stopped stream the chance to produce more if it were still running.
    await new Promise((r) => setTimeout(r, 100));
    t.ok(probe.produced > limit, `${coding}: it did inflate up to the limit (${probe.produced})`);
    t.ok(probe.produced <= limit + DECODE_CHUNK_BYTES, `${coding}: produced ${probe.produced} bytes, at most limit + one ${DECODE_CHUNK_BYTES}-byte chunk`);
  }
});

t.test('decodeBody: corrupt data is 400 naming the problem', async (t) => {
  const gz = zlib.gzipSync(json);
  const flipped = Buffer.from(gz);
  flipped[gz.length - 6] = flipped[gz.length - 6]! ^ 0xff; // inside the CRC32 trailer
  const cases: [string, Buffer, 'gzip' | 'deflate' | 'zstd', RegExp][] = [
    ['not gzip at all', Buffer.from('{"signals":[]}'), 'gzip', /incorrect header check/],
    ['truncated', gz.subarray(0, gz.length - 10), 'gzip', /unexpected end of file/],
    ['checksum', flipped, 'gzip', /incorrect data check/],
    ['trailing garbage after the member', Buffer.concat([gz, Buffer.from('xyz')]), 'gzip', /incorrect header check/],
    ['deflate garbage', Buffer.from('\xff\xff\xff\xff garbage', 'latin1'), 'deflate', /invalid/],
    ...(ZSTD_AVAILABLE ? [['zstd garbage', Buffer.from('not zstd at all'), 'zstd', /./] as [string, Buffer, 'zstd', RegExp]] : []),
  ];
  for (const [name, body, coding, reason] of cases) {
    const e = await refused(decodeBody(body, coding, 1e6));
    t.equal(e.code, 'INVALID_CONTENT_ENCODING', name);
    t.equal(e.status, 400, name);
    t.match(e.details, new RegExp(`^the body is not valid ${coding} data \\(Content-Encoding: ${coding}\\): `), name);
    t.match(e.details, reason, name);
  }
});
