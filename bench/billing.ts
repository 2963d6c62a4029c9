/**
 * Billing evaluation throughput and lag.
 *
 * Starts the service (ROLE=all, plus --pipelines − 1 extra ROLE=pipeline processes with their
 * own data directories), seeds --orgs organizations × --customers customers each (direct KV
 * puts, bench/lib/billing-seed.ts: every customer has a credit-priced attribute for `tokens`,
 * a pool and a monthly cap on its root unit, so every signal is priced, draws credits and
 * counts against a cap), waits until the pipeline processes have shared the billing
 * partitions out (metric billing_pulled_partitions), then runs two scenarios of --duration seconds each: batches of 10
 * signals, then of 500, posted by --in-flight concurrent producers, each batch from a random
 * organization, each signal for a random customer of it (by externalId or service id in turn).
 *
 * It watches the service's own subjects with plain NATS subscriptions (no JetStream consumer,
 * nothing taken from the service): a billable message (one per batch and partition it
 * touches, Nats-Msg-Id `<batch>.p<k>`) is *stored* when the pipeline publishes it, and
 * *evaluated* when the evaluator publishes its rows (Nats-Msg-Id `rows-<batch>.p<k>`).
 * Prints, per scenario: batches accepted/s, billable batches evaluated/s (a batch counts once
 * all its partitions are evaluated), partition messages/s, and billing lag stored → evaluated
 * p50/p99 (hdr-histogram, per partition message and per batch: first part stored → last part
 * evaluated), the lag p99 of each second of the scenario (by when a message was stored: where a
 * tail comes from), and the CPU per batch of the service, its engine host and nats-server.
 * After the producers stop it waits until every stored message is evaluated.
 * Target: billing keeps up (the backlog drains with the producers) with lag p99 ≤ 1 s.
 *
 * Before them, the same service takes the same batches (the largest size of --sizes, the same
 * producers, --duration seconds) naming customers no organization has configured for billing:
 * resolved, stored, not billed — the pipeline's own work (as bench/pipeline.js's ROLE=all
 * phase), measured in the same run on the same machine. Each billing scenario of that size is
 * printed beside it: end to end (signals accepted / time until all stored, or all billed), the
 * service's CPU per signal, what billing adds to it, and the ratios (targets: billed end to
 * end ≥ 0.8 × stored end to end; billing's added service CPU per signal ≤ 1 × the pipeline's).
 *
 * With --rate R the producers are an open loop instead: R batches per second at fixed times,
 * whatever the answers (billing lag at a load the service sustains, rather than at the
 * ingress's maximum).
 *
 *   node dist/bench/billing.js [--orgs N (100)] [--customers N (100)] [--duration S (30)]
 *     [--in-flight N (8)] [--rate R (0)] [--pipelines N (1)] [--partitions N (service default)] [--sizes 10,500]
 */
import { connect, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Args } from './lib/args.js';
import { seed, seedId } from './lib/billing-seed.js';
import { FETCH_EXPIRES_MS, FETCH_GRACE_MS } from '../src/billing/evaluator/consumer.js';
import { CpuMeter, LatencyHistogram, appendHistory, childPids, fmt, hostInfo, pidsByName, printHeader, printProblems, round, sleep, type Percentiles } from './lib/report.js';
import { OPERATOR_TOKEN, createUnlimitedOrg, type BenchOrg } from './lib/api.js';
import { Poster } from './lib/post.js';
import { NATS_URL, cleanup, isolation, onInterrupt, startBenchService as startService, type BenchService as Service } from '../harness/service.js';

const args = new Args('node dist/bench/billing.js [options]', {
  orgs: { help: 'organizations (default 100)' },
  customers: { help: 'customers per organization (default 100)' },
  duration: { help: 'seconds each scenario sends for (default 30)' },
  'in-flight': { help: 'concurrent batch POSTs (default 8)' },
  pipelines: { help: 'pipeline processes: the ROLE=all one plus N − 1 ROLE=pipeline (default 1)' },
  partitions: { help: 'BILLING_PARTITIONS (default: the service default)' },
  sizes: { help: 'signals per batch of each scenario, comma-separated (default 10,500)' },
  'drain-timeout': { help: 'seconds to wait for billing to catch up after a scenario (default 300)' },
  rate: { help: 'open loop: batches/s posted at fixed times, whatever the answers (default 0: closed loop, --in-flight producers as fast as answered)' },
});
const ORGS = args.num('orgs', 100, 1, 10_000);
const CUSTOMERS = args.num('customers', 100, 1, 1_000_000);
const DURATION = args.num('duration', 30, 1, 3_600);
const IN_FLIGHT = args.num('in-flight', 8, 1, 1_024);
const PIPELINES = args.num('pipelines', 1, 1, 8);
const PARTITIONS = args.str('partitions') ?? '';
const SIZES = (args.str('sizes') ?? '10,500').split(',').map((x) => Number(x.trim()));
if (SIZES.some((n) => !Number.isInteger(n) || n < 1 || n > 10_000)) {
  process.stderr.write(`--sizes: whole numbers from 1 to 10000, comma-separated\n`);
  process.exit(2);
}
const DRAIN_S = args.num('drain-timeout', 300, 1, 36_000);
const RATE = args.num('rate', 0, 0, 100_000);
const TARGET_LAG_P99_MS = 1_000;
/** Targets against the pipeline's own run in the same bench: billed end to end ≥ 0.8 × stored end to end; what billing adds to the service's CPU per signal ≤ 1 × the pipeline's own. */
const TARGET_RATE_RATIO = 0.8;
const TARGET_CPU_RATIO = 1;

/** The pipeline alone in this run: the same batches naming customers nobody configured (resolved, stored, not billed). */
interface Reference {
  size: number;
  accepted: number;
  /** Signals accepted / (time until every accepted batch was stored and acked by the pipeline). */
  endToEndSignalsPerS: number;
  drainS: number;
  cpu: Record<string, number | null>;
  cpuSeconds: Record<string, number | null>;
  /** Service CPU µs per signal accepted (ingress, pipeline and everything else the service ran). */
  serviceCpuUsPerSignal: number | null;
}

/** A billing scenario beside the reference of the same batch size. */
interface Comparison {
  size: number;
  storedEndToEndSignalsPerS: number;
  billedEndToEndSignalsPerS: number;
  rateRatio: number;
  pipelineCpuUsPerSignal: number | null;
  billingRunCpuUsPerSignal: number | null;
  billingAddsCpuUsPerSignal: number | null;
  cpuRatio: number | null;
}

interface Result {
  size: number;
  accepted: number;
  acceptedPerS: number;
  /** Batches whose every partition message was evaluated. */
  batchesEvaluated: number;
  /** Signals accepted / (time until every one of them was billed): the billed end-to-end rate. */
  endToEndSignalsPerS: number;
  /** Service CPU µs per signal accepted. */
  serviceCpuUsPerSignal: number | null;
  /** Billable batches evaluated per second while the producers ran. */
  batchesPerSDuring: number;
  /** All batches / (last evaluation − start). */
  batchesPerSOverall: number;
  parts: number;
  partsPerS: number;
  lagPart: Percentiles;
  lagBatch: Percentiles;
  /** Per partition message, by the second of the scenario it was stored in: the p99 lag (ms) of each second (where a tail comes from: the first second's burst, one slow partition, a pause of the whole process). */
  lagP99BySecond: number[];
  drainS: number;
  groups: { count: number; meanMessages: number; meanStepMs: number; waits: number; overdueFetches: number };
  /** Messages stored in the billing state bucket's stream (pins and state keys written) per signal accepted, from the start of the scenario until all was billed. */
  stateWritesPerSignal: number;
  cpu: Record<string, number | null>;
  /** CPU-seconds of each process from the start of the scenario until billing had evaluated every batch. */
  cpuSeconds: Record<string, number | null>;
  /** Of those, ms per billable batch evaluated (the service's includes its ingress and pipeline work). */
  cpuMsPerBatch: Record<string, number | null>;
}

/** What the service publishes, seen on plain subscriptions. */
class Watch {
  readonly stored = new Map<string, number>();
  readonly evaluated = new Map<string, number>();
  private readonly subs: { unsubscribe(): void }[] = [];

  constructor(nc: NatsConnection, prefix: string) {
    const id = (m: Msg): string => m.headers?.get('Nats-Msg-Id') ?? '';
    this.subs.push(
      nc.subscribe(`${prefix}.billable-p.>`, {
        callback: (_err, m) => {
          const k = id(m);
          if (!this.stored.has(k)) this.stored.set(k, performance.now());
        },
      }),
      nc.subscribe(`${prefix}.billing-rows.>`, {
        callback: (_err, m) => {
          const k = id(m).replace(/^rows-/, '');
          if (!this.evaluated.has(k)) this.evaluated.set(k, performance.now());
        },
      }),
    );
  }

  reset(): void {
    this.stored.clear();
    this.evaluated.clear();
  }

  close(): void {
    for (const s of this.subs) s.unsubscribe();
  }
}

/** The evaluator's group figures of the services (Prometheus text): groups, messages in them, step seconds, waits, fetches whose end was not seen by their expiry. */
async function groupFigures(urls: string[]): Promise<{ groups: number; messages: number; seconds: number; waits: number; overdue: number }> {
  const out = { groups: 0, messages: 0, seconds: 0, waits: 0, overdue: 0 };
  for (const url of urls) {
    const value = await metricsOf(url);
    out.groups += value('billing_group_messages_count');
    out.messages += value('billing_group_messages_sum');
    out.seconds += value('billing_group_duration_seconds_sum');
    out.waits += value('billing_partition_waits_total');
    out.overdue += value('billing_fetches_overdue_total');
  }
  return out;
}

/** A service's metrics (Prometheus text): the value of a metric's first sample, 0 when it has none. */
async function metricsOf(url: string): Promise<(name: string) => number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return (name) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
}

/** A fetch of a billing partition's messages lasts at most this long (its expiry, plus the grace after which it is taken as over). */
const FETCH_LIFE_MS = FETCH_EXPIRES_MS + FETCH_GRACE_MS;

/**
 * Waits until the pipeline processes have shared the billing partitions out (each pulls its
 * share: the shares add up to the partition count), and then for the fetches a process made
 * for a partition before it gave it up to end (FETCH_LIFE_MS), so that a scenario measures the
 * steady state, not a process joining (members.ts: until every process has seen the newcomer,
 * up to a heartbeat, and their fetches made before have ended, two pull some partitions and
 * take turns on them). The shares, and how long it took.
 */
async function partitionsShared(urls: string[], partitions: number): Promise<{ shares: number[]; seconds: number }> {
  const t0 = performance.now();
  for (;;) {
    const shares = await Promise.all(urls.map(async (url) => (await metricsOf(url))('billing_pulled_partitions')));
    const split = shares.every((n) => n > 0) && shares.reduce((a, b) => a + b, 0) === partitions;
    if (split && urls.length > 1) await sleep(FETCH_LIFE_MS);
    const seconds = round((performance.now() - t0) / 1000, 1);
    if (split || seconds > 30) return { shares, seconds };
    await sleep(200);
  }
}

/** A batch of `size` signals for a random organization; `billed`: for its configured customers, otherwise for customers it never configured. */
function batchOf(size: number, orgs: { org: BenchOrg; ids: string[] }[], b: number, billed: boolean): { org: BenchOrg; body: string } {
  const o = orgs[Math.floor(Math.random() * orgs.length)]!;
  const signals = Array.from({ length: size }, (_, i) => {
    const c = Math.floor(Math.random() * o.ids.length);
    const customer = !billed ? { externalCustomerId: `nobody-${c + 1}` } : i % 2 === 0 ? { externalCustomerId: `ext-${c + 1}` } : { customerId: o.ids[c]! };
    return { eventName: 'tokens', customer, unitId: 'user', timestamp: new Date().toISOString(), data: { b, i } };
  });
  return { org: o.org, body: JSON.stringify({ signals }) };
}

/** Posts batches for DURATION seconds (closed loop, or open at RATE); the batches accepted and refused, and when sending began and ended. */
async function produce(size: number, svc: Service, orgs: { org: BenchOrg; ids: string[] }[], billed: boolean): Promise<{ accepted: number; refused: number; t0: number; sent: number }> {
  const t0 = performance.now();
  const end = t0 + DURATION * 1000;
  let accepted = 0;
  let refused = 0;
  let n = 0;
  // Open loop: as many connections as requests may be in flight at once.
  const poster = new Poster(svc.url, RATE > 0 ? 256 : IN_FLIGHT);
  const post = async (): Promise<void> => {
    const { org, body } = batchOf(size, orgs, n++, billed);
    const r = await poster.post('/api/v2/signals/bulk', { authorization: `Bearer ${org.liveKey}`, 'content-type': 'application/json' }, body);
    if (r.status === 202) accepted++;
    else refused++;
  };
  if (RATE > 0) {
    // Open loop: batch i is posted at t0 + i / RATE, answered or not.
    const posts: Promise<void>[] = [];
    for (let i = 0; ; i++) {
      const at = t0 + (i * 1000) / RATE;
      if (at >= end) break;
      const wait = at - performance.now();
      if (wait > 1) await sleep(wait);
      posts.push(post());
    }
    await Promise.all(posts);
  } else {
    const producer = async (): Promise<void> => {
      while (performance.now() < end) await post();
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, producer));
  }
  poster.close();
  return { accepted, refused, t0, sent: performance.now() };
}

/** The pipeline's own work in this run: batches of `size` naming customers nobody configured, until every one is stored (the pipeline consumer has nothing pending or unacked). */
async function reference(size: number, svc: Service, orgs: { org: BenchOrg; ids: string[] }[], jsm: Awaited<ReturnType<typeof jetstreamManager>>, prefix: string, pids: Record<string, number>): Promise<Reference> {
  const cpu = new CpuMeter(pids);
  const { accepted, refused, t0, sent } = await produce(size, svc, orgs, false);
  const deadline = sent + DRAIN_S * 1000;
  for (;;) {
    const ci = await jsm.consumers.info(`${prefix}_SIGNALS`, 'pipeline');
    if ((ci.num_pending === 0 && ci.num_ack_pending === 0) || performance.now() > deadline) break;
    await sleep(50);
  }
  const drained = performance.now();
  const usage = cpu.read();
  const cpuSeconds = cpu.seconds();
  if (refused > 0) console.log(`  (${refused} batches refused)`);
  const signals = accepted * size;
  return {
    size,
    accepted,
    endToEndSignalsPerS: round(signals / ((drained - t0) / 1000)),
    drainS: round((drained - sent) / 1000, 1),
    cpu: usage,
    cpuSeconds,
    serviceCpuUsPerSignal: cpuSeconds.service == null || signals === 0 ? null : round((cpuSeconds.service * 1e6) / signals, 1),
  };
}

async function scenario(size: number, svc: Service, orgs: { org: BenchOrg; ids: string[] }[], watch: Watch, billable: () => Promise<number>, stateWrites: () => Promise<number>, pids: Record<string, number>, urls: string[]): Promise<Result> {
  watch.reset();
  const g0 = await groupFigures(urls);
  const w0 = await stateWrites();
  const cpu = new CpuMeter(pids);
  const { accepted, refused, t0, sent } = await produce(size, svc, orgs, true);
  // Until the pipeline has published every accepted batch's billable parts and billing has
  // evaluated them all (the billable stream empty and every stored part evaluated).
  const deadline = sent + DRAIN_S * 1000;
  for (;;) {
    const pending = await billable();
    // Every accepted batch's parts published by the pipeline (a batch counts once stored, by
    // its id), none left on the billable stream, and every stored part evaluated.
    const storedBatches = new Set([...watch.stored.keys()].map((k) => k.slice(0, k.lastIndexOf('.p')))).size;
    if (pending === 0 && storedBatches >= accepted && [...watch.stored.keys()].every((k) => watch.evaluated.has(k))) break;
    if (performance.now() > deadline) break;
    await sleep(100);
  }
  const drained = performance.now();
  const g1 = await groupFigures(urls);
  const w1 = await stateWrites();
  const groups = g1.groups - g0.groups;
  const usage = cpu.read();
  const cpuSeconds = cpu.seconds();

  const lagPart = new LatencyHistogram();
  const bySecond: number[][] = [];
  const batches = new Map<string, { first: number; last: number; parts: number; done: number }>();
  let lastEval = t0;
  for (const [k, at] of watch.stored) {
    const batch = k.slice(0, k.lastIndexOf('.p'));
    const b = batches.get(batch) ?? batches.set(batch, { first: at, last: 0, parts: 0, done: 0 }).get(batch)!;
    b.first = Math.min(b.first, at);
    b.parts++;
    const ev = watch.evaluated.get(k);
    if (ev === undefined) continue;
    lagPart.record(ev - at);
    (bySecond[Math.max(0, Math.floor((at - t0) / 1000))] ??= []).push(ev - at);
    b.last = Math.max(b.last, ev);
    b.done++;
    lastEval = Math.max(lastEval, ev);
  }
  const lagBatch = new LatencyHistogram();
  let complete = 0;
  let completeDuring = 0;
  for (const b of batches.values()) {
    if (b.done !== b.parts) continue;
    complete++;
    if (b.last <= sent) completeDuring++;
    lagBatch.record(b.last - b.first);
  }
  if (refused > 0) console.log(`  (${refused} batches refused)`);
  const seconds = (sent - t0) / 1000;
  return {
    size,
    accepted,
    acceptedPerS: round(accepted / seconds),
    endToEndSignalsPerS: round((accepted * size) / ((lastEval - t0) / 1000)),
    serviceCpuUsPerSignal: cpuSeconds.service == null || accepted === 0 ? null : round((cpuSeconds.service * 1e6) / (accepted * size), 1),
    batchesEvaluated: complete,
    batchesPerSDuring: round(completeDuring / seconds),
    batchesPerSOverall: round(complete / ((lastEval - t0) / 1000)),
    parts: watch.evaluated.size,
    partsPerS: round(watch.evaluated.size / ((lastEval - t0) / 1000)),
    lagPart: lagPart.summary(),
    lagBatch: lagBatch.summary(),
    lagP99BySecond: Array.from(bySecond, (lags) => (lags ? Math.round(lags.sort((a, b) => a - b)[Math.min(lags.length - 1, Math.ceil(lags.length * 0.99) - 1)]!) : 0)),
    drainS: round((drained - sent) / 1000, 1),
    stateWritesPerSignal: accepted === 0 ? 0 : round((w1 - w0) / (accepted * size), 3),
    groups: { count: groups, meanMessages: groups > 0 ? round((g1.messages - g0.messages) / groups, 1) : 0, meanStepMs: groups > 0 ? round(((g1.seconds - g0.seconds) * 1000) / groups, 1) : 0, waits: g1.waits - g0.waits, overdueFetches: g1.overdue - g0.overdue },
    cpu: usage,
    cpuSeconds,
    cpuMsPerBatch: Object.fromEntries(Object.entries(cpuSeconds).map(([k, v]) => [k, v === null || complete === 0 ? null : round((v * 1000) / complete, 2)])),
  };
}

/** A billing scenario beside the pipeline's run of the same batch size. */
function compare(ref: Reference, r: Result): Comparison {
  const adds = r.serviceCpuUsPerSignal === null || ref.serviceCpuUsPerSignal === null ? null : round(r.serviceCpuUsPerSignal - ref.serviceCpuUsPerSignal, 1);
  return {
    size: r.size,
    storedEndToEndSignalsPerS: ref.endToEndSignalsPerS,
    billedEndToEndSignalsPerS: r.endToEndSignalsPerS,
    rateRatio: round(r.endToEndSignalsPerS / ref.endToEndSignalsPerS, 3),
    pipelineCpuUsPerSignal: ref.serviceCpuUsPerSignal,
    billingRunCpuUsPerSignal: r.serviceCpuUsPerSignal,
    billingAddsCpuUsPerSignal: adds,
    cpuRatio: adds === null || !ref.serviceCpuUsPerSignal ? null : round(adds / ref.serviceCpuUsPerSignal, 2),
  };
}

async function main(): Promise<void> {
  const host = hostInfo();
  printHeader('billing evaluation: billable batches/s and billing lag (stored → evaluated)', host, { orgs: ORGS, customers: CUSTOMERS, duration: DURATION, inFlight: IN_FLIGHT, rate: RATE, pipelines: PIPELINES, partitions: PARTITIONS || 'default', sizes: SIZES });
  const problems: string[] = [];
  const iso = isolation('billing', 'bench');
  onInterrupt(async () => void (await cleanup(iso)));
  const env: Record<string, string> = PARTITIONS ? { BILLING_PARTITIONS: PARTITIONS } : {};
  const svc = await startService({ role: 'all', operatorToken: OPERATOR_TOKEN, iso, env });
  const extra: Service[] = [];
  const extraDirs: string[] = [];
  for (let p = 1; p < PIPELINES; p++) {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'bench-billing-p-'));
    extraDirs.push(dataDir);
    extra.push(await startService({ role: 'pipeline', operatorToken: OPERATOR_TOKEN, iso: { ...iso, dataDir }, env }));
  }
  const nc = await connect({ servers: NATS_URL });
  try {
    const kv = await new Kvm(jetstream(nc)).open(`${iso.natsPrefix}_billing`);
    const jsm = await jetstreamManager(nc);
    console.log(`seeding ${ORGS} organizations × ${CUSTOMERS} customers …`);
    const s0 = performance.now();
    const orgs: { org: BenchOrg; ids: string[] }[] = [];
    for (let o = 0; o < ORGS; o++) {
      const org = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
      await seed(kv, org.id, CUSTOMERS, 96, false);
      orgs.push({ org, ids: Array.from({ length: CUSTOMERS }, (_, i) => seedId(org.id, 'cus', i + 1)) });
    }
    console.log(`  ${round((performance.now() - s0) / 1000, 1)} s`);
    const watch = new Watch(nc, iso.natsPrefix);
    const billable = async (): Promise<number> => (await jsm.streams.info(`${iso.natsPrefix}_BILLABLE_P`)).state.messages;
    // Every write of the state bucket (a pin, a customer's state, a cap period) is one message of its stream.
    const stateWrites = async (): Promise<number> => (await jsm.streams.info(`KV_${iso.natsPrefix}_billing_state`)).state.last_seq;
    const natsPid = pidsByName(['nats-server'])['nats-server'];
    // The engine host: the service's child process in embedded mode (it inserts the signal and billing rows).
    const engine = childPids(svc.child.pid)[0];
    const pids: Record<string, number> = { service: svc.child.pid, ...(engine !== undefined ? { 'engine host': engine } : {}), ...Object.fromEntries(extra.map((e, i) => [`pipeline${i + 2}`, e.child.pid])), ...(natsPid !== undefined ? { 'nats-server': natsPid } : {}) };
    const urls = [svc.url, ...extra.map((e) => e.url)];
    const partitions = (await jsm.consumers.list(`${iso.natsPrefix}_BILLABLE_P`).next()).filter((c) => c.name.startsWith('billing-p')).length;
    const shared = await partitionsShared(urls, partitions);
    console.log(`partitions pulled  ${shared.shares.join(' + ')} of ${partitions} (shared out ${shared.seconds} s after seeding)`);
    const refSize = Math.max(...SIZES);
    console.log(`\n${refSize}-signal batches naming customers nobody configured (the pipeline alone: resolved, stored, not billed), ${RATE > 0 ? `${RATE}/s open loop` : `${IN_FLIGHT} in flight`}, ${DURATION} s …`);
    const ref = await reference(refSize, svc, orgs, jsm, iso.natsPrefix, pids);
    console.log(`  accepted            ${fmt(ref.accepted)} batches (${fmt(ref.accepted * refSize)} signals); stored ${ref.drainS} s after the producers stopped; CPU ${JSON.stringify(ref.cpu)}`);
    console.log(`  end to end          ${fmt(ref.endToEndSignalsPerS)} signals/s (accepted / time until all stored); service ${ref.serviceCpuUsPerSignal} µs CPU per signal (CPU-s ${JSON.stringify(ref.cpuSeconds)})`);
    const results: Result[] = [];
    const comparisons: Comparison[] = [];
    for (const size of SIZES) {
      console.log(`\n${size}-signal batches, ${RATE > 0 ? `${RATE}/s open loop` : `${IN_FLIGHT} in flight`}, ${DURATION} s …`);
      const r = await scenario(size, svc, orgs, watch, billable, stateWrites, pids, urls);
      results.push(r);
      console.log(`  accepted            ${fmt(r.accepted)} batches (${fmt(r.acceptedPerS, 1)}/s, ${fmt(r.acceptedPerS * size)} signals/s)`);
      console.log(`  billable evaluated  ${fmt(r.batchesEvaluated)} batches: ${fmt(r.batchesPerSDuring, 1)}/s while sending, ${fmt(r.batchesPerSOverall, 1)}/s until the last (${fmt(r.parts)} partition messages, ${fmt(r.partsPerS, 1)}/s)`);
      console.log(`  billing lag (ms)    per partition message p50 ${r.lagPart.p50} p99 ${r.lagPart.p99} max ${r.lagPart.max} | per batch p50 ${r.lagBatch.p50} p99 ${r.lagBatch.p99} max ${r.lagBatch.max}`);
      console.log(`  lag p99 by second   ${r.lagP99BySecond.join(' ')} (ms; partition messages by the second of the scenario they were stored in)`);
      console.log(`  backlog drained     ${r.drainS} s after the producers stopped; CPU ${JSON.stringify(r.cpu)}`);
      console.log(`  evaluation groups   ${fmt(r.groups.count)}, ${r.groups.meanMessages} messages each on average, a step ${r.groups.meanStepMs} ms on average; ${fmt(r.groups.waits)} waits for another process; ${fmt(r.groups.overdueFetches)} fetches not ended by their expiry`);
      console.log(`  state bucket        ${r.stateWritesPerSignal} writes per signal (pins, customer states, cap periods)`);
      console.log(`  CPU per batch (ms)  ${JSON.stringify(r.cpuMsPerBatch)} (CPU-s ${JSON.stringify(r.cpuSeconds)}; the service's includes its ingress and pipeline, the engine host's the inserts of the signal and billing rows)`);
      console.log(`  end to end          ${fmt(r.endToEndSignalsPerS)} signals/s (accepted / time until all billed); service ${r.serviceCpuUsPerSignal} µs CPU per signal`);
      if (size === refSize) {
        const c = compare(ref, r);
        comparisons.push(c);
        const x = (v: number | null): string => (v === null ? '?' : String(v));
        console.log(`  beside the pipeline  stored ${fmt(c.storedEndToEndSignalsPerS)} / billed ${fmt(c.billedEndToEndSignalsPerS)} signals/s end to end: ratio ${c.rateRatio} (target ≥ ${TARGET_RATE_RATIO}); service CPU per signal ${x(c.pipelineCpuUsPerSignal)} / ${x(c.billingRunCpuUsPerSignal)} µs: billing adds ${x(c.billingAddsCpuUsPerSignal)} µs, ratio ${x(c.cpuRatio)} (target ≤ ${TARGET_CPU_RATIO})`);
        if (c.rateRatio < TARGET_RATE_RATIO) problems.push(`${size}-signal batches: billed end to end ${c.rateRatio} × the pipeline's stored end to end, below the target ${TARGET_RATE_RATIO}`);
        if (c.cpuRatio !== null && c.cpuRatio > TARGET_CPU_RATIO) problems.push(`${size}-signal batches: billing adds ${c.cpuRatio} × the pipeline's own service CPU per signal, above the target ${TARGET_CPU_RATIO}`);
      }
      if (r.batchesEvaluated !== r.accepted) problems.push(`${size}-signal batches: ${r.accepted} accepted, ${r.batchesEvaluated} evaluated in full`);
      if (r.lagPart.p99 > TARGET_LAG_P99_MS) problems.push(`${size}-signal batches: billing lag p99 ${r.lagPart.p99} ms is above the target ${TARGET_LAG_P99_MS} ms`);
    }
    watch.close();
    for (const l of [svc, ...extra].flatMap((s) => s.problems())) if (!/billing fault|BILLING_PARTITIONS/.test(l)) problems.push(`service: ${l.slice(0, 300)}`);
    appendHistory({ bench: 'billing', at: new Date().toISOString(), host, orgs: ORGS, customers: CUSTOMERS, duration: DURATION, inFlight: IN_FLIGHT, rate: RATE, pipelines: PIPELINES, partitions: PARTITIONS || 'default', reference: ref, results, comparisons });
    printProblems(problems.slice(0, 20));
  } finally {
    await nc.close();
    for (const e of extra) await e.child.stop(10_000);
    await svc.child.stop(10_000);
    await cleanup(iso);
    for (const d of extraDirs) await cleanup({ ...iso, dataDir: d }).catch(() => undefined);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
