/**
 * The HTTP server of every role. Routes present depend on the role:
 *   every role      GET /healthz, GET /readyz
 *   ingress, all    /api/v2/signals/bulk, /api/v1/usage, /admin/v1/organizations...
 *   pipeline, all   GET /admin/v1/organizations/:id/stats (needs the store)
 * Unknown paths answer 404 JSON; a known path with another method answers 405 JSON.
 */
import { ApiError } from '../errors.js';
import { log } from '../log.js';
import type { OrgRegistry } from '../orgs/registry.js';
import type { SignalIngress } from './signals.js';
import type { AdminApi } from '../admin/routes.js';
import { operatorGuard } from '../admin/routes.js';
import type { Store } from '../store/index.js';
import { countParams, uWS, wrap, type Handler, type Reply, type Request, type RouteOptions } from './http.js';

export interface Readiness {
  /** name → check; a check throws (or rejects) when its dependency is down. */
  checks: Record<string, () => Promise<void>>;
}

export interface ServerDeps {
  operatorToken: string | null;
  maxBodyBytes: number;
  readiness: Readiness;
  ingress?: { registry: OrgRegistry; signals: SignalIngress; admin: AdminApi };
  store?: Store;
}

type Method = 'get' | 'post' | 'patch';

class Router {
  private readonly methods = new Map<string, Set<string>>();
  constructor(private readonly app: uWS.TemplatedApp) {}

  add(method: Method, pattern: string, handler: Handler, opts?: RouteOptions): void {
    this.app[method](pattern, wrap(handler, opts, countParams(pattern)));
    const set = this.methods.get(pattern) ?? new Set<string>();
    set.add(method.toUpperCase());
    this.methods.set(pattern, set);
  }

  /** 405 for other methods on known paths, 404 for everything else. */
  finish(): void {
    for (const [pattern, set] of this.methods) {
      const allow = [...set].join(', ');
      this.app.any(pattern, wrap(() => {
        throw new ApiError('METHOD_NOT_ALLOWED', `allowed: ${allow}`, { Allow: allow });
      }));
    }
    this.app.any('/*', wrap((req) => {
      throw new ApiError('NOT_FOUND', `no route ${req.method} ${req.url}`);
    }));
  }
}

const withTimeout = <T>(p: Promise<T>, ms: number): Promise<T> =>
  Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms))]);

async function readiness(r: Readiness): Promise<Reply> {
  const results = await Promise.all(
    Object.entries(r.checks).map(async ([name, check]) => {
      try {
        await withTimeout(check(), 2_000);
        return [name, 'up'] as const;
      } catch (err) {
        return [name, `down: ${(err as Error).message}`] as const;
      }
    }),
  );
  const down = results.filter(([, s]) => s !== 'up').map(([n]) => n);
  const body = { status: down.length === 0 ? 'ready' : 'unavailable', down, checks: Object.fromEntries(results) };
  return { status: down.length === 0 ? 200 : 503, body };
}

export function buildApp(deps: ServerDeps): uWS.TemplatedApp {
  const app = uWS.App();
  const r = new Router(app);
  r.add('get', '/healthz', () => ({ status: 200, body: { status: 'ok' } }));
  r.add('get', '/readyz', () => readiness(deps.readiness));

  const operator = deps.operatorToken ? operatorGuard(deps.operatorToken) : null;

  if (deps.ingress) {
    const { registry, signals, admin } = deps.ingress;
    const authenticate = async (req: Request): Promise<undefined> => {
      const m = /^Bearer\s+(\S+)\s*$/.exec(req.authorization);
      if (!m) {
        throw new ApiError('UNAUTHORIZED', req.authorization === '' ? 'missing Authorization: Bearer <api key> header' : 'Authorization header must be "Bearer <api key>"');
      }
      const principal = await registry.authenticate(m[1]!);
      if (!principal) throw new ApiError('UNAUTHORIZED', 'unknown API key');
      req.principal = principal;
      return undefined;
    };
    const bodyOpts: RouteOptions = { body: true, maxBodyBytes: deps.maxBodyBytes, before: authenticate };
    r.add('post', '/api/v2/signals/bulk', (req) => signals.bulk(req, req.principal!), bodyOpts);
    r.add('post', '/api/v1/usage', (req) => signals.v1(req, req.principal!), bodyOpts);

    const adminOpts: RouteOptions = { body: true, maxBodyBytes: 64 * 1024, before: operator! };
    r.add('post', '/admin/v1/organizations', (req) => admin.createOrg(req), adminOpts);
    r.add('get', '/admin/v1/organizations/:id', (req) => admin.getOrg(req), { before: operator! });
    r.add('patch', '/admin/v1/organizations/:id/limits', (req) => admin.patchLimits(req), adminOpts);
  }
  if (deps.store && operator) {
    const store = deps.store;
    r.add('get', '/admin/v1/organizations/:id/stats', async (req) => {
      try {
        return { status: 200, body: { signals: await store.countSignals(req.params[0]!) } };
      } catch (err) {
        log.error('store unavailable', { err });
        throw new ApiError('STORE_UNAVAILABLE', 'the analytics store is unreachable, retry later');
      }
    }, { before: operator });
  }
  r.finish();
  return app;
}

export function listen(app: uWS.TemplatedApp, host: string, port: number): Promise<{ port: number; socket: uWS.us_listen_socket }> {
  return new Promise((resolve, reject) => {
    app.listen(host, port, (socket) => {
      if (!socket) reject(new Error(`cannot listen on ${host}:${port}`));
      else resolve({ port: uWS.us_socket_local_port(socket), socket });
    });
  });
}
