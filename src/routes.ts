/**
 * The route table: which feature's routes are served under which prefix, and with which
 * authentication. Each feature exports its routes (paths relative to the prefix, as Fastify
 * plugins registered with a prefix); this table knows nothing of a feature's inside. Every
 * role also serves GET /healthz, GET /readyz and GET /metrics (src/http/server.ts).
 *
 *   prefix             routes                                     auth           roles
 *   /                  GET /openapi.json                          none           every role
 *   /api               v2/signals/bulk, v1/usage (ingress)        API key        ingress, all
 *   /admin/v1          organizations… (admin)                     operator       ingress, all
 *   /api/v2            webhooks, webhook-deliveries (webhooks)    API key        ingress, all
 *   /                  GET /settings… (webhooks settings page)    none           ingress, all
 *   /admin/v1          organizations/:id/events (webhooks)        operator       ingress, all
 *   /api/v2            customers…, plans (billing configuration)  API key        ingress, all
 *   /admin/v1          organizations/:id/stats (admin)            operator       pipeline, all (the store)
 *   /api/v2/analytics  query, schema, signals/metadata            API key        ingress, all (503 without an engine)
 *
 * main.ts mounts each part once its components are ready (mountIngress, mountStore,
 * mountAnalytics); until it marks the server ready, other paths answer 503 SERVICE_STARTING.
 */
import type { Server } from './http/server.js';
import type { AuthHooks, Route } from './http/route.js';
import { bearerGuard } from './http/bearer.js';
import { OPENAPI } from './openapi.js';
import { apiKeyAuthenticator } from './orgs/api-key.js';
import type { OrgRegistry, Principal } from './orgs/registry.js';
import { routes as signalRoutes } from './ingress/routes.js';
import type { SignalIngress } from './ingress/signals.js';
import { routes as adminRoutes, type AdminApi } from './admin/routes.js';
import { routes as analyticsRoutes } from './analytics/routes.js';
import type { AnalyticsService } from './analytics/service.js';
import type { BillingConfigApi } from './billing/config/api.js';
import type { WebhookApi } from './webhooks/api.js';
import { settingsPageRoutes } from './webhooks/settings-page/index.js';
import { externalEventRoutes, type ExternalEventDeps } from './webhooks/external-events-route.js';
import type { Store } from './store/index.js';

/** GET /openapi.json: the document is serialized once. */
function openapiRoutes(): Route[] {
  const body = JSON.stringify(OPENAPI);
  return [{ method: 'get', path: '/openapi.json', handler: () => ({ status: 200, body, headers: { 'Content-Type': 'application/json' } }) }];
}

export class RouteTable {
  private readonly operator: AuthHooks<Principal>['operator'];
  private apiKey: AuthHooks<Principal>['apiKey'];

  /** Mounts the routes of every role that need nothing: the OpenAPI document. */
  constructor(
    private readonly server: Server,
    operatorToken: string | null,
  ) {
    if (operatorToken) this.operator = bearerGuard(operatorToken);
    server.mount('', openapiRoutes());
  }

  private get hooks(): AuthHooks<Principal> {
    return { ...(this.apiKey ? { apiKey: this.apiKey } : {}), ...(this.operator ? { operator: this.operator } : {}) };
  }

  /** The API of the ingress role: signals, organizations, webhooks, external events, billing configuration. */
  mountIngress(f: {
    registry: OrgRegistry;
    signals: SignalIngress;
    maxBodyBytes: number;
    admin: AdminApi;
    webhooks: WebhookApi;
    externalEvents: Omit<ExternalEventDeps, 'registry'>;
    billing: BillingConfigApi;
  }): void {
    this.apiKey = apiKeyAuthenticator(f.registry);
    const s = this.server;
    s.mount('/api', signalRoutes(f.signals, f.maxBodyBytes), this.hooks);
    s.mount('/admin/v1', adminRoutes({ api: f.admin }), this.hooks);
    s.mount('/api/v2', f.webhooks.routes(), this.hooks);
    s.mount('', settingsPageRoutes());
    s.mount('/admin/v1', externalEventRoutes({ registry: f.registry, ...f.externalEvents }), this.hooks);
    s.mount('/api/v2', f.billing.routes(), this.hooks);
  }

  /** The operator's view of the store (processes that own it; `admin` where the registry is too). */
  mountStore(store: Store, admin?: AdminApi): void {
    this.server.mount('/admin/v1', adminRoutes({ store, ...(admin ? { registryOf: admin } : {}) }), this.hooks);
  }

  /** The analytics operations (after mountIngress: they authenticate with the API key). */
  mountAnalytics(service: AnalyticsService | null): void {
    this.server.mount('/api/v2/analytics', analyticsRoutes(service), this.hooks);
  }
}
