/**
 * Sustained end-to-end throughput: signals per second that reach ClickHouse.
 *
 * Phase 1 (service): the service runs as a child process with ROLE=all (isolated NATS/Redis
 * prefixes, temp DATA_DIR, an organization whose bucket never refuses). A producer keeps
 * --batches-in-flight POSTs of 500-signal batches going for --duration seconds; half the
 * signals carry an idempotencyKey unique per signal, half none. Every second the stored row
 * count is read from GET /admin/v1/organizations/:id/stats. After the producer stops, the
 * count must reach the accepted total EXACTLY (MATCH / MISMATCH).
 *
 * Phase 2 (raw engine, after phase 1, so nothing competes): a fresh chdb Session in a temp
 * dir in this process's main thread, the same table, the same rows (made by the pipeline's
 * own worker function) inserted in 10,000-row JSONEachRow chunks, one insert at a time.
 *
 * Optional (--backlog N): the pipeline alone. A ROLE=ingress process fills the stream with N
 * batches and stops; a ROLE=pipeline process then drains it. In ROLE=all the ingress and the
 * pipeline share one event loop and two cores, so phase 1 may be bounded by the ingress.
 *
 * Targets: end to end ≥ 0.6 × the raw engine rate, the pipeline alone ≥ 0.8 ×.
 * Each phase also prints the CPU-seconds per million signals of the service, its engine host
 * and nats-server (and the raw phase per million rows), so progress shows on any machine.
 *
 *   node dist/bench/pipeline.js [--duration S (default 60)] [--batches-in-flight N (default 4)] [--backlog N (default 1000)]
 */
import { mkdtempSync, rmSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import rowsOf from '../workers/rows.js';
import { schemaStatements } from '../src/store/schema.js';
import { newBatchId } from '../src/bus/batch.js';
import { topology } from '../src/bus/topology.js';
import { Args } from './lib/args.js';
import { BatchTemplate, SIGNALS_PER_BATCH } from './lib/signals.js';
import {
  CpuMeter,
  LatencyHistogram,
  childPids,
  appendHistory,
  fmt,
  hostInfo,
  pidsByName,
  printHeader,
  printProblems,
  round,
  sleep,
  type Percentiles,
} from './lib/report.js';
import { OPERATOR_TOKEN, createUnlimitedOrg, http } from './lib/api.js';
import { Poster } from './lib/post.js';
import { NATS_URL, cleanup, isolation, onInterrupt, startBenchService as startService, type BenchService as Service } from '../harness/service.js';

/** Target: end to end (ROLE=all) ≥ 0.6 × the raw engine insert; the pipeline alone ≥ 0.8 ×. */
const TARGET_RATIO = 0.6;
const BACKLOG_TARGET_RATIO = 0.8;
const FLUSH_ROWS = 10_000; // PIPELINE_FLUSH_ROWS default
const DB = 'billing';
/** CPU (percent of one core) used by unrelated processes above which a run is flagged. */
const OTHER_CPU_LIMIT = 25;

const args = new Args('node dist/bench/pipeline.js [options]', {
  duration: { help: 'seconds the producer runs (default 60)' },
  'batches-in-flight': { help: 'concurrent POSTs of 500-signal batches (default 4)' },
  'raw-seconds': { help: 'seconds of raw chdb inserts (default 15)' },
  'drain-timeout': { help: 'seconds to wait for the stored count to reach the accepted total (default max(120, 2×duration))' },
  'skip-raw': { help: 'do not measure the raw embedded-engine insert rate', flag: true },
  'skip-service': { help: 'do not run the ROLE=all phase (e.g. to measure only the raw engine or the backlog)', flag: true },
  freshness: { help: 'also measure freshness: open-loop POSTs at a fixed rate (ROLE=all), time from each 202 until the stored count covers the batch', flag: true },
  'freshness-rate': { help: 'batches/s of the freshness phase (default: half the steady stored rate of the service phase, else 10)' },
  'freshness-seconds': { help: 'seconds the freshness phase sends (default 20)' },
  backlog: { help: 'also measure the pipeline alone: fill the stream with N batches (ROLE=ingress), then drain it (ROLE=pipeline); default 1000, 0 = off' },
});
const duration = args.num('duration', 60, 1, 24 * 3600);
const inFlight = args.num('batches-in-flight', 4, 1, 1000);
const rawSeconds = args.num('raw-seconds', 15, 1, 3600);
const drainTimeout = args.num('drain-timeout', Math.max(120, 2 * duration), 1, 24 * 3600);
const steadySkip = Math.min(10, Math.floor(duration / 5));
const backlogBatches = args.num('backlog', 1000, 0, 1_000_000);
const freshnessSeconds = args.num('freshness-seconds', 20, 1, 3600);
/** Target: freshness at half the sustained maximum, p50 ≤ 300 ms and p99 ≤ 1 s. */
const FRESHNESS_TARGET = { p50: 300, p99: 1_000 };
/** How often the freshness phase reads the stored count. */
const FRESHNESS_POLL_MS = 50;

// ---------------------------------------------------------------- producer

interface ProducerState {
  requests: number;
  acceptedSignals: number;
  acceptedBatches: number;
  statuses: Map<string, number>;
  errorSamples: string[];
  latency: LatencyHistogram;
}

function newProducerState(): ProducerState {
  return { requests: 0, acceptedSignals: 0, acceptedBatches: 0, statuses: new Map(), errorSamples: [], latency: new LatencyHistogram() };
}

/** Keeps `inFlight` POSTs going while `more(batchNumber)` says so. */
async function produce(svcUrl: string, key: string, template: BatchTemplate, runTag: string, more: (n: number) => boolean, st: ProducerState): Promise<void> {
  let next = 0;
  const poster = new Poster(svcUrl, inFlight);
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const one = async (): Promise<void> => {
    while (more(next)) {
      const n = next++;
      const body = template.render((i) => `${runTag}-${n}-${i}`);
      const t0 = performance.now();
      let status: string;
      try {
        const res = await poster.post('/api/v2/signals/bulk', headers, body);
        const text = res.text;
        status = String(res.status);
        st.latency.record(performance.now() - t0);
        if (res.status === 202) {
          st.acceptedSignals += (JSON.parse(text) as { ingested: number }).ingested;
          st.acceptedBatches++;
        } else if (st.errorSamples.length < 5) {
          st.errorSamples.push(`${res.status} ${text.slice(0, 300)}`);
        }
      } catch (err) {
        status = 'error';
        if (st.errorSamples.length < 5) st.errorSamples.push(String((err as Error).message));
        await sleep(100);
      }
      st.requests++;
      st.statuses.set(status, (st.statuses.get(status) ?? 0) + 1);
    }
  };
  try {
    await Promise.all(Array.from({ length: inFlight }, one));
  } finally {
    poster.close();
  }
}

// ---------------------------------------------------------------- sampling

interface Sample {
  /** Seconds since the producer started. */
  t: number;
  accepted: number;
  stored: number;
  /** Messages in the stream not yet delivered / delivered but not acked. */
  pending: number | null;
  ackPending: number | null;
  serviceCpu: number | null;
  /** CPU of processes other than the service, this benchmark, nats-server and redis-server. */
  otherCpu: number | null;
  statsMs: number;
}

async function storedCount(svcUrl: string, orgId: string): Promise<number> {
  const r = await http<{ signals: { live: number; test: number } }>(`${svcUrl}/admin/v1/organizations/${orgId}/stats`, 'GET', OPERATOR_TOKEN);
  if (r.status !== 200) throw new Error(`stats: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.signals.live + r.body.signals.test;
}

async function consumerState(jsm: JetStreamManager, stream: string, consumer = 'pipeline'): Promise<{ pending: number; ackPending: number } | null> {
  try {
    const ci = await jsm.consumers.info(stream, consumer);
    return { pending: ci.num_pending, ackPending: ci.num_ack_pending };
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------- raw engine

interface RawResult {
  seconds: number;
  rows: number;
  inserts: number;
  rowsPerSec: number;
  insertMs: Percentiles;
  countAfter: number;
  countMatches: boolean;
  chunkBytes: number;
  prepareMs: number;
  cpuPercent: Record<string, number | null>;
  /** CPU-seconds of the raw inserts (this process: chdb) per million rows. */
  cpuSecondsPerMillion: number;
}

async function rawEngine(template: BatchTemplate, runTag: string): Promise<RawResult> {
  // Loaded only now: chdb (and its threads) must not exist in this process during phase 1.
  const { Session } = await import('chdb');
  const dir = mkdtempSync(path.join(tmpdir(), 'billing-bench-raw-'));
  const session = new Session(dir);
  try {
    for (const sql of schemaStatements(DB)) await session.queryAsync(sql);
    // Same rows as the pipeline makes: the worker function over the same batches.
    const t0 = performance.now();
    const chunks: Buffer[] = [];
    const CHUNKS = 20;
    const batchesPerChunk = FLUSH_ROWS / SIGNALS_PER_BATCH;
    let n = 0;
    for (let c = 0; c < CHUNKS; c++) {
      const lines: string[] = [];
      for (let b = 0; b < batchesPerChunk; b++, n++) {
        const body = Buffer.from(template.render((i) => `${runTag}-raw-${n}-${i}`));
        const receivedAtMs = Date.now();
        const r = rowsOf({ body, meta: { orgId: 'org_benchraw', mode: 'live', receivedAtMs, batchId: newBatchId(receivedAtMs) } });
        for (const l of r.lines) lines.push(l);
      }
      chunks.push(Buffer.from(`${lines.join('\n')}\n`));
    }
    const prepareMs = Math.round(performance.now() - t0);
    process.stdout.write(`[raw chdb] ${CHUNKS} chunks of ${fmt(FLUSH_ROWS)} rows prepared in ${prepareMs} ms; inserting for ${rawSeconds} s… `);

    const hist = new LatencyHistogram();
    let rows = 0;
    let inserts = 0;
    const cpu = new CpuMeter({});
    const start = performance.now();
    const end = start + rawSeconds * 1000;
    while (performance.now() < end) {
      const chunk = chunks[inserts % chunks.length]!;
      const t = performance.now();
      await session.insert({ table: `${DB}.signals`, values: chunk, format: 'JSONEachRow', settings: { max_partitions_per_insert_block: 0 } });
      hist.record(performance.now() - t);
      rows += FLUSH_ROWS;
      inserts++;
    }
    const seconds = (performance.now() - start) / 1000;
    const cpuPercent = cpu.read();
    const cpuSecondsPerMillion = round(((cpu.seconds().bench ?? 0) / rows) * 1e6, 2);
    console.log('done');
    const r = await session.queryAsync(`SELECT count() AS n FROM ${DB}.signals`, { format: 'JSONEachRow' });
    const countAfter = Number((JSON.parse(r.text().trim()) as { n: string | number }).n);
    return {
      seconds: round(seconds, 2),
      rows,
      inserts,
      rowsPerSec: round(rows / seconds, 0),
      insertMs: hist.summary(),
      countAfter,
      countMatches: countAfter === rows,
      chunkBytes: chunks[0]!.length,
      prepareMs,
      cpuPercent,
      cpuSecondsPerMillion,
    };
  } finally {
    session.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------- pipeline alone (optional)

interface BacklogResult {
  batches: number;
  signals: number;
  fillSeconds: number;
  fillStatuses: Record<string, number>;
  /** Seconds from the ROLE=pipeline process's readiness to the last signal stored. */
  drainSeconds: number | null;
  /** Accepted total / drainSeconds. */
  drainPerSec: number | null;
  /** Stored rate between the first and the last full sample of the drain. */
  steadyPerSec: number | null;
  finalStored: number;
  match: boolean;
  startupMs: number;
  cpuPercent: Record<string, number | null>;
  /** CPU-seconds of each process during the drain. */
  cpuSeconds: Record<string, number | null>;
  cpuPerMillion: CpuPerMillion;
  /** Seconds from readiness until the billing evaluator had evaluated every batch (its consumer drained). */
  billingDoneSeconds: number | null;
  /** As cpuPerMillion, until billing was done too. */
  cpuPerMillionWithBilling: CpuPerMillion;
}

/**
 * The pipeline's own capacity, without the ingress on the same cores: a ROLE=ingress process
 * fills the stream with `batches` batches and stops; then a ROLE=pipeline process drains it.
 */
async function backlogPhase(template: BatchTemplate, runTag: string, batches: number, bodyBytes: number, problems: string[]): Promise<BacklogResult> {
  const iso = isolation('pipeline', 'bench');
  let svc: Service | null = null;
  onInterrupt(async () => {
    await svc?.child.stop(5_000);
    await cleanup(iso);
  });
  const env = { STREAM_MAX_BYTES: String(Math.max(2 * 1024 ** 3, Math.ceil(batches * (bodyBytes + 512) * 1.2))) };
  try {
    svc = await startService({ role: 'ingress', operatorToken: OPERATOR_TOKEN, iso, env });
    const org = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    const st = newProducerState();
    const f0 = performance.now();
    process.stdout.write(`[backlog] ROLE=ingress fills the stream with ${fmt(batches)} batches… `);
    await produce(svc.url, org.liveKey, template, `${runTag}b`, (n) => n < batches, st);
    const fillSeconds = round((performance.now() - f0) / 1000, 1);
    console.log(`${fmt(st.acceptedSignals)} signals accepted in ${fillSeconds} s`);
    const ingressExit = await svc.child.stop();
    if (ingressExit.code !== 0) problems.push(`backlog: ROLE=ingress exited with ${ingressExit.code ?? ingressExit.signal} on SIGTERM`);
    if (st.acceptedBatches !== st.requests) problems.push(`backlog fill: ${st.requests - st.acceptedBatches} non-202 answers ${JSON.stringify(Object.fromEntries(st.statuses))}`);
    svc = null;

    const s0 = performance.now();
    svc = await startService({ role: 'pipeline', operatorToken: OPERATOR_TOKEN, iso, env });
    const readyAt = performance.now();
    const startupMs = Math.round(readyAt - s0);
    console.log(`[backlog] ROLE=pipeline ready in ${startupMs} ms; draining ${fmt(st.acceptedSignals)} signals\n`);
    console.log(`${pad('t s', 5)}${pad('stored/s', 11)}${pad('stored', 13)}${pad('remaining', 12)}${pad('svc cpu%', 10)}${pad('other%', 8)}`);
    const svcPid = svc.child.pid;
    const others = pidsByName(['nats-server', 'redis-server']);
    const pids = { ...servicePids(svcPid), ...others };
    const whole = new CpuMeter(pids);
    let tick = new CpuMeter(pids);
    const samples: { t: number; stored: number }[] = [];
    let drainSeconds: number | null = null;
    let lastChangeAt = performance.now();
    // Once a second; in the last second of the drain every 50 ms, so the drain time is not
    // rounded up to the next whole second (up to a seventh of a 7-second drain).
    let next = readyAt + 1000;
    let lastSecond = false;
    for (;;) {
      await sleep(Math.max(0, next - performance.now()));
      let stored: number;
      try {
        stored = await storedCount(svc.url, org.id);
      } catch (err) {
        if (!exitedEarly(svc)) throw err;
        problems.push(reportCrash(svc, `drain t≈${Math.round((performance.now() - readyAt) / 1000)} s`));
        break;
      }
      const t = (performance.now() - readyAt) / 1000;
      const cpu = tick.read();
      tick = new CpuMeter(pids);
      const prev = samples.at(-1) ?? { t: 0, stored: 0 };
      samples.push({ t, stored });
      if (stored !== prev.stored) lastChangeAt = performance.now();
      console.log(`${pad(Math.round(t), 5)}${pad(fmt((stored - prev.stored) / (t - prev.t)), 11)}${pad(fmt(stored), 13)}${pad(fmt(st.acceptedSignals - stored), 12)}${pad(cpu.service ?? '?', 10)}${pad(cpu.other ?? '?', 8)}`);
      if (stored >= st.acceptedSignals) {
        drainSeconds = round(t, 2);
        break;
      }
      const perMs = (stored - prev.stored) / ((t - prev.t) * 1000);
      lastSecond ||= perMs > 0 && st.acceptedSignals - stored <= perMs * 1500;
      next += lastSecond ? 50 : 1000;
      if (performance.now() - lastChangeAt > 60_000) {
        problems.push(`backlog: PIPELINE STUCK at ${stored} of ${st.acceptedSignals} for 60 s`);
        break;
      }
      if (t > drainTimeout) {
        problems.push(`backlog: not drained within ${drainTimeout} s`);
        break;
      }
    }
    const cpuPercent = whole.read();
    const cpuSeconds = whole.seconds();
    // Billing on: the evaluator works through the billable stream after the rows are stored.
    // Wait until it has evaluated every batch, for the CPU of the whole work per signal.
    let billingDoneSeconds: number | null = null;
    let cpuSecondsWithBilling: Record<string, number | null> = {};
    const bnc = await connect({ servers: NATS_URL });
    try {
      const bjsm = await jetstreamManager(bnc);
      const t = topology(iso.natsPrefix);
      const b0 = performance.now();
      while (performance.now() - b0 < drainTimeout * 1000 && !exitedEarly(svc)) {
        // The billable partitions are one work queue: empty once every part is evaluated and acked.
        const parts = await bjsm.streams.info(t.billableParts.stream).then((i) => i.state.messages, () => null);
        const rows = await consumerState(bjsm, t.billingRows.stream, t.billingRows.consumer);
        if (parts === 0 && rows && rows.pending === 0 && rows.ackPending === 0) {
          billingDoneSeconds = round((performance.now() - readyAt) / 1000, 2);
          break;
        }
        await sleep(250);
      }
      cpuSecondsWithBilling = whole.seconds();
      if (billingDoneSeconds === null) problems.push(`backlog: billing evaluation not done within ${drainTimeout} s after the rows`);
      else console.log(`[backlog] billing evaluated every batch at t=${billingDoneSeconds} s`);
    } finally {
      await bnc.close();
    }
    if ((cpuPercent.other ?? 0) > OTHER_CPU_LIMIT) problems.push(`backlog drain: other processes used ${cpuPercent.other}% of a core (machine not idle; figures perturbed)`);
    let finalStored = samples.at(-1)?.stored ?? 0;
    if (!exitedEarly(svc)) {
      await sleep(2_000);
      finalStored = await storedCount(svc.url, org.id);
    }
    const match = finalStored === st.acceptedSignals;
    if (!match) problems.push(`backlog MISMATCH: ${fmt(finalStored)} rows stored, ${fmt(st.acceptedSignals)} accepted`);
    const logged = svc.problems();
    if (logged.length > 0) problems.push(`backlog: service logged ${logged.length} warn/error line(s); first: ${logged[0]!.slice(0, 400)}`);
    // Steady: from the first sample to the last one before the final (partial) second.
    const first = samples[0];
    const last = samples.length >= 3 ? samples[samples.length - 2] : undefined;
    const steadyPerSec = first && last && last.t > first.t ? round((last.stored - first.stored) / (last.t - first.t), 0) : null;
    return {
      batches: st.acceptedBatches,
      signals: st.acceptedSignals,
      fillSeconds,
      fillStatuses: Object.fromEntries(st.statuses),
      drainSeconds,
      drainPerSec: drainSeconds ? round(st.acceptedSignals / drainSeconds, 0) : null,
      steadyPerSec,
      finalStored,
      match,
      startupMs,
      cpuPercent,
      cpuSeconds,
      cpuPerMillion: perMillion(cpuSeconds, st.acceptedSignals),
      billingDoneSeconds,
      cpuPerMillionWithBilling: perMillion(cpuSecondsWithBilling, st.acceptedSignals),
    };
  } finally {
    if (svc) {
      const exit = await svc.child.stop();
      if (exit.code !== 0) problems.push(`backlog: service exited with ${exit.code ?? exit.signal} on SIGTERM`);
    }
    await cleanup(iso);
  }
}

// ---------------------------------------------------------------- freshness (optional)

interface FreshnessResult {
  batchesPerSec: number;
  seconds: number;
  sent: number;
  accepted: number;
  statuses: Record<string, number>;
  /** POST latency from each batch's scheduled send time (open loop: coordinated omission corrected). */
  postMs: Percentiles;
  /** From each 202 until the stored count first covered the batch. */
  freshnessMs: Percentiles;
  /** From each batch's scheduled send time until the stored count covered it. */
  scheduledToCountedMs: Percentiles;
  notCounted: number;
  pollMs: Percentiles;
  match: boolean;
  targetMet: boolean;
}

/**
 * Open loop: batch k is sent at t0 + k / rate whether or not earlier ones were answered, so a
 * slow answer does not slow the arrivals (no coordinated omission); POST latency is measured
 * from the scheduled time. The stored count (the analytics store, GET .../stats) is read every
 * FRESHNESS_POLL_MS; a batch counts as stored at the first read whose count covers every
 * accepted batch up to it in the order of their 202s (the pipeline stores batches roughly in
 * that order, so this is the time all of them, it included, were visible).
 */
async function freshnessPhase(template: BatchTemplate, runTag: string, rate: number, bodyBytes: number, problems: string[]): Promise<FreshnessResult> {
  const iso = isolation('freshness', 'bench');
  let svc: Service | null = null;
  onInterrupt(async () => {
    await svc?.child.stop(5_000);
    await cleanup(iso);
  });
  try {
    svc = await startService({ role: 'all', operatorToken: OPERATOR_TOKEN, iso, env: { STREAM_MAX_BYTES: String(streamMaxBytes(bodyBytes)) } });
    const org = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    const url = svc.url;
    // Open loop: as many connections as requests may be in flight at once.
    const poster = new Poster(url, 256);
    const total = Math.max(1, Math.round(rate * freshnessSeconds));
    const interval = 1000 / rate;
    console.log(`[freshness] ROLE=all, open loop: ${fmt(total)} batches at ${rate} batches/s (${fmt(rate * SIGNALS_PER_BATCH)} signals/s) for ${freshnessSeconds} s; stored count read every ${FRESHNESS_POLL_MS} ms`);
    const post = new LatencyHistogram();
    const fresh = new LatencyHistogram();
    const scheduledToCounted = new LatencyHistogram();
    const polls = new LatencyHistogram();
    const statuses = new Map<string, number>();
    /** Accepted batches in the order of their 202s, waiting to be covered by the stored count. */
    const waiting: { cumulative: number; scheduledAt: number; acceptedAt: number }[] = [];
    let head = 0;
    let acceptedTotal = 0;
    let stored = 0;
    let sending = true;
    let lastAcceptAt = performance.now();
    const poller = (async () => {
      while (sending || head < waiting.length) {
        const q0 = performance.now();
        try {
          stored = await storedCount(url, org.id);
        } catch (err) {
          if (exitedEarly(svc!)) throw err;
        }
        const at = performance.now();
        polls.record(at - q0);
        while (head < waiting.length && waiting[head]!.cumulative <= stored) {
          const w = waiting[head++]!;
          fresh.record(Math.max(0, at - w.acceptedAt));
          scheduledToCounted.record(at - w.scheduledAt);
        }
        if (!sending && at - lastAcceptAt > 60_000) break;
        await sleep(Math.max(0, FRESHNESS_POLL_MS - (performance.now() - q0)));
      }
    })();
    const inflight = new Set<Promise<void>>();
    const t0 = performance.now() + 100;
    for (let k = 0; k < total; k++) {
      const scheduledAt = t0 + k * interval;
      const wait = scheduledAt - performance.now();
      if (wait > 0) await sleep(wait);
      const body = template.render((i) => `${runTag}f-${k}-${i}`);
      const p: Promise<void> = (async () => {
        let status = 'error';
        try {
          const res = await poster.post('/api/v2/signals/bulk', { authorization: `Bearer ${org.liveKey}`, 'content-type': 'application/json' }, body);
          const text = res.text;
          status = String(res.status);
          const now = performance.now();
          post.record(now - scheduledAt);
          if (res.status === 202) {
            acceptedTotal += (JSON.parse(text) as { ingested: number }).ingested;
            waiting.push({ cumulative: acceptedTotal, scheduledAt, acceptedAt: now });
            lastAcceptAt = now;
          }
        } catch {
          post.record(performance.now() - scheduledAt);
        }
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      })().finally(() => inflight.delete(p));
      inflight.add(p);
    }
    await Promise.all([...inflight]);
    poster.close();
    sending = false;
    await poller;
    await sleep(2_000);
    const finalStored = await storedCount(url, org.id);
    const r: FreshnessResult = {
      batchesPerSec: rate,
      seconds: freshnessSeconds,
      sent: total,
      accepted: waiting.length,
      statuses: Object.fromEntries(statuses),
      postMs: post.summary(),
      freshnessMs: fresh.summary(),
      scheduledToCountedMs: scheduledToCounted.summary(),
      notCounted: waiting.length - head,
      pollMs: polls.summary(),
      match: finalStored === acceptedTotal,
      targetMet: false,
    };
    r.targetMet = r.notCounted === 0 && r.freshnessMs.p50 <= FRESHNESS_TARGET.p50 && r.freshnessMs.p99 <= FRESHNESS_TARGET.p99;
    if (r.accepted !== total) problems.push(`freshness: ${total - r.accepted} of ${total} POSTs not answered 202 ${JSON.stringify(r.statuses)}`);
    if (r.notCounted > 0) problems.push(`freshness: ${r.notCounted} accepted batches never covered by the stored count`);
    if (!r.match) problems.push(`freshness MISMATCH: ${fmt(finalStored)} rows stored, ${fmt(acceptedTotal)} accepted`);
    const logged = svc.problems();
    if (logged.length > 0) problems.push(`freshness: service logged ${logged.length} warn/error line(s); first: ${logged[0]!.slice(0, 400)}`);
    return r;
  } finally {
    if (svc) {
      const exit = await svc.child.stop();
      if (exit.code !== 0) problems.push(`freshness: service exited with ${exit.code ?? exit.signal} on SIGTERM`);
    }
    await cleanup(iso);
  }
}

// ---------------------------------------------------------------- main

function streamMaxBytes(bodyBytes: number): number {
  // Room for everything the producer could send if the pipeline consumed nothing, within half the free disk.
  const wanted = Math.ceil(duration * 2_000 * (bodyBytes + 512) * 1.2);
  let cap = 64 * 1024 ** 3;
  try {
    const s = statfsSync('/');
    cap = Math.min(cap, Math.floor((s.bavail * s.bsize) / 2));
  } catch {
    /* keep the cap */
  }
  return Math.max(2 * 1024 ** 3, Math.min(wanted, cap));
}

const pad = (s: string | number, n: number): string => String(s).padStart(n);

const exitedEarly = (svc: Service): boolean => svc.child.proc.exitCode !== null || svc.child.proc.signalCode !== null;

/** Prints the last output of a service that exited on its own; returns the problem line. */
function reportCrash(svc: Service, when: string): string {
  const tail = svc.child.output().trimEnd().split('\n').slice(-30);
  const exit = svc.child.proc.exitCode ?? svc.child.proc.signalCode;
  console.log(`\n!!! the service exited with ${exit} at ${when}; its last output:`);
  for (const l of tail) console.log(`    ${l.slice(0, 600)}`);
  return `SERVICE EXITED (${exit}) at ${when}; last output: ${tail.slice(-3).join(' | ').slice(0, 600)}`;
}

interface ServiceResult {
  producerSeconds: number;
  requests: number;
  acceptedBatches: number;
  acceptedSignals: number;
  statuses: Record<string, number>;
  postLatencyMs: Percentiles;
  errorSamples: string[];
  acceptedPerSec: number;
  steadyAcceptedPerSec: number | null;
  steadyStoredPerSec: number | null;
  endToEndPerSec: number | null;
  lagAtProducerEnd: number | null;
  drainSeconds: number | null;
  finalStored: number;
  match: boolean;
  crashed: boolean;
  startupMs: number;
  consumerAfter: { pending: number; ackPending: number } | null;
  cpuPercent: Record<string, number | null>;
  /** CPU-seconds of each process over the whole phase (producer and drain). */
  cpuSeconds: Record<string, number | null>;
  cpuPerMillion: CpuPerMillion;
  loggedProblems: string[];
  samples: Sample[];
}

/** Phase 1: ROLE=all under a producer for `duration` s, sampled every second, then drained and counted. */
async function servicePhase(template: BatchTemplate, runTag: string, bodyBytes: number, problems: string[]): Promise<ServiceResult> {
  const iso = isolation('pipeline', 'bench');
  let svc: Service | null = null;
  let nc: NatsConnection | null = null;
  onInterrupt(async () => {
    await svc?.child.stop(5_000);
    await cleanup(iso);
  });

  const st = newProducerState();
  const samples: Sample[] = [];
  let finalStored = -1;
  let drainSeconds: number | null = null;
  let crashed = false;
  let producerSeconds = 0;
  let startupMs = 0;
  let consumerAfter: ServiceResult['consumerAfter'] = null;
  let cpuPercent: Record<string, number | null> = {};
  let cpuSeconds: Record<string, number | null> = {};
  let loggedProblems: string[] = [];

  try {
    const maxBytes = streamMaxBytes(bodyBytes);
    const t0 = performance.now();
    svc = await startService({ role: 'all', operatorToken: OPERATOR_TOKEN, iso, env: { STREAM_MAX_BYTES: String(maxBytes) } });
    startupMs = Math.round(performance.now() - t0);
    const org = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    console.log(`service: pid ${svc.child.pid}, ${svc.url}, ready in ${startupMs} ms; NATS prefix ${iso.natsPrefix}; STREAM_MAX_BYTES ${fmt(maxBytes)}\n`);
    nc = await connect({ servers: NATS_URL });
    const jsm = await jetstreamManager(nc);
    const streamName = `${iso.natsPrefix}_SIGNALS`;
    const svcUrl = svc.url;
    const svcPid = svc.child.pid;
    const others = pidsByName(['nats-server', 'redis-server']);
    const pids = { ...servicePids(svcPid), ...others };
    const meter = (): CpuMeter => new CpuMeter(pids);
    const whole = meter();

    console.log(`${pad('t s', 5)}${pad('accepted/s', 12)}${pad('stored/s', 11)}${pad('stored', 13)}${pad('lag', 11)}${pad('pending', 9)}${pad('unacked', 9)}${pad('svc cpu%', 10)}${pad('other%', 8)}${pad('stats ms', 10)}`);
    const startAt = performance.now();
    const endAt = startAt + duration * 1000;
    let producerDone = false;
    const producing = produce(svcUrl, org.liveKey, template, runTag, () => performance.now() < endAt && !crashed, st).then(() => {
      producerSeconds = (performance.now() - startAt) / 1000;
      producerDone = true;
    });

    let tickMeter = meter();
    let lastChangeAt = performance.now();
    for (let tick = 1; ; tick++) {
      await sleep(Math.max(0, startAt + tick * 1000 - performance.now()));
      const acceptedNow = st.acceptedSignals;
      const q0 = performance.now();
      let stored: number;
      try {
        stored = await storedCount(svcUrl, org.id);
      } catch (err) {
        if (!exitedEarly(svc)) problems.push(`stats request failed at t=${tick}: ${(err as Error).message}`);
        stored = samples.at(-1)?.stored ?? 0;
      }
      const statsMs = Math.round(performance.now() - q0);
      const cs = await consumerState(jsm, streamName);
      const cpu = tickMeter.read();
      tickMeter = meter();
      const s: Sample = {
        t: round((q0 - startAt) / 1000, 2),
        accepted: acceptedNow,
        stored,
        pending: cs?.pending ?? null,
        ackPending: cs?.ackPending ?? null,
        serviceCpu: cpu.service ?? null,
        otherCpu: cpu.other ?? null,
        statsMs,
      };
      const prev = samples.at(-1) ?? { t: 0, accepted: 0, stored: 0 };
      samples.push(s);
      if (s.stored !== prev.stored) lastChangeAt = performance.now();
      const dt = s.t - prev.t || 1;
      console.log(
        `${pad(Math.round(s.t), 5)}${pad(fmt((s.accepted - prev.accepted) / dt), 12)}${pad(fmt((s.stored - prev.stored) / dt), 11)}${pad(fmt(s.stored), 13)}` +
          `${pad(fmt(s.accepted - s.stored), 11)}${pad(s.pending ?? '?', 9)}${pad(s.ackPending ?? '?', 9)}${pad(s.serviceCpu ?? '?', 10)}${pad(s.otherCpu ?? '?', 8)}${pad(statsMs, 10)}`,
      );
      if (exitedEarly(svc)) {
        crashed = true;
        break;
      }
      if (!producerDone) continue;
      if (s.stored >= st.acceptedSignals) {
        drainSeconds = round(s.t - producerSeconds, 1);
        break;
      }
      if (s.t > producerSeconds + drainTimeout) {
        problems.push(`stored count did not reach the accepted total within ${drainTimeout} s after the producer stopped`);
        break;
      }
      if (performance.now() - lastChangeAt > 60_000) {
        problems.push(`PIPELINE STUCK: stored count unchanged for 60 s at ${s.stored} of ${st.acceptedSignals} (pending ${s.pending}, unacked ${s.ackPending})`);
        break;
      }
    }
    await producing;
    cpuPercent = whole.read();
    cpuSeconds = whole.seconds();
    if ((cpuPercent.other ?? 0) > OTHER_CPU_LIMIT) {
      problems.push(`other processes used ${cpuPercent.other}% of a core during the service phase (machine not idle; figures perturbed)`);
    }
    if (crashed) {
      finalStored = samples.at(-1)?.stored ?? 0;
      problems.push(reportCrash(svc, `t≈${samples.at(-1)?.t ?? '?'} s`));
    } else {
      // Settle: the count must stay exactly at the total (no late duplicates).
      await sleep(2_000);
      finalStored = await storedCount(svcUrl, org.id);
    }
    consumerAfter = await consumerState(jsm, streamName);
    loggedProblems = svc.problems().slice(0, 20).map((l) => l.slice(0, 1000));
    if (loggedProblems.length > 0) problems.push(`service logged ${svc.problems().length} warn/error line(s); first: ${loggedProblems[0]!.slice(0, 400)}`);
  } finally {
    await nc?.close();
    if (svc && !crashed) {
      const exit = await svc.child.stop();
      if (exit.code !== 0) problems.push(`service exited with ${exit.code ?? exit.signal} on SIGTERM`);
    }
    const removed = await cleanup(iso);
    console.log(`\ncleanup: ${removed.join(', ')}`);
  }

  const lastProducing = [...samples].reverse().find((s) => s.t <= producerSeconds + 0.5) ?? samples.at(-1);
  const firstSteady = samples.find((s) => s.t >= steadySkip) ?? samples[0];
  const window = firstSteady && lastProducing && lastProducing.t > firstSteady.t ? { a: firstSteady, b: lastProducing } : null;
  const endToEndSeconds = drainSeconds !== null ? producerSeconds + drainSeconds : null;
  const r: ServiceResult = {
    producerSeconds: round(producerSeconds, 2),
    requests: st.requests,
    acceptedBatches: st.acceptedBatches,
    acceptedSignals: st.acceptedSignals,
    statuses: Object.fromEntries(st.statuses),
    postLatencyMs: st.latency.summary(),
    errorSamples: st.errorSamples,
    acceptedPerSec: producerSeconds > 0 ? round(st.acceptedSignals / producerSeconds, 0) : 0,
    steadyAcceptedPerSec: window ? round((window.b.accepted - window.a.accepted) / (window.b.t - window.a.t), 0) : null,
    steadyStoredPerSec: window ? round((window.b.stored - window.a.stored) / (window.b.t - window.a.t), 0) : null,
    endToEndPerSec: endToEndSeconds ? round(st.acceptedSignals / endToEndSeconds, 0) : null,
    lagAtProducerEnd: lastProducing ? lastProducing.accepted - lastProducing.stored : null,
    drainSeconds,
    finalStored,
    match: finalStored === st.acceptedSignals,
    crashed,
    startupMs,
    consumerAfter,
    cpuPercent,
    cpuSeconds,
    cpuPerMillion: perMillion(cpuSeconds, st.acceptedSignals),
    loggedProblems,
    samples,
  };
  const non202 = r.requests - r.acceptedBatches;
  if (non202 > 0) problems.push(`producer got ${fmt(non202)} non-202 answers of ${fmt(r.requests)}: ${JSON.stringify(r.statuses)}; e.g. ${r.errorSamples[0] ?? ''}`);
  if (!r.match) problems.push(`MISMATCH: ${fmt(r.finalStored)} rows stored, ${fmt(r.acceptedSignals)} signals accepted (difference ${fmt(r.finalStored - r.acceptedSignals)})`);

  const lat = r.postLatencyMs;
  console.log('\n--- service phase (ROLE=all)');
  console.log(`  producer       ${fmt(r.acceptedBatches)} batches / ${fmt(r.acceptedSignals)} signals accepted in ${round(producerSeconds, 1)} s; statuses ${JSON.stringify(r.statuses)}`);
  console.log(`  accepted       ${fmt(r.acceptedPerSec)} signals/s (ingress, whole run)${r.steadyAcceptedPerSec !== null ? `; ${fmt(r.steadyAcceptedPerSec)} signals/s in the steady window` : ''}`);
  console.log(`  POST latency   p50 ${lat.p50} ms   p99 ${lat.p99} ms   p999 ${lat.p999} ms   max ${lat.max} ms`);
  console.log(`  stored         ${r.steadyStoredPerSec !== null ? fmt(r.steadyStoredPerSec) : '?'} signals/s in the steady window (t=${window?.a.t ?? '?'}…${window?.b.t ?? '?'} s)`);
  console.log(`  lag            ${r.lagAtProducerEnd !== null ? fmt(r.lagAtProducerEnd) : '?'} signals behind when the producer stopped; drained ${drainSeconds !== null ? `${drainSeconds} s later` : 'NOT drained'}`);
  console.log(`  end to end     ${r.endToEndPerSec !== null ? `${fmt(r.endToEndPerSec)} signals/s (accepted total / time until all stored)` : '?'}`);
  console.log(`  cpu %          ${cpuLine(r.cpuPercent)}   (100 = one core; other = processes not named here)`);
  console.log(`  CPU-s / 1M     ${perMillionLine(r.cpuPerMillion)}   (per million signals accepted, whole phase)`);
  console.log(`  exact count    ${r.match ? 'MATCH' : 'MISMATCH'}: stored ${fmt(r.finalStored)}, accepted ${fmt(r.acceptedSignals)}${drainSeconds !== null ? '' : ' (not drained)'}`);
  return r;
}

/** CPU-seconds per million signals of the service process, its engine host, nats-server, and their total. */
interface CpuPerMillion {
  service: number | null;
  engine: number | null;
  nats: number | null;
  total: number | null;
}

function perMillion(secs: Record<string, number | null>, signals: number): CpuPerMillion {
  const per = (x: number | null | undefined): number | null => (x == null || signals <= 0 ? null : round((x / signals) * 1e6, 2));
  const parts = [secs.service, secs.engine, secs['nats-server']];
  const total = parts.every((x) => x != null) ? parts.reduce<number>((a, b) => a + b!, 0) : null;
  return { service: per(secs.service), engine: per(secs.engine), nats: per(secs['nats-server']), total: per(total) };
}

const perMillionLine = (c: CpuPerMillion): string => `service ${c.service ?? '?'}   engine host ${c.engine ?? '?'}   nats-server ${c.nats ?? '?'}   total ${c.total ?? '?'}`;

/** The service and its engine host (the service's child process in embedded mode). */
const servicePids = (svcPid: number | undefined): Record<string, number | undefined> => ({ service: svcPid, engine: svcPid === undefined ? undefined : childPids(svcPid)[0] });

const cpuLine = (c: Record<string, number | null>): string =>
  Object.entries(c)
    .map(([k, v]) => `${k} ${v ?? '?'}`)
    .join('   ');

async function main(): Promise<void> {
  const host = hostInfo();
  const runTag = `p${Date.now().toString(36)}`;
  const template = new BatchTemplate({ keyed: (i) => i % 2 === 0, baseTimeMs: Date.now() - 60_000 });
  const bodyBytes = Buffer.byteLength(template.render((i) => `${runTag}-0-${i}`));
  const skipService = args.flag('skip-service');
  printHeader('pipeline benchmark: signals/s from HTTP to ClickHouse (chdb), ROLE=all', host, {
    producer: `${inFlight} batches in flight for ${duration} s; ${SIGNALS_PER_BATCH} signals/batch (${template.keyedCount} with a unique idempotencyKey, ${SIGNALS_PER_BATCH - template.keyedCount} keyless), ~${fmt(bodyBytes)} bytes`,
    service: skipService ? 'skipped' : 'child process, ROLE=all, default pipeline settings, LOG_LEVEL=warn',
    billing: 'on; the signals name customers (externalCustomerId c000…c999) the organization has not configured: resolved, not billed, not published to billing (priced signals: bench/billing.js)',
    raw: args.flag('skip-raw') ? 'skipped' : `chdb Session in this process after the service phase, ${fmt(FLUSH_ROWS)}-row JSONEachRow inserts, one at a time, ${rawSeconds} s`,
    steady: `stored rate measured from t=${steadySkip} s to the end of the producer`,
    backlog: backlogBatches > 0 ? `${fmt(backlogBatches)} batches filled by ROLE=ingress, then drained by ROLE=pipeline alone` : 'off (--backlog N)',
    freshness: args.flag('freshness') ? `open loop, ROLE=all, ${freshnessSeconds} s at ${args.num('freshness-rate', undefined, 0.1, 10_000) !== undefined ? `${args.num('freshness-rate', 10, 0.1, 10_000)} batches/s` : 'half the steady stored rate'}` : 'off (--freshness)',
  });

  const problems: string[] = [];
  const service = skipService ? null : await servicePhase(template, runTag, bodyBytes, problems);

  let backlog: BacklogResult | null = null;
  if (backlogBatches > 0) {
    console.log('');
    backlog = await backlogPhase(template, runTag, backlogBatches, bodyBytes, problems);
    console.log('\n--- pipeline alone (ROLE=pipeline draining a backlog)');
    console.log(`  drained        ${fmt(backlog.signals)} signals in ${backlog.drainSeconds ?? '?'} s after readiness → ${backlog.drainPerSec !== null ? fmt(backlog.drainPerSec) : '?'} signals/s (steady ${backlog.steadyPerSec !== null ? fmt(backlog.steadyPerSec) : '?'}/s)`);
    console.log(`  cpu %          ${cpuLine(backlog.cpuPercent)}`);
    console.log(`  CPU-s / 1M     ${perMillionLine(backlog.cpuPerMillion)}   (per million signals drained, until the rows were stored)`);
    console.log(`  with billing   ${perMillionLine(backlog.cpuPerMillionWithBilling)}   (until billing evaluated every batch, t=${backlog.billingDoneSeconds ?? '?'} s)`);
    console.log(`  exact count    ${backlog.match ? 'MATCH' : 'MISMATCH'}: stored ${fmt(backlog.finalStored)}, accepted ${fmt(backlog.signals)}`);
  }

  let freshness: FreshnessResult | null = null;
  if (args.flag('freshness')) {
    console.log('');
    const half = service?.steadyStoredPerSec ? Math.max(1, Math.round(service.steadyStoredPerSec / 2 / SIGNALS_PER_BATCH)) : 10;
    freshness = await freshnessPhase(template, runTag, args.num('freshness-rate', half, 0.1, 10_000), bodyBytes, problems);
    const f = freshness;
    console.log('\n--- freshness (ROLE=all, open loop)');
    console.log(`  rate           ${f.batchesPerSec} batches/s = ${fmt(f.batchesPerSec * SIGNALS_PER_BATCH)} signals/s for ${f.seconds} s; ${fmt(f.accepted)} of ${fmt(f.sent)} accepted ${JSON.stringify(f.statuses)}`);
    console.log(`  POST ms        p50 ${f.postMs.p50}   p99 ${f.postMs.p99}   max ${f.postMs.max}   (from the scheduled send time)`);
    console.log(`  202 → counted  p50 ${f.freshnessMs.p50}   p99 ${f.freshnessMs.p99}   max ${f.freshnessMs.max} ms   target p50 ≤ ${FRESHNESS_TARGET.p50}, p99 ≤ ${FRESHNESS_TARGET.p99}: ${f.targetMet ? 'MET' : 'NOT MET'}`);
    console.log(`  sent → counted p50 ${f.scheduledToCountedMs.p50}   p99 ${f.scheduledToCountedMs.p99}   max ${f.scheduledToCountedMs.max} ms`);
    console.log(`  count read     p50 ${f.pollMs.p50}   p99 ${f.pollMs.p99} ms (every ${FRESHNESS_POLL_MS} ms; a batch's time includes up to one read)`);
    console.log(`  exact count    ${f.match ? 'MATCH' : 'MISMATCH'}`);
  }

  let raw: RawResult | null = null;
  if (!args.flag('skip-raw')) {
    console.log('');
    raw = await rawEngine(template, runTag);
    console.log('\n--- raw engine (chdb, same rows, same table, this process)');
    console.log(`  rows/s         ${fmt(raw.rowsPerSec)}   (${fmt(raw.rows)} rows in ${raw.inserts} inserts of ${fmt(FLUSH_ROWS)}, ${raw.seconds} s; ${fmt(raw.chunkBytes / 1e6, 1)} MB per insert)`);
    console.log(`  insert ms      p50 ${raw.insertMs.p50}   p99 ${raw.insertMs.p99}   max ${raw.insertMs.max}`);
    console.log(`  count check    ${raw.countMatches ? 'MATCH' : 'MISMATCH'} (${fmt(raw.countAfter)} rows in the table)`);
    console.log(`  cpu %          ${cpuLine(raw.cpuPercent)}   (bench = chdb in this process)`);
    console.log(`  CPU-s / 1M     ${raw.cpuSecondsPerMillion}   (per million rows)`);
    if ((raw.cpuPercent.other ?? 0) > OTHER_CPU_LIMIT) problems.push(`raw phase: other processes used ${raw.cpuPercent.other}% of a core (machine not idle; figures perturbed)`);
    if (!raw.countMatches) problems.push(`raw phase: table holds ${raw.countAfter} rows after inserting ${raw.rows}`);
  }

  const ratio = raw && service?.steadyStoredPerSec != null && raw.rowsPerSec > 0 ? round(service.steadyStoredPerSec / raw.rowsPerSec, 3) : null;
  const backlogRatio = raw && backlog?.drainPerSec ? round(backlog.drainPerSec / raw.rowsPerSec, 3) : null;
  const n = (x: number | null | undefined): string => (x === null || x === undefined ? '?' : fmt(x));
  console.log('\n=== summary');
  if (service) {
    console.log(`accepted (ingress)      ${n(service.acceptedPerSec)} signals/s`);
    console.log(`stored (steady window)  ${n(service.steadyStoredPerSec)} signals/s`);
    console.log(`end to end              ${n(service.endToEndPerSec)} signals/s`);
    console.log(`final lag               ${n(service.lagAtProducerEnd)} signals at producer stop; drain ${service.drainSeconds ?? '—'} s`);
    console.log(`exact count             ${service.match ? 'MATCH' : 'MISMATCH'} (${fmt(service.finalStored)} / ${fmt(service.acceptedSignals)})`);
  }
  if (backlog) console.log(`pipeline alone          ${n(backlog.drainPerSec)} signals/s draining a backlog`);
  if (raw) console.log(`raw chdb insert         ${fmt(raw.rowsPerSec)} rows/s`);
  if (ratio !== null) console.log(`ratio pipeline/raw      ${ratio}   target ≥ ${TARGET_RATIO}: ${ratio >= TARGET_RATIO ? 'MET' : 'NOT MET'}   (ROLE=all, stored steady / raw)`);
  if (backlogRatio !== null) console.log(`ratio alone/raw         ${backlogRatio}   target ≥ ${BACKLOG_TARGET_RATIO}: ${backlogRatio >= BACKLOG_TARGET_RATIO ? 'MET' : 'NOT MET'}   (ROLE=pipeline draining / raw)`);
  console.log('CPU-s per million signals (service = node process with its worker threads; engine host = its chdb child):');
  if (service) console.log(`  ROLE=all              ${perMillionLine(service.cpuPerMillion)}`);
  if (backlog) console.log(`  pipeline alone        ${perMillionLine(backlog.cpuPerMillion)}`);
  if (backlog) console.log(`  alone, with billing   ${perMillionLine(backlog.cpuPerMillionWithBilling)}   (billing done at t=${backlog.billingDoneSeconds ?? '?'} s)`);
  if (raw) console.log(`  raw chdb insert       ${raw.cpuSecondsPerMillion} (per million rows)`);
  const cpuRatio = (c: CpuPerMillion | undefined): number | null => (raw && c?.total ? round(raw.cpuSecondsPerMillion / c.total, 3) : null);
  if (raw && (service || backlog)) console.log(`  raw / pipeline CPU    ROLE=all ${cpuRatio(service?.cpuPerMillion) ?? '?'}   alone ${cpuRatio(backlog?.cpuPerMillion) ?? '?'}   (1 = the pipeline costs what the engine costs)`);
  printProblems(problems);

  appendHistory({
    bench: 'pipeline',
    at: new Date().toISOString(),
    host,
    params: { duration, batchesInFlight: inFlight, rawSeconds, backlogBatches, steadySkip, signalsPerBatch: SIGNALS_PER_BATCH, keyedPerBatch: template.keyedCount, bodyBytes, flushRows: FLUSH_ROWS },
    service,
    backlog,
    raw,
    freshness,
    ratio,
    backlogRatio,
    targetRatio: TARGET_RATIO,
    backlogTargetRatio: BACKLOG_TARGET_RATIO,
    ok: problems.length === 0,
    problems,
  });
  if (problems.length > 0) process.exitCode = 1;
}

main().catch((err: unknown) => {
  process.stderr.write(`pipeline benchmark failed: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exitCode = 1;
});
