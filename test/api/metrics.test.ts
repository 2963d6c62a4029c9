/**
 * GET /metrics on running services: ROLE=all, and the split roles (ingress, pipeline,
 * dispatcher) on one deployment. After real traffic (signals accepted and refused, a 429,
 * billing that prices signals and publishes an event, test and real webhook deliveries to a
 * receiver in this test), every metric a panel of the Grafana dashboard
 * (ops/grafana/usage-billing.json) reads has a series; labels are route patterns and codes,
 * never an organization id; METRICS_TOKEN, when set, is required.
 */
import t, { type Test as Tap } from 'tap';
import { useHttpServer } from '../helpers/http-server.js';
import { readFileSync } from 'node:fs';
import { OPERATOR_TOKEN, ServiceProcess, cleanup, createOrg, http, isolation, ok, sendBatch, useService, waitFor, type TestOrg } from '../helpers/service.js';
import { dashboardQueries, hasSeries, metricNames, sampleValue } from '../helpers/promql.js';

const DASHBOARD = JSON.parse(readFileSync(new URL('../../ops/grafana/usage-billing.json', import.meta.url), 'utf8')) as { panels: unknown[] };
const QUERIES = dashboardQueries(DASHBOARD);
const DASHBOARD_METRICS = [...new Set(QUERIES.flatMap((q) => metricNames(q.expr)))].sort();
const CUR = '9a1c2b1e-0000-4000-8000-00000000abcd';
const METRICS_TOKEN = 'metrics-token-0123456789abcdef';

const { svc } = useService(t, 'metrics', { WEBHOOK_TIMEOUT_MS: '2000' });

/** A receiver that answers 200 to everything and counts what it got. */
const received: string[] = [];
const receiver = useHttpServer(t, (req, res) => {
  req.resume();
  req.on('end', () => {
    received.push(req.url ?? '');
    res.writeHead(200).end();
  });
});

async function scrape(url: string, token?: string): Promise<{ status: number; type: string; text: string }> {
  const res = await fetch(`${url}/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  return { status: res.status, type: res.headers.get('content-type') ?? '', text: await res.text() };
}

interface Traffic {
  orgs: TestOrg[];
  accepted: number;
}

/**
 * Traffic through the ingress at `api` that makes every series exist: accepted and refused
 * signals, a 429, an unmatched path and a 405, billing with a depletion event, a test delivery,
 * a dispatched billing event and an external event delivered.
 */
async function traffic(t: Tap, api: string): Promise<Traffic> {
  const org = await createOrg(api, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const call = (method: string, path: string, body?: unknown) => http(api, method, path, { token: org.live, body });
  // Webhooks: a secret, two events routed to the receiver, one test delivery.
  await ok(call('POST', '/api/v2/webhooks/rotate-secret'));
  for (const event of ['billing-credits-depleted', 'billing-payment-succeeded']) await ok(call('PATCH', `/api/v2/webhooks/${event}`, { url: `${receiver.url}/${event}`, enabled: true }));
  t.match(await ok(call('POST', '/api/v2/webhooks/billing-credits-depleted/test', {})), { delivered: true });
  // Billing: a pool of 2 credits, drained by 3 priced signals (a depletion event).
  const customer = await ok(call('POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme' }));
  const plan = await ok(call('POST', '/api/v2/plans', { name: 'Pro' }));
  const ola = await ok(call('POST', `/api/v2/customers/${customer.id}/order-line-attributes`, { planId: plan.id, eventName: 'api_call', unitPrice: '0.5', currency: 'USD', includedQuantity: null, creditsCurrencyId: CUR, creditsPerUnit: '1' }));
  await ok(call('POST', `/api/v2/customers/${customer.id}/credit-pools`, { orderLineAttributeId: ola.id, credits: '2' }));
  await ok(sendBatch(api, org.live, { signals: Array.from({ length: 3 }, (_, i) => ({ eventName: 'api_call', customer: { externalCustomerId: 'acme' }, idempotencyKey: `m-${i}` })) }), [202]);
  await ok(sendBatch(api, org.test, { signals: [{ eventName: 'api_call', customer: { externalCustomerId: 'acme' } }] }), [202]);
  // An event from another billing component, delivered by the dispatcher.
  const payment = { id: 'pay_1', invoiceId: null, invoiceNumber: null, customerId: 'cus_1', customerName: null, amount: 1250, currency: 'USD', status: 'posted', paymentDate: '2026-11-01T10:00:00Z', paymentType: 'card', externalPaymentId: 'ch_1' };
  await ok(http(api, 'POST', `/admin/v1/organizations/${org.id}/events`, { token: OPERATOR_TOKEN, body: { mode: 'live', event: 'billing-payment-succeeded', data: { payment } } }), [202]);
  // Refusals: an unknown key, a body that is not JSON, a 429 from a small bucket.
  t.equal((await sendBatch(api, 'sk_live_nope', { signals: [] })).status, 401);
  t.equal((await http(api, 'POST', '/api/v2/signals/bulk', { token: org.live, raw: '{"signals":[' })).status, 400);
  const small = await createOrg(api, { burst: 500, refillPerSecond: 0.001 });
  const four = { signals: Array.from({ length: 400 }, (_, i) => ({ eventName: 'api_call', customer: { externalCustomerId: 'c' }, data: { i } })) };
  t.equal((await sendBatch(api, small.live, four)).status, 202);
  const limited = await sendBatch(api, small.live, four);
  t.equal(limited.status, 429);
  t.equal(limited.body.code, 'RATE_LIMIT_EXCEEDED');
  // Other routes: an operator read with an id in the path, an unknown path, a wrong method.
  await ok(http(api, 'GET', `/admin/v1/organizations/${org.id}`, { token: OPERATOR_TOKEN }));
  t.equal((await http(api, 'GET', `/no/such/${org.id}`)).status, 404);
  t.equal((await http(api, 'DELETE', '/api/v2/signals/bulk')).status, 405);
  return { orgs: [org, small], accepted: 3 + 1 + 400 };
}

/** Scrapes until every dashboard metric has a series in one of the texts (union over processes). */
async function scrapeUntilComplete(targets: { url: string; token?: string }[]): Promise<{ texts: string[]; missing: string[] }> {
  return waitFor(
    async () => {
      const texts = await Promise.all(targets.map(async (x) => (await scrape(x.url, x.token)).text));
      return { texts, missing: DASHBOARD_METRICS.filter((m) => !texts.some((text) => hasSeries(text, m))) };
    },
    (r) => r.missing.length === 0,
    60_000,
  );
}

t.test('the dashboard reads metrics, every panel has a query', async (t) => {
  const panels = (DASHBOARD.panels as { type: string; title: string; targets?: { expr: string }[] }[]).filter((p) => p.type !== 'row');
  t.ok(panels.length >= 15, `${panels.length} panels`);
  for (const p of panels) {
    t.ok((p.targets ?? []).length > 0, `${p.title}: has a query`);
    for (const q of p.targets ?? []) t.ok(metricNames(q.expr).length > 0, `${p.title}: ${q.expr} reads a metric`);
  }
  for (const m of ['usage_http_requests_total', 'usage_signals_accepted_total', 'usage_ingress_answers_held_total', 'usage_signal_requests_refused_total', 'usage_http_rate_limited_total', 'usage_jetstream_publish_duration_seconds_bucket', 'usage_jetstream_consumer_pending_messages', 'usage_pipeline_insert_rows_sum', 'usage_pipeline_insert_duration_seconds_bucket', 'usage_signal_freshness_seconds_bucket', 'billing_evaluation_lag_seconds_bucket', 'billing_events_total', 'billing_webhook_delivery_attempts_total', 'billing_webhook_delivery_duration_seconds_bucket', 'process_cpu_seconds_total']) {
    t.ok(DASHBOARD_METRICS.includes(m), `the dashboard shows ${m}`);
  }
});

t.test('ROLE=all: every dashboard metric exists after traffic; labels are bounded', async (t) => {
  const first = await scrape(svc.url);
  t.equal(first.status, 200);
  t.match(first.type, /^text\/plain; version=0\.0\.4/);
  t.ok(hasSeries(first.text, 'process_cpu_seconds_total'), 'default process metrics');

  const { orgs, accepted } = await traffic(t, svc.url);
  const { texts, missing } = await scrapeUntilComplete([{ url: svc.url }]);
  t.same(missing, [], 'every metric of the dashboard has a series');
  await waitFor(async () => received.filter((u) => u === '/billing-credits-depleted').length, (n) => n >= 2, 30_000);
  // The rows inserter flushes on its own timer, after the evaluation published the event.
  const text = await waitFor(async () => (await scrape(svc.url)).text, (x) => (sampleValue(x, 'usage_pipeline_insert_rows_sum', { table: 'fact_cost' }) ?? 0) >= 3, 30_000);

  for (const o of orgs) t.notOk(text.includes(o.id), `no label carries the organization id ${o.id}`);
  t.notOk(text.includes('/no/such'), 'raw paths are not labels');
  t.ok((sampleValue(text, 'usage_signals_accepted_total', { mode: 'live' }) ?? 0) >= accepted - 1, 'live signals counted');
  t.equal(sampleValue(text, 'usage_signals_accepted_total', { mode: 'test' }), 1);
  t.equal(sampleValue(text, 'usage_http_requests_total', { route: '/admin/v1/organizations/:id', method: 'GET', status: '200' }), 1, 'the route pattern, not the path');
  t.equal(sampleValue(text, 'usage_http_requests_total', { route: 'unmatched', method: 'GET', status: '404' }), 1);
  t.equal(sampleValue(text, 'usage_http_requests_total', { route: '/api/v2/signals/bulk', method: 'DELETE', status: '405' }), 1);
  t.equal(sampleValue(text, 'usage_http_rate_limited_total', { route: '/api/v2/signals/bulk', code: 'RATE_LIMIT_EXCEEDED' }), 1);
  for (const reason of ['RATE_LIMIT_EXCEEDED', 'UNAUTHORIZED', 'INVALID_JSON']) t.equal(sampleValue(text, 'usage_signal_requests_refused_total', { reason }), 1, `refused: ${reason}`);
  for (const stream of ['signals', 'billable-p', 'billing-rows', 'events']) t.ok((sampleValue(text, 'usage_jetstream_publish_duration_seconds_count', { stream, outcome: 'ok' }) ?? 0) >= 1, `publishes to ${stream}`);
  // BILLABLE: one consumer per billing partition (BILLING_PARTITIONS, 8 by default).
  for (const [stream, consumer] of [['SIGNALS', 'pipeline'], ...Array.from({ length: 8 }, (_, k) => ['BILLABLE', `billing-p${k}`] as const), ['BILLING_ROWS', 'billing-rows'], ['EVENTS', 'dispatcher']] as const) {
    t.equal(sampleValue(text, 'usage_jetstream_consumer_pending_messages', { stream, consumer }), 0, `lag of ${stream}/${consumer}, drained`);
  }
  t.ok((sampleValue(text, 'usage_pipeline_insert_rows_count', { table: 'signals' }) ?? 0) >= 1);
  t.ok((sampleValue(text, 'usage_dedupe_memory_claims', { kind: 'signals' }) ?? 0) >= 1, 'the pipeline reports the claims it holds (at least each batch\'s mark)');
  t.ok((sampleValue(text, 'usage_pipeline_insert_rows_sum', { table: 'fact_cost' }) ?? 0) >= 3, `billing rows inserted: ${text.split('\n').filter((l) => l.startsWith('usage_pipeline_insert_rows_sum')).join('; ')}`);
  t.ok((sampleValue(text, 'usage_signal_freshness_seconds_count') ?? 0) >= 2);
  t.ok((sampleValue(text, 'billing_evaluation_lag_seconds_count') ?? 0) >= 1);
  t.equal(sampleValue(text, 'billing_pulled_partitions'), 8, 'the one pipeline process pulls every billing partition');
  t.equal(sampleValue(text, 'billing_events_total', { event: 'billing-credits-depleted', source: 'evaluator' }), 1);
  t.equal(sampleValue(text, 'billing_events_total', { event: 'billing-payment-succeeded', source: 'external' }), 1);
  t.equal(sampleValue(text, 'billing_webhook_delivery_attempts_total', { kind: 'test', outcome: 'delivered' }), 1);
  t.ok((sampleValue(text, 'billing_webhook_delivery_attempts_total', { kind: 'event', outcome: 'delivered' }) ?? 0) >= 2, 'the depletion and the payment delivered');
  t.equal(texts.length, 1);
});

t.test('split roles: each serves /metrics, together they cover the dashboard; METRICS_TOKEN is required when set', async (t) => {
  const iso = isolation('metricsroles');
  const roles = {
    ingress: new ServiceProcess(iso, { ROLE: 'ingress' }),
    pipeline: new ServiceProcess(iso, { ROLE: 'pipeline' }),
    dispatcher: new ServiceProcess(iso, { ROLE: 'dispatcher', METRICS_TOKEN, WEBHOOK_TIMEOUT_MS: '2000' }),
  };
  t.teardown(async () => {
    await Promise.all(Object.values(roles).map((p) => p.stop()));
    await cleanup(iso);
  });
  // The ingress makes the streams; the others start once they exist.
  await roles.ingress.start();
  await Promise.all([roles.pipeline.start(), roles.dispatcher.start()]);

  const d = roles.dispatcher.url;
  const none = await scrape(d);
  t.equal(none.status, 401, 'no token');
  t.match(JSON.parse(none.text), { code: 'UNAUTHORIZED', details: /metrics token/ });
  t.equal((await scrape(d, 'wrong-token-0123456789abcdef')).status, 401, 'a wrong token');
  t.equal((await scrape(d, OPERATOR_TOKEN)).status, 401, 'the operator token is not the metrics token');
  t.equal((await http(d, 'GET', '/healthz')).status, 200, 'health stays open');
  t.equal((await scrape(d, METRICS_TOKEN)).status, 200);
  t.equal((await scrape(roles.ingress.url)).status, 200, 'open where METRICS_TOKEN is not set');

  await traffic(t, roles.ingress.url);
  const targets = [{ url: roles.ingress.url }, { url: roles.pipeline.url }, { url: d, token: METRICS_TOKEN }];
  const { texts, missing } = await scrapeUntilComplete(targets);
  t.same(missing, [], 'the roles together expose every metric of the dashboard');
  const [ingress, pipeline, dispatcher] = texts as [string, string, string];
  for (const text of texts) t.ok(hasSeries(text, 'process_cpu_seconds_total'), 'default metrics on every role');
  t.ok(hasSeries(ingress, 'usage_signals_accepted_total'), 'ingress: signals');
  t.notOk(hasSeries(ingress, 'usage_jetstream_consumer_pending_messages'), 'ingress: no consumers of its own');
  t.notOk(sampleValue(pipeline, 'usage_jetstream_consumer_pending_messages', { stream: 'SIGNALS', consumer: 'pipeline' }) === undefined, 'pipeline: lag of its consumer');
  t.ok(hasSeries(pipeline, 'usage_signal_freshness_seconds_bucket'), 'pipeline: freshness');
  t.equal(sampleValue(pipeline, 'billing_pulled_partitions'), 8, 'pipeline: every billing partition');
  t.equal(sampleValue(ingress, 'billing_pulled_partitions') ?? 0, 0, 'ingress: no billing partition');
  t.notOk(sampleValue(dispatcher, 'usage_jetstream_consumer_pending_messages', { stream: 'EVENTS', consumer: 'dispatcher' }) === undefined, 'dispatcher: lag of its consumer');
  t.ok((sampleValue(dispatcher, 'billing_webhook_delivery_attempts_total', { kind: 'event', outcome: 'delivered' }) ?? 0) >= 1, 'dispatcher: deliveries');
  t.equal(sampleValue(ingress, 'billing_webhook_delivery_attempts_total', { kind: 'test', outcome: 'delivered' }), 1, 'ingress: the test delivery');
});
