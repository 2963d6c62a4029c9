/** The error catalogue and the error table of docs/api.md stay in step (Fastify's habit). */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { ERRORS, ApiError, toErrorResponse, rateLimited } from '../../src/errors.js';

const apiDoc = readFileSync(new URL('../../docs/api.md', import.meta.url), 'utf8');
const rows = new Map<string, number>();
for (const m of apiDoc.matchAll(/^\| `([A-Z_]+)` \| (\d{3}) \|/gm)) rows.set(m[1]!, Number(m[2]));

t.test('every catalogued code is documented with its status, and nothing else is', async (t) => {
  for (const [code, def] of Object.entries(ERRORS)) t.equal(rows.get(code), def.status, code);
  t.same([...rows.keys()].sort(), Object.keys(ERRORS).sort());
});

t.test('error bodies', async (t) => {
  t.same(toErrorResponse(new ApiError('INVALID_SIGNAL', 'signals[0].eventName: is required')), {
    status: 400,
    body: { error: 'Bad Request', code: 'INVALID_SIGNAL', details: 'signals[0].eventName: is required' },
    headers: {},
  });
  const unexpected = toErrorResponse(new Error('ECONNREFUSED /var/lib/secret/path at Foo.bar'));
  t.equal(unexpected.status, 500);
  t.same(unexpected.body, { error: 'Internal Server Error', code: 'INTERNAL', details: 'An unexpected error occurred; it has been logged.' }, 'no internals leak');
  t.same(toErrorResponse(rateLimited(7)), {
    status: 429,
    body: { error: 'Too Many Requests', code: 'RATE_LIMIT_EXCEEDED', details: 'Too many requests. Retry after 7s.' },
    headers: { 'Retry-After': '7' },
  });
});
