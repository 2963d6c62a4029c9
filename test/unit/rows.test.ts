/**
 * The rows worker (workers/rows.ts): one JSONEachRow line per signal kept (none for the
 * refused indexes of Billing-Skip), signal ids, timestamps, idempotency claim keys, the
 * customer and product references by kind (`i:` / `x:`), the `data` JSON text; and the guard
 * that any batch accepted by validation inserts into the real engine (chdb, schema of
 * src/store/schema.ts) once the pipeline has put the identity columns in front of each line
 * (src/pipeline/identities.ts).
 *
 * Only this file's main thread uses chdb (one chdb thread per process).
 *
 * The property test inserts every generated batch that validation accepts (with the lone
 * surrogate check on, as the ingress runs it for bodies with a \ud escape); none may be refused.
 * UNIT_RUNS=<n> runs it longer than the default 100 batches (700 batches take about a minute).
 */
import t from 'tap';
import fc from 'fast-check';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { Session } from 'chdb';
import rows, { dataJson, dedupeKey } from '../../workers/rows.js';
import type { BatchMeta } from '../../src/bus/batch.js';
import { newBatchId } from '../../src/bus/batch.js';
import { SIGNAL_COLUMNS, schemaStatements, INSERT_SETTINGS } from '../../src/store/schema.js';
import { allRefused, mayHaveSurrogates, signalProblem, validateBulk } from '../../src/ingress/validate.js';
import { identityPrefix } from '../../src/pipeline/identities.js';
import { parseJson } from '../../src/http/json.js';
import { parseRfc3339 } from '../../src/shared/time.js';
import { ApiError } from '../../src/errors.js';

const RECEIVED = Date.UTC(2026, 0, 31, 12, 0, 0, 123);
const ORG_A = 'org_AAAAAAAAAAAAAAAAAAAA';
const ORG_B = 'org_BBBBBBBBBBBBBBBBBBBB';

function meta(over: Partial<BatchMeta> = {}): BatchMeta {
  return { orgId: ORG_A, mode: 'live', receivedAtMs: RECEIVED, batchId: 'bat_0000abcdeXXXXXXXXXXXX', ...over };
}

const encode = (signals: unknown[]): Uint8Array => new TextEncoder().encode(JSON.stringify({ signals }));
const parse = (line: string): Record<string, unknown> => JSON.parse(line) as Record<string, unknown>;

/** The columns a rows line holds: the schema's, less the identity columns the pipeline puts in front. */
const IDENTITY_COLUMNS = ['customer_id', 'external_customer_id', 'product_id', 'external_product_id'];
const LINE_COLUMNS = SIGNAL_COLUMNS.filter((c) => !IDENTITY_COLUMNS.includes(c));

/** A whole fact_signal row as the pipeline inserts it: the identity prefix (nothing resolved), then the line. */
const fullRow = (r: { lines: string[]; customers: string[]; products: string[] }, i: number): string =>
  Buffer.from(identityPrefix(r.customers[i]!, null, r.products[i]!, null)).toString() + r.lines[i]!.slice(1);

t.test('one JSONEachRow line per signal, columns in schema order after the identity columns', async (t) => {
  const m = meta();
  const signals = [
    { eventName: 'api_call', customer: { customerId: 'cus_1' } },
    { eventName: 'tokens', customer: { externalCustomerId: 'acct-2' }, attribution: { externalProductId: 'chat' }, unitId: 'u1', idempotencyKey: 'k1', timestamp: '2026-01-31T11:00:00Z', data: { n: 5, s: 'x' } },
    { eventName: 'e', customer: { externalCustomerId: 'c' }, attribution: null, unitId: null, idempotencyKey: null, timestamp: null, data: null },
    { eventName: 'e', customer: { externalCustomerId: 'c' }, attribution: { productId: 'prod_1' } },
  ];
  const r = rows({ body: encode(signals), meta: m });
  t.equal(r.lines.length, 4);
  t.same(r.ids, ['sig_0000abcdeXXXXXXXXXXXX_0', 'sig_0000abcdeXXXXXXXXXXXX_1', 'sig_0000abcdeXXXXXXXXXXXX_2', 'sig_0000abcdeXXXXXXXXXXXX_3']);
  t.same(r.customers, ['i:cus_1', 'x:acct-2', 'x:c', 'x:c'], 'customer references by kind: i: a service id, x: an externalId');
  t.same(r.products, ['', 'x:chat', '', 'i:prod_1'], "products the same way, '' for none");
  for (const l of r.lines) {
    t.notOk(l.includes('\n'), 'no newline inside a line');
    t.same(Object.keys(parse(l)), LINE_COLUMNS, 'columns of the schema but the identity ones, in order');
  }
  t.same(parse(r.lines[0]!), {
    org_id: ORG_A,
    livemode: true,
    signal_id: 'sig_0000abcdeXXXXXXXXXXXX_0',
    batch_id: 'bat_0000abcdeXXXXXXXXXXXX',
    event_name: 'api_call',
    unit_id: null,
    idempotency_key: null,
    timestamp: RECEIVED,
    received_at: RECEIVED,
    data: {},
  });
  t.same(parse(r.lines[1]!), {
    org_id: ORG_A,
    livemode: true,
    signal_id: 'sig_0000abcdeXXXXXXXXXXXX_1',
    batch_id: 'bat_0000abcdeXXXXXXXXXXXX',
    event_name: 'tokens',
    unit_id: 'u1',
    idempotency_key: 'k1',
    timestamp: Date.UTC(2026, 0, 31, 11),
    received_at: RECEIVED,
    data: { n: 5, s: 'x' },
  });
  t.same(
    parse(fullRow(r, 1)),
    { customer_id: '', external_customer_id: 'acct-2', product_id: '', external_product_id: 'chat', ...parse(r.lines[1]!) },
    'with the identity prefix: the form sent, the other empty while unresolved',
  );
  t.same(Object.keys(parse(fullRow(r, 0))).sort(), [...SIGNAL_COLUMNS].sort(), 'a full row has every column');
  t.match(parse(fullRow(r, 0)), { customer_id: 'cus_1', external_customer_id: '', product_id: '', external_product_id: '' });
  t.match(parse(Buffer.from(identityPrefix(r.customers[1]!, { id: 'cus_2', externalId: 'acct-2' }, r.products[1]!, { id: 'prod_9', externalId: 'chat' })).toString() + r.lines[1]!.slice(1)), {
    customer_id: 'cus_2', external_customer_id: 'acct-2', product_id: 'prod_9', external_product_id: 'chat',
  }, 'resolved: both forms');
  t.same(r.billable.map((b) => parse(b).c), ['i:cus_1', 'x:acct-2', 'x:c', 'x:c'], 'billable lines carry the customer reference by kind');
  const third = parse(r.lines[2]!);
  t.equal(third.unit_id, null);
  t.equal(third.idempotency_key, null);
  t.equal(third.timestamp, RECEIVED, 'timestamp null = time of receipt');
  t.same(third.data, {}, 'data null = {}');
  t.equal(parse(rows({ body: encode(signals), meta: meta({ mode: 'test' }) }).lines[0]!).livemode, false, 'test mode');
});

t.test('refused indexes (Billing-Skip): no line, no claim, no billable line; the others keep their index in the id', async (t) => {
  const signals = [
    { eventName: 'a', customer: { externalCustomerId: 'c' }, idempotencyKey: 'k0' },
    { eventName: '', customerId: 7, whatever: [] },
    { eventName: 'c', customer: { customerId: 'cus_2' }, idempotencyKey: 'k2' },
    null,
    { eventName: 'e', customer: { externalCustomerId: 'c' } },
  ];
  const r = rows({ body: encode(signals), meta: meta(), skip: [1, 3] });
  t.same(r.ids, ['sig_0000abcdeXXXXXXXXXXXX_0', 'sig_0000abcdeXXXXXXXXXXXX_2', 'sig_0000abcdeXXXXXXXXXXXX_4']);
  t.same(r.lines.map((l) => parse(l).event_name), ['a', 'c', 'e']);
  t.same(r.billable.map((b) => parse(b).i), r.ids);
  t.same(r.customers, ['x:c', 'i:cus_2', 'x:c']);
  t.equal(r.claimKeys.length, 3);
  t.equal(r.claimKeys[0], dedupeKey(meta(), 'k0'));
  t.equal(r.claimKeys[2], null);
  t.throws(() => rows({ body: encode(signals.slice(0, 2)), meta: meta(), skip: [1, 5] }), /names indexes the batch does not have/, 'an index past the batch');
});

t.test('billable lines carry the texts of numbers a double does not keep, and only those', async (t) => {
  const raw = '{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{"q":0.10000000000000000001,"k":7.5,"s":"12345678901234567890"}},{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{"q":7.5}}]}';
  const r = rows({ body: new TextEncoder().encode(raw), meta: meta() });
  const b = r.billable.map(parse);
  t.same(b[0]!.x, { q: '0.10000000000000000001' }, 'the written text, by path');
  t.same(b[0]!.d, { q: 0.1, k: 7.5, s: '12345678901234567890' }, 'data itself as parsed');
  t.notOk('x' in b[1]!, 'nothing extra for a signal without such numbers');
  const plain = rows({ body: encode([{ eventName: 'e', customer: { externalCustomerId: 'c' }, data: { q: 7.5 } }]), meta: meta() });
  t.notOk('x' in parse(plain.billable[0]!), 'nor for a batch without any');
});

t.test('signal ids derive from a real batch id; body may be a view into a larger buffer', async (t) => {
  const batchId = newBatchId(RECEIVED);
  const json = JSON.stringify({ signals: [{ eventName: 'a', customer: { externalCustomerId: 'b' } }, { eventName: 'c', customer: { customerId: 'd' } }] });
  const big = Buffer.from(`GARBAGE${json}TRAILING`);
  const body = new Uint8Array(big.buffer, big.byteOffset + 7, Buffer.byteLength(json));
  const r = rows({ body, meta: meta({ batchId }) });
  t.same(r.ids, [`sig_${batchId.slice(4)}_0`, `sig_${batchId.slice(4)}_1`]);
  t.match(r.ids[0], /^sig_[0-9a-z]{9}[0-9A-Za-z]{12}_0$/);
  t.equal(parse(r.lines[1]!).event_name, 'c');
});

t.test('timestamps: explicit RFC 3339 with offsets become epoch ms', async (t) => {
  const cases: [string, number][] = [
    ['2026-01-31T12:00:00+05:30', Date.UTC(2026, 0, 31, 6, 30)],
    ['2026-01-31T12:00:00-08:00', Date.UTC(2026, 0, 31, 20)],
    ['2026-01-31t10:00:00.5z', Date.UTC(2026, 0, 31, 10, 0, 0, 500)],
    ['2026-01-31 10:00:00.123456789+01:00', Date.UTC(2026, 0, 31, 9, 0, 0, 123)],
    ['2000-01-01T00:00:00Z', Date.UTC(2000, 0, 1)],
    ['2024-02-29T23:59:59.999-00:30', Date.UTC(2024, 2, 1, 0, 29, 59, 999)],
  ];
  const r = rows({ body: encode(cases.map(([ts]) => ({ eventName: 'e', customer: { externalCustomerId: 'c' }, timestamp: ts }))), meta: meta() });
  cases.forEach(([ts, ms], i) => {
    t.equal(parse(r.lines[i]!).timestamp, ms, ts);
    t.equal(parseRfc3339(ts), ms, `the validator agrees on ${ts}`);
  });
});

t.test('claim keys: null for keyless; per org and mode', async (t) => {
  const signals = [
    { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'k1' },
    { eventName: 'e', customer: { externalCustomerId: 'c' } },
    { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'k1' },
    { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'k2' },
    { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: null },
    { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'x'.repeat(255) },
    { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: 'a.b*>  \u0000😀' },
  ];
  const a = rows({ body: encode(signals), meta: meta() }).claimKeys;
  t.equal(a[1], null, 'keyless: null');
  t.equal(a[4], null, 'null key: null');
  t.equal(a[0], a[2], 'equal keys in the same org and mode: equal claim keys');
  t.not(a[0], a[3], 'different keys differ');
  const hash = createHash('sha256').update('k1').digest('base64url');
  t.equal(a[0], `${ORG_A}.live.${hash}`, '<org>.<mode>.<base64url sha256>');
  // every claim key is a valid JetStream KV key (letters, digits, -, _, =, ., /) of bounded length
  for (const k of a) if (k !== null) t.match(k, /^[-/_=.a-zA-Z0-9]+$/, 'a valid KV key whatever the idempotency key holds');
  t.ok(a[5]!.length < 100, 'long keys are hashed to a short claim key');

  const otherOrg = rows({ body: encode(signals), meta: meta({ orgId: ORG_B }) }).claimKeys;
  const otherMode = rows({ body: encode(signals), meta: meta({ mode: 'test' }) }).claimKeys;
  const otherBatch = rows({ body: encode(signals), meta: meta({ batchId: 'bat_0000zzzzzYYYYYYYYYYYY' }) }).claimKeys;
  t.not(otherOrg[0], a[0], 'same key, other org: different claim key');
  t.not(otherMode[0], a[0], 'same key, other mode: different claim key');
  t.equal(otherBatch[0], a[0], 'same key, same org and mode, other batch: the same claim key');
  t.equal(otherOrg[1], null);
  t.equal(dedupeKey(meta(), 'k1'), a[0]);
});

/** Number literals outside strings in a JSON text. */
const numberLiterals = (text: string): string[] => text.replace(/"(?:[^"\\]|\\.)*"/g, '""').match(/-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g) ?? [];
/** An integer literal (no fraction, no exponent) outside Int64 ∪ UInt64's common safe range [-2^63, 2^63). */
const bigIntegerLiteral = (lit: string): boolean => /^-?\d+$/.test(lit) && (BigInt(lit) >= 2n ** 63n || BigInt(lit) < -(2n ** 63n));

t.test('dataJson: integers with |v| ≥ 2^63 are written in exponent form', async (t) => {
  const cases: [Record<string, unknown>, string][] = [
    [{ n: -9223372036854775809 }, '{"n":-9.223372036854776e+18}'],
    [{ n: -9223372036854775808 }, '{"n":-9.223372036854776e+18}'],
    [{ n: 9223372036854775807 }, '{"n":9.223372036854776e+18}'], // the double 2^63
    [{ n: 2 ** 63 + 2048 }, '{"n":9.223372036854778e+18}'],
    [{ n: 18446744073709552000 }, '{"n":1.8446744073709552e+19}'], // 2^64
    [{ n: 18446744073709550000 }, '{"n":1.844674407370955e+19}'], // just below 2^64 (fits UInt64 but written as a double all the same)
    [{ n: 1e19 }, '{"n":1e+19}'],
    [{ n: -1e19 }, '{"n":-1e+19}'],
    [{ n: 1e20 }, '{"n":1e+20}'],
    [{ n: -99999999999999990000 }, '{"n":-9.999999999999998e+19}'], // the double JS prints as -99999999999999980000
    [{ n: 9.999999999999999e20 }, '{"n":9.999999999999999e+20}'], // the largest double below 1e21
    [{ n: [1, -9223372036854775809, { deep: 1e20 }] }, '{"n":[1,-9.223372036854776e+18,{"deep":1e+20}]}'],
    [{ n: 1e21, m: -1e300, k: 1e20 }, '{"n":1e+21,"m":-1e+300,"k":1e+20}'], // ≥ 1e21 JSON.stringify already uses an exponent
    [{ b: 1, 2: 2, 1: 1e20 }, '{"1":1e+20,"2":2,"b":1}'], // key order as JSON.stringify (integer-like keys first)
    [{ a: [], o: {}, z: null, t: true, f: 1.5, s: 'x"\\\n\u2028😀', n: 1e20 }, `{"a":[],"o":{},"z":null,"t":true,"f":1.5,"s":${JSON.stringify('x"\\\n\u2028😀')},"n":1e+20}`],
  ];
  // (labels escape U+2028/U+2029, which would break the TAP stream)
  const label = (x: unknown): string => JSON.stringify(x).replace(/[\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`);
  for (const [d, want] of cases) {
    const text = dataJson(d);
    t.equal(text, want, label(d));
    t.same(numberLiterals(text).filter(bigIntegerLiteral), [], `${label(text)}: no integer literal with |v| ≥ 2^63`);
    t.ok(isDeepStrictEqual(JSON.parse(text), d), `${label(text)} parses back to the same JS value`);
  }
  // numbers within Int64, strings and keys are left alone
  t.equal(dataJson({ n: -9223372036854774784 }), '{"n":-9223372036854775000}', 'just above -2^63: unchanged (JS prints it with trailing zeros, still ≥ Int64 min)');
  t.equal(dataJson({ n: 9223372036854774784 }), '{"n":9223372036854775000}', 'just below 2^63: unchanged (≤ Int64 max)');
  t.equal(dataJson({ n: 1e18, m: -1e18 }), '{"n":1000000000000000000,"m":-1000000000000000000}', '19 digits within Int64: unchanged');
  t.equal(dataJson({ s: '-12345678901234567890' }), '{"s":"-12345678901234567890"}', 'a string of digits is not a number');
  t.equal(dataJson({ '12345678901234567890': 1 }), '{"12345678901234567890":1}', 'a key of digits is not a number');
  t.equal(dataJson({ n: -9223372036854775809, s: '-12345678901234567890' }), '{"n":-9.223372036854776e+18,"s":"-12345678901234567890"}');
  t.equal(dataJson({ a: 1, b: 'x' }), '{"a":1,"b":"x"}', 'fast path: plain JSON.stringify');
  // a user key "__exp__" is data like any other, whatever path dataJson takes
  t.equal(dataJson({ n: -1e19, o: { __exp__: '42' } }), '{"n":-1e+19,"o":{"__exp__":"42"}}', '{"__exp__": "42"} is not rewritten');
  t.equal(dataJson({ n: 1e20, o: { __exp__: 42 } }), '{"n":1e+20,"o":{"__exp__":42}}', '{"__exp__": 42} is not rewritten');
  t.equal(dataJson({ __exp__: 'x', n: -1e19 }), '{"__exp__":"x","n":-1e+19}');
  t.equal(dataJson({ __exp__: '1e+19' }), '{"__exp__":"1e+19"}');
  // the worker uses it for the data column
  const r = rows({ body: encode([{ eventName: 'e', customer: { externalCustomerId: 'c' }, data: { n: -9223372036854775809, m: 18446744073709552000 } }]), meta: meta() });
  t.match(r.lines[0], /"data":\{"n":-9\.223372036854776e\+18,"m":1\.8446744073709552e\+19\}\}$/);
});

/** The outcome of the ingress's validation of one signal, as the ingress runs it on the raw body. */
function ingressOutcome(s: Record<string, unknown>): string {
  const raw = Buffer.from(JSON.stringify({ signals: [s] }));
  try {
    const j = validateBulk(parseJson(raw), RECEIVED, mayHaveSurrogates(raw));
    if (j.errors.length > 0) throw allRefused(j.errors, (i) => `signals[${i}]`);
    return 'accepted';
  } catch (err) {
    if (err instanceof ApiError) return `${err.code}: ${err.details}`;
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------
// Arbitraries: signals that pass validateSignal, with hostile `data`.

const interestingKeys = fc.constantFrom('', '.', 'a.b', 'a', 'b', ' ', 'a b', '..', 'x.', '.y', '`', "'", '"', '\\', '\u0000', 'é', '😀', '__exp__', 'data', 'null', 'a.b.c', '-1', '0');
const key = fc.oneof(interestingKeys, fc.string({ unit: 'binary', maxLength: 8 }), fc.string({ maxLength: 6 }));
const interestingNumbers = fc.constantFrom(
  1e308, -1e308, 1.7976931348623157e308, 5e-324, -5e-324, -0, 0, 0.1, -1.5, 1e-7, 1e21, -1e21, 1e300,
  -9223372036854775809, -9223372036854775808, -9223372036854774784, 9223372036854775807, 2 ** 63, 2 ** 63 + 2048,
  18446744073709552000, 18446744073709550000, 1e20, -1e20, 99999999999999990000, -99999999999999990000,
  Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER, 2 ** 53 + 2,
);
const num = fc.oneof(
  interestingNumbers,
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.bigInt({ min: -(2n ** 72n), max: 2n ** 72n }).map(Number),
);
const interestingStrings = fc.constantFrom('', '\u0000', 'a\u0000b', '"', '\\', '\n\r\t', '{"__exp__":"x"}', '-12345678901234567890', '😀', '\u2028\u2029', '\ufeff', '\uffff', '\ud800', '\udfff');
const str = fc.oneof(fc.string({ unit: 'binary', maxLength: 20 }), fc.string({ unit: 'grapheme', maxLength: 8 }), interestingStrings);
const { value } = fc.letrec<{ value: unknown; leaf: unknown; arr: unknown[]; obj: Record<string, unknown> }>((tie) => ({
  value: fc.oneof({ depthSize: 'small', withCrossShrink: true }, tie('leaf'), tie('arr'), tie('obj')),
  leaf: fc.oneof(num, str, fc.boolean(), fc.constant(null)),
  arr: fc.array(tie('value'), { maxLength: 4 }),
  obj: fc.dictionary(key, tie('value'), { maxKeys: 4 }),
}));
const data = fc.oneof(
  { weight: 1, arbitrary: fc.constantFrom(null, undefined, {}) },
  { weight: 6, arbitrary: fc.dictionary(key, value, { maxKeys: 6 }) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 4 }).filter((v) => v !== null && typeof v === 'object' && !Array.isArray(v)) },
);
const field = fc.oneof(fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }), fc.constantFrom('a', 'x'.repeat(255), '\u0000', '😀'.repeat(127), 'x\udfff', '\udc00', 'x\ud800'));
const offset = fc.oneof(fc.constantFrom('Z', 'z', '+00:00', '-00:00'), fc.tuple(fc.constantFrom('+', '-'), fc.integer({ min: 0, max: 23 }), fc.integer({ min: 0, max: 59 })).map(([s, h, m]) => `${s}${String(h).padStart(2, '0')}:${String(m).padStart(2, '0')}`));
const timestamp = fc.oneof(
  fc.constantFrom(undefined, null),
  fc.tuple(fc.integer({ min: Date.UTC(2000, 0, 1) - 86_400_000, max: RECEIVED + 3_600_000 + 86_400_000 }), fc.constantFrom('T', 't', ' '), fc.constantFrom(0, 1, 3, 6, 9), offset).map(([ms, sep, digits, off]) => {
    const iso = new Date(ms).toISOString(); // local digits shown as-is with an offset: a different instant, still valid text
    const frac = digits === 0 ? '' : `.${iso.slice(20, 23)}${'0'.repeat(Math.max(0, digits - 3))}`.slice(0, digits + 1);
    return `${iso.slice(0, 10)}${sep}${iso.slice(11, 19)}${frac}${off}`;
  }),
);
const signal = fc
  .record(
    {
      eventName: field,
      customer: fc.oneof(field.map((v) => ({ externalCustomerId: v })), field.map((v) => ({ customerId: v }))),
      attribution: fc.oneof(field.map((v) => ({ externalProductId: v })), field.map((v) => ({ productId: v })), fc.constant(null)),
      unitId: fc.option(field, { nil: null }),
      idempotencyKey: fc.option(field, { nil: null }),
      timestamp,
      data,
    },
    { requiredKeys: ['eventName', 'customer'] },
  )
  .map((s) => {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(s)) if (v !== undefined) out[k] = v;
    return out;
  })
  .filter((s) => signalProblem(s, RECEIVED, true) === null);

t.test('property: JSON.parse(dataJson(d)) is d, for data that passes validation', async (t) => {
  let big = 0;
  let plain = 0;
  await fc.assert(
    fc.property(signal, (s) => {
      if (!s.data) return true;
      const d = s.data as Record<string, unknown>;
      const text = dataJson(d);
      const reference = JSON.stringify(d);
      // outside strings, no integer literal with |v| ≥ 2^63 (ClickHouse refuses those beyond
      // UInt64 and reads the rest as integers; exponent form is read as the same Float64)
      const lits = numberLiterals(reference);
      if (numberLiterals(text).some(bigIntegerLiteral)) throw new Error(`integer literal with |v| ≥ 2^63 in ${text}`);
      if (!isDeepStrictEqual(JSON.parse(text), JSON.parse(reference))) throw new Error(`dataJson changed the value: ${text}`);
      if (lits.some(bigIntegerLiteral)) big++;
      else {
        plain++;
        if (text !== reference) throw new Error(`no big integer, yet dataJson differs from JSON.stringify: ${text} vs ${reference}`);
      }
      return true;
    }),
    { numRuns: 300 },
  );
  t.comment(`${big} with integers beyond 64 bits, ${plain} without`);
  t.ok(big > 10 && plain > 10, 'both kinds were exercised');
});

t.test('real engine: any batch accepted by validation inserts into chdb', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'unit-rows-chdb-'));
  const session = new Session(dir);
  t.teardown(() => {
    session.close();
    rmSync(dir, { recursive: true, force: true });
  });
  for (const sql of schemaStatements('ut')) await session.queryAsync(sql);
  t.same(INSERT_SETTINGS, { max_partitions_per_insert_block: '0' });

  let inserted = 0;
  let withBigIntegers = 0;
  let withDottedKeys = 0;
  let run = 0;
  await fc.assert(
    fc.asyncProperty(fc.array(signal, { minLength: 1, maxLength: 5 }), fc.constantFrom<'live' | 'test'>('live', 'test'), async (signals, mode) => {
      const body = { signals };
      // the batch as a whole is accepted, as the ingress checks it: from the raw bytes
      const raw = Buffer.from(JSON.stringify(body));
      if (validateBulk(parseJson(raw), RECEIVED, mayHaveSurrogates(raw)).errors.length > 0) throw new Error(`a generated signal was refused: ${raw.toString()}`);
      // the body travels as the request's bytes
      const m = meta({ mode, batchId: `bat_${String(run++).padStart(9, '0')}ZZZZZZZZZZZZ` });
      const r = rows({ body: new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength), meta: m });
      const lines = r.lines.map((_, i) => fullRow(r, i));
      try {
        await session.insert({ table: 'ut.signals', values: Buffer.from(`${lines.join('\n')}\n`), format: 'JSONEachRow', settings: { max_partitions_per_insert_block: 0 } });
      } catch (err) {
        throw new Error(`insert refused a validated batch: ${(err as Error).message.slice(0, 300)}\nbody: ${JSON.stringify(body)}`);
      }
      inserted += signals.length;
      for (const s of signals) {
        const text = JSON.stringify(s.data ?? {});
        if (numberLiterals(text).some(bigIntegerLiteral)) withBigIntegers++;
        if (/"[^"]*\.[^"]*":/.test(text)) withDottedKeys++;
      }
      // the rows landed with the right ids, timestamps and identity columns (the form sent)
      const got = (
        await session.queryAsync(
          `SELECT signal_id, toUnixTimestamp64Milli(timestamp) AS ts, livemode, customer_id, external_customer_id, product_id, external_product_id FROM ut.signals WHERE batch_id = '${m.batchId}' ORDER BY signal_id FORMAT JSONEachRow`,
        )
      )
        .text()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { signal_id: string; ts: string | number; livemode: boolean; customer_id: string; external_customer_id: string; product_id: string; external_product_id: string });
      const ref = (v: unknown, id: string, external: string): [string, string] => {
        const o = (v ?? {}) as Record<string, string>;
        return [o[id] ?? '', o[external] ?? ''];
      };
      const want = signals.map((s, i) => {
        const [cid, cx] = ref(s.customer, 'customerId', 'externalCustomerId');
        const [pid, px] = ref(s.attribution, 'productId', 'externalProductId');
        return { signal_id: r.ids[i]!, ts: typeof s.timestamp === 'string' ? parseRfc3339(s.timestamp)! : RECEIVED, livemode: mode === 'live', customer_id: cid, external_customer_id: cx, product_id: pid, external_product_id: px };
      });
      want.sort((a, b) => (a.signal_id < b.signal_id ? -1 : 1));
      const gotN = got.map((g) => ({ signal_id: g.signal_id, ts: Number(g.ts), livemode: Boolean(g.livemode), customer_id: g.customer_id, external_customer_id: g.external_customer_id, product_id: g.product_id, external_product_id: g.external_product_id }));
      if (JSON.stringify(gotN) !== JSON.stringify(want)) throw new Error(`stored ${JSON.stringify(gotN)} != ${JSON.stringify(want)}`);
    }),
    { numRuns: Number(process.env.UNIT_RUNS ?? 100) },
  );
  const total = Number(JSON.parse((await session.queryAsync('SELECT count() AS n FROM ut.signals FORMAT JSONEachRow')).text()).n);
  t.equal(total, inserted, `${inserted} rows inserted, all counted`);
  t.ok(inserted > 100, 'the runs inserted rows');
  t.comment(`inserted ${withBigIntegers} signals with integers beyond 64 bits, ${withDottedKeys} with dotted keys`);
  t.ok(withBigIntegers > 0, 'the runs inserted integers beyond 64 bits');

  // ---- Shapes that used to poison the insert, now each inserted or refused by validation.
  const insertOne = async (s: Record<string, unknown>): Promise<{ result: string; batchId: string }> => {
    const batchId = `bat_one${String(run++).padStart(6, '0')}ZZZZZZZZZZZZ`;
    const r = rows({ body: encode([s]), meta: meta({ batchId }) });
    try {
      await session.insert({ table: 'ut.signals', values: Buffer.from(`${r.lines.map((_, i) => fullRow(r, i)).join('\n')}\n`), format: 'JSONEachRow', settings: { max_partitions_per_insert_block: 0 } });
      return { result: 'inserted', batchId };
    } catch (err) {
      return { result: (err as Error).message.split('\n')[0]!.slice(0, 200), batchId };
    }
  };
  const readData = async (batchId: string): Promise<Record<string, unknown>> => {
    const sql = `SELECT data FROM ut.signals WHERE batch_id = '${batchId}' FORMAT JSONEachRow SETTINGS output_format_json_quote_64bit_integers = 0`;
    return (JSON.parse((await session.queryAsync(sql)).text()) as { data: Record<string, unknown> }).data;
  };

  // Overlapping but distinct paths: accepted by validation, and the engine takes them.
  for (const data of [{ a: 1, 'a.b': 2 }, { 'a.b': {}, a: { b: {} } }, { 'a.b': {}, a: { b: 1 } }, { x: [{ 'a.b': 1 }, { a: { b: 2 } }] }, { 'a.b': 1, x: [{ a: { b: 2 } }] }, { x: { '': { a: 1 } }, 'x.a': 2 }]) {
    t.equal(ingressOutcome({ eventName: 'e', customer: { externalCustomerId: 'c' }, data }), 'accepted', `validation accepts ${JSON.stringify(data)}`);
    t.equal((await insertOne({ eventName: 'e', customer: { externalCustomerId: 'c' }, data })).result, 'inserted', `the engine inserts ${JSON.stringify(data)}`);
  }

  // Integers beyond 64 bits insert (exponent form) and read back as the same double.
  const bigNumbers: Record<string, unknown>[] = [
    { n: 18446744073709552000 },
    { n: 1e20 },
    { n: -1e20 },
    { n: -9223372036854775809 },
    { n: 2 ** 63 },
    { n: 99999999999999990000 },
    { n: 9.999999999999999e20 },
    { n: 1e20, o: { p: [{ q: -1e20 }] }, m: 9223372036854774784 },
    { n: -1e19, o: { __exp__: 'x' } }, // a user key "__exp__" next to a big number
    { n: 1e20, o: { __exp__: 42 } },
  ];
  for (const data of bigNumbers) {
    const s = { eventName: 'e', customer: { externalCustomerId: 'c' }, data };
    t.equal(ingressOutcome(s), 'accepted', `validation accepts ${JSON.stringify(data)}`);
    const { result, batchId } = await insertOne(s);
    t.equal(result, 'inserted', `inserted: ${JSON.stringify(data)}`);
    if (result !== 'inserted') continue;
    const back = await readData(batchId);
    t.ok(isDeepStrictEqual(back, data), `read back as the same doubles: ${JSON.stringify(back)}`);
  }
  const typeOf = async (data: Record<string, unknown>, path: string): Promise<string> => {
    const { batchId } = await insertOne({ eventName: 'e', customer: { externalCustomerId: 'c' }, data });
    return String((JSON.parse((await session.queryAsync(`SELECT dynamicType(data.${path}) AS t FROM ut.signals WHERE batch_id = '${batchId}' FORMAT JSONEachRow`)).text()) as { t: string }).t);
  };
  t.equal(await typeOf({ n: 18446744073709552000 }, 'n'), 'Float64', '2^64 is stored as a Float64');
  t.equal(await typeOf({ n: -1e20 }, 'n'), 'Float64', '-1e20 is stored as a Float64');
  t.equal(await typeOf({ n: 9223372036854774784 }, 'n'), 'Int64', 'an integer within Int64 stays an integer');

  // Data with two keys naming the same path: refused by validation, and rightly so (the
  // engine refuses the insert).
  const duplicates: [Record<string, unknown>, string][] = [
    [{ 'a.b': 1, a: { b: 2 } }, 'a.b'],
    [{ a: { 'b.c': 1 }, 'a.b': { c: 2 } }, 'a.b.c'],
    [{ 'a.b': [], a: { b: [1] } }, 'a.b'],
    [{ x: [{ 'a.b': 1, a: { b: 2 } }] }, 'a.b'],
    [{ x: [[{ y: { 'a.': 1, a: { '': 2 } } }]] }, 'y.a.'],
  ];
  for (const [data, path] of duplicates) {
    t.equal(
      ingressOutcome({ eventName: 'e', customer: { externalCustomerId: 'c' }, data }),
      `INVALID_SIGNAL: signals[0].data: two keys name the same path "${path}" (dots in keys separate path segments)`,
      `validation refuses ${JSON.stringify(data)}`,
    );
    t.match((await insertOne({ eventName: 'e', customer: { externalCustomerId: 'c' }, data })).result, /Duplicate path found during parsing JSON object/, `the engine would refuse ${JSON.stringify(data)}`);
  }

  // Lone surrogates: refused by validation (the engine cannot parse them in data).
  const lone: [Record<string, unknown>, string][] = [
    [{ eventName: 'e', customer: { externalCustomerId: 'c' }, data: { s: '\ud800' } }, 'signals[0].data: contains a string that is not well-formed Unicode (lone surrogate)'],
    [{ eventName: 'e', customer: { externalCustomerId: 'c' }, data: { a: ['\udc00'] } }, 'signals[0].data: contains a string that is not well-formed Unicode (lone surrogate)'],
    [{ eventName: 'e', customer: { externalCustomerId: 'c' }, data: { '\udc00': 1 } }, 'signals[0].data: key "\\udc00" is not well-formed Unicode (lone surrogate)'],
    [{ eventName: '\ud800', customer: { externalCustomerId: 'c' } }, 'signals[0].eventName: must be well-formed Unicode (no lone surrogates)'],
    [{ eventName: 'e', customer: { externalCustomerId: 'x\ud800' } }, 'signals[0].customer.externalCustomerId: must be well-formed Unicode (no lone surrogates)'],
    [{ eventName: 'e', customer: { externalCustomerId: 'c' }, attribution: { productId: '\udfff' } }, 'signals[0].attribution.productId: must be well-formed Unicode (no lone surrogates)'],
    [{ eventName: 'e', customer: { externalCustomerId: 'c' }, unitId: '\udfff' }, 'signals[0].unitId: must be well-formed Unicode (no lone surrogates)'],
    [{ eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: '\udbff' }, 'signals[0].idempotencyKey: must be well-formed Unicode (no lone surrogates)'],
  ];
  for (const [s, details] of lone) t.equal(ingressOutcome(s), `INVALID_SIGNAL: ${details}`, `validation refuses ${JSON.stringify(s)}`);
  for (const [s] of lone.slice(0, 3)) t.match((await insertOne(s)).result, /Cannot parse JSON object/, `the engine would refuse ${JSON.stringify(s)}`);

  // An empty key is a path segment of its own, at a document root too.
  for (const [data, path] of [[{ '.a': 1, '': { a: 2 } }, '.a'], [{ '': { '': 1 }, '.': 2 }, '.'], [{ k: [{ '': { a: 1 }, '.a': 2 }] }, '.a']] as const) {
    t.match((await insertOne({ eventName: 'e', customer: { externalCustomerId: 'c' }, data })).result, /Duplicate path found during parsing JSON object/, `the engine refuses ${JSON.stringify(data)}`);
    t.equal(
      ingressOutcome({ eventName: 'e', customer: { externalCustomerId: 'c' }, data }),
      `INVALID_SIGNAL: signals[0].data: two keys name the same path "${path}" (dots in keys separate path segments)`,
      `validation refuses ${JSON.stringify(data)}`,
    );
  }
  for (const data of [{ '': { a: 1 }, a: 2 }, { k: [{ '': { a: 1 }, a: 2 }] }]) {
    t.equal((await insertOne({ eventName: 'e', customer: { externalCustomerId: 'c' }, data })).result, 'inserted', `the engine accepts ${JSON.stringify(data)}`);
    t.equal(ingressOutcome({ eventName: 'e', customer: { externalCustomerId: 'c' }, data }), 'accepted', `validation accepts ${JSON.stringify(data)}`);
  }
});
