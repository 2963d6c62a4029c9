/**
 * The OpenAPI document (GET /openapi.json) stays in step with the service: every documented
 * path and method reaches a real route, and every error code a response names is in the
 * catalogue with that status (and every catalogued code is documented somewhere).
 */
import t from 'tap';
import { http, useService } from '../helpers/service.js';
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
    }
  }
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
