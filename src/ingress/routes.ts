/**
 * The signals API, relative to `/api` (src/routes.ts):
 *   POST /v2/signals/bulk   {"signals": [...]}
 *   POST /v1/usage          legacy: one signal or an array of at most 500
 * Both authenticate with the organization API key before the body is judged.
 */
import type { Route } from '../http/route.js';
import type { Principal } from '../orgs/registry.js';
import type { SignalIngress } from './signals.js';

export function routes(signals: SignalIngress, maxBodyBytes: number): Route<Principal>[] {
  return [
    { method: 'post', path: '/v2/signals/bulk', auth: 'api-key', bodyLimit: maxBodyBytes, handler: (req) => signals.bulk(req, req.principal!) },
    { method: 'post', path: '/v1/usage', auth: 'api-key', bodyLimit: maxBodyBytes, handler: (req) => signals.v1(req, req.principal!) },
  ];
}
