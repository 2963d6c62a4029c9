/**
 * Logs (src/log.ts, pino) through the real service at LOG_LEVEL=debug: every line is JSON,
 * every answer carries an X-Request-Id (a valid incoming one is kept, anything else replaced
 * by a generated one) and the log lines written while handling the request carry the same
 * id; API keys (good and bad), the operator token (good and bad), webhook signing secrets
 * and WEBHOOK_ENCRYPTION_KEY never reach a log line. A second part checks the redaction
 * paths and the flush on exit of the logger itself in a child process.
 */
import t from 'tap';
import { useHttpServer } from '../helpers/http-server.js';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { OPERATOR_TOKEN, TEST_WEBHOOK_KEY, batch, createOrg, useService, type TestOrg } from '../helpers/service.js';

const { svc } = useService(t, 'logs', { LOG_LEVEL: 'debug' });

/** A plain receiver for test deliveries: records the signature header, answers by script. */
const got: string[] = [];
let answer = 200;
const receiver = useHttpServer(t, (req, res) => {
  req.resume();
  req.on('end', () => {
    got.push(String(req.headers['x-webhook-signature'] ?? ''));
    res.writeHead(answer).end();
  });
});

interface Sent {
  /** What the test sent as X-Request-Id, if anything. */
  sentId: string | undefined;
  /** What the service answered in X-Request-Id. */
  id: string;
  status: number;
  path: string;
  body: any;
}
const sent: Sent[] = [];

async function call(method: string, path: string, opts: { token?: string; body?: unknown; requestId?: string } = {}): Promise<Sent> {
  const headers: Record<string, string> = {};
  if (opts.token !== undefined) headers.authorization = `Bearer ${opts.token}`;
  if (opts.requestId !== undefined) headers['x-request-id'] = opts.requestId;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(svc.url + path, { method, headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* keep the text */
  }
  const s = { sentId: opts.requestId, id: res.headers.get('x-request-id') ?? '', status: res.status, path, body };
  sent.push(s);
  return s;
}

const secrets: Record<string, string> = { operatorToken: OPERATOR_TOKEN, webhookEncryptionKey: TEST_WEBHOOK_KEY };
let org: TestOrg;

t.test('requests with keys, tokens and secrets, good and bad', async (t) => {
  const created = await call('POST', '/admin/v1/organizations', { token: OPERATOR_TOKEN, body: { name: 'logs org' }, requestId: 'create-org-1' });
  t.equal(created.status, 201);
  t.equal(created.id, 'create-org-1', 'a valid incoming request id is kept');
  org = { id: created.body.id, live: created.body.apiKeys.live, test: created.body.apiKeys.test };
  secrets.liveKey = org.live;
  secrets.testKey = org.test;

  const accepted = await call('POST', '/api/v2/signals/bulk', { token: org.live, body: batch(3) });
  t.equal(accepted.status, 202);
  t.match(accepted.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, 'generated when none is sent');
  t.equal((await call('POST', '/api/v2/signals/bulk', { token: org.test, body: batch(2), requestId: 'Abc.def_1:2-3' })).id, 'Abc.def_1:2-3');

  for (const bad of ['has space', 'x'.repeat(129), '<script>', 'a\u00e9b', 'semi;colon']) {
    const r = await call('GET', '/healthz', { requestId: bad });
    t.equal(r.status, 200);
    t.not(r.id, bad, `an invalid X-Request-Id (${JSON.stringify(bad.slice(0, 12))}) is replaced`);
    t.match(r.id, /^[0-9a-f-]{36}$/);
  }

  // Failing authentication: a wrong API key shaped like a real one, a wrong operator token.
  secrets.badKey = `${org.live.slice(0, -6)}${org.live.slice(-6) === 'zzzzzz' ? 'yyyyyy' : 'zzzzzz'}`;
  const badKey = await call('POST', '/api/v2/signals/bulk', { token: secrets.badKey, body: batch(1), requestId: 'bad-key-1' });
  t.equal(badKey.status, 401);
  t.equal(badKey.id, 'bad-key-1', 'errors carry the request id too');
  secrets.badOperatorToken = 'not-the-operator-token-9876543210';
  t.equal((await call('GET', `/admin/v1/organizations/${org.id}`, { token: secrets.badOperatorToken })).status, 401);
  t.equal((await call('GET', `/admin/v1/organizations/${org.id}`, { token: OPERATOR_TOKEN })).status, 200);
  t.match(String((await call('GET', '/api/v2/no-such-route', { token: org.live })).status), /^4\d\d$/, 'an unknown route is a 4xx');

  // Webhook signing secrets: two rotations, test deliveries signed with them (one refused by the receiver).
  const rot1 = await call('POST', '/api/v2/webhooks/rotate-secret', { token: org.live });
  t.equal(rot1.status, 201);
  t.match(rot1.body.signingSecret, /^whsec_/);
  secrets.signingSecret1 = rot1.body.signingSecret;
  t.equal((await call('PATCH', '/api/v2/webhooks/billing-payment-failed', { token: org.live, body: { url: `${receiver.url}/hook`, enabled: true } })).status, 200);
  const delivered = await call('POST', '/api/v2/webhooks/billing-payment-failed/test', { token: org.live, body: {}, requestId: 'webhook-test-1' });
  t.equal(delivered.status, 200, JSON.stringify(delivered.body));
  const rot2 = await call('POST', '/api/v2/webhooks/rotate-secret', { token: org.live });
  secrets.signingSecret2 = rot2.body.signingSecret;
  answer = 500;
  const failed = await call('POST', '/api/v2/webhooks/billing-payment-failed/test', { token: org.live, body: {} });
  t.match(failed, { status: 200, body: { delivered: false, statusCode: 500 } }, 'a refused test delivery is reported');
  answer = 200;
  t.ok(got.length >= 2, 'the receiver got the test deliveries');
  t.equal((await call('GET', '/api/v2/webhook-deliveries', { token: org.live })).status, 200);
  t.equal((await call('POST', '/api/v2/analytics/query', { token: org.live, body: { sql: 'SELECT count() AS n FROM signals' } })).id.length > 0, true);
});

t.test('no secret in any log line; request ids in the lines of their requests', async (t) => {
  await svc.stop(); // SIGTERM: the asynchronous destination is flushed on exit
  const lines = svc.output.split('\n').filter((l) => l.trim() !== '');
  t.ok(lines.length > sent.length, `${lines.length} lines logged`);
  const records = lines.map((l) => {
    try {
      return JSON.parse(l) as Record<string, unknown>;
    } catch {
      t.fail(`not a JSON line: ${l}`);
      return {};
    }
  });

  for (const [name, value] of Object.entries(secrets)) {
    t.ok(value && value.length >= 20, `${name} is known to the test`);
    // The whole secret, and its distinctive part without any "sk_live_"/"whsec_" prefix.
    const core = value.slice(-20);
    const leaks = lines.filter((l) => l.includes(value) || l.includes(core));
    t.same(leaks, [], `${name} never appears in a log line`);
  }

  t.ok(records.some((r) => r.msg === 'ready' && r.level === 'info' && r.role === 'all' && r.reqId === undefined), 'lines carry the role; lines outside requests carry no request id');
  t.ok(records.some((r) => r.level === 'debug'), 'LOG_LEVEL=debug is respected');
  for (const s of sent) {
    t.match(s.id, /^[A-Za-z0-9._:-]{1,128}$/, `${s.path}: answered with a request id`);
    const mine = records.filter((r) => r.reqId === s.id);
    t.ok(
      mine.some((r) => r.msg === 'request' && r.module === 'http' && r.role === 'all' && r.status === s.status && r.path === s.path.split('?')[0]),
      `${s.path} (${s.status}): its request line carries X-Request-Id ${s.id}`,
    );
  }
  t.equal(new Set(sent.map((s) => s.id)).size, sent.length, 'request ids are distinct');
});

t.test('the logger: redaction paths, LOG_LEVEL, flush on exit', async (t) => {
  const dist = fileURLToPath(new URL('../../dist/src/log.js', import.meta.url));
  const script = `
    import { configureLog, log, moduleLog, withRequest } from ${JSON.stringify(dist)};
    configureLog({ level: 'info', role: 'ingress' });
    log.debug('hidden at info');
    const m = moduleLog('webhooks');
    withRequest('req-42', () => m.info('fields', {
      apiKey: 'S1-top', authorization: 'Bearer S2-top', signingSecret: 'S3-top', operatorToken: 'S4-top',
      password: 'S5-top', token: 'S6-top', secret: 'S7-top', encryptionKey: 'S8-top',
      org: { apiKey: 'S9-nested', secret: 'S10-nested', name: 'kept' },
      headers: { authorization: 'Bearer S11-headers', 'content-type': 'application/json' },
      endpoint: { signingSecret: 'S12-nested' },
      count: 3,
    }));
    for (let i = 0; i < 2000; i++) log.info('bulk', { i });
    log.fatal('last words', { err: new Error('boom') });
    process.exit(3);
  `;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 });
  t.equal(r.status, 3);
  t.notMatch(r.stdout, /S\d+-(top|nested|headers)/, 'no secret field value is written');
  const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as Record<string, any>);
  t.equal(lines.length, 2002, 'every line is written before exit (asynchronous destination flushed); debug is off at info');
  const f = lines[0]!;
  t.match(f, { msg: 'fields', level: 'info', role: 'ingress', module: 'webhooks', reqId: 'req-42', count: 3 });
  t.equal(f.apiKey, '[redacted]');
  t.equal(f.authorization, '[redacted]');
  t.equal(f.org.apiKey, '[redacted]');
  t.equal(f.org.name, 'kept');
  t.equal(f.headers.authorization, '[redacted]');
  t.equal(f.headers['content-type'], 'application/json');
  t.equal(f.endpoint.signingSecret, '[redacted]');
  t.match(lines.at(-1), { msg: 'last words', level: 'fatal', err: { message: 'boom', type: 'Error' } });
});

t.test('a line written with now() is out before a SIGKILL', async (t) => {
  const dist = fileURLToPath(new URL('../../dist/src/log.js', import.meta.url));
  const script = `
    import { configureLog, moduleLog } from ${JSON.stringify(dist)};
    configureLog({ level: 'info', role: 'pipeline' });
    const m = moduleLog('billing');
    for (let i = 0; i < 500; i++) m.info('before', { i });
    m.now('warn', 'fault point', { point: 'after-events', token: 'S13-now' });
    process.kill(process.pid, 'SIGKILL');
  `;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 });
  t.equal(r.signal, 'SIGKILL');
  const line = r.stdout.split('\n').find((l) => l.includes('"msg":"fault point"'));
  t.ok(line, 'the line is written');
  t.match(JSON.parse(line ?? '{}'), { level: 'warn', role: 'pipeline', module: 'billing', point: 'after-events', token: '[redacted]' });
});
