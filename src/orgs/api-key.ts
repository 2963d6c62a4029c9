/**
 * Authentication of the API: `Authorization: Bearer <organization API key>`, looked up in the
 * registry. The route table hands this to the HTTP server as its API-key hook
 * (src/http/route.ts AuthHooks), so the HTTP layer itself knows nothing of organizations.
 */
import { ApiError } from '../errors.js';
import type { OrgRegistry, Principal } from './registry.js';

export function apiKeyAuthenticator(registry: OrgRegistry): (req: { authorization: string }) => Promise<Principal> {
  return async (req) => {
    const m = /^Bearer\s+(\S+)\s*$/.exec(req.authorization);
    if (!m) {
      throw new ApiError('UNAUTHORIZED', req.authorization === '' ? 'missing Authorization: Bearer <api key> header' : 'Authorization header must be "Bearer <api key>"');
    }
    const principal = await registry.authenticate(m[1]!);
    if (!principal) throw new ApiError('UNAUTHORIZED', 'unknown API key');
    return principal;
  };
}
