/**
 * Operator API (`/admin/v1`), protected by OPERATOR_TOKEN as a bearer token.
 *
 *   POST  /admin/v1/organizations               {name?}  → 201 {id, name, apiKeys: {live, test}, limits}
 *   GET   /admin/v1/organizations/:id                    → 200 organization (no keys)
 *   PATCH /admin/v1/organizations/:id/limits    {burst?, refillPerSecond?, analyticsConcurrency?} → 200 organization
 *   GET   /admin/v1/organizations/:id/stats              → 200 {signals: {live, test}} (processes that own the store)
 */
import { ApiError } from '../errors.js';
import { adminLog as log } from '../log.js';
import { LIMIT_BOUNDS } from '../shared/org-limits.js';
import type { Limits, OrgRecord, OrgRegistry } from '../orgs/registry.js';
import { ORG_ID_PATTERN } from '../orgs/keys.js';
import type { Store } from '../store/index.js';
import type { Reply, Request, Route } from '../http/route.js';
import { parseJson } from '../http/json.js';

/** Bodies of the operator API are small JSON documents. */
const BODY_LIMIT = 64 * 1024;

/**
 * The operator routes, relative to `/admin/v1` (src/routes.ts): the organization routes
 * where the registry is (`api`), the stats route where the store is (`store`; `registryOf`
 * when the registry is in the same process, to tell an unknown organization).
 */
export function routes(parts: { api?: AdminApi; store?: Pick<Store, 'countSignals'>; registryOf?: AdminApi }): Route[] {
  const out: Route[] = [];
  const { api, store, registryOf } = parts;
  if (api) {
    out.push(
      { method: 'post', path: '/organizations', auth: 'operator', bodyLimit: BODY_LIMIT, handler: (req) => api.createOrg(req) },
      { method: 'get', path: '/organizations/:id', auth: 'operator', handler: (req) => api.getOrg(req) },
      { method: 'patch', path: '/organizations/:id/limits', auth: 'operator', bodyLimit: BODY_LIMIT, handler: (req) => api.patchLimits(req) },
    );
  }
  if (store) out.push({ method: 'get', path: '/organizations/:id/stats', auth: 'operator', handler: (req) => stats(store, registryOf, req) });
  return out;
}

async function stats(store: Pick<Store, 'countSignals'>, api: AdminApi | undefined, req: Request): Promise<Reply> {
  // Anything not shaped like an id is no organization; where the registry is (ROLE=all), an
  // unknown one is not either, as on the other operator routes. Without it (ROLE=pipeline
  // reads the store alone) an unknown but well-formed id counts zero.
  if (!ORG_ID_PATTERN.test(req.params[0]!)) throw new ApiError('NOT_FOUND', `no organization ${JSON.stringify(req.params[0])}`);
  if (api) await api.getOrg(req);
  try {
    return { status: 200, body: { signals: await store.countSignals(req.params[0]!) } };
  } catch (err) {
    log.error('store unavailable', { err });
    throw new ApiError('STORE_UNAVAILABLE', 'the analytics store is unreachable, retry later');
  }
}

export function publicOrg(org: OrgRecord): OrgRecord {
  return { id: org.id, name: org.name, createdAt: org.createdAt, updatedAt: org.updatedAt, limits: org.limits };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function parseLimits(body: unknown): Partial<Limits> {
  if (!isObject(body)) throw new ApiError('INVALID_LIMITS', 'body must be a JSON object with burst, refillPerSecond and/or analyticsConcurrency');
  const out: Partial<Limits> = {};
  const keys = Object.keys(body);
  if (keys.length === 0) throw new ApiError('INVALID_LIMITS', 'at least one of burst, refillPerSecond, analyticsConcurrency is required');
  for (const k of keys) {
    if (!Object.hasOwn(LIMIT_BOUNDS, k)) throw new ApiError('INVALID_LIMITS', `${k}: unknown field; allowed: burst, refillPerSecond, analyticsConcurrency`);
    const b = LIMIT_BOUNDS[k as keyof Limits];
    const v = body[k];
    const range = `between ${b.min} and ${b.max}`;
    const ok = typeof v === 'number' && Number.isFinite(v) && (b.integer ? Number.isInteger(v) : true) && v >= b.min && v <= b.max;
    if (!ok) throw new ApiError('INVALID_LIMITS', `${k}: must be ${b.integer ? 'a whole number' : 'a number'} ${range}, got ${JSON.stringify(v)}`);
    out[k as keyof Limits] = v as number;
  }
  return out;
}

function orgId(req: Request): string {
  const id = req.params[0] ?? '';
  if (!ORG_ID_PATTERN.test(id)) throw new ApiError('NOT_FOUND', `no organization ${JSON.stringify(id)}`);
  return id;
}

export class AdminApi {
  constructor(private readonly registry: OrgRegistry) {}

  async createOrg(req: Request): Promise<Reply> {
    let name: string | null = null;
    if (req.body.length > 0) {
      const body = parseJson(req.body);
      if (!isObject(body)) throw new ApiError('INVALID_BODY', 'body must be a JSON object {"name"?: string}');
      for (const k of Object.keys(body)) if (k !== 'name') throw new ApiError('INVALID_BODY', `${k}: unknown field; allowed: name`);
      if (body.name !== undefined && body.name !== null) {
        if (typeof body.name !== 'string' || body.name.length === 0 || body.name.length > 255) {
          throw new ApiError('INVALID_BODY', 'name: must be a string of 1 to 255 characters');
        }
        name = body.name;
      }
    }
    const { org, apiKeys } = await this.registry.create(name);
    return { status: 201, body: { ...publicOrg(org), apiKeys } };
  }

  async getOrg(req: Request): Promise<Reply> {
    const org = await this.registry.get(orgId(req));
    if (!org) throw new ApiError('NOT_FOUND', `no organization ${JSON.stringify(req.params[0])}`);
    return { status: 200, body: publicOrg(org) };
  }

  async patchLimits(req: Request): Promise<Reply> {
    const id = orgId(req);
    const patch = parseLimits(parseJson(req.body));
    const org = await this.registry.updateLimits(id, patch);
    if (!org) throw new ApiError('NOT_FOUND', `no organization ${JSON.stringify(id)}`);
    return { status: 200, body: publicOrg(org) };
  }
}
