/**
 * The nested signal shape (customer, attribution) through the byte readers and their slow
 * paths: the ingress's judge (src/ingress/fast-bulk.ts) answers only for bodies whose every
 * signal validateBulk accepts, with the key ranges the parsed signals hold; the rows worker's
 * fast path (src/pipeline/rows-bytes.ts) writes the slow path's rows, billable lines and
 * references byte for byte, and leaves a batch with refused indexes (Billing-Skip) to the slow
 * path, which builds nothing for them; the dedupe lookup's bodies and its in-request count;
 * the v1 body keeping data's own text.
 */
import t from 'tap';
import fc from 'fast-check';
import rows, { dedupeKey, packed } from '../../workers/rows.js';
import { packedFromBytes } from '../../src/pipeline/rows-bytes.js';
import { fastBulk } from '../../src/ingress/fast-bulk.js';
import { validateBulk, validateV1 } from '../../src/ingress/validate.js';
import { v1Body, v1DataTexts } from '../../src/ingress/v1-body.js';
import { lookupBody, lookupBodyOf, lookupKeys, repeatsInRanges, repeatsInside, repeatsOfTexts } from '../../src/bus/dedupe-lookup.js';
import { distinctRefs } from '../../src/pipeline/rows-task.js';
import type { BatchMeta } from '../../src/bus/batch.js';

const NOW = Date.UTC(2026, 0, 31, 12, 0, 0);
const meta: BatchMeta = { orgId: 'org_AAAAAAAAAAAAAAAAAAAA', mode: 'live', receivedAtMs: NOW, batchId: 'bat_0000abcdeXXXXXXXXXXXX' };

const text = fc.oneof(
  fc.constantFrom('c1', 'acme', 'cus_0a1B2c3D4e5F6g7H8i9J', 'a"b', 'c\\d', 'é€😀', 'x'.repeat(255), 'line\nbreak', 'slash/'),
  fc.string({ minLength: 1, maxLength: 20 }),
);
const customer = fc.oneof(text.map((v) => ({ customerId: v })), text.map((v) => ({ externalCustomerId: v })));
const attribution = fc.oneof(fc.constant(undefined), fc.constant(null), text.map((v) => ({ productId: v })), text.map((v) => ({ externalProductId: v })));
const signal = fc.record(
  {
    eventName: text,
    customer,
    attribution,
    unitId: fc.oneof(fc.constant(undefined), fc.constant(null), text),
    idempotencyKey: fc.oneof(fc.constant(undefined), fc.constant(null), text),
    timestamp: fc.oneof(fc.constant(undefined), fc.constant('2026-01-31T11:00:00Z'), fc.constant('2026-01-30T01:02:03.456+02:00')),
    data: fc.oneof(fc.constant(undefined), fc.constant(null), fc.dictionary(fc.constantFrom('a', 'b', 'n', 'k'), fc.oneof(fc.integer(), text, fc.boolean()), { maxKeys: 4 })),
  },
  { requiredKeys: ['eventName', 'customer'] },
);
/** A refused signal of any kind: the flat customerId, two references, an empty name, not an object. */
const refused = fc.constantFrom<unknown>(
  { eventName: 'e', customerId: 'c' },
  { eventName: 'e', customer: { customerId: 'a', externalCustomerId: 'b' } },
  { eventName: '', customer: { customerId: 'a' } },
  { eventName: 'e', customer: {} },
  { eventName: 'e', customer: { externalCustomerId: 'a' }, attribution: { productId: 'p', other: 1 } },
  5,
  'text',
);

const bodyOf = (signals: unknown[]): Buffer => Buffer.from(JSON.stringify({ signals }));

function slowPacked(body: Buffer, skip: number[] = []) {
  const r = rows({ body, meta, skip });
  const c = distinctRefs(r.customers);
  const p = distinctRefs(r.products);
  return { rows: r.lines.map((l) => `${l}\n`).join(''), billable: r.billable.map((l) => `${l}\n`).join(''), ids: r.ids, claimKeys: r.claimKeys, refs: c.refs, refOf: [...c.refOf], products: p.refs, productOf: [...p.refOf] };
}

function fastPacked(body: Buffer) {
  const p = packedFromBytes(body, meta, dedupeKey);
  return p && { rows: Buffer.from(p.rows).toString('utf8'), billable: Buffer.from(p.billable).toString('utf8'), ids: p.ids, claimKeys: p.claimKeys, refs: p.refs, refOf: [...p.refOf], products: p.products, productOf: [...p.productOf] };
}

t.test('the ingress judge answers only for all-valid bodies, with the keys the parsed signals hold', async (t) => {
  let answered = 0;
  fc.assert(
    fc.property(fc.array(fc.oneof({ weight: 5, arbitrary: signal }, { weight: 1, arbitrary: refused }), { minLength: 1, maxLength: 12 }), (signals) => {
      const body = bodyOf(signals);
      const v = validateBulk(JSON.parse(body.toString('utf8')), NOW, true);
      const f = fastBulk(body, NOW);
      if (f === null) return true;
      answered++;
      if (v.errors.length !== 0 || f.count !== v.count) return false;
      for (let i = 0; i < f.count; i++) {
        const key = (v.signals[i] as { idempotencyKey?: string | null }).idempotencyKey ?? null;
        const got = f.keys[2 * i] === -1 ? null : (JSON.parse(body.toString('utf8', f.keys[2 * i], f.keys[2 * i + 1])) as string);
        if (got !== key) return false;
      }
      return true;
    }),
    { numRuns: 400 },
  );
  t.ok(answered > 100, `the judge answered for ${answered} bodies`);
  t.same(validateBulk({ signals: [{ eventName: 'e', customer: { customerId: 'c' }, attribution: null }] }, NOW).errors, [], 'attribution null is none');
});

t.test('the rows fast path writes the slow path\'s bytes on the nested shape', async (t) => {
  let answered = 0;
  fc.assert(
    fc.property(fc.array(signal, { minLength: 1, maxLength: 12 }), (signals) => {
      const body = bodyOf(signals);
      const f = fastPacked(body);
      if (f === null) return true;
      answered++;
      t.same(f, slowPacked(body));
      return true;
    }),
    { numRuns: 300 },
  );
  t.ok(answered > 100, `the fast path answered for ${answered} bodies`);
  const plain = bodyOf([
    { eventName: 'e', customer: { customerId: 'cus_1' }, idempotencyKey: 'k' },
    { eventName: 'e', customer: { externalCustomerId: 'x' }, attribution: { externalProductId: 'p' } },
    { eventName: 'e', customer: { externalCustomerId: 'x' }, attribution: { productId: 'prod_1' } },
  ]);
  const f = fastPacked(plain);
  t.ok(f, 'a plain body is answered');
  t.same(f!.refs, ['i:cus_1', 'x:x'], 'customer references carry their kind');
  t.same(f!.products, ['', 'x:p', 'i:prod_1'], 'product references carry their kind; none is ""');
  t.match(f!.billable, /"c":"i:cus_1"/);
  t.notMatch(f!.rows, /customer/, 'rows leave the identity columns to the pipeline');
});

t.test('refused indexes (Billing-Skip): no row, no claim, no billable line, the other signals keep their indexes', async (t) => {
  const signals: unknown[] = [
    { eventName: 'a', customer: { externalCustomerId: 'x' }, idempotencyKey: 'k0' },
    { eventName: 'e', customerId: 'flat' },
    { eventName: 'b', customer: { customerId: 'cus_2' }, idempotencyKey: 'k2' },
    7,
  ];
  const body = bodyOf(signals);
  t.equal(packedFromBytes(body, meta, dedupeKey, [1, 3]), null, 'left to the slow path');
  const p = packed({ body, meta, skip: [1, 3] });
  t.same(p.ids, ['sig_0000abcdeXXXXXXXXXXXX_0', 'sig_0000abcdeXXXXXXXXXXXX_2']);
  t.same(p.claimKeys, [dedupeKey(meta, 'k0'), dedupeKey(meta, 'k2')]);
  t.same(p.refs, ['x:x', 'i:cus_2']);
  const lines = Buffer.from(p.billable).toString('utf8').trim().split('\n');
  t.same(lines.map((l) => (JSON.parse(l) as { i: string }).i), p.ids);
  t.equal(Buffer.from(p.rows).toString('utf8').trim().split('\n').length, 2);
  t.throws(() => rows({ body, meta, skip: [1, 3, 9] }), /Billing-Skip/, 'an index the batch does not have');
});

t.test('dedupe lookup bodies and the in-request count', async (t) => {
  const keyText = fc.oneof(fc.constantFrom('a', 'b', 'a"b', 'é', 'x\\y', 'k/1'), fc.string({ maxLength: 6 }));
  fc.assert(
    fc.property(fc.array(fc.option(keyText, { nil: null }), { minLength: 1, maxLength: 40 }), fc.boolean(), (keys, escapeSome) => {
      const json = keys.map((k, i) => (k === null ? null : escapeSome && i % 2 === 0 ? JSON.stringify(k).replace(/[a-z]/, (c) => `\\u00${c.charCodeAt(0).toString(16)}`) : JSON.stringify(k)));
      const body = lookupBody(json.map((j) => (j === null ? null : Buffer.from(j))));
      const parsed = lookupKeys(body).map((k) => (k === null ? null : typeof k === 'string' ? k : Buffer.from(k).toString('utf8')));
      t.same(parsed, keys);
      const expected: number[] = [];
      const seen = new Set<string>();
      keys.forEach((k, i) => {
        if (k === null) return;
        if (seen.has(k)) expected.push(i);
        else seen.add(k);
      });
      t.same(repeatsInside(body), expected);
      // The ingress's form: ranges of the request body itself.
      const src = Buffer.from(`[${json.map((j) => j ?? 'null').join(',')}]`);
      const ranges = new Int32Array(2 * keys.length);
      let at = 1;
      json.forEach((j, i) => {
        ranges[2 * i] = j === null ? -1 : at;
        ranges[2 * i + 1] = j === null ? -1 : at + Buffer.byteLength(j);
        at += Buffer.byteLength(j ?? 'null') + 1;
      });
      t.same(repeatsInRanges(src, ranges, keys.length), expected);
      t.same(lookupBodyOf(src, ranges, keys.length), body);
      t.same(repeatsOfTexts(lookupKeys(body)), expected);
      return true;
    }),
    { numRuns: 200 },
  );
  const src = Buffer.from('xx"k1"yy"k2"');
  t.equal(lookupBodyOf(src, Int32Array.from([2, 6, -1, -1, 8, 12]), 3).toString(), '"k1"\n\n"k2"\n');
});

t.test('v1: mapped to the v2 shape, data as the request\'s own text', async (t) => {
  const raw = '[{"event_name":"e","customer_id":"acme","agent_id":"ag","idempotency_key":"k","data":{"n":1234567890.123456789012, "s":"a,}b"}},{"event_name":"e"},{"eventName":"e","customer":{"customerId":"cus_1"},"data":{"x":1.50}}]';
  const v = validateV1(JSON.parse(raw), NOW, true);
  t.same(v.errors, [{ index: 1, code: 'INVALID_SIGNAL', field: 'customer_id', message: 'is required: {"customerId": …} or {"externalCustomerId": …}' }]);
  const body = v1Body(v.signals, v1DataTexts(raw)).toString('utf8');
  t.equal(
    body,
    '{"signals":[{"eventName":"e","customer":{"externalCustomerId":"acme"},"attribution":{"externalProductId":"ag"},"idempotencyKey":"k","data":{"n":1234567890.123456789012, "s":"a,}b"}},null,{"eventName":"e","customer":{"customerId":"cus_1"},"data":{"x":1.50}}]}',
  );
  const mapped = validateBulk(JSON.parse(body), NOW, true);
  t.same(mapped.errors, [{ index: 1, code: 'INVALID_SIGNAL', field: '', message: 'must be an object, got null' }], 'the refused v1 signal travels as null, skipped by index');
  t.same(validateV1({ event_name: 'e', customer_id: 'c', customerId: 'x' }, NOW).errors, [{ index: 0, code: 'INVALID_SIGNAL', field: 'customerId', message: 'unknown field' }]);
  t.same(validateV1({ event_name: 'e', customer_id: 'c', agent_id: '' }, NOW).errors, [{ index: 0, code: 'INVALID_SIGNAL', field: 'agent_id', message: 'must not be empty' }]);
});
