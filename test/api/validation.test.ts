/**
 * Every validation error through the real HTTP API: a clear 4xx naming the problem, and
 * nothing ingested or counted (the org's bucket holds exactly one 500-signal batch, and a
 * 500 batch is still accepted after all the refusals). A bad signal among valid ones is
 * refused alone and reported by index in the 202 answer (`other`, an organization of its own).
 */
import t from 'tap';
import { ServiceProcess, batch, cleanup, counts, createOrg, drained, http, isolation, sendBatch, signal, type TestOrg } from '../helpers/service.js';

const iso = isolation('validation');
const svc = new ServiceProcess(iso);
let org: TestOrg;
let other: TestOrg;
t.before(async () => {
  await svc.start();
  org = await createOrg(svc.url, { burst: 500, refillPerSecond: 0.001 });
  other = await createOrg(svc.url, { burst: 100_000, refillPerSecond: 100_000 });
});
t.teardown(async () => {
  await svc.stop();
  await cleanup(iso);
});

const longStr = 'x'.repeat(256);
const future = new Date(Date.now() + 2 * 3600_000).toISOString();
const deep = (levels: number): Record<string, unknown> => {
  let v: Record<string, unknown> = { leaf: 1 };
  for (let i = 1; i < levels; i++) v = { n: v };
  return v;
};

/** [name, patch of the signal, field, message]: each of field and message a string (exact) or a RegExp. */
const signalCases: [string, Record<string, unknown>, string | RegExp, string | RegExp][] = [
  ['eventName missing', { eventName: undefined }, 'eventName', 'is required'],
  ['eventName empty', { eventName: '' }, 'eventName', 'must not be empty'],
  ['eventName number', { eventName: 7 }, 'eventName', 'must be a string, got number'],
  ['eventName too long', { eventName: longStr }, 'eventName', 'must be at most 255 characters, got 256'],
  ['customer missing', { customer: undefined }, 'customer', /^is required/],
  ['customer null', { customer: null }, 'customer', /^is required/],
  ['customer string', { customer: 'acme' }, 'customer', /object/],
  ['customer with neither id', { customer: {} }, 'customer', /customerId|externalCustomerId/],
  ['customer with both ids', { customer: { customerId: 'cus_x', externalCustomerId: 'x' } }, 'customer', /customerId|externalCustomerId/],
  ['customer with another key', { customer: { externalCustomerId: 'x', name: 'Acme' } }, /^customer(\.name)?$/, /./],
  ['customer.externalCustomerId empty', { customer: { externalCustomerId: '' } }, 'customer.externalCustomerId', 'must not be empty'],
  ['customer.externalCustomerId too long', { customer: { externalCustomerId: longStr } }, 'customer.externalCustomerId', 'must be at most 255 characters, got 256'],
  ['customer.externalCustomerId lone surrogate', { customer: { externalCustomerId: 'a\ud800b' } }, 'customer.externalCustomerId', /Unicode/i],
  ['customer.customerId number', { customer: { customerId: 7 } }, 'customer.customerId', 'must be a string, got number'],
  ['a flat customerId outside customer', { customerId: 'acme' }, 'customerId', 'unknown field'],
  ['attribution string', { attribution: 'prod' }, 'attribution', /object/],
  ['attribution with both ids', { attribution: { productId: 'prod_x', externalProductId: 'x' } }, 'attribution', /productId|externalProductId/],
  ['attribution.externalProductId number', { attribution: { externalProductId: 1 } }, 'attribution.externalProductId', 'must be a string, got number'],
  ['unitId empty', { unitId: '' }, 'unitId', 'must not be empty'],
  ['unitId array', { unitId: ['u'] }, 'unitId', 'must be a string, got array'],
  ['idempotencyKey too long', { idempotencyKey: longStr }, 'idempotencyKey', 'must be at most 255 characters, got 256'],
  ['idempotencyKey boolean', { idempotencyKey: true }, 'idempotencyKey', 'must be a string, got boolean'],
  ['timestamp number', { timestamp: 1700000000 }, 'timestamp', 'must be an RFC 3339 date-time string, got number'],
  ['timestamp no offset', { timestamp: '2026-01-31T12:00:00' }, 'timestamp', 'must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z, got "2026-01-31T12:00:00"'],
  ['timestamp Feb 30', { timestamp: '2026-02-30T12:00:00Z' }, 'timestamp', 'must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z, got "2026-02-30T12:00:00Z"'],
  ['timestamp before 2000', { timestamp: '1999-12-31T23:59:59Z' }, 'timestamp', 'must not be before 2000-01-01T00:00:00Z'],
  ['timestamp in the future', { timestamp: future }, 'timestamp', 'must not be more than one hour in the future'],
  ['data array', { data: [1] }, 'data', 'must be a JSON object, got array'],
  ['data string', { data: 'x' }, 'data', 'must be a JSON object, got string'],
  ['data too deep', { data: deep(11) }, 'data', 'must not nest deeper than 10 levels'],
  ['data too big', { data: { s: 'y'.repeat(16_400) } }, 'data', 'must be at most 16384 bytes as JSON, got 16408'],
  ['unknown field', { amount: 3 }, 'amount', 'unknown field'],
];

/** signal(i) with `patch` applied (an undefined value removes the field). */
function patched(i: number, patch: Record<string, unknown>): Record<string, unknown> {
  const s = { ...signal(i), ...patch };
  for (const k of Object.keys(patch)) if (patch[k] === undefined) delete s[k];
  return s;
}

t.test('a request whose only signal is bad is refused whole, naming index and field', async (t) => {
  for (const [name, patch, field, message] of signalCases) {
    const r = await sendBatch(svc.url, org.live, { signals: [patched(0, patch)] });
    t.equal(r.status, 400, name);
    t.same(Object.keys(r.body).sort(), ['code', 'details', 'error', 'errors'], name);
    t.match(r.body, { error: 'Bad Request', code: 'INVALID_SIGNAL', errors: [{ index: 0, code: 'INVALID_SIGNAL', field, message }] }, name);
    t.equal(r.body.errors.length, 1, name);
    const e = r.body.errors[0];
    t.equal(r.body.details, `signals[0]${e.field ? `.${e.field}` : ''}: ${e.message}`, `${name}: details is the first error`);
  }
});

t.test('a bad signal among valid ones is refused alone, reported by its index; the others are ingested', async (t) => {
  for (const [name, patch, field, message] of signalCases) {
    const body = batch(5);
    body.signals[3] = patched(3, patch);
    const r = await sendBatch(svc.url, other.live, body);
    t.equal(r.status, 202, name);
    t.match(r.body, { ingested: 4, duplicates: 0, failed: 1, errors: [{ index: 3, code: 'INVALID_SIGNAL', field, message }], batchId: /^bat_/ }, name);
    t.equal(r.body.errors.length, 1, name);
  }
  // Several bad signals: every one reported, in index order.
  const body = batch(6);
  body.signals[1] = patched(1, { eventName: '' });
  body.signals[4] = patched(4, { customerId: 'acme' });
  body.signals[5] = patched(5, { timestamp: 'yesterday' });
  const r = await sendBatch(svc.url, other.live, body);
  t.equal(r.status, 202);
  t.match(r.body, { ingested: 3, duplicates: 0, failed: 3 });
  t.same(r.body.errors.map((e: { index: number; field: string }) => [e.index, e.field]), [[1, 'eventName'], [4, 'customerId'], [5, 'timestamp']]);
  await drained(iso);
  t.same(await counts(svc.url, other.id), { live: 4 * signalCases.length + 3, test: 0 }, 'only the valid signals stored');
});

t.test('bad body shapes', async (t) => {
  const cases: [string, string, string, string][] = [
    ['not JSON', '{"signals": [', 'INVALID_JSON', ''],
    ['empty body', '', 'INVALID_JSON', 'request body is empty; expected JSON'],
    ['top-level array', '[]', 'INVALID_BODY', 'body must be a JSON object {"signals": [...]}, got array'],
    ['top-level string', '"hi"', 'INVALID_BODY', 'body must be a JSON object {"signals": [...]}, got string'],
    ['unknown top-level field', '{"signals": [], "mode": "x"}', 'INVALID_BODY', 'unknown top-level field "mode"; the body is {"signals": [...]}'],
    ['signals missing', '{}', 'INVALID_BODY', 'signals: must be an array, got undefined'],
    ['signals object', '{"signals": {}}', 'INVALID_BODY', 'signals: must be an array, got object'],
    ['zero signals', '{"signals": []}', 'BATCH_EMPTY', 'signals: at least one signal is required'],
    ['a signal that is not an object', '{"signals": [1]}', 'INVALID_SIGNAL', 'signals[0]: must be an object, got number'],
  ];
  for (const [name, raw, code, details] of cases) {
    const r = await http(svc.url, 'POST', '/api/v2/signals/bulk', { token: org.live, raw });
    t.equal(r.status, 400, name);
    t.equal(r.body.error, 'Bad Request', name);
    t.equal(r.body.code, code, name);
    if (details) t.equal(r.body.details, details, name);
    else t.match(r.body.details, /^request body is not valid JSON: /, name);
  }
  const tooMany = await sendBatch(svc.url, org.live, batch(501));
  t.equal(tooMany.status, 400);
  t.equal(tooMany.body.code, 'BATCH_TOO_LARGE');
});

t.test('legacy v1: one signal or an array, same validation, field names as the v1 caller wrote them', async (t) => {
  const one = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: { event_name: 'x' } });
  t.equal(one.status, 400);
  t.match(one.body, { error: 'Bad Request', code: 'INVALID_SIGNAL', details: /customer_id: is required/, errors: [{ index: 0, code: 'INVALID_SIGNAL', field: 'customer_id', message: /^is required/ }] });
  const v2shape = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: { eventName: 'x' } });
  t.match(v2shape.body, { code: 'INVALID_SIGNAL', errors: [{ index: 0, field: /customer/ }] }, 'a v1 signal in the v2 shape is read as one');
  const arr = await http(svc.url, 'POST', '/api/v1/usage', { token: other.live, body: [{ event_name: 'e', customer_id: 'c' }, { event_name: 'e', customer_id: 'c', timestamp: 'yesterday' }] });
  t.equal(arr.status, 202, 'one valid signal of two');
  t.match(arr.body, { ingested: 1, duplicates: 0, failed: 1, errors: [{ index: 1, code: 'INVALID_SIGNAL', field: 'timestamp', message: /^must be an RFC 3339 date-time/ }] });
  const many = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: batch(501).signals });
  t.equal(many.body.code, 'BATCH_TOO_LARGE');
  const none = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: [] });
  t.equal(none.body.code, 'BATCH_EMPTY');
  const num = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: 5 });
  t.same(num.body, { error: 'Bad Request', code: 'INVALID_BODY', details: 'body must be a signal object or an array of signals, got number' });
});

t.test('oversized bodies answer 413', async (t) => {
  const big = JSON.stringify({ signals: [{ eventName: 'e', customer: { externalCustomerId: 'c' }, data: { s: 'z'.repeat(1_100_000) } }] });
  const r = await http(svc.url, 'POST', '/api/v2/signals/bulk', { token: org.live, raw: big });
  t.equal(r.status, 413);
  t.same(r.body, { error: 'Payload Too Large', code: 'PAYLOAD_TOO_LARGE', details: 'request body larger than the limit of 1000000 bytes' });
  // Without Content-Length (chunked): the limit is enforced while reading.
  const chunks = (async function* () {
    for (let i = 0; i < 12; i++) yield Buffer.alloc(100_000, 0x20);
  })();
  const res = await fetch(`${svc.url}/api/v2/signals/bulk`, { method: 'POST', headers: { authorization: `Bearer ${org.live}` }, body: chunks as any, duplex: 'half' } as RequestInit);
  t.equal(res.status, 413);
  t.equal(((await res.json()) as any).code, 'PAYLOAD_TOO_LARGE');
});

t.test('refused batches ingested and counted nothing', async (t) => {
  // The bucket holds 500 tokens and refills at 0.001/s: had any refused request taken a
  // token, this batch would be rate limited.
  const r = await sendBatch(svc.url, org.live, batch(500));
  t.equal(r.status, 202);
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 500, test: 0 });
});

t.test("a number beyond the double's range counts as its text toward the data size (it is stored as that text)", async (t) => {
  const own = await createOrg(svc.url);
  const digits = '9'.repeat(20_000);
  const raw = (q: string): string => JSON.stringify({ signals: [signal(0, { data: { q: 0 } })] }).replace('"q":0', `"q":${q}`);
  const big = await http(svc.url, 'POST', '/api/v2/signals/bulk', { token: own.live, raw: raw(digits) });
  t.equal(big.status, 400, `a 20,000-digit integer: ${JSON.stringify(big.body).slice(0, 300)}`);
  t.match(big.body, { code: 'INVALID_SIGNAL', errors: [{ index: 0, field: 'data', message: /must be at most 16384 bytes as JSON \(a number beyond the double's range counted as its text\), got 2000\d/ }] });
  // Within the size, it is taken (and refused by pricing, not here: docs/billing.md).
  const small = await http(svc.url, 'POST', '/api/v2/signals/bulk', { token: own.live, raw: raw('1e400') });
  t.equal(small.status, 202, JSON.stringify(small.body));
});
