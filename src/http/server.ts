/**
 * The HTTP server of every role. It serves, from the first moment:
 *   GET /healthz, GET /readyz (naming what is not up yet; not ready before `markReady`),
 *   GET /metrics (Prometheus text; open, or METRICS_TOKEN when set);
 * every other route is mounted by the route table (src/routes.ts), each feature's routes
 * once its components are ready. Until the table says so (`markReady`) an unknown path
 * answers 503 SERVICE_STARTING; afterwards 404. A known path with another method is a 405.
 * Every path answers the same with and without a trailing slash (`add`).
 *
 * Nothing here knows a feature: authentication is the functions the route table hands
 * `mount` (src/http/route.ts AuthHooks).
 */
import { ApiError } from '../errors.js';
import { METRICS_CONTENT_TYPE, metricsText } from '../metrics/index.js';
import { bearerGuard } from './bearer.js';
import type { AuthHooks, Handler, Method, Reply, Route } from './route.js';
import { uWS, wrap, type RouteOptions } from './wrap.js';

export interface Readiness {
  /** name → check; a check throws (or rejects) when its dependency is down. */
  checks: Record<string, () => Promise<void>>;
}

export interface ServerDeps {
  /** When set, GET /metrics wants `Authorization: Bearer <token>`; otherwise it is open. */
  metricsToken: string | null;
  readiness: Readiness;
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

export class Server {
  readonly app = uWS.App();
  private readonly methods = new Map<string, Set<string>>();
  private ready = false;

  constructor(deps: ServerDeps) {
    this.add('get', '/healthz', () => ({ status: 200, body: { status: 'ok' } }));
    // Ready only once every route is mounted too: a dependency can be up (readiness checks
    // pass) while the route table is still being mounted (streams ensured, registry loaded).
    const routes = async (): Promise<void> => {
      if (!this.ready) throw new Error('routes are still being mounted');
    };
    this.add('get', '/readyz', () => readiness({ checks: { ...deps.readiness.checks, routes } }));
    this.add(
      'get',
      '/metrics',
      async () => ({ status: 200, body: await metricsText(), headers: { 'Content-Type': METRICS_CONTENT_TYPE } }),
      deps.metricsToken ? { before: bearerGuard(deps.metricsToken, 'metrics token') } : {},
    );
    this.app.any('/*', wrap((req) => {
      if (!this.ready) throw new ApiError('SERVICE_STARTING', 'the service is starting (connecting to its dependencies); retry shortly');
      throw new ApiError('NOT_FOUND', `no route ${req.method} ${req.url}`);
    }));
  }

  /**
   * Mounts routes under `prefix` (paths are joined as written: '/api/v2' + '/plans').
   * `auth: 'api-key'` routes need `hooks.apiKey`; `auth: 'operator'` routes are skipped
   * without `hooks.operator` (no operator token configured).
   */
  mount<P>(prefix: string, routes: readonly Route<P>[], hooks: AuthHooks<P> = {}): void {
    for (const r of routes) {
      const pattern = `${prefix}${r.path}`;
      const opts: RouteOptions<P> = r.bodyLimit === undefined ? {} : { body: true, maxBodyBytes: r.bodyLimit };
      if (r.auth === 'api-key') {
        const apiKey = hooks.apiKey;
        if (!apiKey) throw new Error(`${r.method.toUpperCase()} ${pattern}: mounted without an API-key hook`);
        opts.before = async (req) => {
          req.principal = await apiKey(req);
          return undefined;
        };
      } else if (r.auth === 'operator') {
        if (!hooks.operator) continue;
        opts.before = hooks.operator;
      }
      this.add(r.method, pattern, r.handler, opts);
    }
  }

  /**
   * Registers `pattern` and its trailing-slash form (`/webhooks` and `/webhooks/`, as the
   * official client calls collection paths) with the same handler, and for both a 405
   * naming the allowed methods. uWS matches paths exactly, so each form is its own pattern;
   * both share one metrics route label (the form without the slash) and one set of allowed
   * methods. A `:name` segment never matches an empty segment: `/webhooks/` is the
   * collection, not `/webhooks/:event` with an empty event.
   */
  private add<P>(method: Method, pattern: string, handler: Handler<P>, opts?: RouteOptions<P>): void {
    const canonical = withoutTrailingSlash(pattern) || '/';
    const forms = canonical === '/' ? ['/'] : [canonical, `${canonical}/`];
    const wrapped = wrap(handler, opts, canonical);
    for (const form of forms) this.app[method === 'delete' ? 'del' : method](form, wrapped);
    let allowed = this.methods.get(canonical);
    if (!allowed) {
      const set = new Set<string>();
      allowed = set;
      this.methods.set(canonical, set);
      // Method-specific handlers take precedence over `any` in uWS, whatever the order.
      const notAllowed = wrap(() => {
        const allow = [...set].join(', ');
        throw new ApiError('METHOD_NOT_ALLOWED', `allowed: ${allow}`, { Allow: allow });
      }, { route: canonical });
      for (const form of forms) this.app.any(form, notAllowed);
    }
    allowed.add(method.toUpperCase());
  }

  /** Every route served, `METHOD /pattern` (the form without a trailing slash), sorted by pattern then method. */
  routes(): string[] {
    return [...this.methods].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).flatMap(([pattern, methods]) => [...methods].sort().map((m) => `${m} ${pattern}`));
  }

  /** From now on, an unknown path is a 404 rather than "starting". */
  markReady(): void {
    this.ready = true;
  }
}

/** `/a/b/` → `/a/b`; `/` → `` (the root has one form). */
const withoutTrailingSlash = (pattern: string): string => (pattern.endsWith('/') ? pattern.slice(0, -1) : pattern);

export function listen(app: uWS.TemplatedApp, host: string, port: number): Promise<{ port: number; socket: uWS.us_listen_socket }> {
  return new Promise((resolve, reject) => {
    app.listen(host, port, (socket) => {
      if (!socket) reject(new Error(`cannot listen on ${host}:${port}`));
      else resolve({ port: uWS.us_socket_local_port(socket), socket });
    });
  });
}
