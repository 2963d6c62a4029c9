/**
 * The HTTP server's mounting of routes (src/http/server.ts, src/http/route.ts): a prefix is
 * joined to each route's path; `auth: 'api-key'` routes get the principal from the injected
 * hook before the handler (and its 401 before the body is judged); `auth: 'operator'` routes
 * are guarded by the operator hook and not mounted at all without one; a route mounted
 * without the API-key hook it needs is refused at mount time; a known path with another
 * method is a 405 naming the allowed ones; unknown paths answer 503 SERVICE_STARTING until
 * the server is marked ready, 404 afterwards; every path answers the same with one trailing
 * slash (the official client calls collections as `/webhooks/`).
 */
import t from 'tap';
import { ApiError } from '../../src/errors.js';
import { Server, listen } from '../../src/http/server.js';
import type { AuthHooks, Route } from '../../src/http/route.js';
import { bearerGuard } from '../../src/http/bearer.js';
import { uWS } from '../../src/http/wrap.js';

interface Who {
  org: string;
}

const hooks: AuthHooks<Who> = {
  apiKey: async (req) => {
    if (req.authorization !== 'Bearer key-1') throw new ApiError('UNAUTHORIZED', 'unknown API key');
    return { org: 'org-1' };
  },
  operator: bearerGuard('operator-secret'),
};

let handled = 0;
const keyRoutes: Route<Who>[] = [
  { method: 'get', path: '/things/:id', auth: 'api-key', handler: (req) => ((handled += 1), { status: 200, body: { org: req.principal!.org, id: req.params[0] } }) },
  { method: 'post', path: '/things', auth: 'api-key', bodyLimit: 10, handler: (req) => ((handled += 1), { status: 201, body: { bytes: req.body.length, org: req.principal!.org } }) },
];
const operatorRoutes: Route[] = [{ method: 'get', path: '/secret', auth: 'operator', handler: () => ({ status: 200, body: { ok: true } }) }];

const server = new Server({ metricsToken: null, readiness: { checks: {} } });
const { port, socket } = await listen(server.app, '127.0.0.1', 0);
t.teardown(() => {
  uWS.us_listen_socket_close(socket);
  server.app.close();
});
const base = `http://127.0.0.1:${port}`;
const get = (path: string, authorization?: string): Promise<Response> => fetch(`${base}${path}`, authorization ? { headers: { authorization } } : {});
const code = async (r: Response): Promise<string> => ((await r.json()) as { code: string }).code;

t.test('before the routes are mounted and before ready: 503 SERVICE_STARTING; health answers', async (t) => {
  const r = await get('/api/things/a');
  t.equal(r.status, 503);
  t.equal(await code(r), 'SERVICE_STARTING');
  t.equal((await get('/healthz')).status, 200);
});

t.test('mounted under a prefix, with the injected hooks', async (t) => {
  server.mount('/api', keyRoutes, hooks);
  server.mount('/ops', operatorRoutes, hooks);
  server.mount('/no-operator', operatorRoutes, { apiKey: hooks.apiKey! });
  server.markReady();

  const ok = await get('/api/things/a%20b', 'Bearer key-1');
  t.equal(ok.status, 200);
  t.same(await ok.json(), { org: 'org-1', id: 'a b' }, 'principal from the hook, parameter decoded once');

  const before = handled;
  const noKey = await get('/api/things/x');
  t.equal(noKey.status, 401);
  const badKeyBody = await fetch(`${base}/api/things`, { method: 'POST', headers: { authorization: 'Bearer nope' }, body: 'x'.repeat(100) });
  t.equal(badKeyBody.status, 401, 'authentication answers before the body limit is judged');
  const big = await fetch(`${base}/api/things`, { method: 'POST', headers: { authorization: 'Bearer key-1' }, body: 'x'.repeat(11) });
  t.equal(big.status, 413);
  t.equal(handled, before, 'no refused request reached a handler');
  const posted = await fetch(`${base}/api/things`, { method: 'POST', headers: { authorization: 'Bearer key-1' }, body: 'x'.repeat(10) });
  t.same(await posted.json(), { bytes: 10, org: 'org-1' });

  t.equal((await get('/ops/secret')).status, 401);
  t.equal((await get('/ops/secret', 'Bearer wrong')).status, 401);
  t.equal((await get('/ops/secret', 'Bearer operator-secret')).status, 200);

  const skipped = await get('/no-operator/secret', 'Bearer operator-secret');
  t.equal(skipped.status, 404, 'an operator route without an operator hook is not mounted');
  t.equal(await code(skipped), 'NOT_FOUND');
});

t.test('405 names the allowed methods of a known path', async (t) => {
  const r = await fetch(`${base}/api/things`, { method: 'DELETE' });
  t.equal(r.status, 405);
  t.equal(r.headers.get('allow'), 'POST');
  t.equal(await code(r), 'METHOD_NOT_ALLOWED');
});

t.test('every route answers with and without a trailing slash: handlers, path parameters, 405, health', async (t) => {
  const withSlash = await get('/api/things/a%20b/', 'Bearer key-1');
  t.equal(withSlash.status, 200);
  t.same(await withSlash.json(), { org: 'org-1', id: 'a b' }, 'the same handler, its parameter decoded once');
  t.equal((await get('/api/things/x/')).status, 401, 'authenticated the same way');
  const posted = await fetch(`${base}/api/things/`, { method: 'POST', headers: { authorization: 'Bearer key-1' }, body: 'xyz' });
  t.equal(posted.status, 201);
  t.same(await posted.json(), { bytes: 3, org: 'org-1' }, 'the body is read the same way');
  const big = await fetch(`${base}/api/things/`, { method: 'POST', headers: { authorization: 'Bearer key-1' }, body: 'x'.repeat(11) });
  t.equal(big.status, 413, 'and held to the same limit');

  for (const p of ['/api/things/', '/api/things/a/']) {
    const r = await fetch(`${base}${p}`, { method: 'DELETE' });
    t.equal(r.status, 405, `DELETE ${p}`);
    t.equal(r.headers.get('allow'), p === '/api/things/' ? 'POST' : 'GET', `DELETE ${p}: the allowed methods of the path`);
    t.equal(await code(r), 'METHOD_NOT_ALLOWED');
  }
  t.equal((await get('/healthz/')).status, 200);
  t.equal((await get('/ops/secret/', 'Bearer operator-secret')).status, 200);
  t.equal((await get('/ops/secret/')).status, 401);

  for (const p of ['/api/things//', '/api/things/a//', '/api//things']) {
    const r = await get(p, 'Bearer key-1');
    t.equal(r.status, 404, `${p}: one trailing slash only, no empty parameter`);
    t.equal(await code(r), 'NOT_FOUND');
  }
});

t.test('an API-key route mounted without the API-key hook is refused at mount time', async (t) => {
  t.throws(() => server.mount('/other', keyRoutes, { operator: hooks.operator! }), /GET \/other\/things\/:id: mounted without an API-key hook/);
});
