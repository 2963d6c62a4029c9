/**
 * The rows worker's fast path (src/pipeline/rows-bytes.ts, rows written from the body's bytes)
 * against the slow path it stands in for (workers/rows.ts `rows`, from JSON.parse): where it
 * answers, the rows, billable lines, signal ids, claim keys and the customer and product
 * references must be the slow path's byte for byte. Checked on the bench batch and hand-picked edges (escapes, numbers, keys, UTF-8,
 * whitespace), on generated bodies the ingress accepts, and on byte mutations of a valid body;
 * and that it does answer for the plain bodies it exists for (otherwise nothing here could fail
 * while the fast path were dead).
 */
import t from 'tap';
import fc from 'fast-check';
import rows, { dedupeKey, packed } from '../../workers/rows.js';
import { packedFromBytes } from '../../src/pipeline/rows-bytes.js';
import { mayHaveSurrogates, validateBulk } from '../../src/ingress/validate.js';
import { parseJson } from '../../src/http/json.js';
import type { BatchMeta } from '../../src/bus/batch.js';
import { distinctRefs } from '../../src/pipeline/rows-task.js';
import { BatchTemplate } from '../../bench/lib/signals.js';

const NOW = Date.UTC(2026, 0, 31, 12, 0, 0);
const meta: BatchMeta = { orgId: 'org_AAAAAAAAAAAAAAAAAAAA', mode: 'live', receivedAtMs: NOW, batchId: 'bat_0000abcdeXXXXXXXXXXXX' };

interface Packed {
  rows: string;
  billable: string;
  ids: string[];
  claimKeys: (string | null)[];
  refs: string[];
  refOf: number[];
  products: string[];
  productOf: number[];
}

/** The slow path's packed form: its lines, each ending in '\n'. */
function slow(body: Buffer, m = meta): Packed {
  const r = rows({ body, meta: m });
  const { refs, refOf } = distinctRefs(r.customers);
  const products = distinctRefs(r.products);
  return { rows: `${r.lines.join('\n')}\n`, billable: `${r.billable.join('\n')}\n`, ids: r.ids, claimKeys: r.claimKeys, refs, refOf: [...refOf], products: products.refs, productOf: [...products.refOf] };
}

function fast(body: Buffer, m = meta): Packed | null {
  const p = packedFromBytes(body, m, dedupeKey);
  return p && { rows: Buffer.from(p.rows).toString('utf8'), billable: Buffer.from(p.billable).toString('utf8'), ids: p.ids, claimKeys: p.claimKeys, refs: p.refs, refOf: [...p.refOf], products: p.products, productOf: [...p.productOf] };
}

/** Whether the slow path (the ingress's validation) accepts the body and every signal of it: the bodies that reach the rows worker without refused indexes. */
function accepted(body: Buffer): boolean {
  try {
    return validateBulk(parseJson(body), NOW, mayHaveSurrogates(body)).errors.length === 0;
  } catch {
    return false;
  }
}

/** The rule on one body: no answer, or the slow path's answer. */
function agree(body: Buffer, m = meta): { answered: boolean; ok: boolean; detail: string } {
  const f = fast(body, m);
  if (f === null) return { answered: false, ok: true, detail: 'not sure' };
  const s = slow(body, m);
  const ok = f.rows === s.rows && f.billable === s.billable && JSON.stringify([f.ids, f.claimKeys, f.refs, f.refOf, f.products, f.productOf]) === JSON.stringify([s.ids, s.claimKeys, s.refs, s.refOf, s.products, s.productOf]);
  return { answered: true, ok, detail: ok ? 'same' : `fast ${JSON.stringify(f).slice(0, 600)}\nslow ${JSON.stringify(s).slice(0, 600)}` };
}

const sig = (over: Record<string, unknown> = {}): Record<string, unknown> => ({ eventName: 'api_call', customer: { externalCustomerId: 'acct_1' }, ...over });
const ext = (id: string): { externalCustomerId: string } => ({ externalCustomerId: id });
const bulk = (...signals: unknown[]): Buffer => Buffer.from(JSON.stringify({ signals }));
const text = (s: string): Buffer => Buffer.from(s);
const withData = (data: string): Buffer => text(`{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":${data}}]}`);

t.test('the bench batch and other plain bodies: answered, the slow path byte for byte', async (t) => {
  const template = new BatchTemplate({ keyed: (i) => i % 2 === 0, baseTimeMs: NOW - 60_000 });
  const plain: [string, Buffer][] = [
    ['the 500-signal bench batch', Buffer.from(template.render((i) => `key-${i}`))],
    ['one signal', bulk(sig())],
    ['every field', bulk(sig({ unitId: 'u', idempotencyKey: 'k', timestamp: '2026-01-31T11:00:00Z', data: { a: 1, b: 'x', c: [1, 2, { d: null }], e: true, f: false, g: -0.5e-3, h: 120.25, i: 1e21, j: 5e-324 } }))],
    ['nulls', bulk(sig({ unitId: null, idempotencyKey: null, timestamp: null, data: null }))],
    ['empty containers', bulk(sig({ data: {} }), sig({ data: { a: [] } }), sig({ data: { a: {} } }))],
    ['escapes JSON.stringify writes', bulk(sig({ eventName: 'a"b\\c\n\t\r\b\f', customer: ext('x'.repeat(255)), data: { 'k"\n': 'v\\"' } }))],
    ['escapes in the idempotency key (its claim is of the parsed text)', bulk(sig({ idempotencyKey: 'k"1\\\n' }))],
    ['escapes in customer references, each reference once', bulk(sig({ customer: ext('a"b') }), sig({ customer: ext('c\\d') }), sig({ customer: ext('a"b') }), sig({ customer: ext('é') }))],
    ['the same text by either kind: two references', bulk(sig({ customer: ext('same') }), sig({ customer: { customerId: 'same' } }), sig({ customer: ext('same') }))],
    ['attribution by either kind, or none', bulk(sig({ attribution: { productId: 'prod_1' } }), sig({ attribution: { externalProductId: 'chat' } }), sig({ attribution: null }), sig(), sig({ attribution: { externalProductId: 'chat' } }))],
    ['UTF-8 everywhere', bulk(sig({ eventName: 'é€😀', customer: ext('日本'), attribution: { externalProductId: 'ß製品' }, unitId: 'ß', idempotencyKey: '😀k', data: { 'ключ': ['日本', { 'ß': 1 }], u: '\u2028\u2029\uFEFF' } }))],
    ['whitespace outside data', text(' \n\t{ "signals" : [ { "eventName" : "e" , "customer" : { "externalCustomerId" : "c" } , "attribution" : { "productId" : "p" } , "data" : {"a":[1,2]} } ] } \r\n')],
    ['fields in another order, repeated (the last counts)', text('{"signals":[{"data":{"a":1},"customer":{"customerId":"c0"},"timestamp":"2026-01-31T11:00:00.123456Z","eventName":"e","customer":{"externalCustomerId":"c"}}]}')],
    ['timestamps with offsets and fractions', bulk(sig({ timestamp: '2026-01-31T12:30:00+01:00' }), sig({ timestamp: '2026-01-31 11:00:00.9999Z' }), sig({ timestamp: '2000-01-01T00:00:00z' }))],
    ['dotted data keys', bulk(sig({ data: { 'a.b': 1, c: { 'd.e': 'f' } } }))],
    ['keys that look like numbers but are not integers', bulk(sig({ data: { '-1': 1, '1.5': 2, '1e3': 3, ' 1': 4 } }))],
    ['__proto__ as a data key', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{"__proto__":{"x":1},"constructor":2}}]}')],
    ['a test-mode batch', bulk(sig({ idempotencyKey: 'k' }))],
  ];
  for (const [name, body] of plain) {
    t.ok(accepted(body), `${name}: accepted by the ingress`);
    const r = agree(body, name === 'a test-mode batch' ? { ...meta, mode: 'test' } : meta);
    t.ok(r.answered && r.ok, `${name}: ${r.detail}`);
  }
});

t.test('edges the slow path writes differently: not sure', async (t) => {
  const cases: [string, Buffer][] = [
    ['whitespace inside data', withData('{ "a":1}')],
    ['a newline inside data', withData('{"a":\n1}')],
    ['\\/ in data', withData('{"a":"x\\/y"}')],
    ['\\/ in an event name', text('{"signals":[{"eventName":"a\\/b","customer":{"externalCustomerId":"c"}}]}')],
    ['\\/ in an idempotency key', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"idempotencyKey":"k\\/1"}]}')],
    ['\\u escape in a value', withData('{"a":"\\u00e9"}')],
    ['\\u escape in a customer id', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"\\u0063"}}]}')],
    ['\\u escape in a product id', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"attribution":{"productId":"\\u0070"}}]}')],
    ['digit key (V8 orders integer keys first)', withData('{"b":1,"2":3}')],
    ['digit key in a nested object', withData('{"b":{"x":1,"10":2}}')],
    ['repeated key', withData('{"a":1,"b":2,"a":3}')],
    ['repeated key in a nested object', withData('{"o":{"k":1,"k":1}}')],
    ['empty timestamp', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"timestamp":""}]}')],
    ['timestamp with an escape', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"timestamp":"2026-01-31T11:00:00\\/Z"}]}')],
    ['invalid UTF-8', Buffer.concat([text('{"signals":[{"eventName":"'), Buffer.from([0xff]), text('","customer":{"externalCustomerId":"c"}}]}')])],
    ['an encoded surrogate', Buffer.concat([text('{"signals":[{"eventName":"'), Buffer.from([0xed, 0xa0, 0x80]), text('","customer":{"externalCustomerId":"c"}}]}')])],
    ['unknown field', bulk(sig({ other: 1 }))],
    ['data not an object', bulk(sig({ data: [1] }))],
    ['not JSON', text('{"signals":[')],
    ['empty batch', bulk()],
    ['trailing garbage', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"}}]}x')],
    ...['1.0', '1e2', '1E5', '-0', '0.0', '1.50', '100e-2', '1e21', '0.10000000000000000001', '12345678901234567890', '9223372036854775808', '9223372036854776000', '1e-400', '2e+400'].map(
      (n): [string, Buffer] => [`number ${n}`, withData(`{"n":${n}}`)],
    ),
  ];
  for (const [name, body] of cases) t.equal(fast(body), null, name);
  // and the slow path still renders them (the worker falls back to it)
  const p = packed({ body: withData('{ "n" : 1.0 , "2" : "\\u00e9" }'), meta });
  t.match(Buffer.from(p.rows).toString(), /"data":\{"2":"é","n":1\}\}\n$/, 'packed falls back to the slow path');
});

const NUMBER_TEXTS = ['0', '-1', '7', '123456789012345', '1234567890123456', '0.5', '-0.25', '1.5e-7', '1e+21', '5e-324', '1.7976931348623157e+308', '0.1', '0.30000000000000004', '1.0', '-0', '1e2', '100'];
const ascii = fc.string({ unit: fc.constantFrom(...'abcXYZ019 _-:./"\\\n\t'.split(''), 'é', '€', '😀', '\u{10FFFF}', '\uFEFF', '\u2028'), minLength: 1, maxLength: 20 });
const dataKey = fc.oneof(fc.constantFrom('a', 'b', 'a.b', '1', '01', '-1', '', 'é', 'k\n', '__proto__'), fc.string({ maxLength: 5 }));
/** Data values as text: JSON.stringify's, with number texts in other spellings, sometimes repeated keys or whitespace. */
const dataText = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.constantFrom(...NUMBER_TEXTS),
    fc.integer().map(String),
    fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => JSON.stringify(d)),
    fc.constantFrom('true', 'false', 'null'),
    ascii.map((s) => JSON.stringify(s)),
    fc.constantFrom('"a\\/b"', '"\\u0041"', '"x"'),
    tie('obj'),
    tie('arr'),
  ),
  obj: fc.array(fc.tuple(dataKey, tie('value')), { maxLength: 4 }).map((kv) => `{${kv.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`),
  arr: fc.array(tie('value'), { maxLength: 3 }).map((vs) => `[${vs.join(',')}]`),
})).obj as fc.Arbitrary<string>;
const timestamp = fc.oneof(
  fc.integer({ min: Date.UTC(2000, 0, 1), max: NOW + 3_600_000 }).map((ms) => new Date(ms).toISOString()),
  fc.constantFrom('2026-01-31T12:00:00+01:00', '2026-01-31 11:00:00.123456Z', '2026-01-31T13:00:00.0009Z', '2024-02-29t00:00:00z'),
);
const signalText = fc
  .record(
    {
      eventName: ascii,
      customer: fc.oneof(ascii.map(ext), ascii.map((v) => ({ customerId: v }))),
      attribution: fc.oneof(ascii.map((v) => ({ externalProductId: v })), ascii.map((v) => ({ productId: v })), fc.constant(null)),
      unitId: fc.oneof(ascii, fc.constant(null)),
      idempotencyKey: fc.oneof(ascii, fc.constant(null)),
      timestamp: fc.oneof(timestamp, fc.constant(null)),
    },
    { requiredKeys: ['eventName', 'customer'] },
  )
  .chain((s) =>
    fc.oneof(dataText, fc.constant('null'), fc.constant(undefined)).map((data) => {
      const fields = Object.entries(s).map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`);
      if (data !== undefined) fields.push(`"data":${data}`);
      return `{${fields.join(',')}}`;
    }),
  );

t.test('generated bodies the ingress accepts: never a different answer, and mostly answered', async (t) => {
  let acceptedBodies = 0;
  let answered = 0;
  fc.assert(
    fc.property(fc.array(signalText, { minLength: 1, maxLength: 6 }), fc.boolean(), (signals, spaced) => {
      const body = text(`{"signals":[${signals.join(spaced ? ' , ' : ',')}]}`);
      if (!accepted(body)) return true;
      acceptedBodies++;
      const r = agree(body);
      if (r.answered) answered++;
      if (!r.ok) t.comment(r.detail);
      return r.ok;
    }),
    { numRuns: 4000 },
  );
  t.ok(acceptedBodies > 1000, `accepted bodies generated (${acceptedBodies} of 4000)`);
  t.ok(answered > acceptedBodies / 10, `the fast path answered some of them (${answered} of ${acceptedBodies})`);

  // Bodies as producers write them (JSON.stringify of plain values): answered every time, but
  // for a number with a run of 19 digits (0.0000010000000000000002: left to the slow path).
  const plainData = fc.dictionary(fc.string({ unit: fc.constantFrom('a', 'b', '_', 'x'), minLength: 1, maxLength: 4 }), fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean(), fc.constant(null), ascii), { maxKeys: 5 });
  fc.assert(
    fc.property(fc.array(fc.record({ eventName: ascii, customer: ascii.map(ext), idempotencyKey: fc.oneof(ascii, fc.constant(null)), timestamp, data: plainData }), { minLength: 1, maxLength: 8 }), (signals) => {
      const body = bulk(...signals);
      if (!accepted(body) || /\d{19}/.test(JSON.stringify(signals.map((s) => s.data)))) return true;
      const r = agree(body);
      return r.answered && r.ok;
    }),
    { numRuns: 1000 },
  );
});

t.test('byte mutations of a valid body: never a different answer', async (t) => {
  const base = text(
    JSON.stringify({
      signals: [
        sig({ unitId: 'u1', timestamp: '2026-01-31T11:59:59.5Z', idempotencyKey: 'k-1', data: { region: 'eu', n: 12.5, list: [1, 'two', { three: 3 }], ok: true, none: null } }),
        sig({ data: { deep: { deeper: { deepest: [[-1e-3]] } } }, idempotencyKey: 'k"2' }),
      ],
    }),
  );
  t.ok(agree(base).answered, 'the base body is answered');
  const replacements = [...' \n"\\/,:{}[]01-.eEuaé'.split(''), '\u0000'].map((c) => Buffer.from(c));
  let tried = 0;
  fc.assert(
    fc.property(fc.nat(base.length - 1), fc.constantFrom(...replacements), fc.constantFrom('replace', 'insert', 'delete'), (at, with_, how) => {
      const body = how === 'delete' ? Buffer.concat([base.subarray(0, at), base.subarray(at + 1)]) : Buffer.concat([base.subarray(0, at), with_, base.subarray(how === 'replace' ? at + 1 : at)]);
      if (!accepted(body)) return true;
      tried++;
      const r = agree(body);
      if (!r.ok) t.comment(`${how} ${JSON.stringify(with_.toString())} at ${at}: ${r.detail}`);
      return r.ok;
    }),
    { numRuns: 4000 },
  );
  t.ok(tried > 200, `mutations the ingress accepts were tried (${tried})`);
});

t.test('the pipeline form takes the fast path for plain batches', async (t) => {
  const template = new BatchTemplate({ keyed: (i) => i % 3 === 0, baseTimeMs: NOW - 1_000 });
  const body = Buffer.from(template.render((i) => `key-${i}`));
  const p = packed({ body, meta });
  const s = slow(body);
  t.equal(Buffer.from(p.rows).toString(), s.rows);
  t.equal(Buffer.from(p.billable).toString(), s.billable);
  t.same(p.claimKeys, s.claimKeys);
  t.same([p.refs, [...p.refOf]], [s.refs, s.refOf]);
  t.same([p.products, [...p.productOf]], [s.products, s.productOf]);
  t.equal(new Set(p.refs).size, p.refs.length, 'each reference once');
  t.same([...p.refOf].map((k) => p.refs[k]), JSON.parse(body.toString()).signals.map((x: { customer: { externalCustomerId: string } }) => `x:${x.customer.externalCustomerId}`), "each signal's own reference, by kind");
});

t.test('a batch with refused indexes (Billing-Skip) is left to the slow path, which skips them', async (t) => {
  const valid = bulk(sig({ idempotencyKey: 'k0' }), sig(), sig({ customer: { customerId: 'cus_2' } }));
  t.ok(packedFromBytes(valid, meta, dedupeKey) !== null, 'answered without refused indexes');
  t.equal(packedFromBytes(valid, meta, dedupeKey, [1]), null, 'not sure with one, even where that signal is valid');
  const body = bulk(sig({ idempotencyKey: 'k0' }), { eventName: '' }, sig({ customer: { customerId: 'cus_2' } }));
  const p = packed({ body, meta, skip: [1] });
  const r = rows({ body, meta, skip: [1] });
  t.equal(Buffer.from(p.rows).toString(), `${r.lines.join('\n')}\n`);
  t.same(p.ids, ['sig_0000abcdeXXXXXXXXXXXX_0', 'sig_0000abcdeXXXXXXXXXXXX_2']);
  t.same([...p.refOf].map((k) => p.refs[k]), ['x:acct_1', 'i:cus_2']);
});

t.test('through the worker pool (packedMoved): the same result, its byte arrays moved', async (t) => {
  const { createWorkerPool, workerTask } = await import('../../src/shared/worker-pool.js');
  const pool = createWorkerPool(1, 4);
  t.teardown(() => pool.destroy());
  const run = workerTask<{ body: Uint8Array; meta: BatchMeta }, ReturnType<typeof packed>>(new URL('../../workers/rows.ts', import.meta.url).href, 'packedMoved');
  const template = new BatchTemplate({ keyed: (i) => i % 2 === 0, baseTimeMs: NOW - 1_000 });
  for (const body of [Buffer.from(template.render((i) => `k-${i}`)), withData('{ "n" : 1.0 }')]) {
    const copy = new Uint8Array(body);
    const got = await run(pool, { body: copy, meta }, [copy.buffer as ArrayBuffer]);
    const want = packed({ body, meta });
    t.same(
      [Buffer.from(got.rows).toString(), Buffer.from(got.billable).toString(), got.ids, got.claimKeys, got.refs, [...got.refOf], got.products, [...got.productOf]],
      [Buffer.from(want.rows).toString(), Buffer.from(want.billable).toString(), want.ids, want.claimKeys, want.refs, [...want.refOf], want.products, [...want.productOf]],
    );
  }
});
