/**
 * Webhook signatures (spec 5.2): the signing side (src/webhooks/signature.ts) and the receiver
 * helper (packages/receiver/src/verify.ts, the receiver package). Known-answer vectors computed independently with
 * openssl, round trips and tampering as properties, the header grammar's edge cases, and the
 * five-minute window at its exact boundary.
 */
import t from 'tap';
import fc from 'fast-check';
import { createHmac } from 'node:crypto';
import {
  SIGNING_SECRET_LENGTH,
  SIGNING_SECRET_PATTERN,
  computeSignature,
  newSigningSecret,
  signatureHeader,
} from '../../src/webhooks/signature.js';
import { DEFAULT_TOLERANCE_MS, parseSignatureHeader, verifyWebhook } from '../../packages/receiver/src/verify.js';

/*
 * Vector 1, computed with openssl (no Node involved):
 *   SECRET='whsec_q3pXnE0Vb6mT1yK8rL2sJ9dF4hG7cA5wZ0xN3vB6uQ8'
 *   BODY='{"event":"billing-credits-depleted","timestamp":"2023-11-14T22:13:20.000Z","isTest":true,"data":{"credits":{"signalId":"sig_test_1"}}}'
 *   printf '%s.%s' 1700000000000 "$BODY" | openssl dgst -sha256 -hmac "$SECRET" -binary | base64
 *   → TyPOBwCxhzH+NoFi4Ip6yo3+QdIuVWRFYWllVou12mk=
 * Vector 2: a non-ASCII secret (key = its UTF-8 bytes 73c3a96372657420e29883) and a body of
 * arbitrary bytes 00 ff 0a '{"a": 1}' 0d 0a, t = 1:
 *   printf '1.\x00\xff\n{"a": 1}\r\n' > v2.bin
 *   openssl dgst -sha256 -mac HMAC -macopt hexkey:73c3a96372657420e29883 -binary v2.bin | base64
 *   → 2TR/67YnCe4GsQORrp6XoOs1jGv8vDZBmMluo7fA6MU=
 */
const KAT1 = {
  secret: 'whsec_q3pXnE0Vb6mT1yK8rL2sJ9dF4hG7cA5wZ0xN3vB6uQ8',
  body: '{"event":"billing-credits-depleted","timestamp":"2023-11-14T22:13:20.000Z","isTest":true,"data":{"credits":{"signalId":"sig_test_1"}}}',
  t: 1_700_000_000_000,
  s: 'TyPOBwCxhzH+NoFi4Ip6yo3+QdIuVWRFYWllVou12mk=',
};
const KAT2 = {
  secret: 'sécret ☃',
  body: Buffer.concat([Buffer.from([0x00, 0xff, 0x0a]), Buffer.from('{"a": 1}\r\n')]),
  t: 1,
  s: '2TR/67YnCe4GsQORrp6XoOs1jGv8vDZBmMluo7fA6MU=',
};

/** An independent signer: the spec's sentence, in three lines. */
const reference = (secret: string, body: Buffer, t: number) =>
  `t=${t},s=${createHmac('sha256', Buffer.from(secret, 'utf8')).update(Buffer.concat([Buffer.from(`${t}.`), body])).digest('base64')}`;

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

t.test('known-answer vectors', async (t) => {
  t.equal(signatureHeader(KAT1.secret, KAT1.body, KAT1.t), `t=${KAT1.t},s=${KAT1.s}`);
  t.equal(signatureHeader(KAT1.secret, Buffer.from(KAT1.body), KAT1.t), `t=${KAT1.t},s=${KAT1.s}`, 'string body = its UTF-8 bytes');
  t.equal(signatureHeader(Buffer.from(KAT1.secret), KAT1.body, KAT1.t), `t=${KAT1.t},s=${KAT1.s}`, 'string secret = its UTF-8 bytes');
  t.equal(computeSignature(KAT1.secret, KAT1.body, KAT1.t), KAT1.s);
  t.equal(signatureHeader(KAT2.secret, KAT2.body, KAT2.t), `t=1,s=${KAT2.s}`);
  t.same(verifyWebhook(KAT1.body, `t=${KAT1.t},s=${KAT1.s}`, KAT1.secret, { nowMs: KAT1.t }), { ok: true, timestampMs: KAT1.t });
  t.same(verifyWebhook(KAT2.body, `t=1,s=${KAT2.s}`, KAT2.secret, { nowMs: 1 }), { ok: true, timestampMs: 1 });
});

t.test('padding is part of the signature and survives the first-= split', async (t) => {
  const header = signatureHeader(KAT1.secret, KAT1.body, KAT1.t);
  t.match(header, /^t=\d+,s=[A-Za-z0-9+/]{43}=$/, 'always 44 base64 characters ending in one =');
  const p = parseSignatureHeader(header);
  t.ok(p.ok && p.s.endsWith('='), 'the parsed s keeps its =');
  t.ok(p.ok && p.signature.length === 32);
  const unpadded = header.replace(/=$/, '');
  t.match(verifyWebhook(KAT1.body, unpadded, KAT1.secret, { nowMs: KAT1.t }), { ok: false, reason: 'MALFORMED_HEADER' }, 'unpadded s refused');
  t.match(verifyWebhook(KAT1.body, `${header}=`, KAT1.secret, { nowMs: KAT1.t }), { ok: false, reason: 'MALFORMED_HEADER' }, 'extra = refused');
  // A receiver that split every pair on every "=" would read s without its padding.
  t.not(header.split(',')[1]!.split('=')[1], KAT1.s);
});

t.test('signing secrets', async (t) => {
  const secrets = new Set<string>();
  for (let i = 0; i < 200; i++) {
    const s = newSigningSecret();
    t.match(s, SIGNING_SECRET_PATTERN);
    t.equal(s.length, SIGNING_SECRET_LENGTH);
    secrets.add(s);
  }
  t.equal(SIGNING_SECRET_LENGTH, 49);
  t.equal(secrets.size, 200, 'no repeats');
  t.equal(Buffer.from([...secrets][0]!.slice(6), 'base64url').length, 32, '32 random bytes');
  // The key is the whole string's bytes, prefix included, not the decoded random part.
  const s = newSigningSecret();
  t.equal(signatureHeader(s, '{}', 5), reference(s, Buffer.from('{}'), 5));
  t.not(signatureHeader(s, '{}', 5), signatureHeader(Buffer.from(s.slice(6), 'base64url'), '{}', 5));
});

t.test('misuse throws instead of signing or verifying', async (t) => {
  t.throws(() => signatureHeader('', '{}', 1), TypeError, 'empty secret');
  t.throws(() => signatureHeader(Buffer.alloc(0), '{}', 1), TypeError, 'empty key bytes');
  t.throws(() => verifyWebhook('{}', 't=1,s=x', ''), TypeError, 'empty secret on the receiver');
  t.throws(() => verifyWebhook('{}', undefined, ''), TypeError, 'even without a header');
  for (const bad of [-1, 1.5, Number.NaN, Infinity, 2 ** 53]) t.throws(() => signatureHeader('k', '{}', bad), RangeError, String(bad));
  t.throws(() => verifyWebhook('{}', 't=1,s=x', 'k', { toleranceMs: -1 }), RangeError);
  t.throws(() => verifyWebhook('{}', 't=1,s=x', 'k', { toleranceMs: Number.NaN }), RangeError);
  t.throws(() => verifyWebhook('{}', 't=1,s=x', 'k', { nowMs: Number.NaN }), RangeError);
});

t.test('the five-minute window, at its exact boundary, both directions', async (t) => {
  const T = 1_750_000_000_000;
  const h = signatureHeader(KAT1.secret, KAT1.body, T);
  t.equal(DEFAULT_TOLERANCE_MS, 300_000);
  for (const off of [0, 1, 299_999, 300_000, -1, -299_999, -300_000]) {
    t.same(verifyWebhook(KAT1.body, h, KAT1.secret, { nowMs: T + off }), { ok: true, timestampMs: T }, `now = t ${off >= 0 ? '+' : ''}${off} ms`);
  }
  for (const off of [300_001, -300_001, 3_600_000, -86_400_000, T]) {
    t.match(verifyWebhook(KAT1.body, h, KAT1.secret, { nowMs: T + off }), { ok: false, reason: 'TIMESTAMP_OUT_OF_TOLERANCE' }, `now = t + ${off} ms`);
  }
  t.same(verifyWebhook(KAT1.body, h, KAT1.secret, { nowMs: T + 10_000, toleranceMs: 10_000 }), { ok: true, timestampMs: T });
  t.match(verifyWebhook(KAT1.body, h, KAT1.secret, { nowMs: T + 10_001, toleranceMs: 10_000 }), { reason: 'TIMESTAMP_OUT_OF_TOLERANCE' });
  t.same(verifyWebhook(KAT1.body, h, KAT1.secret, { nowMs: T, toleranceMs: 0 }), { ok: true, timestampMs: T });
  // Seconds instead of milliseconds: parses, authentic, 55 years off.
  const secs = signatureHeader(KAT1.secret, KAT1.body, Math.floor(T / 1000));
  t.match(verifyWebhook(KAT1.body, secs, KAT1.secret, { nowMs: T }), { reason: 'TIMESTAMP_OUT_OF_TOLERANCE' });
  // Default clock: a fresh signature verifies now, an old one does not.
  t.ok(verifyWebhook('{}', signatureHeader('k', '{}', Date.now()), 'k').ok);
  t.match(verifyWebhook('{}', signatureHeader('k', '{}', Date.now() - 301_000), 'k'), { reason: 'TIMESTAMP_OUT_OF_TOLERANCE' });
});

t.test('the signature is checked before the clock', async (t) => {
  const old = KAT1.t - 3_600_000;
  const forged = `t=${old},s=${KAT1.s}`;
  t.match(verifyWebhook(KAT1.body, forged, KAT1.secret, { nowMs: KAT1.t }), { reason: 'BAD_SIGNATURE' }, 'a forgery never reads as merely stale');
  const authenticOld = signatureHeader(KAT1.secret, KAT1.body, old);
  t.match(verifyWebhook(KAT1.body, authenticOld, KAT1.secret, { nowMs: KAT1.t }), { reason: 'TIMESTAMP_OUT_OF_TOLERANCE' });
  t.match(verifyWebhook(KAT1.body, authenticOld, 'another secret', { nowMs: KAT1.t }), { reason: 'BAD_SIGNATURE' });
});

t.test('bodies must be the raw bytes', async (t) => {
  const h = signatureHeader(KAT1.secret, KAT1.body, KAT1.t);
  const reserialized = JSON.stringify(JSON.parse(KAT1.body), null, 1);
  t.match(verifyWebhook(reserialized, h, KAT1.secret, { nowMs: KAT1.t }), { reason: 'BAD_SIGNATURE' });
  t.match(verifyWebhook(`${KAT1.body}\n`, h, KAT1.secret, { nowMs: KAT1.t }), { reason: 'BAD_SIGNATURE' });
  const u8 = new Uint8Array(Buffer.from(`xx${KAT1.body}yy`)).subarray(2, 2 + Buffer.byteLength(KAT1.body));
  t.same(verifyWebhook(u8, h, KAT1.secret, { nowMs: KAT1.t }), { ok: true, timestampMs: KAT1.t }, 'a Uint8Array view is read by its offset and length');
});

t.test('header grammar: missing and malformed', async (t) => {
  const s = KAT1.s;
  const missing: unknown[] = [undefined, null, '', '   ', []];
  for (const h of missing) {
    t.match(verifyWebhook(KAT1.body, h as string, KAT1.secret, { nowMs: KAT1.t }), { ok: false, reason: 'MISSING_HEADER' }, JSON.stringify(h));
  }
  const other31 = Buffer.alloc(31, 7).toString('base64');
  const other33 = Buffer.alloc(33, 7).toString('base64');
  const nonCanonical = `${s.slice(0, 42)}${B64[B64.indexOf(s[42]!) + 1]}=`; // same bytes, non-zero trailing bits
  const malformed: [string | string[], string][] = [
    [`t=${KAT1.t}`, 'no s'],
    [`s=${s}`, 'no t'],
    [`t=${KAT1.t};s=${s}`, 'wrong separator'],
    [`t=${KAT1.t},s=${s},garbage`, 'a pair without ='],
    [`T=${KAT1.t},S=${s}`, 'keys are case-sensitive'],
    [`t=${KAT1.t},t=${KAT1.t},s=${s}`, 'duplicate t, even identical'],
    [`t=${KAT1.t},s=${s},s=${s}`, 'duplicate s, even identical'],
    [`t=${KAT1.t},s=${s}, t=${KAT1.t},s=${s}`, 'two headers joined by Node with ", "'],
    [[`t=${KAT1.t},s=${s}`, `t=${KAT1.t},s=${s}`], 'two header values'],
    [`t=abc,s=${s}`, 'non-numeric t'],
    [`t=,s=${s}`, 'empty t'],
    [`t=1700000000000.0,s=${s}`, 'fractional t'],
    [`t=1.7e12,s=${s}`, 'exponent'],
    [`t=-1700000000000,s=${s}`, 'negative t'],
    [`t=+1700000000000,s=${s}`, 'signed t'],
    [`t=01700000000000,s=${s}`, 'leading zero'],
    [`t= 1700000000000,s=${s}`, 'space inside the pair'],
    [`t=0x18bcfe56800,s=${s}`, 'hex t'],
    [`t=9007199254740993,s=${s}`, 't beyond 2^53'],
    [`t=${KAT1.t},s=`, 'empty s'],
    [`t=${KAT1.t},s=${s.replace(/\+/g, '-').replace(/\//g, '_')}`, 'base64url'],
    [`t=${KAT1.t},s=${s.slice(0, 20)} ${s.slice(20)}`, 'space inside s'],
    [`t=${KAT1.t},s=${other31}`, '31 bytes'],
    [`t=${KAT1.t},s=${other33}`, '33 bytes'],
    [`t=${KAT1.t},s=${nonCanonical}`, 'non-canonical base64'],
    [`t=${KAT1.t},s=${Buffer.from(s).toString('hex')}`, 'hex s'],
  ];
  for (const [h, why] of malformed) {
    t.match(verifyWebhook(KAT1.body, h, KAT1.secret, { nowMs: KAT1.t }), { ok: false, reason: 'MALFORMED_HEADER' }, why);
  }
  t.equal(Buffer.from(nonCanonical, 'base64').toString('base64'), s, 'the non-canonical s decodes to the very same bytes');
  const p = parseSignatureHeader(`t=${KAT1.t}`);
  t.ok(!p.ok && p.detail.length > 0, 'a detail for logs');
});

t.test('header grammar: what is tolerated', async (t) => {
  const s = KAT1.s;
  const T = KAT1.t;
  const accepted: [string | string[], string][] = [
    [`s=${s},t=${T}`, 'pairs in any order'],
    [`t=${T},v2=abc=,s=${s}`, 'unknown pairs ignored (value with = too)'],
    [`x=1,t=${T},s=${s},y=`, 'unknown pairs anywhere'],
    [`t=${T}, s=${s}`, 'a space after the comma'],
    [` t=${T} ,\ts=${s}\t`, 'spaces and tabs around pairs'],
    [`t=${T},,s=${s},`, 'empty pairs'],
    [[`t=${T},s=${s}`], 'an array with one value'],
  ];
  for (const [h, why] of accepted) {
    t.same(verifyWebhook(KAT1.body, h, KAT1.secret, { nowMs: T }), { ok: true, timestampMs: T }, why);
  }
  t.same(verifyWebhook('{}', signatureHeader('k', '{}', 0), 'k', { nowMs: 0 }), { ok: true, timestampMs: 0 }, 't=0 is well-formed');
});

// ---------------------------------------------------------------------------------------
// Properties (modest run counts: this machine has two cores)

const secretArb = fc.oneof(
  fc.constant(null).map(() => newSigningSecret()),
  fc.string({ minLength: 1, maxLength: 64, unit: 'grapheme' }),
  fc.string({ minLength: 1, maxLength: 64, unit: 'binary' }).filter((x) => Buffer.from(x, 'utf8').toString('utf8') === x),
);
const bodyArb = fc.uint8Array({ maxLength: 1024 }).map((u) => Buffer.from(u));
const tArb = fc.oneof(fc.integer({ min: 0, max: 2 ** 45 }), fc.constant(Number.MAX_SAFE_INTEGER), fc.constant(0));

t.test('property: anything signed verifies, and matches an independent signer', async (t) => {
  await fc.assert(
    fc.property(secretArb, bodyArb, tArb, fc.integer({ min: -300_000, max: 300_000 }), (secret, body, ts, skew) => {
      const h = signatureHeader(secret, body, ts);
      const now = ts > 2 ** 52 ? ts - Math.abs(skew) : ts + skew; // stay exact near 2^53
      const v = verifyWebhook(body, h, secret, { nowMs: now });
      return h === reference(secret, body, ts) && v.ok && v.timestampMs === ts;
    }),
    { numRuns: 300 },
  );
  t.pass('300 runs');
});

t.test('property: a one-byte change of the body is refused', async (t) => {
  await fc.assert(
    fc.property(secretArb, bodyArb.filter((b) => b.length > 0), tArb, fc.nat(), fc.integer({ min: 1, max: 255 }), (secret, body, ts, at, x) => {
      const h = signatureHeader(secret, body, ts);
      const tampered = Buffer.from(body);
      tampered[at % body.length]! ^= x;
      const v = verifyWebhook(tampered, h, secret, { nowMs: ts });
      return !v.ok && v.reason === 'BAD_SIGNATURE';
    }),
    { numRuns: 300 },
  );
  await fc.assert(
    fc.property(secretArb, bodyArb, tArb, fc.integer({ min: 0, max: 255 }), fc.boolean(), (secret, body, ts, byte, front) => {
      const h = signatureHeader(secret, body, ts);
      const longer = front ? Buffer.concat([Buffer.from([byte]), body]) : Buffer.concat([body, Buffer.from([byte])]);
      const shorter = body.subarray(front ? 1 : 0, body.length - (front ? 0 : 1));
      return !verifyWebhook(longer, h, secret, { nowMs: ts }).ok && (body.length === 0 || !verifyWebhook(shorter, h, secret, { nowMs: ts }).ok);
    }),
    { numRuns: 200 },
  );
  t.pass('500 runs');
});

t.test('property: any one-character change of the header is refused', async (t) => {
  const printable = fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c));
  await fc.assert(
    fc.property(secretArb, bodyArb, tArb, fc.nat(), printable, (secret, body, ts, at, ch) => {
      const h = signatureHeader(secret, body, ts);
      const i = at % h.length;
      fc.pre(h[i] !== ch);
      const mutated = h.slice(0, i) + ch + h.slice(i + 1);
      return !verifyWebhook(body, mutated, secret, { nowMs: ts }).ok;
    }),
    { numRuns: 500 },
  );
  // Targeted: a different t within the window, or a different s character.
  await fc.assert(
    fc.property(secretArb, bodyArb, fc.integer({ min: 300_000, max: 2 ** 45 }), fc.integer({ min: -300_000, max: 300_000 }).filter((d) => d !== 0), (secret, body, ts, d) => {
      const s = computeSignature(secret, body, ts);
      const v = verifyWebhook(body, `t=${ts + d},s=${s}`, secret, { nowMs: ts });
      return !v.ok && v.reason === 'BAD_SIGNATURE';
    }),
    { numRuns: 200 },
  );
  await fc.assert(
    fc.property(secretArb, bodyArb, tArb, fc.integer({ min: 0, max: 42 }), fc.integer({ min: 1, max: 63 }), (secret, body, ts, i, step) => {
      const s = computeSignature(secret, body, ts);
      const other = s.slice(0, i) + B64[(B64.indexOf(s[i]!) + step) % 64] + s.slice(i + 1);
      const v = verifyWebhook(body, `t=${ts},s=${other}`, secret, { nowMs: ts });
      // Position 42 carries two unused bits: a change there is either another signature or non-canonical.
      return !v.ok && (v.reason === 'BAD_SIGNATURE' || (i === 42 && v.reason === 'MALFORMED_HEADER'));
    }),
    { numRuns: 300 },
  );
  t.pass('1000 runs');
});

t.test('property: reordered pairs, unknown pairs and spaces around pairs still verify', async (t) => {
  const unknownPair = fc
    .tuple(fc.stringMatching(/^[a-z][a-z0-9_]{0,7}$/).filter((k) => k !== 't' && k !== 's'), fc.stringMatching(/^[A-Za-z0-9+/=._-]{0,20}$/))
    .map(([k, v]) => `${k}=${v}`);
  const ows = fc.stringMatching(/^[ \t]{0,2}$/);
  await fc.assert(
    fc.property(secretArb, bodyArb, tArb, fc.array(unknownPair, { maxLength: 4 }), fc.boolean(), fc.nat(), fc.nat(), fc.array(ows, { minLength: 12, maxLength: 12 }), (secret, body, ts, extra, swap, i, j, pad) => {
      const s = computeSignature(secret, body, ts);
      const pairs = [...extra];
      const known = swap ? [`s=${s}`, `t=${ts}`] : [`t=${ts}`, `s=${s}`];
      pairs.splice(i % (pairs.length + 1), 0, known[0]!);
      pairs.splice(j % (pairs.length + 1), 0, known[1]!);
      const header = pairs.map((p, k) => `${pad[(2 * k) % 12]}${p}${pad[(2 * k + 1) % 12]}`).join(',');
      const v = verifyWebhook(body, header, secret, { nowMs: ts });
      return v.ok && v.timestampMs === ts;
    }),
    { numRuns: 300 },
  );
  t.pass('300 runs');
});
