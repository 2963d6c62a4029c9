/**
 * The HTTP server of every role. Routes present depend on the role:
 *   every role      GET /healthz, GET /readyz (from the first moment), GET /openapi.json,
 *                   GET /metrics (Prometheus text; open, or METRICS_TOKEN when set)
 *   ingress, all    /api/v2/signals/bulk, /api/v1/usage, /admin/v1/organizations...
 *   pipeline, all   GET /admin/v1/organizations/:id/stats (needs the store)
 *   ingress, all    /api/v2/analytics/* (answer 503 without an engine in reach)
 *   ingress, all    /api/v2/customers..., /api/v2/plans (billing configuration)
 *   ingress, all    /api/v2/webhooks..., GET /settings (the web settings page, no key needed)
 */
import { ApiError } from '../errors.js';
import { ingressLog as log } from '../log.js';
import { OPENAPI } from '../openapi.js';
import type { OrgRegistry } from '../orgs/registry.js';
import { ORG_ID_PATTERN } from '../orgs/keys.js';
import type { SignalIngress } from './signals.js';
import type { AdminApi } from '../admin/routes.js';
import { operatorGuard } from '../admin/routes.js';
import type { Store } from '../store/index.js';
import type { AnalyticsService } from '../analytics/service.js';
import type { WebhookApi } from '../webhooks/api.js';
import { settingsPageRoutes } from '../webhooks/settings-page/index.js';
import type { BillingConfigApi } from '../billing/config/api.js';
import { METRICS_CONTENT_TYPE, metricsText } from '../metrics/index.js';
import { uWS, wrap, type Handler, type Reply, type Request, type RouteOptions } from './http.js';

export interface Readiness {
  /** name → check; a check throws (or rejects) when its dependency is down. */
  checks: Record<string, () => Promise<void>>;
}

export interface ServerDeps {
  operatorToken: string | null;
  /** When set, GET /metrics wants `Authorization: Bearer <token>`; otherwise it is open. */
  metricsToken: string | null;
  maxBodyBytes: number;
  readiness: Readiness;
}

export interface IngressDeps {
  registry: OrgRegistry;
  signals: SignalIngress;
  admin: AdminApi;
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

type Method = 'get' | 'post' | 'patch' | 'put' | 'delete';

/**
 * The HTTP server. It listens before the dependencies are connected, so /healthz and
 * /readyz answer from the first moment (readyz naming what is not up yet); the API and
 * operator routes are added once their components are ready, and until then those paths
 * answer 503 SERVICE_STARTING. Unknown paths answer 404, known paths with another method 405.
 */
export class Server {
  readonly app = uWS.App();
  private readonly methods = new Map<string, Set<string>>();
  private ready = false;
  private readonly operator: ((req: Request) => Reply | undefined) | null;

  constructor(private readonly deps: ServerDeps) {
    this.operator = deps.operatorToken ? operatorGuard(deps.operatorToken) : null;
    this.add('get', '/healthz', () => ({ status: 200, body: { status: 'ok' } }));
    this.add('get', '/readyz', () => readiness(deps.readiness));
    const openapi = JSON.stringify(OPENAPI);
    this.add('get', '/openapi.json', () => ({ status: 200, body: openapi, headers: { 'Content-Type': 'application/json' } }));
    this.add(
      'get',
      '/metrics',
      async () => ({ status: 200, body: await metricsText(), headers: { 'Content-Type': METRICS_CONTENT_TYPE } }),
      deps.metricsToken ? { before: operatorGuard(deps.metricsToken, 'metrics token') } : {},
    );
    this.app.any('/*', wrap((req) => {
      if (!this.ready) throw new ApiError('SERVICE_STARTING', 'the service is starting (connecting to its dependencies); retry shortly');
      throw new ApiError('NOT_FOUND', `no route ${req.method} ${req.url}`);
    }));
  }

  private add(method: Method, pattern: string, handler: Handler, opts?: RouteOptions): void {
    this.app[method === 'delete' ? 'del' : method](pattern, wrap(handler, opts, pattern));
    let allowed = this.methods.get(pattern);
    if (!allowed) {
      const set = new Set<string>();
      allowed = set;
      this.methods.set(pattern, set);
      // Method-specific handlers take precedence over `any` in uWS, whatever the order.
      this.app.any(pattern, wrap(() => {
        const allow = [...set].join(', ');
        throw new ApiError('METHOD_NOT_ALLOWED', `allowed: ${allow}`, { Allow: allow });
      }, { route: pattern }));
    }
    allowed.add(method.toUpperCase());
  }

  private authenticate: ((req: Request) => Promise<undefined>) | null = null;

  addIngress(ingress: IngressDeps): void {
    const { registry, signals, admin } = ingress;
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
    this.authenticate = authenticate;
    const bodyOpts: RouteOptions = { body: true, maxBodyBytes: this.deps.maxBodyBytes, before: authenticate };
    this.add('post', '/api/v2/signals/bulk', (req) => signals.bulk(req, req.principal!), bodyOpts);
    this.add('post', '/api/v1/usage', (req) => signals.v1(req, req.principal!), bodyOpts);

    const operator = this.operator!;
    const adminOpts: RouteOptions = { body: true, maxBodyBytes: 64 * 1024, before: operator };
    this.add('post', '/admin/v1/organizations', (req) => admin.createOrg(req), adminOpts);
    this.add('get', '/admin/v1/organizations/:id', (req) => admin.getOrg(req), { before: operator });
    this.add('patch', '/admin/v1/organizations/:id/limits', (req) => admin.patchLimits(req), adminOpts);
  }

  /**
   * The analytics operations (after addIngress: they authenticate like the rest of the API).
   * Without an engine in reach (ROLE=ingress with embedded chdb, which only the pipeline
   * process may open) they answer 503 ANALYTICS_UNAVAILABLE.
   */
  addAnalytics(analytics: AnalyticsService | null): void {
    const before = this.authenticate!;
    const unavailable = (): never => {
      throw new ApiError('ANALYTICS_UNAVAILABLE', 'analytics queries need the analytics engine in this process: run ROLE=all with the embedded engine, or set CLICKHOUSE_URL');
    };
    const opts: RouteOptions = { body: true, maxBodyBytes: 256 * 1024, before };
    this.add('post', '/api/v2/analytics/query', (req) => (analytics ? analytics.query(req, req.principal!) : unavailable()), opts);
    this.add('get', '/api/v2/analytics/schema', () => (analytics ? analytics.schema() : unavailable()), { before });
    this.add('get', '/api/v2/analytics/signals/metadata', (req) => (analytics ? analytics.signalsMetadata(req, req.principal!) : unavailable()), { before });
  }

  /**
   * The billing configuration API (after addIngress: it authenticates with the organization
   * API key; every operation is scoped to the key's organization and mode).
   */
  addBilling(billing: BillingConfigApi): void {
    const before = this.authenticate!;
    for (const r of billing.routes()) {
      this.add(r.method, r.pattern, r.handler, r.body ? { body: true, maxBodyBytes: 64 * 1024, before } : { before });
    }
  }

  /** Operator: events of other billing components onto the bus (src/webhooks/external-events.ts). */
  addExternalEvents(handler: (req: Request) => Promise<Reply>): void {
    if (!this.operator) return;
    this.add('post', '/admin/v1/organizations/:id/events', handler, { body: true, maxBodyBytes: 256 * 1024, before: this.operator });
  }

  /**
   * Webhook management (after addIngress: authenticated with the API key), and the web
   * settings page at GET /settings (unauthenticated static files; the page calls this API).
   */
  addWebhooks(webhooks: WebhookApi): void {
    const before = this.authenticate!;
    for (const r of webhooks.routes()) {
      this.add(r.method, r.pattern, r.handler, r.body ? { body: true, maxBodyBytes: 64 * 1024, before } : { before });
    }
    for (const r of settingsPageRoutes()) this.add('get', r.pattern, r.handler);
  }

  addStore(store: Store): void {
    if (!this.operator) return;
    this.add('get', '/admin/v1/organizations/:id/stats', async (req) => {
      // Counts are read from the store without the registry (ROLE=pipeline has none): an
      // unknown but well-formed id counts zero; anything not shaped like an id is no organization.
      if (!ORG_ID_PATTERN.test(req.params[0]!)) throw new ApiError('NOT_FOUND', `no organization ${JSON.stringify(req.params[0])}`);
      try {
        return { status: 200, body: { signals: await store.countSignals(req.params[0]!) } };
      } catch (err) {
        log.error('store unavailable', { err });
        throw new ApiError('STORE_UNAVAILABLE', 'the analytics store is unreachable, retry later');
      }
    }, { before: this.operator });
  }

  /** From now on, an unknown path is a 404 rather than "starting". */
  markReady(): void {
    this.ready = true;
  }
}

export function listen(app: uWS.TemplatedApp, host: string, port: number): Promise<{ port: number; socket: uWS.us_listen_socket }> {
  return new Promise((resolve, reject) => {
    app.listen(host, port, (socket) => {
      if (!socket) reject(new Error(`cannot listen on ${host}:${port}`));
      else resolve({ port: uWS.us_socket_local_port(socket), socket });
    });
  });
}
