/**
 * kill -9 of the dispatcher (its own process, ROLE=dispatcher) in the middle of deliveries
 * to a slow receiver: after a restart every event is still delivered (at least once), each
 * delivery verifying with the organization's secret.
 */
import t from 'tap';
import http from 'node:http';
import { createHmac } from 'node:crypto';
import { OPERATOR_TOKEN, ServiceProcess, cleanup, createOrg, http as call, isolation, sleep, waitFor } from '../helpers/service.js';

const EVENTS = 30;

t.test('kill -9 of the dispatcher mid-delivery: every event still delivered', async (t) => {
  const iso = isolation('whcrash');
  const api = new ServiceProcess(iso, { ROLE: 'ingress' });
  const env = { ROLE: 'dispatcher', WEBHOOK_TIMEOUT_MS: '2000', WEBHOOK_RETRY_SCHEDULE_MS: '200,200,200,200' };
  let dispatcher = new ServiceProcess(iso, env);
  const got = new Map<string, number>();
  let secret = '';
  let bad = 0;
  // A slow receiver: 150 ms per delivery, so the kill lands while deliveries are in flight.
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const header = String(req.headers['x-webhook-signature'] ?? '');
      const m = /^t=(\d+),s=(.+)$/.exec(header);
      const ok = m !== null && createHmac('sha256', secret).update(`${m[1]}.`).update(raw).digest('base64') === m[2];
      if (!ok) bad++;
      const id = JSON.parse(raw.toString()).data.payment.id as string;
      setTimeout(() => {
        got.set(id, (got.get(id) ?? 0) + 1);
        res.writeHead(200).end();
      }, 150);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`;
  t.teardown(async () => {
    await api.stop();
    await dispatcher.stop();
    server.closeAllConnections();
    server.close();
    await cleanup(iso);
  });

  await api.start();
  await dispatcher.start();
  const org = await createOrg(api.url);
  secret = (await call(api.url, 'POST', '/api/v2/webhooks/rotate-secret', { token: org.live })).body.signingSecret;
  t.equal((await call(api.url, 'PATCH', '/api/v2/webhooks/billing-payment-succeeded', { token: org.live, body: { url, enabled: true } })).status, 200);

  for (let i = 0; i < EVENTS; i++) {
    const r = await call(api.url, 'POST', `/admin/v1/organizations/${org.id}/events`, {
      token: OPERATOR_TOKEN,
      body: { mode: 'live', event: 'billing-payment-succeeded', data: { payment: { id: `pay_${i}`, invoiceId: null, invoiceNumber: null, customerId: 'c', customerName: null, amount: i, currency: 'EUR', status: 'posted', paymentDate: '2026-11-01T00:00:00Z', paymentType: 'sepa', externalPaymentId: null } } },
    });
    t.equal(r.status, 202);
  }
  await waitFor(async () => got.size, (n) => n >= 3, 20_000);
  await dispatcher.kill9();
  const atKill = got.size;
  t.ok(atKill < EVENTS, `killed with ${atKill} of ${EVENTS} delivered`);
  await sleep(300);
  dispatcher = new ServiceProcess(iso, env);
  await dispatcher.start();
  await waitFor(async () => got.size, (n) => n === EVENTS, 60_000);
  t.equal(got.size, EVENTS, 'every event delivered');
  t.equal(bad, 0, 'every delivery verifies');
  // A delivery the receiver answered just before the kill was not yet logged or acked by the
  // dead process: it comes back after the ack wait (2 × timeout + 10 s) and is logged then.
  const loggedDelivered = async (): Promise<number> => {
    const log = (await call(api.url, 'GET', '/api/v2/webhook-deliveries?limit=1000', { token: org.live })).body.deliveries as { outcome: string; eventId: string }[];
    return new Set(log.filter((d) => d.outcome === 'delivered').map((d) => d.eventId)).size;
  };
  t.equal(await waitFor(loggedDelivered, (n) => n === EVENTS, 40_000), EVENTS, 'the log shows each event delivered');
});
