/**
 * The metric module (src/metrics): names and units, bounded labels, the helpers features call,
 * scrape-time consumer lag with its timeout; and the PromQL name extraction the dashboard test
 * relies on (test/helpers/promql.ts).
 */
import t from 'tap';
import {
  INGEST_ROUTES,
  LAG_TIMEOUT_MS,
  UNMATCHED_ROUTE,
  metricsText,
  observeDelivery,
  observeFreshness,
  observeInsert,
  observeRequest,
  registry,
  startDefaultMetrics,
  streamKind,
  watchConsumer,
} from '../../src/metrics/index.js';
import { dashboardQueries, hasSeries, metricNames, sampleValue } from '../helpers/promql.js';

type Sample = { labels: Record<string, string | number>; value: number; metricName?: string };

async function samples(name: string): Promise<Sample[]> {
  const m = registry.getSingleMetric(name);
  if (!m) throw new Error(`no metric ${name}`);
  return (await m.get()).values as Sample[];
}

async function value(name: string, labels: Record<string, string>, sampleName = name): Promise<number> {
  const s = (await samples(name)).find((x) => (x.metricName ?? name) === sampleName && Object.entries(labels).every(([k, v]) => String(x.labels[k]) === v));
  return s?.value ?? 0;
}

t.test('names: a usage_ or billing_ prefix, units in the name, counters end in _total', async (t) => {
  const metrics = await registry.getMetricsAsJSON();
  t.ok(metrics.length >= 15, `${metrics.length} metrics defined`);
  for (const m of metrics) {
    t.match(m.name, /^(usage|billing)_[a-z_]+$/, `${m.name}: prefix`);
    // prom-client's typings say a numeric enum; the value is the type's name ('counter', …).
    if (String(m.type) === 'counter') t.match(m.name, /_total$/, `${m.name}: counter ends in _total`);
    else t.match(m.name, /_(seconds|rows|messages|claims|partitions|bytes)$/, `${m.name}: unit in the name`);
    t.notOk((m as unknown as { labelNames?: string[] }).labelNames?.some((l) => /org|customer|key|url/i.test(l)), `${m.name}: no unbounded label`);
  }
});

t.test('HTTP requests: route patterns, bounded methods, 429 codes and refused signal requests', async (t) => {
  const before = await value('usage_http_requests_total', { route: '/api/v2/signals/bulk', method: 'POST', status: '202' });
  observeRequest('/api/v2/signals/bulk', 'POST')(202, { ingested: 3, duplicates: 0, failed: 0, errors: [], batchId: 'bat_x' });
  t.equal(await value('usage_http_requests_total', { route: '/api/v2/signals/bulk', method: 'POST', status: '202' }), before + 1);
  t.equal(await value('usage_signal_requests_refused_total', { reason: 'RATE_LIMIT_EXCEEDED' }), 0, 'a 202 refuses nothing');

  observeRequest('/api/v2/signals/bulk', 'POST')(429, { error: 'Too Many Requests', code: 'RATE_LIMIT_EXCEEDED', details: '' });
  t.equal(await value('usage_http_rate_limited_total', { route: '/api/v2/signals/bulk', code: 'RATE_LIMIT_EXCEEDED' }), 1);
  t.equal(await value('usage_signal_requests_refused_total', { reason: 'RATE_LIMIT_EXCEEDED' }), 1);

  observeRequest('/api/v2/analytics/query', 'POST')(429, { code: 'CONCURRENCY_LIMIT_EXCEEDED' });
  t.equal(await value('usage_http_rate_limited_total', { route: '/api/v2/analytics/query', code: 'CONCURRENCY_LIMIT_EXCEEDED' }), 1);
  t.equal(await value('usage_signal_requests_refused_total', { reason: 'CONCURRENCY_LIMIT_EXCEEDED' }), 0, 'not an ingestion route');

  observeRequest('/api/v1/usage', 'POST')(400, { code: 'VALIDATION_FAILED' });
  observeRequest('/api/v1/usage', 'POST')(500, 'not json');
  observeRequest('/api/v1/usage', 'POST')(400, { code: 'lower case or {injected="x"}' });
  t.equal(await value('usage_signal_requests_refused_total', { reason: 'VALIDATION_FAILED' }), 1);
  t.equal(await value('usage_signal_requests_refused_total', { reason: 'UNKNOWN' }), 2, 'a body without a catalogue-shaped code is UNKNOWN');

  observeRequest('', 'GET')(404, { code: 'NOT_FOUND' });
  observeRequest('', 'PROPFIND')(404, { code: 'NOT_FOUND' });
  observeRequest('', 'x'.repeat(100))(404, { code: 'NOT_FOUND' });
  t.equal(await value('usage_http_requests_total', { route: UNMATCHED_ROUTE, method: 'GET', status: '404' }), 1);
  t.equal(await value('usage_http_requests_total', { route: UNMATCHED_ROUTE, method: 'OTHER', status: '404' }), 2, 'unknown methods share one label value');
  t.equal(await value('usage_http_request_duration_seconds', { route: UNMATCHED_ROUTE, method: 'OTHER' }, 'usage_http_request_duration_seconds_count'), 2);
  t.same([...INGEST_ROUTES].sort(), ['/api/v1/usage', '/api/v2/signals/bulk']);
});

t.test('stream kinds come from the subject, never the organization', async (t) => {
  t.equal(streamKind('BILLING.signals.org_abc'), 'signals');
  t.equal(streamKind('T1.billing-rows.org_abc'), 'billing-rows');
  t.equal(streamKind('P.events.org_abc.live.billing-credits-depleted'), 'events');
  t.equal(streamKind('nodots'), 'other');
  t.equal(streamKind('P.Org_Upper.x'), 'other');
  t.equal(streamKind(`P.${'a'.repeat(40)}.x`), 'other');
});

t.test('inserts: rows and time on success, time and outcome on failure, the error passed on', async (t) => {
  t.equal(await observeInsert('signals', 120, async () => 'done'), 'done');
  t.equal(await value('usage_pipeline_insert_rows', { table: 'signals' }, 'usage_pipeline_insert_rows_sum'), 120);
  t.equal(await value('usage_pipeline_insert_duration_seconds', { table: 'signals', outcome: 'ok' }, 'usage_pipeline_insert_duration_seconds_count'), 1);
  await t.rejects(observeInsert('signals', 50, async () => Promise.reject(new Error('engine down'))), /engine down/);
  t.equal(await value('usage_pipeline_insert_rows', { table: 'signals' }, 'usage_pipeline_insert_rows_sum'), 120, 'rows not stored are not counted');
  t.equal(await value('usage_pipeline_insert_duration_seconds', { table: 'signals', outcome: 'error' }, 'usage_pipeline_insert_duration_seconds_count'), 1);
});

t.test('freshness and deliveries', async (t) => {
  observeFreshness(Date.now() - 3_000);
  observeFreshness(Date.now() + 60_000); // a clock ahead: counted as 0, not negative
  t.equal(await value('usage_signal_freshness_seconds', {}, 'usage_signal_freshness_seconds_count'), 2);
  const sum = await value('usage_signal_freshness_seconds', {}, 'usage_signal_freshness_seconds_sum');
  t.ok(sum >= 3 && sum < 4, `sum ${sum}`);
  t.equal(await value('usage_signal_freshness_seconds', { le: '0.01' }, 'usage_signal_freshness_seconds_bucket'), 1, 'the clamped one is in the first bucket');

  observeDelivery('event', 'delivered', 12);
  observeDelivery('event', 'refused', 1);
  observeDelivery('test', 'failed', 2_000);
  t.equal(await value('billing_webhook_delivery_attempts_total', { kind: 'event', outcome: 'delivered' }), 1);
  t.equal(await value('billing_webhook_delivery_attempts_total', { kind: 'event', outcome: 'refused' }), 1);
  t.equal(await value('billing_webhook_delivery_attempts_total', { kind: 'test', outcome: 'failed' }), 1);
  t.equal(await value('billing_webhook_delivery_duration_seconds', { kind: 'test', outcome: 'failed' }, 'billing_webhook_delivery_duration_seconds_sum'), 2);
});

t.test('consumer lag: read when scraped, bounded by a timeout, removed when unwatched', async (t) => {
  const failuresBefore = await value('usage_metrics_collect_failures_total', { collector: 'consumer_lag' });
  let reads = 0;
  const unwatchA = watchConsumer('SIGNALS', 'pipeline', async () => {
    reads++;
    return { pending: 42, ackPending: 7 };
  });
  const unwatchB = watchConsumer('EVENTS', 'dispatcher', () => new Promise(() => undefined)); // never answers
  const unwatchC = watchConsumer('BILLABLE', 'billing', async () => Promise.reject(new Error('no responders')));
  t.equal(reads, 0, 'nothing is read before a scrape');
  const started = Date.now();
  const text = await metricsText();
  const took = Date.now() - started;
  t.ok(took >= LAG_TIMEOUT_MS - 50 && took < LAG_TIMEOUT_MS + 2_000, `the scrape waited for the timeout, not longer (${took} ms)`);
  t.equal(reads, 1, 'one read per scrape serves both gauges');
  t.equal(sampleValue(text, 'usage_jetstream_consumer_pending_messages', { stream: 'SIGNALS', consumer: 'pipeline' }), 42);
  t.equal(sampleValue(text, 'usage_jetstream_consumer_ack_pending_messages', { stream: 'SIGNALS', consumer: 'pipeline' }), 7);
  t.equal(sampleValue(text, 'usage_jetstream_consumer_pending_messages', { stream: 'EVENTS' }), undefined, 'a consumer that did not answer has no value (not a stale one)');
  t.equal(sampleValue(text, 'usage_jetstream_consumer_pending_messages', { stream: 'BILLABLE' }), undefined);
  t.equal(sampleValue(text, 'usage_metrics_collect_failures_total', { collector: 'consumer_lag' }), failuresBefore + 2);
  unwatchB();
  unwatchC();
  await new Promise((r) => setTimeout(r, 300));
  const fast = Date.now();
  await metricsText();
  t.ok(Date.now() - fast < LAG_TIMEOUT_MS, 'without the hanging consumer the scrape is quick');
  t.equal(reads, 2);
  unwatchA();
  const after = await metricsText();
  t.notOk(hasSeries(after, 'usage_jetstream_consumer_pending_messages'), 'unwatched: the series is gone');
});

t.test('default process metrics, started once', async (t) => {
  t.notOk(hasSeries(await metricsText(), 'process_cpu_seconds_total'), 'not before they are started');
  startDefaultMetrics();
  startDefaultMetrics();
  const text = await metricsText();
  for (const name of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_p99_seconds', 'nodejs_heap_size_used_bytes']) t.ok(hasSeries(text, name), name);
  t.equal(text.match(/^# TYPE process_cpu_seconds_total /gm)?.length, 1, 'registered once');
});

t.test('PromQL: the metric names a query reads', async (t) => {
  t.same(metricNames('sum by (route, status) (rate(usage_http_requests_total[$__rate_interval]))'), ['usage_http_requests_total']);
  t.same(metricNames('histogram_quantile(0.99, sum by (le, route) (rate(usage_http_request_duration_seconds_bucket{route!~"/x|/y"}[5m])))'), ['usage_http_request_duration_seconds_bucket']);
  t.same(metricNames('sum by (table) (rate(a_sum[1m])) / sum by (table) (rate(a_count{outcome="error"}[1m]))').sort(), ['a_count', 'a_sum']);
  t.same(metricNames('max without (instance) (x_messages) > bool 10 and on (stream) y_messages offset 5m'), ['x_messages', 'y_messages']);
  t.same(metricNames('up{job="a{b}"} * 1e3'), ['up']);
  t.same(metricNames('sum(rate(foo_total[1m]))'), ['foo_total'], 'functions and aggregations are not metrics');
  const q = dashboardQueries({ panels: [{ title: 'row', panels: [{ title: 'p', targets: [{ expr: 'a' }] }] }, { title: 'q', targets: [{ expr: 'b' }, {}] }] });
  t.same(q, [{ panel: 'p', expr: 'a' }, { panel: 'q', expr: 'b' }]);
  t.ok(hasSeries('x_total{a="1"} 3\n', 'x_total'));
  t.notOk(hasSeries('# TYPE x_total counter\nx_total_more 1\n', 'x_total'));
  t.equal(sampleValue('m{a="1",b="2"} 5\nm{a="3",b="2"} 6\n', 'm', { a: '3' }), 6);
});
