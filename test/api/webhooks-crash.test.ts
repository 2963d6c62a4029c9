/**
 * kill -9 of the dispatcher (its own process, ROLE=dispatcher) at an observed point: the
 * receiver answers the first HELD_AFTER deliveries and then holds every further delivery
 * open without answering; the dispatcher is killed once the receiver holds at least one, so
 * deliveries are provably in flight at the kill (the held connections close unanswered when
 * the process dies). After a restart every event is still delivered (at least once), each
 * delivery verifying with the organization's secret. The dispatcher's ack wait is short
 * (DISPATCHER_ACK_WAIT_MS), so the events the dead process held come back in seconds.
 */
import t from 'tap';
import http from 'node:http';
import { createHmac } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { NATS_URL, OPERATOR_TOKEN, ServiceProcess, cleanup, createOrg, http as call, isolation, waitFor } from '../helpers/service.js';

const EVENTS = 30;
const HELD_AFTER = 3;
const ACK_WAIT_MS = 5_000;

interface Held {
  id: string;
  res: http.ServerResponse;
  closed: Promise<boolean>;
}

t.test('kill -9 of the dispatcher while deliveries are held open: every event still delivered', async (t) => {
  const iso = isolation('whcrash');
  const api = new ServiceProcess(iso, { ROLE: 'ingress' });
  const env = { ROLE: 'dispatcher', WEBHOOK_TIMEOUT_MS: '4000', DISPATCHER_ACK_WAIT_MS: String(ACK_WAIT_MS), WEBHOOK_RETRY_SCHEDULE_MS: '200,200,200,200' };
  let dispatcher = new ServiceProcess(iso, env);
  const got = new Map<string, number>();
  let secret = '';
  let bad = 0;
  let holding = true;
  let answeredBeforeHold = 0;
  const held: Held[] = [];
  let firstHeld: () => void = () => undefined;
  const holdObserved = new Promise<void>((r) => {
    firstHeld = r;
  });
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
      if (holding && answeredBeforeHold >= HELD_AFTER) {
        // Held open: resolves true when the connection closes without an answer.
        const closed = new Promise<boolean>((r) => res.on('close', () => r(!res.writableEnded)));
        held.push({ id, res, closed });
        firstHeld();
        return;
      }
      if (holding) answeredBeforeHold++;
      got.set(id, (got.get(id) ?? 0) + 1);
      res.writeHead(200).end();
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
  const org = await createOrg(api.url);
  secret = (await call(api.url, 'POST', '/api/v2/webhooks/rotate-secret', { token: org.live })).body.signingSecret;
  t.equal((await call(api.url, 'PATCH', '/api/v2/webhooks/billing-payment-succeeded', { token: org.live, body: { url, enabled: true } })).status, 200);
  // Every event is on the bus before the dispatcher starts, so nothing else happens between
  // the observed point and the kill.
  for (let i = 0; i < EVENTS; i++) {
    const r = await call(api.url, 'POST', `/admin/v1/organizations/${org.id}/events`, {
      token: OPERATOR_TOKEN,
      body: { mode: 'live', event: 'billing-payment-succeeded', data: { payment: { id: `pay_${i}`, invoiceId: null, invoiceNumber: null, customerId: 'c', customerName: null, amount: i, currency: 'EUR', status: 'posted', paymentDate: '2026-11-01T00:00:00Z', paymentType: 'sepa', externalPaymentId: null } } },
    });
    t.equal(r.status, 202);
  }

  await dispatcher.start();
  // The observed point: HELD_AFTER deliveries answered, at least one more held open. Kill now.
  await holdObserved;
  const answeredAtKill = got.size;
  const openAtKill = held.filter((h) => !h.res.writableEnded && !h.res.destroyed);
  await dispatcher.kill9();
  t.equal(answeredAtKill, HELD_AFTER, `killed after exactly ${HELD_AFTER} answered deliveries`);
  t.ok(openAtKill.length >= 1, `killed while ${openAtKill.length} deliveries were held open by the receiver`);
  const unanswered = await Promise.all(openAtKill.map((h) => h.closed));
  t.ok(unanswered.every(Boolean), 'each held connection was closed by the dying dispatcher, unanswered');
  t.ok(got.size < EVENTS, `killed with ${got.size} of ${EVENTS} delivered`);

  const nc = await connect({ servers: NATS_URL });
  try {
    const ci = await (await jetstreamManager(nc)).consumers.info(`${iso.natsPrefix}_EVENTS`, 'dispatcher');
    t.equal(ci.config.ack_wait, ACK_WAIT_MS * 1_000_000, 'the dispatcher consumer uses DISPATCHER_ACK_WAIT_MS');
  } finally {
    await nc.close();
  }

  holding = false;
  dispatcher = new ServiceProcess(iso, env);
  await dispatcher.start();
  await waitFor(async () => got.size, (n) => n === EVENTS, 60_000);
  t.equal(got.size, EVENTS, 'every event delivered');
  for (const h of openAtKill) t.ok((got.get(h.id) ?? 0) >= 1, `${h.id}, held at the kill, delivered after the restart`);
  t.equal(bad, 0, 'every delivery verifies');
  // A delivery answered just before the kill may not have been logged or acked by the dead
  // process: it comes back after the ack wait and is logged then.
  const loggedDelivered = async (): Promise<number> => {
    const log = (await call(api.url, 'GET', '/api/v2/webhook-deliveries?limit=1000', { token: org.live })).body.deliveries as { outcome: string; eventId: string }[];
    return new Set(log.filter((d) => d.outcome === 'delivered').map((d) => d.eventId)).size;
  };
  t.equal(await waitFor(loggedDelivered, (n) => n === EVENTS, 4 * ACK_WAIT_MS), EVENTS, 'the log shows each event delivered');
});
