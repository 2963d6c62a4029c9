/** A fixed bearer token (OPERATOR_TOKEN, METRICS_TOKEN), compared in constant time. */
import { timingSafeEqual, createHash } from 'node:crypto';
import { ApiError } from '../errors.js';
import type { Reply, Request } from './route.js';

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

/** Refuses (401) a request without `Authorization: Bearer <token>`; `what` names the token in the message. */
export function bearerGuard(token: string, what = 'operator token'): (req: Request) => Reply | undefined {
  const expected = digest(token);
  return (req) => {
    const m = /^Bearer (.+)$/.exec(req.authorization);
    if (m && timingSafeEqual(digest(m[1]!), expected)) return undefined;
    throw new ApiError('UNAUTHORIZED', req.authorization === '' ? `missing Authorization: Bearer <${what}> header` : `invalid ${what}`);
  };
}
