import t, { type Test } from 'tap';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { OPERATOR_TOKEN, createOrg, http, sendBatch, batch, useService } from '../helpers/service.js';

const run = promisify(execFile);
const { svc } = useService(t, 'auth');

const unauthorized = (t: Test, r: { status: number; body: any }, details: string): void => {
  t.equal(r.status, 401);
  t.same(r.body, { error: 'Unauthorized', code: 'UNAUTHORIZED', details });
};

t.test('API routes need a known API key', async (t) => {
  for (const p of ['/api/v2/signals/bulk', '/api/v1/usage']) {
    unauthorized(t, await http(svc.url, 'POST', p, { body: batch(1) }), 'missing Authorization: Bearer <api key> header');
    unauthorized(t, await http(svc.url, 'POST', p, { token: 'sk_live_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', body: batch(1) }), 'unknown API key');
    unauthorized(t, await http(svc.url, 'POST', p, { token: 'not-a-key', body: batch(1) }), 'unknown API key');
    unauthorized(t, await http(svc.url, 'POST', p, { token: OPERATOR_TOKEN, body: batch(1) }), 'unknown API key');
    const basic = await fetch(svc.url + p, { method: 'POST', headers: { authorization: 'Basic dXNlcjpwYXNz' }, body: '{}' });
    unauthorized(t, { status: basic.status, body: await basic.json() }, 'Authorization header must be "Bearer <api key>"');
  }
});

t.test('operator API needs the operator token, not an API key', async (t) => {
  const org = await createOrg(svc.url);
  unauthorized(t, await http(svc.url, 'POST', '/admin/v1/organizations', { body: {} }), 'missing Authorization: Bearer <operator token> header');
  unauthorized(t, await http(svc.url, 'POST', '/admin/v1/organizations', { token: 'wrong-token-wrong-token', body: {} }), 'invalid operator token');
  unauthorized(t, await http(svc.url, 'GET', `/admin/v1/organizations/${org.id}`, { token: org.live }), 'invalid operator token');
  unauthorized(t, await http(svc.url, 'PATCH', `/admin/v1/organizations/${org.id}/limits`, { token: org.live, body: { burst: 600 } }), 'invalid operator token');
  unauthorized(t, await http(svc.url, 'GET', `/admin/v1/organizations/${org.id}/stats`, { token: org.live }), 'invalid operator token');
});

t.test('create an organization: keys shown once, stored hashed', async (t) => {
  const r = await http(svc.url, 'POST', '/admin/v1/organizations', { token: OPERATOR_TOKEN, body: { name: 'Acme' } });
  t.equal(r.status, 201);
  t.match(r.body, { id: /^org_[0-9A-Za-z]{20}$/, name: 'Acme', apiKeys: { live: /^sk_live_[0-9A-Za-z]{32}$/, test: /^sk_test_[0-9A-Za-z]{32}$/ }, limits: { burst: 10000, refillPerSecond: 1000, analyticsConcurrency: 4 } });
  const g = await http(svc.url, 'GET', `/admin/v1/organizations/${r.body.id}`, { token: OPERATOR_TOKEN });
  t.equal(g.status, 200);
  t.equal(g.body.apiKeys, undefined, 'keys are never shown again');
  t.notMatch(JSON.stringify(g.body), r.body.apiKeys.live);
  t.equal((await sendBatch(svc.url, r.body.apiKeys.live, batch(1))).status, 202);
  t.equal((await sendBatch(svc.url, r.body.apiKeys.test, batch(1))).status, 202);
  const anon = await http(svc.url, 'POST', '/admin/v1/organizations', { token: OPERATOR_TOKEN });
  t.equal(anon.status, 201, 'a body is optional');
  t.equal(anon.body.name, null);
});

t.test('bad organization input changes nothing', async (t) => {
  const bad = async (body: unknown, code: string, details: string): Promise<void> => {
    const r = await http(svc.url, 'POST', '/admin/v1/organizations', { token: OPERATOR_TOKEN, body });
    t.equal(r.status, 400);
    t.same(r.body, { error: 'Bad Request', code, details });
  };
  await bad({ name: 'x', plan: 'gold' }, 'INVALID_BODY', 'plan: unknown field; allowed: name');
  await bad({ name: '' }, 'INVALID_BODY', 'name: must be a string of 1 to 255 characters');
  await bad({ name: 42 }, 'INVALID_BODY', 'name: must be a string of 1 to 255 characters');
  await bad([1], 'INVALID_BODY', 'body must be a JSON object {"name"?: string}');
  const r = await http(svc.url, 'POST', '/admin/v1/organizations', { token: OPERATOR_TOKEN, raw: '{nope' });
  t.equal(r.status, 400);
  t.equal(r.body.code, 'INVALID_JSON');
});

t.test('limits: set, validated, unknown organization', async (t) => {
  const org = await createOrg(svc.url);
  const p = `/admin/v1/organizations/${org.id}/limits`;
  const ok = await http(svc.url, 'PATCH', p, { token: OPERATOR_TOKEN, body: { burst: 750, refillPerSecond: 2.5, analyticsConcurrency: 2 } });
  t.equal(ok.status, 200);
  t.same(ok.body.limits, { burst: 750, refillPerSecond: 2.5, analyticsConcurrency: 2 });
  const partial = await http(svc.url, 'PATCH', p, { token: OPERATOR_TOKEN, body: { burst: 900 } });
  t.same(partial.body.limits, { burst: 900, refillPerSecond: 2.5, analyticsConcurrency: 2 }, 'a partial update keeps the rest');
  const cases: [unknown, string][] = [
    [{ burst: 499 }, 'burst: must be a whole number between 500 and 1000000000, got 499'],
    [{ burst: 600.5 }, 'burst: must be a whole number between 500 and 1000000000, got 600.5'],
    [{ burst: '600' }, 'burst: must be a whole number between 500 and 1000000000, got "600"'],
    [{ refillPerSecond: 0 }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got 0'],
    [{ refillPerSecond: -1 }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got -1'],
    [{ refillPerSecond: 0.0009 }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got 0.0009'],
    [{ analyticsConcurrency: 0 }, 'analyticsConcurrency: must be a whole number between 1 and 1000, got 0'],
    [{ burst: 600, colour: 'red' }, 'colour: unknown field; allowed: burst, refillPerSecond, analyticsConcurrency'],
    [{}, 'at least one of burst, refillPerSecond, analyticsConcurrency is required'],
    [[], 'body must be a JSON object with burst, refillPerSecond and/or analyticsConcurrency'],
  ];
  for (const [body, details] of cases) {
    const r = await http(svc.url, 'PATCH', p, { token: OPERATOR_TOKEN, body });
    t.equal(r.status, 400, JSON.stringify(body));
    t.same(r.body, { error: 'Bad Request', code: 'INVALID_LIMITS', details });
  }
  const after = await http(svc.url, 'GET', `/admin/v1/organizations/${org.id}`, { token: OPERATOR_TOKEN });
  t.same(after.body.limits, { burst: 900, refillPerSecond: 2.5, analyticsConcurrency: 2 }, 'refused updates changed nothing');
  for (const id of ['org_AAAAAAAAAAAAAAAAAAAA', 'nope']) {
    const r = await http(svc.url, 'PATCH', `/admin/v1/organizations/${id}/limits`, { token: OPERATOR_TOKEN, body: { burst: 600 } });
    t.equal(r.status, 404);
    t.equal(r.body.code, 'NOT_FOUND');
    t.equal((await http(svc.url, 'GET', `/admin/v1/organizations/${id}`, { token: OPERATOR_TOKEN })).status, 404);
  }
});

t.test('unknown routes and methods', async (t) => {
  const r = await http(svc.url, 'GET', '/api/v2/nothing-here', {});
  t.equal(r.status, 404);
  t.same(r.body, { error: 'Not Found', code: 'NOT_FOUND', details: 'no route GET /api/v2/nothing-here' });
  const m = await http(svc.url, 'GET', '/api/v2/signals/bulk', {});
  t.equal(m.status, 405);
  t.equal(m.headers.get('allow'), 'POST');
  t.equal(m.body.code, 'METHOD_NOT_ALLOWED');
});

t.test('command-line tool', async (t) => {
  const cli = new URL('../../dist/src/cli/admin.js', import.meta.url).pathname;
  const env = { ...process.env, BILLING_URL: svc.url, OPERATOR_TOKEN };
  const created = JSON.parse((await run(process.execPath, [cli, 'create-org', '--name', 'From CLI'], { env })).stdout);
  t.match(created, { id: /^org_/, name: 'From CLI', apiKeys: { live: /^sk_live_/ } });
  const limited = JSON.parse((await run(process.execPath, [cli, 'set-limits', created.id, '--burst', '800', '--refill-per-second=50'], { env })).stdout);
  t.same(limited.limits, { burst: 800, refillPerSecond: 50, analyticsConcurrency: 4 });
  const got = JSON.parse((await run(process.execPath, [cli, 'get-org', created.id], { env })).stdout);
  t.equal(got.id, created.id);
  const refused = await run(process.execPath, [cli, 'set-limits', created.id, '--burst', '10'], { env }).catch((e: any) => e);
  t.equal(refused.code, 1, 'an API error exits 1');
  t.match(refused.stderr, /INVALID_LIMITS/);
  const usage = await run(process.execPath, [cli, 'frobnicate'], { env }).catch((e: any) => e);
  t.equal(usage.code, 2, 'bad usage exits 2');
  t.match(usage.stderr, /unknown command frobnicate/);
  const noToken = await run(process.execPath, [cli, 'get-org', created.id], { env: { ...env, OPERATOR_TOKEN: '' } }).catch((e: any) => e);
  t.equal(noToken.code, 2);
  t.match(noToken.stderr, /OPERATOR_TOKEN is not set/);
});
