/**
 * Webhooks through the real service: management API, signing secret, test deliveries and
 * real billing events delivered by the dispatcher to a plain HTTP receiver in this test,
 * which verifies every delivery with nothing but spec 5.2 and the secret (its own HMAC
 * code, not the service's helper). Retries, timeouts, rotation, the delivery log, resend.
 */
import t from 'tap';
import http from 'node:http';
import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import { OPERATOR_TOKEN, TEST_WEBHOOK_KEY, createOrg, http as call, sendBatch, sleep, useService, waitFor, type TestOrg } from '../helpers/service.js';
import { EVENT_NAMES } from '../../src/bus/events.js';

const { svc } = useService(t, 'webhooks', { WEBHOOK_RETRY_SCHEDULE_MS: '300,300,300', WEBHOOK_TIMEOUT_MS: '1000' });

interface Received {
  path: string;
  body: string;
  signature: string;
  envelope: { event: string; timestamp: string; isTest: boolean; data: any };
  verifiedWith: string | null;
}

/** An independent receiver: answers by script, verifies per spec 5.2 with the secrets it is told. */
class Receiver {
  readonly got: Received[] = [];
  secrets: string[] = [];
  /** Status per request (in order); default 200. 'hang' never answers. */
  script: (number | 'hang')[] = [];
  /** Per request left hanging: when it came and when the sender gave up on it (null: still open). */
  readonly hung: { from: number; to: number | null }[] = [];
  /** Requests left hanging that were open at `at` (epoch ms). */
  openAt(at: number): number {
    return this.hung.filter((h) => h.from <= at && (h.to === null || h.to > at)).length;
  }
  private server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const header = String(req.headers['x-webhook-signature'] ?? '');
      this.got.push({ path: req.url ?? '', body: raw.toString(), signature: header, envelope: JSON.parse(raw.toString()), verifiedWith: this.verify(raw, header) });
      const step = this.script.shift() ?? 200;
      if (step === 'hang') {
        const h = { from: Date.now(), to: null as number | null };
        this.hung.push(h);
        res.on('close', () => (h.to = Date.now()));
        return;
      }
      res.writeHead(step).end();
    });
  });
  url = '';

  async start(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as { port: number }).port}`;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }

  /** Spec 5.2: split on ",", each pair on its first "=", HMAC-SHA256 over "<t>.<raw body>", base64 with padding, constant-time compare, 5 minutes. */
  private verify(raw: Buffer, header: string): string | null {
    const pairs = new Map<string, string>();
    for (const p of header.split(',')) {
      const i = p.indexOf('=');
      if (i > 0) pairs.set(p.slice(0, i), p.slice(i + 1));
    }
    const ts = pairs.get('t');
    const sig = pairs.get('s');
    if (!ts || !sig || Math.abs(Date.now() - Number(ts)) > 5 * 60_000) return null;
    for (const secret of this.secrets) {
      const expected = createHmac('sha256', secret).update(`${ts}.`).update(raw).digest('base64');
      const a = Buffer.from(expected);
      const b = Buffer.from(sig);
      if (a.length === b.length && timingSafeEqual(a, b)) return secret;
    }
    return null;
  }
}

const receiver = new Receiver();
t.before(() => receiver.start());
t.teardown(() => receiver.close());

const api = (org: TestOrg, method: string, path: string, body?: unknown) => call(svc.url, method, path, { token: org.live, body });

interface Webhook {
  id: string;
  name: string;
  description: string;
  enabled: boolean;
  url: string | null;
  lastSentAt: string | null;
  lastStatus: 'success' | 'failed' | null;
  updatedAt: string | null;
  lastDelivery: { deliveryId: string; attempt: number; isTest: boolean; statusCode: number | null } | null;
}

t.test('management: the ten events, validation, secret shown once, test deliveries', async (t) => {
  const org = await createOrg(svc.url);
  const list = await api(org, 'GET', '/api/v2/webhooks');
  t.equal(list.status, 200);
  const listed = list.body.data as Webhook[];
  t.same(listed.map((w) => w.name), EVENT_NAMES, 'the ten events of spec 6 in order, billing-credit-cap-reached included');
  t.same(listed[0], {
    id: listed[0]!.id, name: 'billing-invoice-created', description: 'Fires when a new invoice is created.', enabled: false, url: null, lastSentAt: null, lastStatus: null,
    updatedAt: null, lastDelivery: null,
  }, "the client's Webhook, then the service's own fields");
  t.match(listed[9], { name: 'billing-credit-cap-reached', description: /reach the cap set on that unit/ });
  t.ok(listed.every((w) => /^wh_[A-Za-z0-9_-]{22}$/.test(w.id)), 'ids: wh_ and 128 bits');
  t.equal(new Set(listed.map((w) => w.id)).size, 10, 'one id per event');
  t.ok(listed.every((w) => !w.id.includes(org.id.slice(4)) && !w.id.includes(w.name)), 'an id shows neither the organization nor the event');
  const other = await createOrg(svc.url);
  const otherIds = ((await api(other, 'GET', '/api/v2/webhooks')).body.data as Webhook[]).map((w) => w.id);
  const testIds = ((await call(svc.url, 'GET', '/api/v2/webhooks', { token: org.test })).body.data as Webhook[]).map((w) => w.id);
  t.equal(otherIds.filter((id) => listed.some((w) => w.id === id)).length, 0, 'another organization: other ids');
  t.equal(testIds.filter((id) => listed.some((w) => w.id === id)).length, 0, 'the test mode: other ids');
  const idKey = Buffer.from(hkdfSync('sha256', Buffer.from(TEST_WEBHOOK_KEY, 'hex'), Buffer.alloc(0), 'webhook-id', 32));
  const hmac = createHmac('sha256', idKey).update(`${org.id}\0live\0billing-invoice-created`).digest().subarray(0, 16);
  t.equal(listed[0]!.id, `wh_${hmac.toString('base64url')}`, 'an HMAC under a key derived from the webhook key: derived again alike, guessed by no one');
  const slash = await api(org, 'GET', '/api/v2/webhooks/');
  t.equal(slash.status, 200, 'the client calls the collection with a trailing slash');
  t.same(slash.body, list.body, 'the same answer');
  t.same(list.body.signingSecret, { exists: false, createdAt: null });

  const bad: [string, unknown, number, string, RegExp][] = [
    ['billing-nope', { enabled: true }, 404, 'NOT_FOUND', /no webhook event/],
    ['billing-payment-failed', { url: 'http://10.0.0.7/hook' }, 400, 'INVALID_WEBHOOK', /private|non-public|10\.0\.0\.7/i],
    ['billing-payment-failed', { url: 'http://169.254.169.254/latest' }, 400, 'INVALID_WEBHOOK', /link-local|169\.254/],
    ['billing-payment-failed', { url: 'http://[::ffff:10.0.0.1]/' }, 400, 'INVALID_WEBHOOK', /url/],
    ['billing-payment-failed', { url: 'http://0x0a000001/' }, 400, 'INVALID_WEBHOOK', /url/],
    ['billing-payment-failed', { url: 'not a url' }, 400, 'INVALID_WEBHOOK', /url/],
    ['billing-payment-failed', { url: 'ftp://example.com/' }, 400, 'INVALID_WEBHOOK', /url/],
    ['billing-payment-failed', { enabled: 'yes' }, 400, 'INVALID_WEBHOOK', /enabled/],
    ['billing-payment-failed', { url: `${receiver.url}/x`, extra: 1 }, 400, 'INVALID_BODY', /extra/],
    ['billing-payment-failed', {}, 400, 'INVALID_BODY', /url or enabled/],
  ];
  for (const [event, body, status, code, details] of bad) {
    const r = await api(org, 'PATCH', `/api/v2/webhooks/${event}`, body);
    t.equal(r.status, status, `${event} ${JSON.stringify(body)} → ${JSON.stringify(r.body)}`);
    t.equal(r.body.code, code);
    t.match(r.body.details, details);
  }
  t.match((await api(org, 'GET', '/api/v2/webhooks')).body.data[6], { name: 'billing-payment-failed', url: null, enabled: false, updatedAt: null }, 'nothing changed');

  // Enabled only with a URL: the state it would leave is refused whole.
  const notReady = await api(org, 'PATCH', '/api/v2/webhooks/billing-payment-failed', { enabled: true });
  t.equal(notReady.status, 409, 'enabling without a URL');
  t.equal(notReady.body.code, 'WEBHOOK_NOT_READY');
  t.match(notReady.body.details, /^enabled: billing-payment-failed has no URL/);
  const contradiction = await api(org, 'PATCH', '/api/v2/webhooks/billing-payment-failed', { url: null, enabled: true });
  t.equal(contradiction.status, 409, 'enabled with a null URL');
  t.match(contradiction.body.details, /^enabled: /);
  t.match((await api(org, 'GET', '/api/v2/webhooks')).body.data[6], { url: null, enabled: false, updatedAt: null }, 'nothing changed');

  const set = await api(org, 'PATCH', '/api/v2/webhooks/billing-payment-failed', { url: `${receiver.url}/payments`, enabled: false });
  t.equal(set.status, 200);
  t.same(Object.keys(set.body), Object.keys(listed[0]!), 'one Webhook, as listed');
  t.match(set.body, { id: listed[6]!.id, name: 'billing-payment-failed', url: `${receiver.url}/payments`, enabled: false, lastStatus: null });
  let r = await api(org, 'POST', '/api/v2/webhooks/billing-payment-failed/test', {});
  t.equal(r.status, 409, 'disabled → no test delivery');
  t.equal(r.body.code, 'WEBHOOK_NOT_READY');
  t.equal((await api(org, 'PATCH', '/api/v2/webhooks/billing-payment-failed', { enabled: true })).status, 200, 'enabled: the URL is set');
  const clearWhileOn = await api(org, 'PATCH', '/api/v2/webhooks/billing-payment-failed', { url: null });
  t.equal(clearWhileOn.status, 409, 'clearing the URL of an enabled webhook');
  t.match(clearWhileOn.body, { code: 'WEBHOOK_NOT_READY', details: /^url: billing-payment-failed is enabled; a URL can be cleared only while it is disabled/ });
  t.match((await api(org, 'GET', '/api/v2/webhooks')).body.data[6], { url: `${receiver.url}/payments`, enabled: true }, 'nothing changed');
  r = await api(org, 'POST', '/api/v2/webhooks/billing-payment-failed/test', {});
  t.equal(r.status, 409, 'no signing secret yet');
  t.match(r.body.details, /rotate-secret/);
  t.equal((await api(org, 'GET', '/api/v2/webhooks')).body.data[6].lastSentAt, null, 'nothing sent, nothing to show');

  const rot = await api(org, 'POST', '/api/v2/webhooks/rotate-secret');
  t.equal(rot.status, 201);
  t.match(rot.body.signingSecret, /^whsec_[A-Za-z0-9_-]{43}$/);
  t.notMatch(JSON.stringify((await api(org, 'GET', '/api/v2/webhooks')).body), rot.body.signingSecret, 'the secret is never readable again');
  receiver.secrets = [rot.body.signingSecret];

  for (const event of ((await api(org, 'GET', '/api/v2/webhooks')).body.data as Webhook[]).map((w) => w.name)) {
    await api(org, 'PATCH', `/api/v2/webhooks/${event}`, { url: `${receiver.url}/all`, enabled: true });
    const before = receiver.got.length;
    const test = await api(org, 'POST', `/api/v2/webhooks/${event}/test`, {});
    t.equal(test.status, 200, event);
    t.match(test.body, { success: true, event, delivered: true, statusCode: 200, deliveryId: /^whd_test_/ });
    const got = receiver.got[before]!;
    t.equal(got.verifiedWith, rot.body.signingSecret, `${event}: verifies with the spec's rules and the secret`);
    t.equal(got.envelope.event, event);
    t.equal(got.envelope.isTest, true);
    t.same(Object.keys(got.envelope).sort(), ['data', 'event', 'isTest', 'timestamp']);
    const ids = JSON.stringify(got.envelope.data).match(/"(?:id|customerId|planId|orderLineAttributeId|externalId)":"([a-z]+_test_[^"]*)"/g) ?? [];
    t.ok(ids.length > 0, `${event}: synthetic ids carry test prefixes`);
  }
  const after = (await api(org, 'GET', '/api/v2/webhooks')).body.data as Webhook[];
  t.ok(after.every((w) => w.lastStatus === 'success' && w.lastDelivery?.isTest === true && w.lastDelivery.statusCode === 200), 'every event: the test delivery is its last, a success');
  t.ok(after.every((w) => Date.parse(w.lastSentAt!) >= Date.parse(w.updatedAt!)), 'sent after its last change');

  // A receiver that refuses: the test was sent, so a 200 with success false; the list says failed.
  receiver.script = [500];
  const refused = await api(org, 'POST', '/api/v2/webhooks/billing-payment-failed/test/', {});
  t.equal(refused.status, 200, 'a refused test delivery is still a 200 (and the path answers with a trailing slash)');
  t.match(refused.body, { success: false, delivered: false, statusCode: 500, error: /500/ });
  const failed = ((await api(org, 'GET', '/api/v2/webhooks')).body.data as Webhook[])[6]!;
  t.match(failed, { name: 'billing-payment-failed', lastStatus: 'failed', lastDelivery: { deliveryId: refused.body.deliveryId, isTest: true, statusCode: 500 } });
  t.ok(Date.parse(failed.lastSentAt!) > Date.parse(after[6]!.lastSentAt!), 'a later attempt');

  // Cleared while disabled: the client's {url: null} with enabled false.
  const cleared = await api(org, 'PATCH', '/api/v2/webhooks/billing-payment-failed/', { url: null, enabled: false });
  t.equal(cleared.status, 200, JSON.stringify(cleared.body));
  t.match(cleared.body, { url: null, enabled: false, lastStatus: 'failed' }, 'the delivery history stays');
  const shapes: Record<string, string[]> = {
    'billing-credits-depleted': ['credits'],
    'billing-overage-incurred': ['overage'],
    'billing-credit-cap-reached': ['breachedUnit', 'cap', 'customer', 'detectedAt', 'period', 'used', 'usedDecimal'],
    'billing-invoice-created': ['invoice'],
    'billing-checkout-expired': ['checkout'],
  };
  for (const [event, keys] of Object.entries(shapes)) {
    t.same(Object.keys(receiver.got.find((g) => g.envelope.event === event)!.envelope.data).sort(), keys, `${event}: data keys`);
  }
  const data = (event: string) => receiver.got.find((g) => g.envelope.event === event)!.envelope.data;
  t.same(Object.keys(data('billing-credits-depleted').credits).sort(), ['customerId', 'customerName', 'orderLineAttributeId', 'creditsCurrencyId', 'totalCredits', 'remainingCredits', 'usedCredits', 'totalCreditsDecimal', 'remainingCreditsDecimal', 'usedCreditsDecimal', 'eventName', 'signalId', 'depletedAt'].sort(), 'spec 2.6 fields');
  t.same(Object.keys(data('billing-overage-incurred').overage).sort(), ['customerId', 'customerName', 'planId', 'planName', 'orderLineAttributeId', 'eventType', 'threshold', 'currentUsage', 'occurredAt'].sort(), 'spec 2.7 fields');
  t.match(data('billing-credit-cap-reached'), { customer: { id: /^cus_test_/ }, breachedUnit: { externalId: /^cu_test_/ }, cap: { frequency: 'MONTHLY', amountDecimal: '500' } }, 'spec 2.8 shape');
  const pay = receiver.got.find((g) => g.envelope.event === 'billing-payment-succeeded')!.envelope.data.payment;
  t.same(Object.keys(pay).sort(), ['amount', 'currency', 'customerId', 'customerName', 'externalPaymentId', 'id', 'invoiceId', 'invoiceNumber', 'paymentDate', 'paymentType', 'status'].sort(), 'spec 2.5 fields');
  t.match(pay.id, /^pay_test_/);
});

async function billingSetup(org: TestOrg): Promise<string> {
  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await api(org, method, path, body);
    if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const c = await ok('POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme' });
  const plan = await ok('POST', '/api/v2/plans', { name: 'Pro' });
  const ola = await ok('POST', `/api/v2/customers/${c.id}/order-line-attributes`, { planId: plan.id, eventName: 'call', unitPrice: '1', currency: 'USD', creditsCurrencyId: '11111111-2222-4333-8444-555555555555', creditsPerUnit: '1' });
  await ok('POST', `/api/v2/customers/${c.id}/credit-pools`, { orderLineAttributeId: ola.id, credits: '1' });
  return c.id;
}

const deliveries = async (org: TestOrg) => {
  const r = await api(org, 'GET', '/api/v2/webhook-deliveries');
  if (r.status !== 200) throw new Error(`deliveries: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.deliveries as { deliveryId: string; attempt: number; event: string; outcome: string; statusCode: number | null; error: string | null }[];
};

t.test('real events: delivered signed, 500 then 200 retried, a hanging receiver timed out and retried, rotation, log and resend', async (t) => {
  const org = await createOrg(svc.url, { burst: 100_000, refillPerSecond: 100_000 });
  await billingSetup(org);
  const rot = await api(org, 'POST', '/api/v2/webhooks/rotate-secret');
  receiver.secrets = [rot.body.signingSecret];
  await api(org, 'PATCH', '/api/v2/webhooks/billing-credits-depleted', { url: `${receiver.url}/depleted`, enabled: true });
  // billing-overage-incurred stays unconfigured: logged as not delivered.

  receiver.script = [500, 'hang', 200];
  const start = receiver.got.length;
  t.equal((await sendBatch(svc.url, org.live, { signals: [{ eventName: 'call', customer: { externalCustomerId: 'acme' } }, { eventName: 'call', customer: { externalCustomerId: 'acme' } }] })).status, 202);
  await waitFor(async () => receiver.got.length - start, (n) => n >= 3, 30_000);
  await sleep(300);
  const got = receiver.got.slice(start).filter((g) => g.path === '/depleted');
  t.equal(got.length, 3, 'three attempts: 500, no answer, 200');
  t.ok(got.every((g) => g.verifiedWith === rot.body.signingSecret), 'every attempt verifies');
  t.equal(new Set(got.map((g) => g.body)).size, 1, 'the same body bytes on every attempt');
  t.equal(new Set(got.map((g) => g.signature)).size, 3, 'each attempt signed afresh');
  const env = got[0]!.envelope;
  t.equal(env.event, 'billing-credits-depleted');
  t.equal(env.isTest, false);
  t.match(env.data.credits, { customerName: 'Acme', totalCreditsDecimal: '1', remainingCreditsDecimal: '0', usedCreditsDecimal: '1' });

  const log = await waitFor(() => deliveries(org), (d) => d.some((x) => x.outcome === 'delivered'), 10_000);
  const mine = log.filter((d) => d.event === 'billing-credits-depleted').reverse();
  t.same(mine.map((d) => [d.attempt, d.outcome, d.statusCode]), [[1, 'failed', 500], [2, 'failed', null], [3, 'delivered', 200]]);
  t.match(mine[1]!.error, /no answer within 1000 ms/);
  const skipped = log.find((d) => d.event === 'billing-overage-incurred');
  t.match(skipped, { outcome: 'not-delivered', error: /no webhook URL/ }, 'the overage event (unconfigured) is logged as not delivered');

  // Rotation: the next delivery is signed with the new secret only.
  const rot2 = await api(org, 'POST', '/api/v2/webhooks/rotate-secret');
  t.not(rot2.body.signingSecret, rot.body.signingSecret);
  receiver.secrets = [rot.body.signingSecret, rot2.body.signingSecret];
  const before = receiver.got.length;
  const resend = await api(org, 'POST', `/api/v2/webhook-deliveries/${encodeURIComponent(mine[2]!.deliveryId)}/resend`);
  t.equal(resend.status, 202, JSON.stringify(resend.body));
  await waitFor(async () => receiver.got.length, (n) => n > before, 10_000);
  const again = receiver.got[before]!;
  t.equal(again.body, got[0]!.body, 'the resent event carries the same envelope');
  t.equal(again.verifiedWith, rot2.body.signingSecret, 'signed with the new secret, not the old one');

  const depleted = ((await api(org, 'GET', '/api/v2/webhooks')).body.data as Webhook[]).find((w) => w.name === 'billing-credits-depleted')!;
  t.match(depleted, { lastStatus: 'success', lastDelivery: { isTest: false, statusCode: 200 } }, 'the last attempt of a real event: delivered');
  const overage = ((await api(org, 'GET', '/api/v2/webhooks')).body.data as Webhook[]).find((w) => w.name === 'billing-overage-incurred')!;
  t.match(overage, { lastSentAt: null, lastStatus: null, lastDelivery: null }, 'an event logged as not delivered was never sent');

  const unknown = await api(org, 'POST', '/api/v2/webhook-deliveries/nope/resend');
  t.equal(unknown.status, 404);
});

t.test('payment events from the operator API: validated, delivered once, and a slow receiver holds back no one else', async (t) => {
  const slowOrg = await createOrg(svc.url);
  const org = await createOrg(svc.url);
  const hanging = new Receiver();
  await hanging.start();
  t.teardown(() => hanging.close());
  hanging.script = Array.from({ length: 50 }, () => 'hang' as const);
  for (const [o, r] of [[slowOrg, hanging], [org, receiver]] as const) {
    const rot = await api(o, 'POST', '/api/v2/webhooks/rotate-secret');
    r.secrets = [...r.secrets, rot.body.signingSecret];
    await api(o, 'PATCH', '/api/v2/webhooks/billing-payment-succeeded', { url: `${r.url}/pay`, enabled: true });
  }
  const ops = (orgId: string, body: unknown) => call(svc.url, 'POST', `/admin/v1/organizations/${orgId}/events`, { token: OPERATOR_TOKEN, body });
  const payment = (id: string) => ({ id, invoiceId: null, invoiceNumber: null, customerId: 'cus_1', customerName: null, amount: 1250, currency: 'USD', status: 'posted', paymentDate: '2026-11-01T10:00:00Z', paymentType: 'card', externalPaymentId: 'ch_1' });

  const bad: [unknown, RegExp][] = [
    [{ mode: 'live', event: 'billing-payment-succeeded', data: { payment: { ...payment('p'), status: 'failed' } } }, /data\.payment\.status/],
    [{ mode: 'live', event: 'billing-payment-succeeded', data: { payment: { ...payment('p'), paymentDate: 'yesterday' } } }, /data\.payment\.paymentDate/],
    [{ mode: 'live', event: 'billing-payment-succeeded', data: { payment: { ...payment('p'), amount: '12' } } }, /data\.payment\.amount/],
    [{ mode: 'live', event: 'billing-payment-succeeded', data: { payment: { ...payment('p'), surprise: 1 } } }, /data\.payment\.surprise/],
    [{ mode: 'live', event: 'billing-payment-failed', data: { payment: payment('p') } }, /data\.payment\.status/],
    [{ mode: 'live', event: 'billing-credits-depleted', data: {} }, /event/],
    [{ mode: 'prod', event: 'billing-payment-succeeded', data: { payment: payment('p') } }, /mode/],
  ];
  for (const [body, details] of bad) {
    const r = await ops(org.id, body);
    t.equal(r.status, 400, JSON.stringify(r.body));
    t.equal(r.body.code, 'INVALID_EVENT');
    t.match(r.body.details, details);
  }
  t.equal((await ops('org_AAAAAAAAAAAAAAAAAAAA', { mode: 'live', event: 'billing-payment-succeeded', data: { payment: payment('p') } })).status, 404);

  // The slow organization's receiver never answers; its deliveries time out and retry.
  for (let i = 0; i < 5; i++) t.equal((await ops(slowOrg.id, { mode: 'live', event: 'billing-payment-succeeded', data: { payment: payment(`slow-${i}`) } })).status, 202);
  await sleep(200);
  const before = receiver.got.length;
  const sentAt = Date.now();
  const first = await ops(org.id, { mode: 'live', event: 'billing-payment-succeeded', data: { payment: payment('pay_fast') } });
  t.same([first.status, first.body.duplicate], [202, false]);
  const again = await ops(org.id, { mode: 'live', event: 'billing-payment-succeeded', data: { payment: payment('pay_fast') } });
  t.same([again.status, again.body.duplicate], [202, true], 'the same payment again is the same event');
  await waitFor(async () => receiver.got.length, (n) => n > before, 10_000);
  const deliveredAt = Date.now();
  // Held back, it would come only after a hanging delivery was given up (1 s, WEBHOOK_TIMEOUT_MS),
  // with none open. Within 900 ms, or with some hanging delivery still open when it came (a
  // loaded machine can be slower than the bound without anything being held back).
  const open = hanging.openAt(deliveredAt - 100);
  t.ok(deliveredAt - sentAt < 900 || open > 0, `delivered in ${deliveredAt - sentAt} ms, ${open} of the other organization's deliveries hanging then`);
  await sleep(500);
  const got = receiver.got.slice(before).filter((g) => g.path === '/pay');
  t.equal(got.length, 1, 'delivered once');
  t.ok(got[0]!.verifiedWith);
  t.same(got[0]!.envelope.data.payment, payment('pay_fast'));
  t.ok(hanging.got.length >= 5, 'the slow receiver was tried');
});

t.test('test deliveries to a receiver that never answers: at most 2 at once per organization and mode', async (t) => {
  const org = await createOrg(svc.url);
  const other = await createOrg(svc.url);
  const hanging = new Receiver();
  await hanging.start();
  t.teardown(() => hanging.close());
  hanging.script = Array.from({ length: 10 }, () => 'hang' as const);
  for (const o of [org, other]) {
    t.equal((await api(o, 'POST', '/api/v2/webhooks/rotate-secret')).status, 201);
    t.equal((await api(o, 'PATCH', '/api/v2/webhooks/billing-payment-failed', { url: `${hanging.url}/slow`, enabled: true })).status, 200);
  }
  const first = [api(org, 'POST', '/api/v2/webhooks/billing-payment-failed/test', {}), api(org, 'POST', '/api/v2/webhooks/billing-payment-failed/test', {})];
  await waitFor(async () => hanging.got.length, (n) => n === 2, 5_000);
  const third = await api(org, 'POST', '/api/v2/webhooks/billing-payment-failed/test', {});
  t.equal(third.status, 429, 'a third one is refused while two hold their connections');
  t.equal(third.body.code, 'CONCURRENCY_LIMIT_EXCEEDED');
  t.match(third.body.details, /at most 2 .*at once/);
  const patch = await api(org, 'PATCH', '/api/v2/webhooks/billing-payment-failed', { url: `${hanging.url}/elsewhere` });
  t.equal(patch.status, 429, 'a URL check counts too (it resolves names on the organization’s behalf)');
  t.equal(patch.body.code, 'CONCURRENCY_LIMIT_EXCEEDED');
  t.equal((await api(org, 'GET', '/api/v2/webhooks')).status, 200, 'requests that neither resolve nor connect are not limited');
  t.equal((await api(org, 'PATCH', '/api/v2/webhooks/billing-payment-failed', { enabled: true })).status, 200, 'nor is a PATCH without a URL');
  const neighbour = api(other, 'POST', '/api/v2/webhooks/billing-payment-failed/test', {});
  await waitFor(async () => hanging.got.length, (n) => n === 3, 5_000);
  t.pass('another organization is not held back');
  for (const r of [...(await Promise.all(first)), await neighbour]) t.match(r, { status: 200, body: { success: false, delivered: false, statusCode: null, error: 'no answer within 1000 ms' } });
  t.equal(hanging.got.length, 3, 'the refused one never reached the receiver');
  const log = (await api(org, 'GET', '/api/v2/webhook-deliveries')).body.deliveries as unknown[];
  t.equal(log.length, 2, 'and was not logged');
  t.equal(((await api(org, 'GET', '/api/v2/webhooks')).body.data as Webhook[]).find((w) => w.name === 'billing-payment-failed')!.url, `${hanging.url}/slow`, 'the refused PATCH changed nothing');
  hanging.script = [];
  const after = await api(org, 'POST', '/api/v2/webhooks/billing-payment-failed/test', {});
  t.match(after.body, { delivered: true, statusCode: 200 }, 'slots come back when the attempts end');
});

t.test('path parameters are decoded once: %25ZZ is the text %ZZ, a malformed escape is 400 INVALID_PATH', async (t) => {
  const org = await createOrg(svc.url);
  const cases: [string, string, number, string, RegExp][] = [
    ['PATCH', '/api/v2/webhooks/%25ZZ', 404, 'NOT_FOUND', /^no webhook event "%ZZ"/],
    ['POST', '/api/v2/webhooks/%25ZZ/test', 404, 'NOT_FOUND', /^no webhook event "%ZZ"/],
    ['POST', '/api/v2/webhook-deliveries/%25ZZ/resend', 404, 'NOT_FOUND', /^deliveryId: no delivery "%ZZ"/],
    ['PATCH', '/api/v2/webhooks/%ZZ', 400, 'INVALID_PATH', /^event: the path segment "%ZZ" is not valid percent-encoded UTF-8/],
    ['POST', '/api/v2/webhooks/%E0%A4%A/test', 400, 'INVALID_PATH', /^event: /],
    ['POST', '/api/v2/webhook-deliveries/%C0%AF/resend', 400, 'INVALID_PATH', /^deliveryId: /],
  ];
  for (const [method, p, status, code, details] of cases) {
    const r = await call(svc.url, method, p, { token: org.live, body: method === 'PATCH' ? { enabled: true } : {} });
    t.equal(r.status, status, `${method} ${p}`);
    t.equal(r.body.code, code, `${method} ${p}`);
    t.match(r.body.details, details, `${method} ${p}`);
  }
  const list = (await call(svc.url, 'GET', '/api/v2/webhooks', { token: org.live })).body.data as Webhook[];
  t.ok(list.every((w) => !w.enabled), 'nothing changed');
  // An event name written with escapes is the same event: decoded once, it matches.
  const r = await call(svc.url, 'PATCH', '/api/v2/webhooks/billing%2Dpayment%2Dfailed', { token: org.live, body: { enabled: false } });
  t.equal(r.status, 200);
  t.equal(r.body.name, 'billing-payment-failed');
});
