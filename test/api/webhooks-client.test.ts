/**
 * Webhook management through the official client, unchanged: `@paid-ai/paid-node`'s
 * `client.webhooks.listWebhooks()`, `updateWebhook({webhookName, url, enabled})` and
 * `testWebhook({webhookName})` against the running service (the client calls the collection
 * as `webhooks/`, with a trailing slash). Test deliveries go to a plain HTTP receiver in this
 * test (the test service allows 127.0.0.0/8 over HTTP: WEBHOOK_ALLOW_HTTP,
 * WEBHOOK_ALLOWED_NETWORKS) that verifies each with the receiver package's `verifyWebhook`.
 * Refusals surface as the client's `PaidError` carrying the service's `{error, code, details}`
 * in `err.body`, and change nothing.
 */
import t, { type Test } from 'tap';
import http from 'node:http';
import type { PaidClient } from '@paid-ai/paid-node';
import { paidClient, paidError } from '../helpers/paid.js';
import { verifyWebhook } from '../../packages/receiver/src/index.js';
import { EVENT_NAMES } from '../../src/bus/events.js';
import { createOrg, http as call, useService, type TestOrg } from '../helpers/service.js';

const { svc } = useService(t, 'whclient');

interface Received {
  path: string;
  raw: Buffer;
  signature: string | undefined;
}

/** A plain receiver: keeps every body and signature header; answers by script (default 200). */
const got: Received[] = [];
let script: number[] = [];
const receiver = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    got.push({ path: req.url ?? '', raw: Buffer.concat(chunks), signature: req.headers['x-webhook-signature'] as string | undefined });
    res.writeHead(script.shift() ?? 200).end();
  });
});
let receiverUrl = '';
t.before(async () => {
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as { port: number }).port}`;
});
t.teardown(async () => {
  receiver.closeAllConnections();
  await new Promise<void>((r) => receiver.close(() => r()));
});

const EVENT = 'billing-payment-succeeded';
/** In the spec (section 6) but not in the client's enum of webhook names: the client passes it through. */
const CAP_EVENT = 'billing-credit-cap-reached' as typeof EVENT;

const clientOf = (org: TestOrg): PaidClient => paidClient(svc.url, org.live);

/** The client's refusal of `p`: a PaidError with the status and the service's error body. */
async function refusal(t: Test, p: Promise<unknown>, status: number, code: string, details: RegExp): Promise<void> {
  const e = await paidError(p);
  t.equal(e.statusCode, status);
  const body = e.body as { error: unknown; code: unknown; details: unknown };
  t.same(Object.keys(body).sort(), ['code', 'details', 'error'], 'err.body is the service error');
  t.equal(body.code, code);
  t.type(body.error, 'string');
  t.match(body.details, details);
}

t.test('list, configure and test through the official client, a delivery verified by the receiver package', async (t) => {
  const org = await createOrg(svc.url);
  const client = clientOf(org);

  const listed = await client.webhooks.listWebhooks();
  t.same(listed.data.map((w) => w.name), EVENT_NAMES, 'the ten events, billing-credit-cap-reached included');
  for (const w of listed.data) {
    t.match(w, { id: /^wh_/, description: /^Fires when /, enabled: false, url: null, lastSentAt: null, lastStatus: null }, w.name);
  }

  // Configure: the client's PATCH body {url, enabled}; one Webhook back.
  const updated = await client.webhooks.updateWebhook({ webhookName: EVENT, url: `${receiverUrl}/hook`, enabled: true });
  const id = listed.data.find((w) => w.name === EVENT)!.id;
  t.match(updated, { id, name: EVENT, enabled: true, url: `${receiverUrl}/hook`, lastSentAt: null, lastStatus: null });

  // Not ready without a signing secret: the client throws, nothing is sent.
  await refusal(t, client.webhooks.testWebhook({ webhookName: EVENT }), 409, 'WEBHOOK_NOT_READY', /signing secret/);
  t.equal(got.length, 0, 'nothing sent');

  // The client has no rotate operation: the service's own one, with the same key.
  const rot = await call(svc.url, 'POST', '/api/v2/webhooks/rotate-secret', { token: org.live });
  t.equal(rot.status, 201);
  const secret = rot.body.signingSecret as string;

  const tested = await client.webhooks.testWebhook({ webhookName: EVENT });
  t.equal(tested.success, true, "the client's WebhookTestResponse");
  t.match(tested, { delivered: true, statusCode: 200, deliveryId: /^whd_test_/ }, "the delivery's details beside it");
  t.equal(got.length, 1, 'the receiver got one delivery');
  const d = got[0]!;
  t.equal(d.path, '/hook');
  t.match(verifyWebhook(d.raw, d.signature, secret), { ok: true }, 'verified by packages/receiver');
  t.match(verifyWebhook(d.raw, d.signature, 'whsec_not_the_secret'), { ok: false, reason: 'BAD_SIGNATURE' }, 'and by no other secret');
  t.match(JSON.parse(d.raw.toString()), { event: EVENT, isTest: true });

  const after = (await client.webhooks.listWebhooks()).data.find((w) => w.name === EVENT)!;
  t.match(after, { id, enabled: true, url: `${receiverUrl}/hook`, lastStatus: 'success' });
  t.ok(Math.abs(Date.parse(after.lastSentAt!) - Date.now()) < 60_000, `lastSentAt is the test's time (${after.lastSentAt})`);

  // A receiver that answers 500: the test was sent, so the client gets a 200 {success: false}.
  script = [500];
  const failed = await client.webhooks.testWebhook({ webhookName: EVENT });
  t.match(failed, { success: false, delivered: false, statusCode: 500 });
  t.equal((await client.webhooks.listWebhooks()).data.find((w) => w.name === EVENT)!.lastStatus, 'failed');

  // The event the client's enum does not know yet works all the same.
  const cap = await client.webhooks.updateWebhook({ webhookName: CAP_EVENT, url: `${receiverUrl}/cap`, enabled: true });
  t.match(cap, { name: 'billing-credit-cap-reached', enabled: true, url: `${receiverUrl}/cap` });
  t.equal((await client.webhooks.testWebhook({ webhookName: CAP_EVENT })).success, true);
  const capDelivery = got.at(-1)!;
  t.equal(capDelivery.path, '/cap');
  t.match(verifyWebhook(capDelivery.raw, capDelivery.signature, secret), { ok: true });

  // The client's {url: null} clears the URL while disabled.
  const cleared = await client.webhooks.updateWebhook({ webhookName: CAP_EVENT, url: null, enabled: false });
  t.match(cleared, { name: 'billing-credit-cap-reached', enabled: false, url: null, lastStatus: 'success' });
});

t.test("refusals through the client: PaidError with the service's {error, code, details}, nothing changed", async (t) => {
  const org = await createOrg(svc.url);
  const client = clientOf(org);
  await client.webhooks.updateWebhook({ webhookName: EVENT, url: `${receiverUrl}/kept`, enabled: false });
  const before = await client.webhooks.listWebhooks();

  const unknown = 'billing-nope' as typeof EVENT;
  await refusal(t, client.webhooks.updateWebhook({ webhookName: unknown, enabled: true }), 404, 'NOT_FOUND', /^no webhook event "billing-nope"/);
  await refusal(t, client.webhooks.testWebhook({ webhookName: unknown }), 404, 'NOT_FOUND', /^no webhook event "billing-nope"/);
  await refusal(t, client.webhooks.updateWebhook({ webhookName: EVENT, url: 'not a url' }), 400, 'INVALID_WEBHOOK', /^url: /);
  await refusal(t, client.webhooks.updateWebhook({ webhookName: EVENT, url: 'http://10.0.0.7/hook' }), 400, 'INVALID_WEBHOOK', /^url: .*10\.0\.0\.7/);
  await refusal(t, client.webhooks.updateWebhook({ webhookName: EVENT }), 400, 'INVALID_BODY', /url or enabled/);
  await refusal(t, client.webhooks.updateWebhook({ webhookName: 'billing-invoice-paid', enabled: true }), 409, 'WEBHOOK_NOT_READY', /^enabled: billing-invoice-paid has no URL/);
  await refusal(t, client.webhooks.testWebhook({ webhookName: EVENT }), 409, 'WEBHOOK_NOT_READY', /disabled/);
  const foreign = paidClient(svc.url, 'sk_live_not_a_key_at_all_000000');
  await refusal(t, foreign.webhooks.listWebhooks(), 401, 'UNAUTHORIZED', /./);

  t.same(await client.webhooks.listWebhooks(), before, 'nothing changed');
  t.equal(got.filter((g) => g.path === '/kept').length, 0, 'nothing sent');
});
