/**
 * The operator route of external events, relative to `/admin/v1` (src/routes.ts):
 *   POST /organizations/:id/events   {mode, event, id?, data}  → 202 {id, event, duplicate}
 * validated and published by external-events.ts; an unknown organization is a 404, an
 * unreachable JetStream a 503 (resend with the same id: it is the publish's dedupe key).
 */
import { ApiError } from '../errors.js';
import { webhooksLog as log } from '../log.js';
import { billingEvents } from '../metrics/index.js';
import type { Route } from '../http/route.js';
import { parseJson } from '../http/json.js';
import type { Nats } from '../bus/connection.js';
import type { OrgRegistry } from '../orgs/registry.js';
import { publishExternalEvent, validateExternalEvent } from './external-events.js';
import { ORG_ID_PATTERN } from '../orgs/keys.js';

const BODY_LIMIT = 256 * 1024;

export interface ExternalEventDeps {
  registry: Pick<OrgRegistry, 'get'>;
  nats: Nats;
  publishTimeoutMs: number;
}

export function externalEventRoutes(deps: ExternalEventDeps): Route[] {
  const { registry, nats, publishTimeoutMs } = deps;
  return [
    {
      method: 'post',
      path: '/organizations/:id/events',
      auth: 'operator',
      bodyLimit: BODY_LIMIT,
      handler: async (req) => {
        const orgId = req.params[0] ?? '';
        // Checked before anything else: an id of another shape is no organization, and never a KV key.
        if (!ORG_ID_PATTERN.test(orgId)) throw new ApiError('NOT_FOUND', `no organization ${JSON.stringify(orgId)}`);
        const e = validateExternalEvent(parseJson(req.body));
        if (!(await registry.get(orgId))) throw new ApiError('NOT_FOUND', `no organization ${JSON.stringify(orgId)}`);
        try {
          const r = await publishExternalEvent(nats, orgId, e, publishTimeoutMs);
          if (!r.duplicate) billingEvents.inc({ event: e.event, source: 'external' });
          return { status: 202, body: { id: e.id, event: e.event, duplicate: r.duplicate } };
        } catch (err) {
          log.warn('event publish failed', { err });
          throw new ApiError('QUEUE_UNAVAILABLE', 'JetStream is unreachable; the event was not published, retry with the same id');
        }
      },
    },
  ];
}
