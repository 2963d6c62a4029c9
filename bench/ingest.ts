/**
 * Ingress throughput and latency: POST /api/v2/signals/bulk with one fixed 500-signal batch,
 * against (1) a bare uWS server that only reads and JSON.parses the body — the raw ceiling —
 * and (2) the service in ROLE=ingress (auth, validation, Redis token bucket, JetStream
 * publish with stream ack). Both servers run as child processes; autocannon runs here, so
 * the load generator competes for the same cores in both phases.
 *
 *   node dist/bench/ingest.js [--url URL] [--connections N] [--duration S] [--rate R] [--pipelining N] [--gzip] [--processes N]
 *
 * With --gzip the service is measured twice, with the same batch sent plain and then gzipped
 * (`Content-Encoding: gzip`, level 6, compressed once here): batches/s of each, and the CPU-seconds
 * the service process used per phase and per 1,000 accepted batches — what decompression costs.
 *
 * With --processes N, N ingress processes listen on the one port (uWS sets SO_REUSEPORT on
 * Linux; the kernel spreads the connections): CPU-seconds are the sum over the N processes.
 *
 * Without --url the service is started here with isolated NATS/Redis prefixes and a temp
 * DATA_DIR, and everything it made is removed at the end. Target: full/raw ≥ 0.7.
 */
import path from 'node:path';
import { statfsSync } from 'node:fs';
import zlib from 'node:zlib';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import autocannon from 'autocannon';
import { Args } from './lib/args.js';
import { BatchTemplate, SIGNALS_PER_BATCH } from './lib/signals.js';
import { CpuMeter, LatencyHistogram, ROOT, appendHistory, fmt, hostInfo, pidsByName, printHeader, printProblems, processCpuSeconds, round, type Percentiles } from './lib/report.js';
import { OPERATOR_TOKEN, createUnlimitedOrg } from './lib/api.js';
import { cleanup, isolation, onInterrupt, startChild, startBenchService as startService, streamState, type Child, type BenchService as Service } from '../harness/service.js';

const TARGET_RATIO = 0.7;
const BULK_PATH = '/api/v2/signals/bulk';
/** CPU (percent of one core) used by unrelated processes above which a phase is flagged. */
const OTHER_CPU_LIMIT = 25;

const args = new Args('node dist/bench/ingest.js [options]', {
  url: { help: 'base URL of a running service (default: start one here, ROLE=ingress)' },
  key: { help: 'API key to use with --url (default: create an org with OPERATOR_TOKEN)' },
  'operator-token': { help: 'operator token of the --url service (default: env OPERATOR_TOKEN)' },
  connections: { help: 'concurrent connections (default 8)' },
  duration: { help: 'seconds measured per phase (default 10)' },
  warmup: { help: 'seconds of unmeasured load before each phase (default 2)' },
  rate: { help: 'overall requests/s (autocannon overallRate); default: closed loop' },
  pipelining: { help: 'requests in flight per connection (default 1)' },
  'skip-raw': { help: 'do not measure the bare uWS ceiling', flag: true },
  gzip: { help: 'also measure the service with the batch gzipped (Content-Encoding: gzip); reports its CPU-seconds for both', flag: true },
  processes: { help: 'ingress processes sharing the one port (SO_REUSEPORT; default 1; not with --url)' },
});
const processes = args.num('processes', 1, 1, 16);
const gzip = args.flag('gzip');
const connections = args.num('connections', 8, 1, 10_000);
const duration = args.num('duration', 10, 1, 3600);
const warmup = args.num('warmup', 2, 0, 600);
const rate = args.num('rate', undefined, 1, 10_000_000);
const pipelining = args.num('pipelining', 1, 1, 1000);
const externalUrl = args.str('url')?.replace(/\/+$/, '');

interface PhaseResult {
  phase: string;
  url: string;
  seconds: number;
  requests: number;
  accepted: number;
  batchesPerSec: number;
  signalsPerSec: number;
  mbPerSec: number;
  latencyMs: Percentiles;
  /** autocannon's own histogram (1 ms resolution; coordinated-omission corrected with --rate). */
  autocannonLatencyMs: { p50: number; p99: number; p99_9: number; max: number };
  statusCounts: Record<string, number>;
  errors: number;
  timeouts: number;
  errorSamples: string[];
  cpuPercent: Record<string, number | null>;
  /** CPU-seconds (user + system) of the server process during the measured phase, when its pid is known. */
  serverCpuSeconds: number | null;
  /** serverCpuSeconds per 1,000 accepted batches. */
  serverCpuSecondsPer1000Batches: number | null;
  /** Content-Encoding of the request bodies (null: sent plain). */
  encoding: string | null;
  /** 202 responses during the unmeasured warm-up. */
  warmupAccepted: number;
}

interface LoadOptions {
  url: string;
  key: string | null;
  seconds: number;
  body: Buffer;
  /** Content-Encoding header to send with `body` (already encoded). */
  encoding?: string;
}

function runAutocannon(o: LoadOptions, onResponse: (status: number, ms: number) => void, onError: (err: unknown) => void): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (o.key !== null) headers.authorization = `Bearer ${o.key}`;
    if (o.encoding) headers['content-encoding'] = o.encoding;
    const instance = autocannon(
      {
        url: o.url + BULK_PATH,
        method: 'POST',
        headers,
        body: o.body,
        connections,
        pipelining,
        duration: o.seconds,
        ...(rate !== undefined ? { overallRate: rate } : {}),
        timeout: 30,
      },
      (err, result) => (err ? reject(err) : resolve(result)),
    );
    instance.on('response', (_client, statusCode, _bytes, responseTime) => onResponse(statusCode, responseTime));
    instance.on('reqError', onError);
  });
}

/** CPU-seconds used so far by the server processes (the pids named `server…`), summed; null when unknown. */
function serversCpuSeconds(pids: Record<string, number | undefined>): number | null {
  const servers = Object.entries(pids).filter(([name]) => name.startsWith('server'));
  if (servers.length === 0) return null;
  let sum = 0;
  for (const [, pid] of servers) {
    const cpu = pid === undefined ? null : processCpuSeconds(pid);
    if (cpu === null) return null;
    sum += cpu;
  }
  return sum;
}

async function measure(phase: string, o: LoadOptions, pids: Record<string, number | undefined>): Promise<PhaseResult> {
  let warmupAccepted = 0;
  if (warmup > 0) {
    process.stdout.write(`[${phase}] warm-up ${warmup} s… `);
    await runAutocannon({ ...o, seconds: warmup }, (status) => void (status === 202 && warmupAccepted++), () => undefined);
  }
  process.stdout.write(`[${phase}] measuring ${o.seconds} s… `);
  const hist = new LatencyHistogram();
  const statuses = new Map<number, number>();
  const errorSamples: string[] = [];
  // Per-connection expected interval for coordinated-omission correction in open loop.
  const expectedMs = rate !== undefined ? (connections / rate) * 1000 : 0;
  const cpu = new CpuMeter({ ...pids, ...pidsByName(['nats-server', 'redis-server']) });
  const serverCpu0 = serversCpuSeconds(pids);
  const result = await runAutocannon(
    o,
    (status, ms) => {
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
      if (expectedMs > 0) hist.recordExpected(ms, expectedMs);
      else hist.record(ms);
    },
    (err) => {
      if (errorSamples.length < 5) errorSamples.push(String((err as Error)?.message ?? err));
    },
  );
  const cpuPercent = cpu.read();
  const serverCpu1 = serversCpuSeconds(pids);
  const serverCpuSeconds = serverCpu0 !== null && serverCpu1 !== null ? round(serverCpu1 - serverCpu0, 2) : null;
  console.log('done');
  const requests = [...statuses.values()].reduce((a, b) => a + b, 0);
  const accepted = statuses.get(202) ?? 0;
  const seconds = result.duration;
  return {
    phase,
    url: o.url,
    seconds: round(seconds, 2),
    requests,
    accepted,
    batchesPerSec: round(accepted / seconds, 1),
    signalsPerSec: round((accepted * SIGNALS_PER_BATCH) / seconds, 0),
    mbPerSec: round((accepted * o.body.length) / seconds / 1e6, 1),
    latencyMs: hist.summary(),
    autocannonLatencyMs: { p50: result.latency.p50, p99: result.latency.p99, p99_9: result.latency.p99_9, max: result.latency.max },
    statusCounts: Object.fromEntries([...statuses].sort((a, b) => a[0] - b[0]).map(([s, n]) => [String(s), n])),
    errors: result.errors,
    timeouts: result.timeouts,
    errorSamples,
    cpuPercent,
    serverCpuSeconds,
    serverCpuSecondsPer1000Batches: serverCpuSeconds !== null && accepted > 0 ? round((serverCpuSeconds / accepted) * 1000, 3) : null,
    encoding: o.encoding ?? null,
    warmupAccepted,
  };
}

async function rawPhase(body: Buffer): Promise<PhaseResult> {
  const child: Child = startChild(path.join(ROOT, 'dist/bench/raw-server.js'), ['0'], { PATH: process.env.PATH });
  try {
    const m = await child.waitFor(/\{"port":(\d+)\}/, 15_000);
    const url = `http://127.0.0.1:${m[1]}`;
    return await measure('raw uWS', { url, key: null, seconds: duration, body }, { server: child.pid });
  } finally {
    await child.stop(5_000);
  }
}

/**
 * Waits until every ingress process knows the organization's key (each loads the registry by
 * itself): an authenticated request with an invalid body answers 400 once the key is known,
 * 401 before. Each probe is a new connection, so the kernel spreads them over the processes;
 * 8 answers per process in a row without a 401 is taken as all of them knowing it.
 */
async function waitAllKnow(processCount: number, url: string, key: string): Promise<void> {
  const probe = (): Promise<number> =>
    new Promise((resolve, reject) => {
      const req = http.request(url + BULK_PATH, { method: 'POST', agent: false, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', reject);
      req.end('{}');
    });
  const end = Date.now() + 30_000;
  let inARow = 0;
  while (inARow < 8 * processCount) {
    if (Date.now() > end) throw new Error('not every ingress process knew the organization within 30 s');
    const status = await probe();
    if (status === 400) inARow++;
    else if (status === 401) inARow = 0;
    else throw new Error(`probe of the organization key answered ${status}, expected 400 (or 401 before the key is known)`);
  }
}

function printPhase(r: PhaseResult): void {
  const l = r.latencyMs;
  console.log(`\n--- ${r.phase}  (${r.url})`);
  console.log(`  batches/s     ${fmt(r.batchesPerSec, 1)}   (202 responses ${fmt(r.accepted)} in ${r.seconds} s; all responses ${fmt(r.requests)})`);
  console.log(`  signals/s     ${fmt(r.signalsPerSec)}   (${fmt(r.mbPerSec, 1)} MB/s of request bodies)`);
  console.log(`  latency ms    p50 ${l.p50}   p99 ${l.p99}   p999 ${l.p999}   max ${l.max}   mean ${l.mean}   (n=${fmt(l.count)})`);
  const a = r.autocannonLatencyMs;
  console.log(`  autocannon    p50 ${a.p50}   p99 ${a.p99}   p99.9 ${a.p99_9}   max ${a.max}   (1 ms resolution)`);
  console.log(`  status codes  ${Object.entries(r.statusCounts).map(([s, n]) => `${s}×${fmt(n)}`).join('  ') || '(none)'}`);
  console.log(`  conn errors   ${r.errors} (timeouts ${r.timeouts})${r.errorSamples.length ? `  e.g. ${r.errorSamples.join(' | ')}` : ''}`);
  if (r.serverCpuSeconds !== null) {
    console.log(`  server cpu    ${r.serverCpuSeconds} CPU-s in ${r.seconds} s = ${r.serverCpuSecondsPer1000Batches ?? '?'} CPU-s per 1,000 batches${r.encoding ? ` (bodies Content-Encoding: ${r.encoding})` : ' (plain bodies)'}`);
  }
  console.log(`  cpu %         ${Object.entries(r.cpuPercent).map(([k, v]) => `${k} ${v ?? '?'}`).join('   ')}   (100 = one core; other = processes not named here)`);
}

function phaseProblems(r: PhaseResult): string[] {
  const out: string[] = [];
  const non202 = r.requests - r.accepted;
  if (non202 > 0) out.push(`${r.phase}: ${fmt(non202)} non-202 responses of ${fmt(r.requests)} (${JSON.stringify(r.statusCounts)})`);
  if (r.errors > 0) out.push(`${r.phase}: ${r.errors} connection errors / timeouts (${r.timeouts} timeouts)${r.errorSamples.length ? `: ${r.errorSamples[0]}` : ''}`);
  if (r.requests === 0) out.push(`${r.phase}: no responses at all`);
  const other = r.cpuPercent.other;
  if (other !== undefined && other !== null && other > OTHER_CPU_LIMIT) {
    out.push(`${r.phase}: other processes used ${other}% of a core during the phase (machine not idle; figures perturbed)`);
  }
  return out;
}

/** STREAM_MAX_BYTES for the run: room for every accepted batch at ~3,000 batches/s, within half the free disk. */
function streamMaxBytes(bodyBytes: number): number {
  const wanted = Math.ceil((duration + warmup) * 3_000 * (bodyBytes + 512) * 1.2);
  let cap = 64 * 1024 ** 3;
  try {
    const fsStats = statfsSync('/');
    cap = Math.min(cap, Math.floor((fsStats.bavail * fsStats.bsize) / 2));
  } catch {
    /* keep the cap */
  }
  return Math.max(2 * 1024 ** 3, Math.min(wanted, cap));
}

async function main(): Promise<void> {
  const host = hostInfo();
  const template = new BatchTemplate({ keyed: () => true, baseTimeMs: Date.now() - 60_000 });
  const runTag = Date.now().toString(36);
  const body = Buffer.from(template.render((i) => `ingest-${runTag}-${i}`));
  const gzBody = gzip ? zlib.gzipSync(body) : null;
  const params = {
    target: externalUrl ?? 'service child process, ROLE=ingress',
    body: `${SIGNALS_PER_BATCH} signals, ${fmt(body.length)} bytes (${round(body.length / 1024, 1)} KiB), same body every request`,
    ...(gzBody ? { gzip: `the same batch gzipped (level 6): ${fmt(gzBody.length)} bytes, ratio ${round(body.length / gzBody.length, 1)}×; service measured plain, then gzipped` } : {}),
    load: `autocannon: ${connections} connections, pipelining ${pipelining}, ${duration} s measured after ${warmup} s warm-up, ${rate !== undefined ? `overallRate ${rate}/s (open loop)` : 'closed loop'}`,
  };
  printHeader('ingest benchmark: POST /api/v2/signals/bulk', host, params);

  const problems: string[] = [];
  const phases: PhaseResult[] = [];
  let serviceNotes: Record<string, unknown> = {};

  if (!args.flag('skip-raw')) {
    const raw = await rawPhase(body);
    phases.push(raw);
    printPhase(raw);
  }

  if (externalUrl) {
    let key = args.str('key');
    if (!key) {
      const token = args.str('operator-token') ?? process.env.OPERATOR_TOKEN;
      if (!token) throw new Error('--url needs --key, or --operator-token / OPERATOR_TOKEN to create an organization');
      key = (await createUnlimitedOrg(externalUrl, token)).liveKey;
    }
    const full = await measure('service', { url: externalUrl, key, seconds: duration, body }, {});
    phases.push(full);
    printPhase(full);
    if (gzBody) {
      const gz = await measure('service, gzip', { url: externalUrl, key, seconds: duration, body: gzBody, encoding: 'gzip' }, {});
      phases.push(gz);
      printPhase(gz);
    }
  } else {
    const iso = isolation('ingest', 'bench');
    const maxBytes = streamMaxBytes(body.length);
    const services: Service[] = [];
    onInterrupt(async () => {
      await Promise.all(services.map((s) => s.child.stop(5_000)));
      await cleanup(iso);
    });
    try {
      const t0 = performance.now();
      // One webhook key for all the processes: they share the webhook store.
      const env = { STREAM_MAX_BYTES: String(maxBytes), WEBHOOK_ENCRYPTION_KEY: randomBytes(32).toString('hex') };
      const svc = await startService({ role: 'ingress', operatorToken: OPERATOR_TOKEN, iso, env });
      services.push(svc);
      for (let i = 1; i < processes; i++) services.push(await startService({ role: 'ingress', operatorToken: OPERATOR_TOKEN, iso, env, sharedPort: svc.port }));
      const startupMs = Math.round(performance.now() - t0);
      const org = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
      // Every process must know the organization before the load starts (each watches the registry).
      await waitAllKnow(services.length, svc.url, org.liveKey);
      const pids: Record<string, number> = Object.fromEntries(services.map((s, i) => [i === 0 ? 'server' : `server${i + 1}`, s.child.pid]));
      console.log(`\nservice: ${services.length} process(es), pid ${services.map((s) => s.child.pid).join(', ')}, ${svc.url}, ready in ${startupMs} ms; NATS prefix ${iso.natsPrefix}, STREAM_MAX_BYTES ${fmt(maxBytes)}`);
      const phaseName = processes === 1 ? 'service (ROLE=ingress)' : `service (ROLE=ingress ×${processes})`;
      const full = await measure(phaseName, { url: svc.url, key: org.liveKey, seconds: duration, body }, pids);
      phases.push(full);
      printPhase(full);
      const servicePhases = [full];
      if (gzBody) {
        const gz = await measure('service, gzip', { url: svc.url, key: org.liveKey, seconds: duration, body: gzBody, encoding: 'gzip' }, pids);
        phases.push(gz);
        printPhase(gz);
        servicePhases.push(gz);
      }
      const stream = await streamState(iso.natsPrefix);
      serviceNotes = { startupMs, streamMaxBytes: maxBytes, streamAfter: stream };
      if (stream) {
        // autocannon stops with up to connections × pipelining requests in flight per run (warm-up and
        // measured): those batches may be stored although their 202 was never counted here.
        const counted = servicePhases.reduce((n, p) => n + p.accepted + p.warmupAccepted, 0);
        const inFlightAtStop = servicePhases.length * (warmup > 0 ? 2 : 1) * connections * pipelining;
        const extra = stream.messages - counted;
        const ok = extra >= 0 && extra <= inFlightAtStop;
        console.log(
          `  stream        ${fmt(stream.messages)} messages, ${fmt(stream.bytes / 1e6, 1)} MB held (no consumer in ROLE=ingress); ` +
            `202s counted incl. warm-up ${fmt(counted)}, +${extra} in flight at stop (at most ${inFlightAtStop}) → ${ok ? 'CONSISTENT' : 'INCONSISTENT'}`,
        );
        if (!ok) problems.push(`stream holds ${stream.messages} messages but the service answered 202 ${counted} times (at most ${inFlightAtStop} were in flight at stop)`);
      }
      const logged = services.flatMap((s) => s.problems());
      if (logged.length > 0) {
        problems.push(`service logged ${logged.length} warn/error line(s); first: ${logged[0]!.slice(0, 400)}`);
        console.log(`  service log   ${logged.length} warn/error line(s):`);
        for (const l of logged.slice(0, 5)) console.log(`    ${l.slice(0, 400)}`);
      }
    } finally {
      for (const s of services) {
        const exit = await s.child.stop();
        if (exit.code !== 0) problems.push(`service pid ${s.child.pid} exited with ${exit.code ?? exit.signal} on SIGTERM`);
      }
      const removed = await cleanup(iso);
      console.log(`\ncleanup: ${removed.join(', ')}`);
    }
  }

  for (const p of phases) problems.push(...phaseProblems(p));
  const raw = phases.find((p) => p.phase === 'raw uWS');
  const full = phases.find((p) => p.phase !== 'raw uWS' && p.encoding === null);
  const gzPhase = phases.find((p) => p.encoding === 'gzip');
  const ratio = raw && full && raw.batchesPerSec > 0 ? round(full.batchesPerSec / raw.batchesPerSec, 3) : null;

  console.log('\n=== summary');
  console.log(`${'phase'.padEnd(26)}${'batches/s'.padStart(11)}${'signals/s'.padStart(12)}${'p50 ms'.padStart(9)}${'p99 ms'.padStart(9)}${'p999 ms'.padStart(9)}${'CPU-s/1k'.padStart(10)}  status codes`);
  for (const p of phases) {
    console.log(
      `${p.phase.padEnd(26)}${fmt(p.batchesPerSec, 1).padStart(11)}${fmt(p.signalsPerSec).padStart(12)}${String(p.latencyMs.p50).padStart(9)}${String(p.latencyMs.p99).padStart(9)}${String(p.latencyMs.p999).padStart(9)}${String(p.serverCpuSecondsPer1000Batches ?? '-').padStart(10)}  ${JSON.stringify(p.statusCounts)}`,
    );
  }
  const gzipCost =
    full?.serverCpuSecondsPer1000Batches && gzPhase?.serverCpuSecondsPer1000Batches ? round(gzPhase.serverCpuSecondsPer1000Batches / full.serverCpuSecondsPer1000Batches, 3) : null;
  if (gzPhase && full) {
    console.log(
      `gzip vs plain: batches/s ${round(gzPhase.batchesPerSec / Math.max(full.batchesPerSec, 1e-9), 3)}×, service CPU-seconds per batch ${gzipCost ?? '?'}×; request bytes ${fmt(gzBody!.length)} vs ${fmt(body.length)} (${round(body.length / gzBody!.length, 1)}× smaller)`,
    );
  }
  if (ratio !== null) console.log(`ratio full/raw (batches/s): ${ratio}   target ≥ ${TARGET_RATIO}: ${ratio >= TARGET_RATIO ? 'MET' : 'NOT MET'}`);
  printProblems(problems);

  appendHistory({
    bench: 'ingest',
    at: new Date().toISOString(),
    host,
    params: { url: externalUrl ?? null, processes, connections, duration, warmup, rate: rate ?? null, pipelining, bodyBytes: body.length, gzipBodyBytes: gzBody?.length ?? null, signalsPerBatch: SIGNALS_PER_BATCH },
    phases,
    service: serviceNotes,
    ratio,
    gzipCpuPerBatchRatio: gzipCost,
    targetRatio: TARGET_RATIO,
    ok: problems.length === 0,
    problems,
  });
  if (problems.length > 0) process.exitCode = 1;
}

main().catch((err: unknown) => {
  process.stderr.write(`ingest benchmark failed: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exitCode = 1;
});
