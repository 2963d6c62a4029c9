/**
 * The three example receivers (packages/receiver/examples: node:http, Express 5, Fastify 5)
 * receiving REAL deliveries from the service: test deliveries of all ten events, a real
 * billing-credits-depleted (and the overage after it) from signals, a payment from the
 * operator API. Each example verifies with the package; a recorder between the service and the
 * example keeps the exact bytes and the example's answers, so the test can also replay a
 * delivery tampered, re-serialized, or signed too long ago (401), and check that a resend from
 * the delivery log, and a failed-then-retried delivery, are each processed exactly once.
 */
import t from 'tap';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { OPERATOR_TOKEN, createOrg, http as call, sendBatch, useService, waitFor, type TestOrg } from '../helpers/service.js';
import { Redis } from 'ioredis';
import { type WebhookEvent, RedisDedupeStore, WEBHOOK_EVENTS, WebhookReceiver, creditsDecimals, signatureHeader } from '../../packages/receiver/src/index.js';
import { type ExampleOptions, createNodeHttpReceiver } from '../../packages/receiver/examples/node-http.js';
import { createExpressApp } from '../../packages/receiver/examples/express.js';
import { createFastifyApp } from '../../packages/receiver/examples/fastify.js';

const { svc } = useService(t, 'receiver', { WEBHOOK_RETRY_SCHEDULE_MS: '300,300,300', WEBHOOK_TIMEOUT_MS: '2000' });

interface Running {
  url: string;
  close: () => Promise<void>;
}

const serverUrl = (s: http.Server) => `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
const closeServer = (s: http.Server) => {
  s.closeAllConnections();
  return new Promise<void>((r) => s.close(() => r()));
};

const FRAMEWORKS: Record<string, (opts: ExampleOptions) => Promise<Running>> = {
  'node:http': async (opts) => {
    const s = createNodeHttpReceiver(opts);
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    return { url: serverUrl(s), close: () => closeServer(s) };
  },
  express: async (opts) => {
    const s = createExpressApp(opts).listen(0, '127.0.0.1');
    await new Promise((r) => s.once('listening', r));
    return { url: serverUrl(s), close: () => closeServer(s) };
  },
  fastify: async (opts) => {
    const app = createFastifyApp(opts);
    await app.listen({ port: 0, host: '127.0.0.1' });
    return { url: serverUrl(app.server), close: () => app.close() };
  },
};

interface Delivery {
  body: Buffer;
  headers: Record<string, string>;
  status: number;
  answer: any;
}

/** Between the service and the example: forwards each request unchanged and records it with the answer. */
class Recorder {
  readonly got: Delivery[] = [];
  private server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const headers: Record<string, string> = {};
      for (const h of ['content-type', 'x-webhook-signature']) if (typeof req.headers[h] === 'string') headers[h] = req.headers[h] as string;
      void post(this.target + (req.url ?? '/'), body, headers).then(({ status, text }) => {
        let answer: unknown = text;
        try {
          answer = JSON.parse(text);
        } catch {
          /* keep the text */
        }
        this.got.push({ body, headers, status, answer });
        res.writeHead(status, { 'content-type': 'application/json' }).end(text);
      });
    });
  });
  url = '';
  constructor(private readonly target: string) {}
  async start(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = serverUrl(this.server);
    return this;
  }
  close = () => closeServer(this.server);
  /** The deliveries of `event` (test deliveries only when `isTest`). */
  of(event: string, isTest = false): Delivery[] {
    return this.got.filter((d) => {
      const e = JSON.parse(d.body.toString());
      return e.event === event && e.isTest === isTest;
    });
  }
}

async function post(url: string, body: Buffer | string, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  const r = await fetch(url, { method: 'POST', body, headers });
  return { status: r.status, text: await r.text() };
}

async function ok(r: Promise<{ status: number; body: any }>): Promise<any> {
  const res = await r;
  if (res.status >= 300) throw new Error(`${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

for (const [name, start] of Object.entries(FRAMEWORKS)) {
  t.test(`${name} example: real deliveries verified, deduplicated, answered 2xx; forgeries refused`, async (t) => {
    const org: TestOrg = await createOrg(svc.url, { burst: 100_000, refillPerSecond: 100_000 });
    const api = (method: string, path: string, body?: unknown) => call(svc.url, method, path, { token: org.live, body });
    const secret: string = (await ok(api('POST', '/api/v2/webhooks/rotate-secret'))).signingSecret;

    const processed: WebhookEvent[] = [];
    let failNextDepletion = true; // the first queueing of the depletion fails: the example answers 500
    const example = await start({
      receiver: new WebhookReceiver({ secret }),
      onEvent: (e) => {
        if (e.event === 'billing-credits-depleted' && failNextDepletion) {
          failNextDepletion = false;
          throw new Error('queue unavailable');
        }
        processed.push(e);
      },
    });
    t.teardown(example.close);
    const recorder = await new Recorder(example.url).start();
    t.teardown(recorder.close);
    for (const event of WEBHOOK_EVENTS) await ok(api('PATCH', `/api/v2/webhooks/${event}`, { url: `${recorder.url}/webhooks`, enabled: true }));

    // 1. Test deliveries of all ten events: verified and labelled, not processed.
    for (const event of WEBHOOK_EVENTS) {
      const r = await ok(api('POST', `/api/v2/webhooks/${event}/test`, {}));
      t.match(r, { delivered: true, statusCode: 200 }, `${event} test delivery accepted`);
      t.same(recorder.of(event, true).at(-1)!.answer, { action: 'test' }, `${event}: verified, recognised as a test delivery`);
    }
    t.equal(processed.length, 0, 'test deliveries are not processed');

    // 2. A real depletion from signals (and the credit overage the second signal causes).
    const customer = await ok(api('POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme' }));
    const plan = await ok(api('POST', '/api/v2/plans', { name: 'Pro' }));
    const ola = await ok(api('POST', `/api/v2/customers/${customer.id}/order-line-attributes`, { planId: plan.id, eventName: 'call', unitPrice: '1', currency: 'USD', creditsCurrencyId: '11111111-2222-4333-8444-555555555555', creditsPerUnit: '1' }));
    await ok(api('POST', `/api/v2/customers/${customer.id}/credit-pools`, { orderLineAttributeId: ola.id, credits: '1.5' }));
    t.equal((await sendBatch(svc.url, org.live, { signals: [{ eventName: 'call', customer: { externalCustomerId: 'acme' } }, { eventName: 'call', customer: { externalCustomerId: 'acme' } }] })).status, 202);
    await waitFor(async () => processed.filter((e) => e.event === 'billing-credits-depleted').length, (n) => n > 0, 30_000);
    // The example processes the event before its answer is written: wait for the answer too.
    await waitFor(async () => recorder.of('billing-credits-depleted').length, (n) => n >= 2, 10_000);
    const depletions = recorder.of('billing-credits-depleted');
    t.same(depletions.map((d) => [d.status, d.answer]), [[500, { error: 'could not queue the event' }], [200, { action: 'process' }]], 'queueing failed: 500, the service retried, the retry was processed (the key was released)');
    t.equal(depletions[0]!.body.toString(), depletions[1]!.body.toString(), 'the retry carried the same bytes');
    const depleted = processed.find((e) => e.event === 'billing-credits-depleted')!;
    t.equal(depleted.isTest, false);
    if (depleted.event !== 'billing-credits-depleted') throw new Error('narrowing');
    t.equal(depleted.data.credits.customerId, customer.id);
    t.equal(depleted.data.credits.orderLineAttributeId, ola.id);
    t.same(creditsDecimals(depleted.data.credits), { total: '1.5', remaining: '-0.5', used: '1' }, 'exact decimals from the real event');
    await waitFor(async () => processed.filter((e) => e.event === 'billing-overage-incurred').length, (n) => n > 0, 10_000);
    const overage = processed.find((e) => e.event === 'billing-overage-incurred')!;
    t.match(overage, { isTest: false, data: { overage: { eventType: 'OverageCredit', orderLineAttributeId: ola.id } } });

    // 3. A payment from another billing component (operator API).
    const payment = { id: `pay_${name.replace(/\W/g, '')}`, invoiceId: null, invoiceNumber: null, customerId: customer.id, customerName: 'Acme', amount: 1250, currency: 'USD', status: 'posted', paymentDate: '2026-11-01T10:00:00Z', paymentType: 'card', externalPaymentId: null };
    t.equal((await call(svc.url, 'POST', `/admin/v1/organizations/${org.id}/events`, { token: OPERATOR_TOKEN, body: { mode: 'live', event: 'billing-payment-succeeded', data: { payment } } })).status, 202);
    await waitFor(async () => processed.filter((e) => e.event === 'billing-payment-succeeded').length, (n) => n > 0, 10_000);
    t.match(processed.find((e) => e.event === 'billing-payment-succeeded'), { isTest: false, data: { payment } });

    // 4. Resends from the delivery log: delivered (2xx) again, and deduplicated by business ids.
    const log = (await ok(api('GET', '/api/v2/webhook-deliveries'))).deliveries as { deliveryId: string; event: string; outcome: string }[];
    for (const event of ['billing-credits-depleted', 'billing-payment-succeeded'] as const) {
      const delivered = log.find((d) => d.event === event && d.outcome === 'delivered');
      t.ok(delivered, `${event} logged as delivered`);
      const before = recorder.of(event).length;
      t.equal((await api('POST', `/api/v2/webhook-deliveries/${encodeURIComponent(delivered!.deliveryId)}/resend`)).status, 202);
      await waitFor(async () => recorder.of(event).length, (n) => n > before, 10_000);
      const again = recorder.of(event).at(-1)!;
      t.same([again.status, again.answer], [200, { action: 'duplicate' }], `${event}: the resend is verified and recognised as a duplicate`);
      t.not(again.headers['x-webhook-signature'], recorder.of(event)[0]!.headers['x-webhook-signature'], 'though signed afresh');
    }
    t.same(
      processed.map((e) => e.event).sort(),
      ['billing-credits-depleted', 'billing-overage-incurred', 'billing-payment-succeeded'],
      'each real event processed exactly once',
    );

    // 5. Forgeries and replays, sent straight to the example.
    const real = depletions[1]!;
    const text = real.body.toString();
    const hook = `${example.url}/webhooks`;
    const json = { 'content-type': 'application/json' };
    const refused = async (body: string, header: string | undefined, reason: string, what: string) => {
      const r = await post(hook, body, header === undefined ? json : { ...json, 'x-webhook-signature': header });
      t.same([r.status, JSON.parse(r.text)], [401, { error: reason }], what);
    };
    t.match(text, /"remainingCreditsDecimal":"-0.5"/);
    await refused(text.replace('"remainingCreditsDecimal":"-0.5"', '"remainingCreditsDecimal":"100"'), real.headers['x-webhook-signature'], 'BAD_SIGNATURE', 'a tampered body');
    await refused(JSON.stringify(JSON.parse(text), null, 1), real.headers['x-webhook-signature'], 'BAD_SIGNATURE', 'the same JSON re-serialized');
    await refused(text, signatureHeader(secret, text, Date.now() - 6 * 60_000), 'TIMESTAMP_OUT_OF_TOLERANCE', 'signed with the right secret six minutes ago');
    await refused(text, signatureHeader(secret, text, Date.now() + 6 * 60_000), 'TIMESTAMP_OUT_OF_TOLERANCE', 'six minutes ahead');
    await refused(text, signatureHeader('whsec_' + 'A'.repeat(43), text, Date.now()), 'BAD_SIGNATURE', 'another secret');
    await refused(text, undefined, 'MISSING_HEADER', 'no signature');
    await refused(text, 't=1,s=abc', 'MALFORMED_HEADER', 'a malformed signature');
    const replay = await post(hook, text, { ...json, 'x-webhook-signature': real.headers['x-webhook-signature']! });
    t.same([replay.status, JSON.parse(replay.text)], [200, { action: 'duplicate' }], 'the genuine delivery replayed within the window: a duplicate');
    const unknownBody = JSON.stringify({ event: 'billing-refund-issued', timestamp: new Date().toISOString(), isTest: false, data: { refund: { id: 'rf_1' } } });
    const unknown = await post(hook, unknownBody, { ...json, 'x-webhook-signature': signatureHeader(secret, unknownBody, Date.now()) });
    t.same([unknown.status, JSON.parse(unknown.text)], [200, { action: 'ignored' }], 'an unknown event: 2xx and ignored');
    if (name !== 'node:http') {
      const plain = await post(hook, text, { 'content-type': 'text/plain', 'x-webhook-signature': real.headers['x-webhook-signature']! });
      t.equal(plain.status, 415, 'only application/json bodies are read raw');
    }
    const tooBig = await post(hook, Buffer.alloc((1 << 20) + 1, 0x20), { ...json, 'x-webhook-signature': real.headers['x-webhook-signature']! }).catch((err: Error) => ({ status: 0, text: err.message }));
    t.equal(tooBig.status, 413, 'a body over 1 MiB: 413');
    t.equal(processed.length, 3, 'nothing refused or replayed was processed');

    // 6. The dedupe store unreachable (a real ioredis client to a closed port): 500, so the service retries.
    const dead = new Redis({ port: 1, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
    t.teardown(() => dead.disconnect());
    const down = await start({ receiver: new WebhookReceiver({ secret, store: new RedisDedupeStore(dead) }), onEvent: (e) => void processed.push(e) });
    t.teardown(down.close);
    const r = await post(`${down.url}/webhooks`, text, { ...json, 'x-webhook-signature': signatureHeader(secret, text, Date.now()) });
    t.same([r.status, JSON.parse(r.text)], [500, { error: 'could not check the delivery' }], 'store down: 500, nothing processed');
    t.equal(processed.length, 3);
  });
}
