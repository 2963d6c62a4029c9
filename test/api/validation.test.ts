/**
 * Every validation error through the real HTTP API: a clear 4xx naming the problem, and
 * nothing ingested or counted (the org's bucket holds exactly one 500-signal batch, and a
 * 500 batch is still accepted after all the refusals).
 */
import t from 'tap';
import { ServiceProcess, batch, cleanup, counts, createOrg, drained, http, isolation, sendBatch, signal, type TestOrg } from '../helpers/service.js';

const iso = isolation('validation');
const svc = new ServiceProcess(iso);
let org: TestOrg;
t.before(async () => {
  await svc.start();
  org = await createOrg(svc.url, { burst: 500, refillPerSecond: 0.001 });
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

const signalCases: [string, Record<string, unknown>, string][] = [
  ['eventName missing', { eventName: undefined }, 'signals[3].eventName: is required'],
  ['eventName empty', { eventName: '' }, 'signals[3].eventName: must not be empty'],
  ['eventName number', { eventName: 7 }, 'signals[3].eventName: must be a string, got number'],
  ['eventName too long', { eventName: longStr }, 'signals[3].eventName: must be at most 255 characters, got 256'],
  ['customerId missing', { customerId: undefined }, 'signals[3].customerId: is required'],
  ['customerId null', { customerId: null }, 'signals[3].customerId: is required'],
  ['customerId object', { customerId: { id: 1 } }, 'signals[3].customerId: must be a string, got object'],
  ['unitId empty', { unitId: '' }, 'signals[3].unitId: must not be empty'],
  ['unitId array', { unitId: ['u'] }, 'signals[3].unitId: must be a string, got array'],
  ['idempotencyKey too long', { idempotencyKey: longStr }, 'signals[3].idempotencyKey: must be at most 255 characters, got 256'],
  ['idempotencyKey boolean', { idempotencyKey: true }, 'signals[3].idempotencyKey: must be a string, got boolean'],
  ['timestamp number', { timestamp: 1700000000 }, 'signals[3].timestamp: must be an RFC 3339 date-time string, got number'],
  ['timestamp no offset', { timestamp: '2026-01-31T12:00:00' }, 'signals[3].timestamp: must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z, got "2026-01-31T12:00:00"'],
  ['timestamp Feb 30', { timestamp: '2026-02-30T12:00:00Z' }, 'signals[3].timestamp: must be an RFC 3339 date-time such as 2026-01-31T12:00:00Z, got "2026-02-30T12:00:00Z"'],
  ['timestamp before 2000', { timestamp: '1999-12-31T23:59:59Z' }, 'signals[3].timestamp: must not be before 2000-01-01T00:00:00Z'],
  ['timestamp in the future', { timestamp: future }, 'signals[3].timestamp: must not be more than one hour in the future'],
  ['data array', { data: [1] }, 'signals[3].data: must be a JSON object, got array'],
  ['data string', { data: 'x' }, 'signals[3].data: must be a JSON object, got string'],
  ['data too deep', { data: deep(11) }, 'signals[3].data: must not nest deeper than 10 levels'],
  ['data too big', { data: { s: 'y'.repeat(16_400) } }, 'signals[3].data: must be at most 16384 bytes as JSON, got 16408'],
  ['unknown field', { amount: 3 }, 'signals[3].amount: unknown field'],
];

t.test('a bad field in any signal refuses the whole batch, naming index and field', async (t) => {
  for (const [name, patch, details] of signalCases) {
    const body = batch(5);
    Object.assign(body.signals[3]!, patch);
    for (const k of Object.keys(patch)) if (patch[k] === undefined) delete body.signals[3]![k];
    const r = await sendBatch(svc.url, org.live, body);
    t.equal(r.status, 400, name);
    t.same(r.body, { error: 'Bad Request', code: 'INVALID_SIGNAL', details }, name);
  }
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

t.test('legacy v1: one signal or an array, same validation', async (t) => {
  const one = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: { eventName: 'x' } });
  t.same(one.body, { error: 'Bad Request', code: 'INVALID_SIGNAL', details: 'signal.customerId: is required' });
  const arr = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: [signal(0), { ...signal(1), timestamp: 'yesterday' }] });
  t.equal(arr.status, 400);
  t.match(arr.body.details, /^\[1\]\.timestamp: must be an RFC 3339 date-time/);
  const many = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: batch(501).signals });
  t.equal(many.body.code, 'BATCH_TOO_LARGE');
  const none = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: [] });
  t.equal(none.body.code, 'BATCH_EMPTY');
  const num = await http(svc.url, 'POST', '/api/v1/usage', { token: org.live, body: 5 });
  t.same(num.body, { error: 'Bad Request', code: 'INVALID_BODY', details: 'body must be a signal object or an array of signals, got number' });
});

t.test('oversized bodies answer 413', async (t) => {
  const big = JSON.stringify({ signals: [{ eventName: 'e', customerId: 'c', data: { s: 'z'.repeat(1_100_000) } }] });
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
