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
 * Target (issue): the pipeline keeps up with at least the raw engine rate (ratio ≥ 1.0).
 *
 *   node dist/bench/pipeline.js [--duration S (default 60)] [--batches-in-flight N (default 4)] [--backlog N]
 */
import { mkdtempSync, rmSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import rowsOf from '../workers/rows.js';
import { schemaStatements } from '../src/store/schema.js';
import { newBatchId } from '../src/pipeline/message.js';
import { Args } from './lib/args.js';
import { BatchTemplate, SIGNALS_PER_BATCH } from './lib/signals.js';
import {
  CpuMeter,
  LatencyHistogram,
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
import { NATS_URL, OPERATOR_TOKEN, cleanup, createUnlimitedOrg, http, isolation, onInterrupt, startService, type Service } from './lib/service.js';

const TARGET_RATIO = 1.0;
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
  backlog: { help: 'also measure the pipeline alone: fill the stream with N batches (ROLE=ingress), then drain it (ROLE=pipeline); default 0 = off' },
});
const duration = args.num('duration', 60, 1, 24 * 3600);
const inFlight = args.num('batches-in-flight', 4, 1, 1000);
const rawSeconds = args.num('raw-seconds', 15, 1, 3600);
const drainTimeout = args.num('drain-timeout', Math.max(120, 2 * duration), 1, 24 * 3600);
const steadySkip = Math.min(10, Math.floor(duration / 5));
const backlogBatches = args.num('backlog', 0, 0, 1_000_000);

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
  const one = async (): Promise<void> => {
    while (more(next)) {
      const n = next++;
      const body = template.render((i) => `${runTag}-${n}-${i}`);
      const t0 = performance.now();
      let status: string;
      try {
        const res = await fetch(`${svcUrl}/api/v2/signals/bulk`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body,
          signal: AbortSignal.timeout(30_000),
        });
        const text = await res.text();
        status = String(res.status);
        st.latency.record(performance.now() - t0);
        if (res.status === 202) {
          const accepted = (JSON.parse(text) as { accepted: number }).accepted;
          st.acceptedSignals += accepted;
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
  await Promise.all(Array.from({ length: inFlight }, one));
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

async function consumerState(jsm: JetStreamManager, stream: string): Promise<{ pending: number; ackPending: number } | null> {
  try {
    const ci = await jsm.consumers.info(stream, 'pipeline');
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
}

/**
 * The pipeline's own capacity, without the ingress on the same cores: a ROLE=ingress process
 * fills the stream with `batches` batches and stops; then a ROLE=pipeline process drains it.
 */
async function backlogPhase(template: BatchTemplate, runTag: string, batches: number, bodyBytes: number, problems: string[]): Promise<BacklogResult> {
  const iso = isolation();
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
    const whole = new CpuMeter({ service: svcPid, ...others });
    let tick = new CpuMeter({ service: svcPid, ...others });
    const samples: { t: number; stored: number }[] = [];
    let drainSeconds: number | null = null;
    let lastChangeAt = performance.now();
    for (let i = 1; ; i++) {
      await sleep(Math.max(0, readyAt + i * 1000 - performance.now()));
      const stored = await storedCount(svc.url, org.id);
      const t = (performance.now() - readyAt) / 1000;
      const cpu = tick.read();
      tick = new CpuMeter({ service: svcPid, ...others });
      const prev = samples.at(-1) ?? { t: 0, stored: 0 };
      samples.push({ t, stored });
      if (stored !== prev.stored) lastChangeAt = performance.now();
      console.log(`${pad(Math.round(t), 5)}${pad(fmt((stored - prev.stored) / (t - prev.t)), 11)}${pad(fmt(stored), 13)}${pad(fmt(st.acceptedSignals - stored), 12)}${pad(cpu.service ?? '?', 10)}${pad(cpu.other ?? '?', 8)}`);
      if (stored >= st.acceptedSignals) {
        drainSeconds = round(t, 2);
        break;
      }
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
    if ((cpuPercent.other ?? 0) > OTHER_CPU_LIMIT) problems.push(`backlog drain: other processes used ${cpuPercent.other}% of a core (machine not idle; figures perturbed)`);
    await sleep(2_000);
    const finalStored = await storedCount(svc.url, org.id);
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
    };
  } finally {
    if (svc) {
      const exit = await svc.child.stop();
      if (exit.code !== 0) problems.push(`backlog: service exited with ${exit.code ?? exit.signal} on SIGTERM`);
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

async function main(): Promise<void> {
  const host = hostInfo();
  const runTag = `p${Date.now().toString(36)}`;
  const template = new BatchTemplate({ keyed: (i) => i % 2 === 0, baseTimeMs: Date.now() - 60_000 });
  const sampleBody = template.render((i) => `${runTag}-0-${i}`);
  printHeader('pipeline benchmark: signals/s from HTTP to ClickHouse (chdb), ROLE=all', host, {
    producer: `${inFlight} batches in flight for ${duration} s; ${SIGNALS_PER_BATCH} signals/batch (${template.keyedCount} with a unique idempotencyKey, ${SIGNALS_PER_BATCH - template.keyedCount} keyless), ~${fmt(sampleBody.length)} bytes`,
    service: 'child process, ROLE=all, default pipeline settings, LOG_LEVEL=warn',
    raw: args.flag('skip-raw') ? 'skipped' : `chdb Session in this process after the service phase, ${fmt(FLUSH_ROWS)}-row JSONEachRow inserts, one at a time, ${rawSeconds} s`,
    steady: `stored rate measured from t=${steadySkip} s to the end of the producer`,
    backlog: backlogBatches > 0 ? `${fmt(backlogBatches)} batches filled by ROLE=ingress, then drained by ROLE=pipeline alone` : 'off (--backlog N)',
  });

  const problems: string[] = [];
  const iso = isolation();
  let svc: Service | null = null;
  let nc: NatsConnection | null = null;
  onInterrupt(async () => {
    await svc?.child.stop(5_000);
    await cleanup(iso);
  });

  const st = newProducerState();
  const samples: Sample[] = [];
  let service: Record<string, unknown> = {};
  let finalStored = -1;
  let drainSeconds: number | null = null;
  let drained = false;
  let producerSeconds = 0;

  try {
    const maxBytes = streamMaxBytes(sampleBody.length);
    const t0 = performance.now();
    svc = await startService({ role: 'all', operatorToken: OPERATOR_TOKEN, iso, env: { STREAM_MAX_BYTES: String(maxBytes) } });
    const startupMs = Math.round(performance.now() - t0);
    const org = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    console.log(`service: pid ${svc.child.pid}, ${svc.url}, ready in ${startupMs} ms; NATS prefix ${iso.natsPrefix}; STREAM_MAX_BYTES ${fmt(maxBytes)}\n`);
    nc = await connect({ servers: NATS_URL });
    const jsm = await jetstreamManager(nc);
    const streamName = `${iso.natsPrefix}_SIGNALS`;
    const svcUrl = svc.url;
    const svcPid = svc.child.pid;
    const others = pidsByName(['nats-server', 'redis-server']);
    const cpuAll = new CpuMeter({ service: svcPid, ...others });

    console.log(`${pad('t s', 5)}${pad('accepted/s', 12)}${pad('stored/s', 11)}${pad('stored', 13)}${pad('lag', 11)}${pad('pending', 9)}${pad('unacked', 9)}${pad('svc cpu%', 10)}${pad('other%', 8)}${pad('stats ms', 10)}`);
    const startAt = performance.now();
    const endAt = startAt + duration * 1000;
    const producing = produce(svcUrl, org.liveKey, template, runTag, () => performance.now() < endAt, st).then(() => {
      producerSeconds = (performance.now() - startAt) / 1000;
    });
    let producerDone = false;
    void producing.then(() => (producerDone = true));

    const tickMeter = (): CpuMeter => new CpuMeter({ service: svcPid, ...others });
    let svcCpu = tickMeter();
    const drainDeadline = (): number => endAt + drainTimeout * 1000;
    let lastChangeAt = performance.now();
    for (let tick = 1; ; tick++) {
      const due = startAt + tick * 1000;
      await sleep(Math.max(0, due - performance.now()));
      const acceptedNow = st.acceptedSignals;
      const q0 = performance.now();
      let stored: number;
      try {
        stored = await storedCount(svcUrl, org.id);
      } catch (err) {
        problems.push(`stats request failed at t=${tick}: ${(err as Error).message}`);
        stored = samples.at(-1)?.stored ?? 0;
      }
      const statsMs = Math.round(performance.now() - q0);
      const cs = await consumerState(jsm, streamName);
      const cpuNow = svcCpu.read();
      svcCpu = tickMeter();
      const cpu = cpuNow.service ?? null;
      const s: Sample = { t: round((q0 - startAt) / 1000, 2), accepted: acceptedNow, stored, pending: cs?.pending ?? null, ackPending: cs?.ackPending ?? null, serviceCpu: cpu, otherCpu: cpuNow.other ?? null, statsMs };
      const prev = samples.at(-1) ?? { t: 0, accepted: 0, stored: 0 };
      samples.push(s);
      if (s.stored !== prev.stored) lastChangeAt = performance.now();
      const dt = s.t - prev.t || 1;
      console.log(
        `${pad(Math.round(s.t), 5)}${pad(fmt((s.accepted - prev.accepted) / dt), 12)}${pad(fmt((s.stored - prev.stored) / dt), 11)}${pad(fmt(s.stored), 13)}${pad(fmt(s.accepted - s.stored), 11)}${pad(s.pending ?? '?', 9)}${pad(s.ackPending ?? '?', 9)}${pad(cpu ?? '?', 10)}${pad(s.otherCpu ?? '?', 8)}${pad(statsMs, 10)}`,
      );
      if (svc.child.proc.exitCode !== null || svc.child.proc.signalCode !== null) {
        problems.push(`service exited during the run (${svc.child.proc.exitCode ?? svc.child.proc.signalCode})`);
        break;
      }
      if (!producerDone) continue;
      if (drainSeconds === null && s.stored >= st.acceptedSignals) {
        drainSeconds = round(s.t - producerSeconds, 1);
        drained = true;
        break;
      }
      if (performance.now() > drainDeadline()) {
        problems.push(`stored count did not reach the accepted total within ${drainTimeout} s after the producer stopped`);
        break;
      }
      if (performance.now() - lastChangeAt > 60_000) {
        problems.push(`PIPELINE STUCK: stored count unchanged for 60 s at ${s.stored} of ${st.acceptedSignals} (pending ${s.pending}, unacked ${s.ackPending})`);
        break;
      }
    }
    await producing;
    const cpuTotals = cpuAll.read();
    if ((cpuTotals.other ?? 0) > OTHER_CPU_LIMIT) {
      problems.push(`other processes used ${cpuTotals.other}% of a core during the service phase (machine not idle; figures perturbed)`);
    }

    // Settle: the count must stay exactly at the total (no late duplicates).
    await sleep(2_000);
    finalStored = await storedCount(svcUrl, org.id);
    const cs = await consumerState(jsm, streamName);
    service = { startupMs, streamMaxBytes: maxBytes, consumerAfter: cs, cpuPercentWholeRun: cpuTotals };
    const logged = svc.problems();
    if (logged.length > 0) {
      problems.push(`service logged ${logged.length} warn/error line(s); first: ${logged[0]!.slice(0, 400)}`);
      service.loggedProblems = logged.slice(0, 20).map((l) => l.slice(0, 1000));
    }
  } finally {
    await nc?.close();
    if (svc) {
      const exit = await svc.child.stop();
      if (exit.code !== 0) problems.push(`service exited with ${exit.code ?? exit.signal} on SIGTERM`);
    }
    const removed = await cleanup(iso);
    console.log(`\ncleanup: ${removed.join(', ')}`);
  }

  // ---- figures of the service phase
  const lastProducing = [...samples].reverse().find((s) => s.t <= producerSeconds + 0.5) ?? samples.at(-1);
  const firstSteady = samples.find((s) => s.t >= steadySkip) ?? samples[0];
  const steadyStoredPerSec =
    firstSteady && lastProducing && lastProducing.t > firstSteady.t ? round((lastProducing.stored - firstSteady.stored) / (lastProducing.t - firstSteady.t), 0) : null;
  const steadyAcceptedPerSec =
    firstSteady && lastProducing && lastProducing.t > firstSteady.t ? round((lastProducing.accepted - firstSteady.accepted) / (lastProducing.t - firstSteady.t), 0) : null;
  const acceptedPerSec = producerSeconds > 0 ? round(st.acceptedSignals / producerSeconds, 0) : 0;
  const lagAtProducerEnd = lastProducing ? lastProducing.accepted - lastProducing.stored : null;
  const endToEndSeconds = drainSeconds !== null ? producerSeconds + drainSeconds : null;
  const endToEndPerSec = endToEndSeconds ? round(st.acceptedSignals / endToEndSeconds, 0) : null;
  const match = finalStored === st.acceptedSignals;
  const non202 = st.requests - st.acceptedBatches;
  if (non202 > 0) problems.push(`producer got ${fmt(non202)} non-202 answers of ${fmt(st.requests)}: ${JSON.stringify(Object.fromEntries(st.statuses))}; e.g. ${st.errorSamples[0] ?? ''}`);
  if (!match) problems.push(`MISMATCH: ${fmt(finalStored)} rows stored, ${fmt(st.acceptedSignals)} signals accepted (difference ${fmt(finalStored - st.acceptedSignals)})`);

  const lat = st.latency.summary();
  console.log('\n--- service phase (ROLE=all)');
  console.log(`  producer       ${fmt(st.acceptedBatches)} batches / ${fmt(st.acceptedSignals)} signals accepted in ${round(producerSeconds, 1)} s; statuses ${JSON.stringify(Object.fromEntries(st.statuses))}`);
  console.log(`  accepted       ${fmt(acceptedPerSec)} signals/s (ingress, whole run)${steadyAcceptedPerSec !== null ? `; ${fmt(steadyAcceptedPerSec)} signals/s in the steady window` : ''}`);
  console.log(`  POST latency   p50 ${lat.p50} ms   p99 ${lat.p99} ms   p999 ${lat.p999} ms   max ${lat.max} ms`);
  console.log(`  stored         ${steadyStoredPerSec !== null ? fmt(steadyStoredPerSec) : '?'} signals/s in the steady window (t=${firstSteady?.t ?? '?'}…${lastProducing?.t ?? '?'} s)`);
  console.log(`  lag            ${lagAtProducerEnd !== null ? fmt(lagAtProducerEnd) : '?'} signals behind when the producer stopped; drained ${drainSeconds !== null ? `${drainSeconds} s later` : 'NOT drained'}`);
  console.log(`  end to end     ${endToEndPerSec !== null ? `${fmt(endToEndPerSec)} signals/s (accepted total / time until all stored)` : '?'}`);
  console.log(`  cpu %          ${Object.entries((service.cpuPercentWholeRun as Record<string, number | null> | undefined) ?? {}).map(([k, v]) => `${k} ${v ?? '?'}`).join('   ')}   (100 = one core; other = processes not named here)`);
  console.log(`  exact count    ${match ? 'MATCH' : 'MISMATCH'}: stored ${fmt(finalStored)}, accepted ${fmt(st.acceptedSignals)}${drained ? '' : ' (not drained)'}`);

  // ---- pipeline alone (optional)
  let backlog: BacklogResult | null = null;
  if (backlogBatches > 0) {
    console.log('');
    backlog = await backlogPhase(template, runTag, backlogBatches, sampleBody.length, problems);
    console.log('\n--- pipeline alone (ROLE=pipeline draining a backlog)');
    console.log(`  drained        ${fmt(backlog.signals)} signals in ${backlog.drainSeconds ?? '?'} s after readiness → ${backlog.drainPerSec !== null ? fmt(backlog.drainPerSec) : '?'} signals/s (steady ${backlog.steadyPerSec !== null ? fmt(backlog.steadyPerSec) : '?'}/s)`);
    console.log(`  cpu %          ${Object.entries(backlog.cpuPercent).map(([k, v]) => `${k} ${v ?? '?'}`).join('   ')}`);
    console.log(`  exact count    ${backlog.match ? 'MATCH' : 'MISMATCH'}: stored ${fmt(backlog.finalStored)}, accepted ${fmt(backlog.signals)}`);
  }

  // ---- raw engine phase
  let raw: RawResult | null = null;
  if (!args.flag('skip-raw')) {
    console.log('');
    raw = await rawEngine(template, runTag);
    console.log('\n--- raw engine (chdb, same rows, same table, this process)');
    console.log(`  rows/s         ${fmt(raw.rowsPerSec)}   (${fmt(raw.rows)} rows in ${raw.inserts} inserts of ${fmt(FLUSH_ROWS)}, ${raw.seconds} s; ${fmt(raw.chunkBytes / 1e6, 1)} MB per insert)`);
    console.log(`  insert ms      p50 ${raw.insertMs.p50}   p99 ${raw.insertMs.p99}   max ${raw.insertMs.max}`);
    console.log(`  count check    ${raw.countMatches ? 'MATCH' : 'MISMATCH'} (${fmt(raw.countAfter)} rows in the table)`);
    console.log(`  cpu %          ${Object.entries(raw.cpuPercent).map(([k, v]) => `${k} ${v ?? '?'}`).join('   ')}   (bench = chdb in this process)`);
    if ((raw.cpuPercent.other ?? 0) > OTHER_CPU_LIMIT) problems.push(`raw phase: other processes used ${raw.cpuPercent.other}% of a core (machine not idle; figures perturbed)`);
    if (!raw.countMatches) problems.push(`raw phase: table holds ${raw.countAfter} rows after inserting ${raw.rows}`);
  }

  const ratio = raw && steadyStoredPerSec !== null && raw.rowsPerSec > 0 ? round(steadyStoredPerSec / raw.rowsPerSec, 3) : null;
  console.log('\n=== summary');
  console.log(`accepted (ingress)      ${fmt(acceptedPerSec)} signals/s`);
  console.log(`stored (steady window)  ${steadyStoredPerSec !== null ? fmt(steadyStoredPerSec) : '?'} signals/s`);
  console.log(`end to end              ${endToEndPerSec !== null ? fmt(endToEndPerSec) : '?'} signals/s`);
  console.log(`final lag               ${lagAtProducerEnd !== null ? fmt(lagAtProducerEnd) : '?'} signals at producer stop; drain ${drainSeconds ?? '—'} s`);
  console.log(`exact count             ${match ? 'MATCH' : 'MISMATCH'} (${fmt(finalStored)} / ${fmt(st.acceptedSignals)})`);
  if (raw) console.log(`raw chdb insert         ${fmt(raw.rowsPerSec)} rows/s`);
  if (ratio !== null) console.log(`ratio pipeline/raw      ${ratio}   target ≥ ${TARGET_RATIO}: ${ratio >= TARGET_RATIO ? 'MET' : 'NOT MET'}   (ROLE=all, stored steady / raw)`);
  const backlogRatio = raw && backlog?.drainPerSec ? round(backlog.drainPerSec / raw.rowsPerSec, 3) : null;
  if (backlog) console.log(`pipeline alone          ${backlog.drainPerSec !== null ? fmt(backlog.drainPerSec) : '?'} signals/s draining a backlog${backlogRatio !== null ? `; ratio to raw ${backlogRatio}` : ''}`);
  printProblems(problems);

  appendHistory({
    bench: 'pipeline',
    at: new Date().toISOString(),
    host,
    params: { duration, batchesInFlight: inFlight, rawSeconds, backlogBatches, steadySkip, signalsPerBatch: SIGNALS_PER_BATCH, keyedPerBatch: template.keyedCount, bodyBytes: sampleBody.length, flushRows: FLUSH_ROWS },
    producer: {
      seconds: round(producerSeconds, 2),
      requests: st.requests,
      acceptedBatches: st.acceptedBatches,
      acceptedSignals: st.acceptedSignals,
      statuses: Object.fromEntries(st.statuses),
      latencyMs: lat,
      errorSamples: st.errorSamples,
    },
    acceptedPerSec,
    steadyAcceptedPerSec,
    steadyStoredPerSec,
    endToEndPerSec,
    lagAtProducerEnd,
    drainSeconds,
    finalStored,
    match,
    raw,
    ratio,
    backlog,
    backlogRatio,
    targetRatio: TARGET_RATIO,
    service,
    samples,
    ok: problems.length === 0,
    problems,
  });
  if (problems.length > 0) process.exitCode = 1;
}

main().catch((err: unknown) => {
  process.stderr.write(`pipeline benchmark failed: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exitCode = 1;
});
