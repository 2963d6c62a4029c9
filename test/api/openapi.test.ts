/**
 * The OpenAPI document (GET /openapi.json) stays in step with the service: every documented
 * path and method reaches a real route, and every error code a response names is in the
 * catalogue with that status (and every catalogued code is documented somewhere).
 */
import t from 'tap';
import nodeHttp from 'node:http';
import { OPERATOR_TOKEN, createOrg, http, useService } from '../helpers/service.js';
import { ERRORS } from '../../src/errors.js';

const { svc } = useService(t, 'openapi');

type Doc = { openapi: string; paths: Record<string, Record<string, { responses: Record<string, any> }>> };

t.test('every documented operation is served', async (t) => {
  const r = await http<Doc>(svc.url, 'GET', '/openapi.json');
  t.equal(r.status, 200);
  t.equal(r.body.openapi, '3.1.0');
  for (const [path, ops] of Object.entries(r.body.paths)) {
    const concrete = path.replace('{id}', 'org_AAAAAAAAAAAAAAAAAAAA');
    for (const method of Object.keys(ops)) {
      const res = await http(svc.url, method.toUpperCase(), concrete, method === 'get' ? {} : { body: {} });
      t.not(res.status, 405, `${method.toUpperCase()} ${path} is routed`);
      t.not(res.body?.code, 'NOT_FOUND', `${method.toUpperCase()} ${path} exists`);
      t.ok(res.status === 200 || res.status === 401, `${method.toUpperCase()} ${path}: ${res.status} (200, or 401 without credentials)`);
      const slash = await http(svc.url, method.toUpperCase(), `${concrete}/`, method === 'get' ? {} : { body: {} });
      t.equal(slash.status, res.status, `${method.toUpperCase()} ${path}/: the same answer with a trailing slash`);
    }
  }
});

t.test('a trailing slash: the same routes, parameters and 405 as without (the official client calls collections as /webhooks/)', async (t) => {
  const org = await createOrg(svc.url);
  const list = await http(svc.url, 'GET', '/api/v2/webhooks/', { token: org.live });
  t.equal(list.status, 200);
  t.equal(list.body.data.length, 10);
  const created = await http(svc.url, 'POST', '/api/v2/customers/', { token: org.live, body: { externalId: 'slash', name: 'Slash' } });
  t.equal(created.status, 201, JSON.stringify(created.body));
  const read = await http(svc.url, 'GET', `/api/v2/customers/${created.body.id}/`, { token: org.live });
  t.equal(read.status, 200, 'a path parameter before the slash');
  t.equal(read.body.id, created.body.id);
  const notAllowed = await http(svc.url, 'DELETE', '/api/v2/webhooks/', { token: org.live });
  t.equal(notAllowed.status, 405);
  t.equal(notAllowed.body.code, 'METHOD_NOT_ALLOWED');
  t.equal(notAllowed.headers.get('allow'), 'GET');
  const twice = await http(svc.url, 'GET', '/api/v2/webhooks//', { token: org.live });
  t.equal(twice.status, 404, 'one slash only');
});

t.test('error codes in the document match the catalogue', async (t) => {
  const r = await http<Doc>(svc.url, 'GET', '/openapi.json');
  const used = new Set<string>();
  for (const [path, ops] of Object.entries(r.body.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      for (const [status, resp] of Object.entries(op.responses)) {
        const codes: string[] | undefined = resp.content?.['application/json']?.schema?.allOf?.[1]?.properties?.code?.enum;
        for (const code of codes ?? []) {
          used.add(code);
          t.equal(ERRORS[code as keyof typeof ERRORS]?.status, Number(status), `${method.toUpperCase()} ${path} ${status} ${code}`);
        }
      }
    }
  }
  const generic = new Set(['INTERNAL', 'METHOD_NOT_ALLOWED']);
  for (const code of Object.keys(ERRORS)) if (!generic.has(code)) t.ok(used.has(code), `${code} is documented on some operation`);
});

/**
 * Path parameters are decoded once, by the HTTP layer. Every path template
 * of the document, with every method, gets malformed and hostile escapes in its parameters:
 * the answer is always a 4xx JSON error `{error, code, details}`, never a 5xx; a malformed
 * escape answers 400 INVALID_PATH naming the parameter, whichever parameter carries it. The
 * requests go out byte for byte (node:http, no URL normalization: `%2e%2e` stays as sent).
 */
const MALFORMED = ['%ZZ', '%', '%E0%A4%A', '%C0%AF', '%FF', 'ok%2', `${'a'.repeat(1500)}%G0`];
const HOSTILE = ['%25ZZ', '%2525', '%00', '..%2F..', '%2e%2e', '..', '%2F', `${'x'.repeat(1800)}`, '%E2%82%AC%F0%9F%9A%80', 'caf\u00e9', '%EF%BF%BF', '%F4%8F%BF%BF'];

function rawRequest(base: string, method: string, rawPath: string, token: string, body: string | null): Promise<{ status: number; type: string; text: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { authorization: `Bearer ${token}` };
    if (body !== null) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(body));
    }
    const req = nodeHttp.request({ host: u.hostname, port: u.port, method, path: rawPath, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type'] ?? ''), text: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body ?? undefined);
  });
}

t.test('hostile path parameters: 4xx JSON on every route, never 5xx; malformed escapes are INVALID_PATH', async (t) => {
  const org = await createOrg(svc.url);
  const doc = (await http<Doc>(svc.url, 'GET', '/openapi.json')).body;
  let operations = 0;
  let requests = 0;
  for (const [template, ops] of Object.entries(doc.paths)) {
    const names = [...template.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!);
    if (names.length === 0) continue;
    const token = template.startsWith('/admin/') ? OPERATOR_TOKEN : org.live;
    for (const method of Object.keys(ops)) {
      operations++;
      const body = method === 'get' || method === 'delete' ? null : '{}';
      // Each parameter in turn carries the value (the others an ordinary unknown id), then all at once.
      const placements: (string | null)[] = [...names, null];
      for (const value of [...MALFORMED, ...HOSTILE]) {
        for (const target of placements) {
          const rawPath = template.replace(/\{([^}]+)\}/g, (_m, name: string) => (target === null || name === target ? value : 'none_such'));
          const r = await rawRequest(svc.url, method.toUpperCase(), rawPath, token, body);
          requests++;
          const what = `${method.toUpperCase()} ${rawPath.length > 120 ? `${rawPath.slice(0, 120)}…` : rawPath}`;
          let parsed: { error?: unknown; code?: unknown; details?: unknown } | null = null;
          try {
            parsed = JSON.parse(r.text);
          } catch {
            /* asserted below */
          }
          const ok4xx = r.status >= 400 && r.status < 500 && /application\/json/.test(r.type) && typeof parsed?.error === 'string' && typeof parsed?.code === 'string' && typeof parsed?.details === 'string';
          if (!ok4xx) t.fail(`${what}: ${r.status} ${r.text.slice(0, 200)}`);
          if (MALFORMED.includes(value)) {
            const first = target ?? names[0]!;
            if (parsed?.code !== 'INVALID_PATH' || r.status !== 400 || !String(parsed.details).startsWith(`${first}:`)) {
              t.fail(`${what}: expected 400 INVALID_PATH naming ${first}, got ${r.status} ${r.text.slice(0, 200)}`);
            }
          } else if (parsed?.code === 'INVALID_PATH') t.fail(`${what}: a well-formed escape was refused as INVALID_PATH`);
        }
      }
    }
  }
  t.ok(operations >= 20, `${operations} operations with path parameters walked`);
  t.pass(`${requests} requests, every one a 4xx JSON error`);
  // Without credentials a malformed path still answers 401 first (nothing is revealed before authentication).
  const anon = await rawRequest(svc.url, 'PATCH', '/api/v2/webhooks/%25ZZ', '', '{}');
  t.equal(anon.status, 401);
});
