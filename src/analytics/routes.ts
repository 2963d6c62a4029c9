/**
 * The analytics operations, relative to `/api/v2/analytics` (src/routes.ts), authenticated
 * with the organization API key:
 *   POST /query               {query}
 *   GET  /schema
 *   GET  /signals/metadata
 * Without an engine in reach (`service` null: ROLE=ingress with embedded chdb, which only the
 * pipeline process may open) they answer 503 ANALYTICS_UNAVAILABLE.
 */
import { ApiError } from '../errors.js';
import type { Route } from '../http/route.js';
import type { Principal } from '../orgs/registry.js';
import type { AnalyticsService } from './service.js';

const BODY_LIMIT = 256 * 1024;

export function routes(service: AnalyticsService | null): Route<Principal>[] {
  const unavailable = (): never => {
    throw new ApiError('ANALYTICS_UNAVAILABLE', 'analytics queries need the analytics engine in this process: run ROLE=all with the embedded engine, or set CLICKHOUSE_URL');
  };
  return [
    { method: 'post', path: '/query', auth: 'api-key', bodyLimit: BODY_LIMIT, handler: (req) => (service ? service.query(req, req.principal!) : unavailable()) },
    { method: 'get', path: '/schema', auth: 'api-key', handler: () => (service ? service.schema() : unavailable()) },
    { method: 'get', path: '/signals/metadata', auth: 'api-key', handler: (req) => (service ? service.signalsMetadata(req, req.principal!) : unavailable()) },
  ];
}
