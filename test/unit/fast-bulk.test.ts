/**
 * The ingress's fast path for bulk bodies (src/ingress/fast-bulk.ts) against the slow path it
 * stands in for (`validateBulk(parseJson(body))`): it may only answer N where the slow path
 * accepts the body with N signals and refuses none of them, and null otherwise (a body with a
 * refused signal, or refused whole, is the slow path's to answer). Checked on hand-picked edges (duplicate
 * keys, depth, size, numbers, escapes, timestamps at the limits), on generated bodies (valid
 * and defective) and on byte-level mutations of valid bodies; and that it does answer for the
 * plain bodies it exists for (otherwise nothing here could fail while the fast path were dead).
 * Also Rfc3339Reader.parseBytes against parse.
 */
import t from 'tap';
import fc from 'fast-check';
import { fastBulkCount } from '../../src/ingress/fast-bulk.js';
import { MAX_DATA_BYTES, mayHaveSurrogates, validateBulk } from '../../src/ingress/validate.js';
import { parseJson } from '../../src/http/json.js';
import { Rfc3339Reader, parseRfc3339 } from '../../src/shared/time.js';
import { BatchTemplate } from '../../bench/lib/signals.js';

const NOW = Date.UTC(2026, 0, 31, 12, 0, 0);

/** The slow path's answer: the count when it accepts every signal, or 'refused' (the request, or one of its signals). */
function slow(body: Buffer, now = NOW): number | 'refused' {
  try {
    const judged = validateBulk(parseJson(body), now, mayHaveSurrogates(body));
    return judged.errors.length === 0 ? judged.count : 'refused';
  } catch {
    return 'refused';
  }
}

/** Checks the rule on one body; returns the fast answer. */
function agree(body: Buffer, now = NOW): { fast: number | null; slow: number | 'refused'; ok: boolean } {
  const f = fastBulkCount(body, now);
  const s = slow(body, now);
  return { fast: f, slow: s, ok: f === null || f === s };
}

const sig = (over: Record<string, unknown> = {}): Record<string, unknown> => ({ eventName: 'api_call', customer: { externalCustomerId: 'acct-1' }, ...over });
const bulk = (...signals: unknown[]): Buffer => Buffer.from(JSON.stringify({ signals }));
const text = (s: string): Buffer => Buffer.from(s);

t.test('the bench batch and other plain bodies: the fast path answers, with the slow path count', async (t) => {
  const template = new BatchTemplate({ keyed: (i) => i % 2 === 0, baseTimeMs: NOW - 60_000 });
  const body = Buffer.from(template.render((i) => `key-${i}`));
  t.equal(fastBulkCount(body, NOW), 500, 'the 500-signal bench batch');
  t.equal(slow(body), 500, 'the slow path agrees');
  const plain = [
    bulk(sig()),
    bulk(sig({ unitId: 'u', idempotencyKey: 'k', timestamp: '2026-01-31T11:00:00Z', data: { a: 1, b: 'x', c: [1, 2, { d: null }], e: true, f: false, g: -0.5e-3 } })),
    bulk(sig({ unitId: null, idempotencyKey: null, timestamp: null, data: null })),
    bulk(sig({ data: {} }), sig({ data: { a: [] } }), sig({ data: { a: {} } })),
    bulk(sig({ eventName: 'a"b\\c/d\n\t', customer: { externalCustomerId: 'x'.repeat(255) } })),
    bulk(sig({ customer: { customerId: 'cus_AAAAAAAAAAAAAAAAAAAA' } })),
    bulk(sig({ attribution: { productId: 'prod_AAAAAAAAAAAAAAAAAAAA' } }), sig({ attribution: { externalProductId: 'chat' } }), sig({ attribution: null })),
    text('{"signals":[{"eventName":"e","customer": { "customerId" : "c" } ,"attribution":{"externalProductId":"p"}}]}'),
    text(' \n\t{ "signals" : [ { "eventName" : "e" , "customer" : { "externalCustomerId" : "c" } , "data" : { "a" : [ 1 , 2 ] } } ] } \r\n'),
    bulk(...Array.from({ length: 500 }, () => sig())),
  ];
  for (const b of plain) {
    const r = agree(b);
    t.ok(r.fast !== null && r.fast === r.slow, `${b.toString().slice(0, 80)}: fast ${r.fast}, slow ${r.slow}`);
  }
});

t.test('edges: never an answer the slow path would not give', async (t) => {
  const deep = (levels: number, arrays = false): unknown => {
    let v: unknown = 1;
    for (let i = 1; i < levels; i++) v = arrays ? [v] : { a: v };
    return arrays ? { a: v } : v;
  };
  const nestObj = (levels: number): Record<string, unknown> => {
    let v: Record<string, unknown> = { leaf: 1 };
    for (let i = 1; i < levels; i++) v = { a: v };
    return v;
  };
  // objects inside arrays: the slow path does not count them as a level; the fast path does
  let objInArrays: unknown = { x: 1 };
  for (let i = 0; i < 8; i++) objInArrays = [objInArrays];
  const cases: [string, Buffer][] = [
    ['empty body', text('')],
    ['not JSON', text('{"signals":[')],
    ['empty batch', bulk()],
    ['501 signals', bulk(...Array.from({ length: 501 }, () => sig()))],
    ['missing customer', bulk({ eventName: 'e' })],
    ['required null', bulk(sig({ customer: null }))],
    ['repeated required, last null', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"customer":null}]}')],
    ['repeated required, first bad', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":""},"customer":{"externalCustomerId":"c"}}]}')],
    ['repeated key inside customer, last empty', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c","externalCustomerId":""}}]}')],
    ['repeated key inside customer, first empty', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"","externalCustomerId":"c"}}]}')],
    ['customer with both ids', bulk(sig({ customer: { customerId: 'cus_1', externalCustomerId: 'c' } }))],
    ['customer with neither', bulk(sig({ customer: {} }))],
    ['customer with another key', bulk(sig({ customer: { externalCustomerId: 'c', name: 'n' } }))],
    ['customer a string', bulk(sig({ customer: 'c' }))],
    ['customer an array', bulk(sig({ customer: [{ externalCustomerId: 'c' }] }))],
    ['customer id empty', bulk(sig({ customer: { customerId: '' } }))],
    ['customer id of 256', bulk(sig({ customer: { externalCustomerId: 'x'.repeat(256) } }))],
    ['customer id null', bulk(sig({ customer: { externalCustomerId: null } }))],
    ['customer key escaped', text('{"signals":[{"eventName":"e","customer":{"external\\u0043ustomerId":"c"}}]}')],
    ['customer key a prefix', text('{"signals":[{"eventName":"e","customer":{"externalCustomer":"c"}}]}')],
    ['a flat customerId', bulk({ eventName: 'e', customerId: 'c' })],
    ['a flat customerId beside customer', bulk(sig({ customerId: 'c' }))],
    ['attribution with both ids', bulk(sig({ attribution: { productId: 'p', externalProductId: 'p' } }))],
    ['attribution with a customer key', bulk(sig({ attribution: { externalCustomerId: 'p' } }))],
    ['attribution empty', bulk(sig({ attribution: { externalProductId: '' } }))],
    ['attribution a string', bulk(sig({ attribution: 'p' }))],
    ['attribution a number id', bulk(sig({ attribution: { productId: 1 } }))],
    ['attribution repeated, last null', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"attribution":{"productId":"p"},"attribution":null}]}')],
    ['repeated data, last deep', text(`{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{},"data":${JSON.stringify(nestObj(11))}}]}`)],
    ['unknown field', bulk(sig({ other: 1 }))],
    ['unknown top-level field', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"}}],"x":1}')],
    ['repeated top-level field', text('{"signals":[],"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"}}]}')],
    ['signals not an array', text('{"signals":{}}')],
    ['top level an array', text('[{"eventName":"e","customer":{"externalCustomerId":"c"}}]')],
    ['string of 256', bulk(sig({ eventName: 'x'.repeat(256) }))],
    ['string of 255 with escapes', bulk(sig({ eventName: '\n'.repeat(255) }))],
    ['string of 256 with escapes', bulk(sig({ eventName: '\n'.repeat(256) }))],
    ['empty idempotencyKey', bulk(sig({ idempotencyKey: '' }))],
    ['number as customer id', bulk(sig({ customer: { externalCustomerId: 7 } }))],
    ['one bad signal among good ones', bulk(sig(), sig({ eventName: '' }), sig())],
    ['lone surrogate', text('{"signals":[{"eventName":"\\ud800","customer":{"externalCustomerId":"c"}}]}')],
    ['escaped key', text('{"signals":[{"event\\u004eame":"e","customer":{"externalCustomerId":"c"}}]}')],
    ['non-ASCII', bulk(sig({ eventName: 'é' }))],
    ['255 two-byte characters (510 bytes, 255 units)', bulk(sig({ eventName: 'é'.repeat(255) }))],
    ['256 two-byte characters', bulk(sig({ eventName: 'é'.repeat(256) }))],
    ['127 emoji and a letter (255 units)', bulk(sig({ eventName: `${'😀'.repeat(127)}x` }))],
    ['128 emoji (256 units)', bulk(sig({ eventName: '😀'.repeat(128) }))],
    ['emoji in data keys and values', bulk(sig({ data: { '😀': 'ü€😀', 'ключ': ['日本', { 'ß': 1 }] } }))],
    ['an encoded surrogate (ED A0 80)', Buffer.concat([text('{"signals":[{"eventName":"'), Buffer.from([0xed, 0xa0, 0x80]), text('","customer":{"externalCustomerId":"c"}}]}')])],
    // each ill-formed sequence is two or three U+FFFD to the slow path: too long once decoded
    ['86 encoded surrogates (258 units once decoded)', Buffer.concat([text('{"signals":[{"eventName":"'), Buffer.from(Array.from({ length: 86 }, () => [0xed, 0xa0, 0x80]).flat()), text('","customer":{"externalCustomerId":"c"}}]}')])],
    ['128 overlong forms (256 units once decoded)', Buffer.concat([text('{"signals":[{"eventName":"'), Buffer.from(Array.from({ length: 128 }, () => [0xc0, 0xaf]).flat()), text('","customer":{"externalCustomerId":"c"}}]}')])],
    ['64 code points above U+10FFFF (256 units once decoded)', Buffer.concat([text('{"signals":[{"eventName":"'), Buffer.from(Array.from({ length: 64 }, () => [0xf4, 0x90, 0x80, 0x80]).flat()), text('","customer":{"externalCustomerId":"c"}}]}')])],
    ['an overlong form (C0 AF)', Buffer.concat([text('{"signals":[{"eventName":"'), Buffer.from([0xc0, 0xaf]), text('","customer":{"externalCustomerId":"c"}}]}')])],
    ['a truncated sequence (E2 82 then a quote)', Buffer.concat([text('{"signals":[{"eventName":"'), Buffer.from([0xe2, 0x82]), text('","customer":{"externalCustomerId":"c"}}]}')])],
    ['above U+10FFFF (F4 90 80 80)', Buffer.concat([text('{"signals":[{"eventName":"'), Buffer.from([0xf4, 0x90, 0x80, 0x80]), text('","customer":{"externalCustomerId":"c"}}]}')])],
    ['a lone continuation byte', Buffer.concat([text('{"signals":[{"eventName":"a'), Buffer.from([0x80]), text('","customer":{"externalCustomerId":"c"}}]}')])],
    ['non-ASCII in a timestamp', bulk(sig({ timestamp: '2026-01-31T11:00:00Ｚ' }))],
    ['non-ASCII outside strings', Buffer.concat([text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"}}'), Buffer.from([0xc2, 0xa0]), text(']}')])],
    ['invalid UTF-8 (decoded as U+FFFD by the slow path)', Buffer.concat([text('{"signals":[{"eventName":"'), Buffer.from([0xff]), text('","customer":{"externalCustomerId":"c"}}]}')])],
    // 6,000 bytes of 0xFF become 6,000 U+FFFD, 18,000 bytes as JSON: over the data limit
    ['invalid UTF-8 growing past the data limit once decoded', Buffer.concat([text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{"s":"'), Buffer.alloc(6000, 0xff), text('"}}]}')])],
    ['BOM', Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), bulk(sig())])],
    ['data 10 levels', bulk(sig({ data: nestObj(10) }))],
    ['data 11 levels', bulk(sig({ data: nestObj(11) }))],
    ['data arrays 10 levels', bulk(sig({ data: deep(10, true) }))],
    ['data arrays 11 levels', bulk(sig({ data: deep(11, true) }))],
    ['objects inside arrays (the slow path counts fewer levels)', bulk(sig({ data: { a: objInArrays } }))],
    ['data an array', bulk(sig({ data: [1] }))],
    ['data a string', bulk(sig({ data: 's' }))],
    ['data dotted keys', bulk(sig({ data: { 'a.b': 1, a: { c: 2 } } }))],
    ['data colliding dotted keys', bulk(sig({ data: { 'a.b': 1, a: { b: 2 } } }))],
    ['data at the size limit', bulk(sig({ data: { s: 'x'.repeat(MAX_DATA_BYTES - 8) } }))],
    ['data just over the limit', bulk(sig({ data: { s: 'x'.repeat(MAX_DATA_BYTES - 7) } }))],
    ['data of short numbers that grow when re-serialized', text(`{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{"a":[${Array.from({ length: 1500 }, () => '1e20').join(',')}]}}]}`)],
    ['timestamp now', bulk(sig({ timestamp: new Date(NOW).toISOString() }))],
    ['timestamp one hour ahead', bulk(sig({ timestamp: new Date(NOW + 3_600_000).toISOString() }))],
    ['timestamp one hour and 1 ms ahead', bulk(sig({ timestamp: new Date(NOW + 3_600_001).toISOString() }))],
    ['timestamp 2000-01-01', bulk(sig({ timestamp: '2000-01-01T00:00:00Z' }))],
    ['timestamp before 2000', bulk(sig({ timestamp: '1999-12-31T23:59:59.999Z' }))],
    ['timestamp with offset', bulk(sig({ timestamp: '2026-01-31T12:30:00+01:00' }))],
    ['timestamp not a date', bulk(sig({ timestamp: '2026-02-30T00:00:00Z' }))],
    ['timestamp a number', bulk(sig({ timestamp: 1 }))],
    ['timestamp with an escape', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"timestamp":"2026-01-31T11:00:00\\/Z"}]}')],
    ['trailing garbage', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"}}]}x')],
    ['trailing comma', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"}},]}')],
    ['trailing comma in object', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},}]}')],
    ['control character in a string', text('{"signals":[{"eventName":"a\tb","customer":{"externalCustomerId":"c"}}]}')],
    ['bad escape', text('{"signals":[{"eventName":"a\\xb","customer":{"externalCustomerId":"c"}}]}')],
    ['truncated literal', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{"a":tru}}]}')],
    ['literal null in data', text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{"a":null,"b":[null,true,false]}}]}')],
    ...['01', '1.', '.5', '+1', '-', '1e', '1e+', '-01', '0x1', '1.5e3', '-0', '1E-2', '0.0'].map((n): [string, Buffer] => [`number ${n}`, text(`{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{"n":${n}}}]}`)]),
  ];
  for (const [name, body] of cases) {
    const r = agree(body);
    t.ok(r.ok, `${name}: fast ${r.fast}, slow ${r.slow}`);
  }
  // Some of those the fast path must answer (plain) and some it must leave to the slow path.
  t.equal(fastBulkCount(bulk(sig({ data: nestObj(10) })), NOW), 1, 'data of 10 levels: answered');
  t.equal(fastBulkCount(bulk(sig({ timestamp: new Date(NOW + 3_600_000).toISOString() })), NOW), 1, 'one hour ahead: answered');
  t.equal(fastBulkCount(bulk(sig({ eventName: '\n'.repeat(255) })), NOW), 1, '255 escaped characters: answered');
  t.equal(fastBulkCount(text('{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"data":{"n":-0}}]}'), NOW), 1, 'number -0: answered');
  t.equal(fastBulkCount(bulk(sig({ eventName: 'é'.repeat(255) })), NOW), 1, '255 two-byte characters: answered');
  t.equal(fastBulkCount(bulk(sig({ eventName: `${'😀'.repeat(127)}x` })), NOW), 1, '127 emoji and a letter: answered');
  t.equal(fastBulkCount(bulk(sig({ eventName: '😀'.repeat(128) })), NOW), null, '128 emoji (256 units): left to the slow path');
});

/** A generated signal: mostly valid, sometimes with one defect. */
const jsonLeaf = fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean(), fc.constant(null), fc.string({ maxLength: 12 }), fc.string({ unit: 'binary', maxLength: 6 }));
const dataKey = fc.oneof(fc.constantFrom('a', 'b', 'a.b', 'x', '', 'é', 'k\n'), fc.string({ maxLength: 6 }));
const dataValue = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small', withCrossShrink: true }, jsonLeaf, tie('obj'), tie('arr')),
  obj: fc.dictionary(dataKey, tie('value'), { maxKeys: 4 }),
  arr: fc.array(tie('value'), { maxLength: 3 }),
})).obj;
const str = fc.oneof(fc.string({ minLength: 1, maxLength: 20 }), fc.constantFrom('', 'x'.repeat(255), 'x'.repeat(256), 'a\\b"c', '\ud800', 'é'), fc.string({ unit: 'grapheme', maxLength: 4 }));
const timestamp = fc.oneof(
  fc.integer({ min: Date.UTC(1999, 11, 31), max: NOW + 3_700_000 }).map((ms) => new Date(ms).toISOString()),
  fc.constantFrom('2026-01-31T12:00:00+01:00', '2026-01-31 11:00:00.123456Z', '2026-02-29T00:00:00Z', 'yesterday', '2026-01-31T13:00:00.0009Z'),
);
/** A customer (or product) reference: one of the two keys, sometimes both, neither, another or a non-string. */
const reference = (id: string, external: string) =>
  fc.oneof(
    { weight: 6, arbitrary: fc.oneof(str.map((v) => ({ [id]: v })), str.map((v) => ({ [external]: v }))) },
    fc.record({ [id]: str, [external]: str }),
    fc.constant({}),
    str.map((v) => ({ other: v })),
    fc.integer().map((v) => ({ [external]: v })),
    str,
  );
/** A signal of any shape, most often a defective one. */
const anySignal = fc.record(
  {
    eventName: fc.oneof({ weight: 5, arbitrary: str }, fc.constant(null), fc.integer()),
    customer: fc.oneof({ weight: 5, arbitrary: reference('customerId', 'externalCustomerId') }, fc.constant(null)),
    attribution: fc.oneof(reference('productId', 'externalProductId'), fc.constant(null)),
    customerId: str,
    unitId: fc.oneof(str, fc.constant(null)),
    idempotencyKey: fc.oneof(str, fc.constant(null)),
    timestamp: fc.oneof(timestamp, fc.constant(null), fc.integer()),
    data: fc.oneof({ weight: 4, arbitrary: dataValue }, fc.constant(null), fc.array(fc.integer(), { maxLength: 2 })),
    extra: fc.integer(),
  },
  { requiredKeys: [] },
);
/** A signal the slow path mostly accepts (any Unicode, dotted keys, escapes: mostly left to it by the fast path). */
const likelyId = fc.string({ minLength: 1, maxLength: 12 });
const likelySignal = fc.record(
  {
    eventName: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 12 }),
    customer: fc.oneof(likelyId.map((v) => ({ externalCustomerId: v })), likelyId.map((v) => ({ customerId: v }))),
    attribution: fc.oneof(likelyId.map((v) => ({ externalProductId: v })), likelyId.map((v) => ({ productId: v })), fc.constant(null)),
    unitId: fc.oneof(fc.string({ minLength: 1, maxLength: 8 }), fc.constant(null)),
    idempotencyKey: fc.oneof(fc.string({ minLength: 1, maxLength: 8 }), fc.constant(null)),
    timestamp: fc.oneof(timestamp, fc.constant(null)),
    data: fc.oneof(dataValue, fc.constant(null)),
  },
  { requiredKeys: ['eventName', 'customer'] },
);
const signal = fc.oneof({ weight: 4, arbitrary: likelySignal }, { weight: 1, arbitrary: anySignal });
/** JSON text with optional whitespace between tokens (JSON.stringify's indentation, or none). */
const render = (v: unknown, indent: number): string => JSON.stringify(v, null, indent);

t.test('generated bodies: the fast path never disagrees, and answers for every plain valid one', async (t) => {
  let answered = 0;
  let acceptedBySlow = 0;
  fc.assert(
    fc.property(fc.array(signal, { minLength: 0, maxLength: 6 }), fc.constantFrom(0, 0, 1, 2), (signals, indent) => {
      const body = Buffer.from(render({ signals }, indent));
      const r = agree(body);
      if (r.fast !== null) answered++;
      if (r.slow !== 'refused') acceptedBySlow++;
      return r.ok;
    }),
    { numRuns: 3000 },
  );
  t.ok(acceptedBySlow > 100, `the generator makes accepted bodies too (${acceptedBySlow} of 3000)`);
  t.ok(answered > 0, `the fast path answered some (${answered})`);

  // Plain signals (strings of ASCII and well-formed UTF-8, no \u escapes; data without dots): answered exactly when valid.
  let plainRefused = 0;
  const ascii = fc.string({ unit: fc.constantFrom(...'abcXYZ019 _-:/"\\\n'.split(''), 'é', '€', '😀', '\u{10FFFF}', '\uFEFF'), minLength: 1, maxLength: 40 });
  const plainData = fc.letrec((tie) => ({
    // At most 4 levels below data: the fast path counts objects inside arrays as a level (the slow path does not), so it may leave deep ones to the slow path.
    value: fc.oneof({ maxDepth: 4, depthIdentifier: 'd' }, fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean(), fc.constant(null), ascii, tie('obj'), tie('arr')),
    obj: fc.dictionary(fc.string({ unit: fc.constantFrom('a', 'b', '_', '1'), maxLength: 4 }), tie('value'), { maxKeys: 3, depthIdentifier: 'd' }),
    arr: fc.array(tie('value'), { maxLength: 3, depthIdentifier: 'd' }),
  })).obj;
  const plainSignal = fc.record(
    {
      eventName: fc.oneof({ weight: 8, arbitrary: ascii }, fc.constantFrom('', 'x'.repeat(255), 'x'.repeat(256), '\n'.repeat(255), '\n'.repeat(256))),
      customer: fc.oneof(ascii.map((v) => ({ externalCustomerId: v })), ascii.map((v) => ({ customerId: v }))),
      attribution: fc.oneof(ascii.map((v) => ({ externalProductId: v })), ascii.map((v) => ({ productId: v })), fc.constant(null)),
      unitId: fc.oneof(ascii, fc.constant(null)),
      idempotencyKey: fc.oneof(ascii, fc.constant(null)),
      timestamp: fc.oneof(fc.integer({ min: Date.UTC(1999, 11, 31, 23), max: NOW + 3_600_100 }).map((ms) => new Date(ms).toISOString()), fc.constant(null)),
      data: fc.oneof(plainData, fc.constant(null)),
    },
    { requiredKeys: ['eventName', 'customer'] },
  );
  fc.assert(
    fc.property(fc.array(plainSignal, { minLength: 1, maxLength: 8 }), fc.constantFrom(0, 2), (signals, indent) => {
      const body = Buffer.from(render({ signals }, indent));
      const s = slow(body);
      const f = fastBulkCount(body, NOW);
      if (s === 'refused') {
        plainRefused++;
        return f === null; // too long, too early, too late, too deep
      }
      return f === s;
    }),
    { numRuns: 3000 },
  );
  t.ok(plainRefused > 100, `plain bodies refused by the slow path were exercised (${plainRefused} of 3000)`);
});

t.test('byte mutations of a valid body: the fast path never disagrees', async (t) => {
  const base = render(
    {
      signals: [
        sig({ unitId: 'u1', timestamp: '2026-01-31T11:59:59.5Z', idempotencyKey: 'k-1', data: { region: 'eu', n: 12.5, list: [1, 'two', { three: 3 }], ok: true, none: null } }),
        sig({ data: { deep: { deeper: { deepest: [[-1e-3]] } } } }),
      ],
    },
    0,
  );
  const alphabet = '{}[]:,"\\ 0123456789.-+eEtrufalsn\n\u0001xé';
  let mutated = 0;
  let differentOutcome = 0;
  const baseSlow = slow(Buffer.from(base));
  t.equal(baseSlow, 2, 'the base body is accepted');
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.nat(base.length), fc.constantFrom('replace', 'insert', 'delete'), fc.constantFrom(...alphabet.split(''))), { minLength: 1, maxLength: 3 }),
      (edits) => {
        let s = base;
        for (const [at, op, ch] of edits) {
          const i = Math.min(at, s.length);
          s = op === 'replace' ? s.slice(0, i) + ch + s.slice(i + 1) : op === 'insert' ? s.slice(0, i) + ch + s.slice(i) : s.slice(0, i) + s.slice(i + 1);
        }
        const r = agree(Buffer.from(s));
        mutated++;
        if (r.slow !== baseSlow) differentOutcome++;
        return r.ok;
      },
    ),
    { numRuns: 20_000 },
  );
  t.ok(differentOutcome > mutated / 10, `mutations changed the slow path's outcome often enough to test something (${differentOutcome} of ${mutated})`);

  // Byte-level edits with any byte (ill-formed UTF-8 included), inside and outside strings.
  const bytes = Buffer.from(base);
  let answeredChanged = 0;
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.nat(bytes.length), fc.constantFrom('replace', 'insert'), fc.oneof(fc.integer({ min: 0x80, max: 0xff }), fc.integer({ min: 0, max: 0xff }))), { minLength: 1, maxLength: 4 }), (edits) => {
      let b = Buffer.from(bytes);
      for (const [at, op, byte] of edits) {
        const i = Math.min(at, b.length - 1);
        b = op === 'replace' ? Buffer.concat([b.subarray(0, i), Buffer.from([byte]), b.subarray(i + 1)]) : Buffer.concat([b.subarray(0, i), Buffer.from([byte]), b.subarray(i)]);
      }
      const r = agree(b);
      if (r.fast !== null && !b.equals(bytes)) answeredChanged++;
      return r.ok;
    }),
    { numRuns: 20_000 },
  );
  t.ok(answeredChanged > 0, `the fast path answered for some edited bodies too (${answeredChanged})`);
});

t.test('Rfc3339Reader.parseBytes answers as parse, on the bytes inside a larger buffer, whatever came before', async (t) => {
  const prefixes = ['2026-01-31T12', '2026-01-31t12', '2026-01-31 12', '2026-02-29T12', '2024-02-29T23', '2026-13-01T00', '2026-01-31T24', '2026-01-31X12'];
  const rests = [':00:00Z', ':59:59.999999999+01:00', ':60:00Z', ':00:60Z', ':00:00', ':00:00.Z', ':00:00.1234567890Z', ':00:00-23:59', ':00:00+24:00', ':00:00z', ':00:00ZZ', ':0a:00Z', '-00:00Z', ':00:00+01', ':00:00.5', ''];
  const textArb = fc.oneof(
    fc.tuple(fc.constantFrom(...prefixes), fc.constantFrom(...rests)).map(([p, r]) => p + r),
    fc.date({ min: new Date(Date.UTC(1990, 0, 1)), max: new Date(Date.UTC(2040, 0, 1)), noInvalidDate: true }).map((d) => d.toISOString()),
    fc.string({ unit: fc.constantFrom(...'0123456789-:T.Z+'.split('')), maxLength: 30 }),
  );
  fc.assert(
    fc.property(fc.array(fc.tuple(textArb, fc.constantFrom('', '0', '5Z', ':00', '"')), { maxLength: 20 }), (list) => {
      const reader = new Rfc3339Reader();
      for (const [s, after] of list) {
        // Bytes after the end must not be read: the timestamp sits inside a body.
        const buf = Buffer.from(`xx${s}${after}`, 'latin1');
        if (reader.parseBytes(buf, 2, 2 + s.length) !== parseRfc3339(s)) return false;
      }
      return true;
    }),
    { numRuns: 3000 },
  );
  t.pass('parseBytes agreed on every generated sequence');
});
