/**
 * Prometheus metrics: the one registry of the process and every metric definition. Features
 * import the metric (or the small helper beside it) and observe; nothing else creates metrics.
 * `GET /metrics` (src/http/server.ts) renders this registry on every role.
 *
 * Rules that keep the hot path cheap and the series few:
 * - labels come from small fixed sets (route patterns, never raw paths; error codes of the
 *   catalogue; event names; stream kinds); never an organization id, key, URL or customer;
 * - an HTTP method outside the usual few is counted as `OTHER`, so a client cannot mint series;
 * - consumer lag is not tracked continuously: it is read from JetStream when scraped (one
 *   consumer-info request per watched consumer, all at once, each given LAG_TIMEOUT_MS).
 * Names: `usage_` for the signal path, `billing_` for billing and webhooks; units in the name
 * (`_seconds`, `_rows`, `_messages`, `_total` for counters), per Prometheus conventions.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export const registry = new Registry();

let defaultsStarted = false;
/** prom-client's default process and Node.js metrics (CPU, memory, event-loop lag, GC, handles). Idempotent. */
export function startDefaultMetrics(): void {
  if (defaultsStarted) return;
  defaultsStarted = true;
  collectDefaultMetrics({ register: registry });
}

/** The text of every metric, in Prometheus exposition format. */
export const metricsText = (): Promise<string> => registry.metrics();
export const METRICS_CONTENT_TYPE = registry.contentType;

// Latency buckets (seconds): HTTP and JetStream publishes are milliseconds; freshness and
// billing lag can run to minutes when a stage is behind.
const FAST = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const SLOW = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800];

// ---- HTTP -------------------------------------------------------------------------------

export const httpRequests = new Counter({
  name: 'usage_http_requests_total',
  help: 'HTTP requests answered, by route pattern, method and status',
  labelNames: ['route', 'method', 'status'] as const,
  registers: [registry],
});

export const httpDuration = new Histogram({
  name: 'usage_http_request_duration_seconds',
  help: 'Time from the request to its answer (body read, handler, write), by route pattern and method',
  labelNames: ['route', 'method'] as const,
  buckets: FAST,
  registers: [registry],
});

export const rateLimited = new Counter({
  name: 'usage_http_rate_limited_total',
  help: 'Requests answered 429, by route pattern and error code (RATE_LIMIT_EXCEEDED or CONCURRENCY_LIMIT_EXCEEDED)',
  labelNames: ['route', 'code'] as const,
  registers: [registry],
});

// ---- Signals ----------------------------------------------------------------------------

export const signalsAccepted = new Counter({
  name: 'usage_signals_accepted_total',
  help: 'Signals accepted by the ingress (answered 202, durable in JetStream), by mode',
  labelNames: ['mode'] as const,
  registers: [registry],
});

export const ingressAnswersHeld = new Counter({
  name: 'usage_ingress_answers_held_total',
  help: 'Answers (202) the ingress held because the pipeline of its process was behind (INGRESS_HOLD_BACKLOG) or its billing evaluator lagged (INGRESS_HOLD_BILLING_LAG_MS)',
  registers: [registry],
});

export const signalRequestsRefused = new Counter({
  name: 'usage_signal_requests_refused_total',
  help: 'Signal ingestion requests (bulk and v1) refused, by reason (the error code of the answer)',
  labelNames: ['reason'] as const,
  registers: [registry],
});

/** The routes whose refusals count as refused signal requests. */
export const INGEST_ROUTES: ReadonlySet<string> = new Set(['/api/v2/signals/bulk', '/api/v1/usage']);

const METHODS = new Set(['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS']);
/** The route label of requests no route matched. */
export const UNMATCHED_ROUTE = 'unmatched';

/**
 * Starts timing a request; the returned function records its answer. Called by the HTTP layer
 * (src/http/wrap.ts) once per request. `route` is the uWS pattern ('' = no route matched).
 */
export function observeRequest(route: string, method: string): (status: number, body: unknown) => void {
  const started = performance.now();
  return (status, body) => {
    const r = route === '' ? UNMATCHED_ROUTE : route;
    const upper = method.toUpperCase();
    const m = METHODS.has(upper) ? upper : 'OTHER';
    httpRequests.inc({ route: r, method: m, status: String(status) });
    httpDuration.observe({ route: r, method: m }, (performance.now() - started) / 1000);
    if (status < 400) return;
    const code = errorCode(body);
    if (status === 429) rateLimited.inc({ route: r, code });
    if (INGEST_ROUTES.has(r)) signalRequestsRefused.inc({ reason: code });
  };
}

/** The catalogued code of an error body (`{error, code, details}`), or `UNKNOWN`. */
function errorCode(body: unknown): string {
  const code = typeof body === 'object' && body !== null ? (body as { code?: unknown }).code : undefined;
  return typeof code === 'string' && /^[A-Z_]{1,64}$/.test(code) ? code : 'UNKNOWN';
}

// ---- Analytics --------------------------------------------------------------------------

export const analyticsResultBytesHeld = new Gauge({
  name: 'usage_analytics_result_held_bytes',
  help: "Bytes of analytics results the service holds now: read from the engine and not yet taken by the client's socket",
  registers: [registry],
});

// ---- JetStream --------------------------------------------------------------------------

export const publishDuration = new Histogram({
  name: 'usage_jetstream_publish_duration_seconds',
  help: 'Durable JetStream publishes, until the stream acked (retries included), by stream kind and outcome',
  labelNames: ['stream', 'outcome'] as const,
  buckets: FAST,
  registers: [registry],
});

/**
 * The stream kind of a subject built by this service, `<NATS_PREFIX>.<kind>.…` (signals,
 * billable, billing-rows, events, dlq): a fixed set, whatever the organizations.
 */
export function streamKind(subject: string): string {
  const kind = subject.split('.', 2)[1] ?? '';
  return /^[a-z-]{1,32}$/.test(kind) ? kind : 'other';
}

export interface ConsumerLag {
  /** Messages in the stream not yet delivered to the consumer. */
  pending: number;
  /** Messages delivered and not yet acknowledged. */
  ackPending: number;
}

interface LagSource {
  stream: string;
  consumer: string;
  read: () => Promise<ConsumerLag>;
}

/** The most one consumer-info request may take during a scrape. */
export const LAG_TIMEOUT_MS = 1_000;
const lagSources = new Set<LagSource>();
let lagSnapshot: { at: number; values: Promise<{ source: LagSource; lag: ConsumerLag | null }[]> } | null = null;


/**
 * Registers a consumer whose lag is read on every scrape. `stream` is the stream's kind
 * (SIGNALS, BILLABLE, BILLING_ROWS, EVENTS: without NATS_PREFIX). Returns the function that
 * removes it (on shutdown).
 */
export function watchConsumer(stream: string, consumer: string, read: () => Promise<ConsumerLag>): () => void {
  const source: LagSource = { stream, consumer, read };
  lagSources.add(source);
  lagSnapshot = null;
  return () => {
    lagSources.delete(source);
    lagSnapshot = null;
    consumerPending.remove(stream, consumer);
    consumerAckPending.remove(stream, consumer);
  };
}

const withTimeout = <T>(p: Promise<T>, ms: number): Promise<T> => {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms)))]).finally(() => clearTimeout(timer));
};

/**
 * One read of every watched consumer per scrape: both lag gauges share it (a read is reused
 * for 250 ms, the time one scrape takes to render the other gauge).
 */
function readLag(): Promise<{ source: LagSource; lag: ConsumerLag | null }[]> {
  const now = Date.now();
  if (lagSnapshot && now - lagSnapshot.at < 250) return lagSnapshot.values;
  const values = Promise.all(
    [...lagSources].map(async (source) => {
      try {
        return { source, lag: await withTimeout(source.read(), LAG_TIMEOUT_MS) };
      } catch {
        collectFailures.inc({ collector: 'consumer_lag' });
        return { source, lag: null };
      }
    }),
  );
  lagSnapshot = { at: now, values };
  return values;
}

/** A gauge of one count of every watched consumer, read at scrape time; a consumer whose read failed has no series. */
function consumerLagGauge(name: string, help: string, count: keyof ConsumerLag): Gauge<'stream' | 'consumer'> {
  return new Gauge({
    name,
    help,
    labelNames: ['stream', 'consumer'] as const,
    registers: [registry],
    async collect() {
      for (const { source, lag } of await readLag()) {
        if (lag) this.set({ stream: source.stream, consumer: source.consumer }, lag[count]);
        else this.remove(source.stream, source.consumer);
      }
    },
  });
}

export const consumerPending = consumerLagGauge(
  'usage_jetstream_consumer_pending_messages',
  'Messages of the stream not yet delivered to the durable consumer (num_pending), read at scrape time',
  'pending',
);

export const consumerAckPending = consumerLagGauge(
  'usage_jetstream_consumer_ack_pending_messages',
  'Messages delivered to the durable consumer and not yet acknowledged (num_ack_pending), read at scrape time',
  'ackPending',
);

export const collectFailures = new Counter({
  name: 'usage_metrics_collect_failures_total',
  help: 'Values that could not be read while being scraped (a consumer info that failed or took longer than 1 s), by collector',
  labelNames: ['collector'] as const,
  registers: [registry],
  // The scrape's own reads (shared with the lag gauges) count in the scrape that made them.
  async collect() {
    await readLag();
  },
});
// Present at 0 from the start: an alert on increase() needs the series before the first failure.
collectFailures.inc({ collector: 'consumer_lag' }, 0);

// ---- Pipeline ---------------------------------------------------------------------------

export const claimsInMemory = new Gauge({
  name: 'usage_dedupe_memory_claims',
  help: 'Idempotency claims and batch marks this process holds in memory (src/pipeline/claim-index.ts: 50-100 bytes each), by kind (signals: the pipeline, rows: the billing rows inserter)',
  labelNames: ['kind'] as const,
  registers: [registry],
});

export const insertRows = new Histogram({
  name: 'usage_pipeline_insert_rows',
  help: 'Rows per insert into the analytics store, by table',
  labelNames: ['table'] as const,
  buckets: [1, 10, 50, 100, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000],
  registers: [registry],
});

export const insertDuration = new Histogram({
  name: 'usage_pipeline_insert_duration_seconds',
  help: 'Time of one insert into the analytics store, by table and outcome',
  labelNames: ['table', 'outcome'] as const,
  buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [registry],
});

/** Runs one insert of `rows` rows into `table`, recording its size, time and outcome. */
export async function observeInsert<T>(table: string, rows: number, insert: () => Promise<T>): Promise<T> {
  const started = performance.now();
  try {
    const r = await insert();
    insertRows.observe({ table }, rows);
    insertDuration.observe({ table, outcome: 'ok' }, (performance.now() - started) / 1000);
    return r;
  } catch (err) {
    insertDuration.observe({ table, outcome: 'error' }, (performance.now() - started) / 1000);
    throw err;
  }
}

export const freshness = new Histogram({
  name: 'usage_signal_freshness_seconds',
  help: 'From a batch received by the ingress to its rows stored by the pipeline (one observation per batch)',
  buckets: SLOW,
  registers: [registry],
});

/** Observes the freshness of a batch received at `receivedAtMs` (epoch ms), stored now. */
export const observeFreshness = (receivedAtMs: number): void => freshness.observe(Math.max(0, Date.now() - receivedAtMs) / 1000);

// ---- Billing ----------------------------------------------------------------------------

export const billingLag = new Histogram({
  name: 'billing_evaluation_lag_seconds',
  help: 'From a batch stored (published to the billable stream) to its billing evaluation committed',
  buckets: SLOW,
  registers: [registry],
});

export const billingGroupMessages = new Histogram({
  name: 'billing_group_messages',
  help: 'Billable messages per committed evaluation group (a partition evaluates its oldest messages a group at a time)',
  buckets: [1, 2, 4, 8, 16, 32, 64],
  registers: [registry],
});

export const billingGroupSeconds = new Histogram({
  name: 'billing_group_duration_seconds',
  help: 'One evaluation step of a partition: from reading its pin to the group committed',
  buckets: FAST,
  registers: [registry],
});

export const billingWaits = new Counter({
  name: 'billing_partition_waits_total',
  help: 'Times a partition waited because older messages of it were held by another process (or not yet delivered here)',
  registers: [registry],
});

export const billingPartitionsPulled = new Gauge({
  name: 'billing_pulled_partitions',
  help: "Billing partitions this process pulls now: its share among the pipeline processes (src/billing/evaluator/members.ts); while processes join or leave, a partition may be pulled by two for a moment",
  registers: [registry],
});

export const billingFetchesOverdue = new Counter({
  name: 'billing_fetches_overdue_total',
  help: 'Fetches of a billing partition not ended 250 ms after their expiry (their end status lost, or this process too busy to read it), after which the partition pulled again without waiting for them',
  registers: [registry],
});

export const billingEvents = new Counter({
  name: 'billing_events_total',
  help: 'Billing events published to the event bus, by event name and source (evaluator, or external via the operator API)',
  labelNames: ['event', 'source'] as const,
  registers: [registry],
});

// ---- Webhooks ---------------------------------------------------------------------------

export type DeliveryOutcomeLabel = 'delivered' | 'failed' | 'refused';

export const webhookAttempts = new Counter({
  name: 'billing_webhook_delivery_attempts_total',
  help: 'Webhook delivery attempts, by kind (event: the dispatcher; test: a test delivery) and outcome (delivered: 2xx; failed: no 2xx; refused: the URL failed the address check)',
  labelNames: ['kind', 'outcome'] as const,
  registers: [registry],
});

export const webhookDuration = new Histogram({
  name: 'billing_webhook_delivery_duration_seconds',
  help: 'Time of one webhook delivery attempt (address check, connection, answer), by kind and outcome',
  labelNames: ['kind', 'outcome'] as const,
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [registry],
});

export function observeDelivery(kind: 'event' | 'test', outcome: DeliveryOutcomeLabel, latencyMs: number): void {
  webhookAttempts.inc({ kind, outcome });
  webhookDuration.observe({ kind, outcome }, latencyMs / 1000);
}
