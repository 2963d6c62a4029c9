/**
 * Every route with an id in its path answers a clear JSON 4xx for an id of the wrong shape
 * (percent-encoded non-ASCII, dots and wildcards, escaped operators, slashes, spaces, very
 * long ones) and changes nothing: no id reaches a key lookup (NATS KV keys allow only a few
 * characters, and a refused key used to surface as a 500).
 */
import t, { type Test } from 'tap';
import { OPERATOR_TOKEN, createOrg, http, useService } from '../helpers/service.js';
import { call } from '../helpers/billing-api.js';

const { svc } = useService(t, 'path-ids');

/** Path segments as sent (already percent-encoded where they carry an escape). */
const HOSTILE = ['%C3%A9', 'org_x.*', 'org_%3E', 'org_x%2Fy', 'a%20b', 'x.>', '*', '%00', 'org_' + 'A'.repeat(300), '..%2F..'];

const payment = { id: 'p1', invoiceId: null, invoiceNumber: null, customerId: 'cus_1', customerName: null, amount: 1250, currency: 'USD', status: 'posted', paymentDate: '2026-11-01T10:00:00Z', paymentType: 'card', externalPaymentId: 'ch_1' };

function clearRefusal(t: Test, what: string, r: { status: number; body: any }): void {
  t.ok(r.status >= 400 && r.status < 500, `${what}: a 4xx (got ${r.status} ${JSON.stringify(r.body).slice(0, 200)})`);
  t.ok(typeof r.body === 'object' && r.body !== null && typeof r.body.error === 'string' && typeof r.body.code === 'string' && typeof r.body.details === 'string', `${what}: a JSON {error, code, details}`);
}

t.test('operator routes: an id not shaped like an organization id is no organization', async (t) => {
  const org = await createOrg(svc.url);
  const before = await http(svc.url, 'GET', `/admin/v1/organizations/${org.id}`, { token: OPERATOR_TOKEN });
  for (const id of HOSTILE) {
    const routes: [string, string, unknown][] = [
      ['GET', `/admin/v1/organizations/${id}`, undefined],
      ['PATCH', `/admin/v1/organizations/${id}/limits`, { burst: 600 }],
      ['GET', `/admin/v1/organizations/${id}/stats`, undefined],
      ['POST', `/admin/v1/organizations/${id}/events`, { mode: 'live', event: 'billing-payment-succeeded', data: { payment } }],
    ];
    for (const [method, p, body] of routes) {
      const r = await http(svc.url, method, p, { token: OPERATOR_TOKEN, ...(body === undefined ? {} : { body }) });
      clearRefusal(t, `${method} ${p.slice(0, 80)}`, r);
      t.equal(r.status, 404, `${method} ${p.slice(0, 80)}: 404`);
      t.equal(r.body.code, 'NOT_FOUND');
    }
  }
  // Shaped like an id, of no organization: every operator route answers 404 alike (stats too, where the registry is).
  const unknown = 'org_AAAAAAAAAAAAAAAAAAAA';
  for (const [method, p, body] of [
    ['GET', `/admin/v1/organizations/${unknown}`, undefined],
    ['PATCH', `/admin/v1/organizations/${unknown}/limits`, { burst: 600 }],
    ['GET', `/admin/v1/organizations/${unknown}/stats`, undefined],
  ] as [string, string, unknown][]) {
    const r = await http(svc.url, method, p, { token: OPERATOR_TOKEN, ...(body === undefined ? {} : { body }) });
    t.equal(r.status, 404, `${method} ${p}: 404 for an organization that does not exist`);
    t.equal(r.body.code, 'NOT_FOUND');
  }
  t.equal((await http(svc.url, 'GET', `/admin/v1/organizations/${org.id}/stats`, { token: OPERATOR_TOKEN })).status, 200, "an existing organization's stats");
  const after = await http(svc.url, 'GET', `/admin/v1/organizations/${org.id}`, { token: OPERATOR_TOKEN });
  t.same(after.body, before.body, 'the organization is unchanged');
});

t.test('organization routes: a malformed id in any position is refused', async (t) => {
  const org = await createOrg(svc.url);
  const c = await call(svc.url, org, 'POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme' });
  await call(svc.url, org, 'PUT', `/api/v2/customers/${c.id}/units/root`, {});
  const plan = await call(svc.url, org, 'POST', '/api/v2/plans', { name: 'Pro' });
  const cur = '0b5e7c1a-1111-4222-8333-444455556666';
  const ola = await call(svc.url, org, 'POST', `/api/v2/customers/${c.id}/order-line-attributes`, { planId: plan.id, eventName: 'e', unitPrice: '1', currency: 'EUR', creditsCurrencyId: cur, creditsPerUnit: '1' });
  const pool = await call(svc.url, org, 'POST', `/api/v2/customers/${c.id}/credit-pools`, { orderLineAttributeId: ola.id, credits: '10' });
  const cap = { amount: '5', frequency: 'MONTHLY', effectiveFrom: '2026-01-01T00:00:00Z' };
  await call(svc.url, org, 'PUT', `/api/v2/customers/${c.id}/units/root/credit-caps/${cur}`, cap);
  const snapshot = async (): Promise<unknown> => [
    await call(svc.url, org, 'GET', `/api/v2/customers/${c.id}`),
    await call(svc.url, org, 'GET', `/api/v2/customers/${c.id}/units`),
    await call(svc.url, org, 'GET', `/api/v2/customers/${c.id}/credit-pools`),
    await call(svc.url, org, 'GET', `/api/v2/customers/${c.id}/credit-caps`),
    await call(svc.url, org, 'GET', '/api/v2/webhooks'),
  ];
  const before = await snapshot();
  // Each route with each of its parameters replaced in turn; `{x}` marks the parameters.
  const routes: [string, string, Record<string, string>, unknown][] = [
    ['GET', '/api/v2/customers/{customerId}', { customerId: c.id }, undefined],
    ['GET', '/api/v2/customers/{customerId}/units', { customerId: c.id }, undefined],
    ['PUT', '/api/v2/customers/{customerId}/units/{unit}', { customerId: c.id, unit: 'root' }, { name: 'x' }],
    ['GET', '/api/v2/customers/{customerId}/units/{unit}', { customerId: c.id, unit: 'root' }, undefined],
    ['POST', '/api/v2/customers/{customerId}/order-line-attributes', { customerId: c.id }, { planId: plan.id, eventName: 'f', unitPrice: '1', currency: 'EUR' }],
    ['GET', '/api/v2/customers/{customerId}/order-line-attributes', { customerId: c.id }, undefined],
    ['POST', '/api/v2/customers/{customerId}/credit-pools', { customerId: c.id }, { orderLineAttributeId: ola.id, credits: '1' }],
    ['GET', '/api/v2/customers/{customerId}/credit-pools', { customerId: c.id }, undefined],
    ['POST', '/api/v2/customers/{customerId}/credit-pools/{pool}/top-ups', { customerId: c.id, pool: pool.id }, { credits: '1' }],
    ['PUT', '/api/v2/customers/{customerId}/units/{unit}/credit-caps/{cur}', { customerId: c.id, unit: 'root', cur }, cap],
    ['GET', '/api/v2/customers/{customerId}/units/{unit}/credit-caps/{cur}', { customerId: c.id, unit: 'root', cur }, undefined],
    ['DELETE', '/api/v2/customers/{customerId}/units/{unit}/credit-caps/{cur}', { customerId: c.id, unit: 'root', cur }, undefined],
    ['GET', '/api/v2/customers/{customerId}/credit-caps', { customerId: c.id }, undefined],
    ['PATCH', '/api/v2/webhooks/{event}', { event: 'billing-credits-depleted' }, { enabled: false }],
    ['POST', '/api/v2/webhooks/{event}/test', { event: 'billing-credits-depleted' }, {}],
    ['POST', '/api/v2/webhook-deliveries/{delivery}/resend', { delivery: 'whd_x' }, {}],
  ];
  for (const [method, pattern, good, body] of routes) {
    for (const param of Object.keys(good)) {
      for (const id of HOSTILE) {
        // A unit external id is the caller's own name (any text): a PUT creates a unit so
        // named; elsewhere a name no unit has is not found.
        if (method === 'PUT' && param === 'unit') continue;
        const p = pattern.replace(/\{(\w+)\}/g, (_, name: string) => (name === param ? id : good[name]!));
        const r = await http(svc.url, method, p, { token: org.live, ...(body === undefined ? {} : { body }) });
        clearRefusal(t, `${method} ${p.slice(0, 90)}`, r);
      }
    }
  }
  t.same(await snapshot(), before, 'nothing changed');
});

/** Writes `bytes` on a new connection; what came back within 3 s, and whether the service closed it. */
async function rawExchange(bytes: string): Promise<{ text: string; closed: boolean }> {
  const { connect } = await import('node:net');
  const u = new URL(svc.url);
  const sock = connect(Number(u.port), u.hostname);
  const got: Buffer[] = [];
  sock.on('data', (d: Buffer) => got.push(d));
  const closed = new Promise<boolean>((resolve) => {
    sock.once('close', () => resolve(true));
    setTimeout(() => resolve(false), 3_000);
  });
  await new Promise<void>((resolve) => sock.once('connect', () => resolve()));
  sock.write(bytes);
  const wasClosed = await closed;
  sock.destroy();
  return { text: Buffer.concat(got).toString('latin1'), closed: wasClosed };
}

/** uWebSockets.js's binaries differ by Node line: Node 20's (ABI 115) is an older build than Node 22's and 24's. */
const OLDER_UWS = Number(process.versions.modules) <= 115;

t.test(`a body longer than its Content-Length, on Node ${process.versions.node}: ${OLDER_UWS ? "uWebSockets.js's 505 and the connection closed" : 'the first request answered, the extra bytes left waiting'} (documented)`, async (t) => {
  // The bytes past the declared length are read as the next request on the connection. Node
  // 20's uWebSockets.js refuses them itself (505, connection closed) before the service's own
  // answer to the first request is written; Node 22's and 24's answer the first request (here
  // its 5 bytes are not JSON: the service's own 400) and keep the rest as the start of a next
  // request. docs/api.md ("HTTP framing") says so. What is tested: that answer, and that
  // nothing else suffers.
  const raw = rawExchange;
  const head = (len: number): string => `POST /admin/v1/organizations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${OPERATOR_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: ${len}\r\n\r\n`;
  const { text, closed } = await raw(`${head(5)}{"name":"x"}`);
  const statuses = [...text.matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => Number(m[1]));
  if (OLDER_UWS) {
    t.same(statuses, [505], `uWebSockets.js's own 505 only: ${JSON.stringify(text.slice(0, 200))}`);
    t.ok(closed, 'the connection is closed');
  } else {
    t.same(statuses, [400], `the service's own answer to the first request only: ${JSON.stringify(text.slice(0, 200))}`);
    t.match(text, /"code":"INVALID_(JSON|BODY)"/, 'its 5 bytes are not a JSON body');
    t.notOk(closed, 'the extra bytes wait as the start of a next request');
  }
  // The same request with its true length is answered as usual, on a new connection.
  const ok = await http(svc.url, 'POST', '/admin/v1/organizations', { token: OPERATOR_TOKEN, raw: '{"name":"x"}' });
  t.equal(ok.status, 201, 'the service serves on');
  t.equal((await http(svc.url, 'GET', '/healthz')).status, 200, 'and its health check answers');
});

t.test('conflicting Content-Length values are refused with a 400 and the connection is closed (RFC 9112 section 6.3)', async (t) => {
  const org = await createOrg(svc.url);
  const raw = (lengths: string[], body: string): Promise<{ text: string; closed: boolean }> =>
    rawExchange(`POST /api/v2/analytics/query HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${org.live}\r\nContent-Type: application/json\r\n${lengths.map((l) => `Content-Length: ${l}\r\n`).join('')}\r\n${body}`);
  const body = '{"query":"SELECT 1 AS x"}';
  const answer = (text: string): number[] => [...text.matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => Number(m[1]));
  // The first field frames the body (uWebSockets.js reads it): the service refuses the request.
  const first = await raw([String(body.length), '3'], body);
  t.same(answer(first.text), [400], `Content-Length ${body.length} then 3: one answer, a 400 (${JSON.stringify(first.text.slice(0, 120))})`);
  t.match(first.text, /"code":"INVALID_BODY"/);
  t.match(first.text, /conflicting Content-Length/, 'naming the problem');
  t.ok(first.closed, 'the connection is closed: what follows cannot be framed');
  // A shorter first field leaves bytes that uWebSockets.js reads as a next request, and refuses
  // itself (505, on every Node line here) before the service's answer is written.
  const shorter = await raw(['3', String(body.length)], body);
  t.same(answer(shorter.text), [505], `Content-Length 3 then ${body.length}: ${JSON.stringify(shorter.text.slice(0, 120))}`);
  t.ok(shorter.closed, 'the connection is closed');
  // A list in one field: uWebSockets.js refuses it itself, with its own 400.
  const list = await raw([`${body.length}, 3`], body);
  t.same(answer(list.text), [400], `Content-Length "${body.length}, 3": a 400 (${JSON.stringify(list.text.slice(0, 120))})`);
  t.ok(list.closed, 'the connection is closed');
  // The same length twice is one length.
  const same = await raw([String(body.length), String(body.length)], body);
  t.match(same.text, /^HTTP\/1\.1 200/, `the same value twice is served: ${JSON.stringify(same.text.slice(0, 120))}`);
  t.equal((await http(svc.url, 'GET', '/healthz')).status, 200, 'the service serves on');
});

t.test('the absolute and asterisk request-target forms are refused by uWebSockets.js itself (documented)', async (t) => {
  const org = await createOrg(svc.url);
  for (const line of [`GET http://${new URL(svc.url).host}/api/v2/customers HTTP/1.1`, 'OPTIONS * HTTP/1.1']) {
    const { text, closed } = await rawExchange(`${line}\r\nHost: x\r\nAuthorization: Bearer ${org.live}\r\n\r\n`);
    t.match(text, /^HTTP\/1\.1 505 /, `${line}: ${JSON.stringify(text.slice(0, 80))}`);
    t.ok(closed, 'the connection is closed');
  }
  // The origin form of the same request is served.
  t.equal((await http(svc.url, 'GET', '/api/v2/customers', { token: org.live })).status, 200);
});
