/**
 * Operator API (`/admin/v1`), protected by OPERATOR_TOKEN as a bearer token.
 *
 *   POST  /admin/v1/organizations               {name?}  → 201 {id, name, apiKeys: {live, test}, limits}
 *   GET   /admin/v1/organizations/:id                    → 200 organization (no keys)
 *   PATCH /admin/v1/organizations/:id/limits    {burst?, refillPerSecond?, analyticsConcurrency?} → 200 organization
 *   GET   /admin/v1/organizations/:id/stats              → 200 {signals: {live, test}} (processes that own the store)
 */
import { timingSafeEqual, createHash } from 'node:crypto';
import { ApiError } from '../errors.js';
import { LIMIT_BOUNDS } from '../shared/org-limits.js';
import type { Limits, OrgRecord, OrgRegistry } from '../orgs/registry.js';
import { ORG_ID_PATTERN } from '../orgs/keys.js';
import type { Reply, Request } from '../ingress/http.js';
import { parseJson } from '../ingress/validate.js';

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

/** Refuses (401) a request without `Authorization: Bearer <token>`; `what` names the token in the message. */
export function operatorGuard(token: string, what = 'operator token'): (req: Request) => Reply | undefined {
  const expected = digest(token);
  return (req) => {
    const m = /^Bearer (.+)$/.exec(req.authorization);
    if (m && timingSafeEqual(digest(m[1]!), expected)) return undefined;
    throw new ApiError('UNAUTHORIZED', req.authorization === '' ? `missing Authorization: Bearer <${what}> header` : `invalid ${what}`);
  };
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
