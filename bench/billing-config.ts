/**
 * Billing configuration at scale (issue 14, "Size").
 *
 * 1. Seeds one organization with --customers customers (default 100,000), each with a unit
 *    tree of three (root → team → user), one order line attribute (credit-priced), one credit
 *    pool and one credit cap (on the root unit). Seeding writes the KV keys of the per-entity
 *    layout directly (src/billing/config/store.ts: customer document, externalId claim,
 *    listing position; the counters), in parallel: going through the API for 100,000
 *    customers × 5 requests would take most of the run. A second organization gets
 *    --small customers (default 1,000) the same way.
 * 2. Starts the service (ROLE=ingress: the configuration API) and times every configuration
 *    operation through the real HTTP API, --samples times each (default 200), one request at
 *    a time, on the large organization: p50 / p99 (ms).
 * 3. Evaluation of a 10-signal batch (10 distinct random customers) at --small vs --customers
 *    customers: what the evaluator does per batch for the configuration, in this process —
 *    `forBatch` (the KV reads of the customers the batch names, i.e. the pin's content) and
 *    `capPeriods` + `evaluate` (the worker's pure functions; cap period keys are not read:
 *    that cost is per batch, unchanged by this layout) — plus the pin's size in bytes. Target: flat.
 *
 *   node dist/bench/billing-config.js [--customers N (100000)] [--small N (1000)] [--samples N (200)]
 */
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import { Args } from './lib/args.js';
import { LatencyHistogram, appendHistory, hostInfo, printHeader, printProblems, round } from './lib/report.js';
import { OPERATOR_TOKEN, createUnlimitedOrg, http } from './lib/api.js';
import { NATS_URL, cleanup, isolation, onInterrupt, startBenchService as startService } from '../harness/service.js';
import { BillingConfigStore } from '../src/billing/config/store.js';
import { AT, CUR, seed, seedId } from './lib/billing-seed.js';
import { capPeriods, emptyState, evaluate, startingTotal, type BillableSignal, type PeriodTotal } from '../src/billing/evaluator/evaluate.js';

const args = new Args('node dist/bench/billing-config.js [options]', {
  customers: { help: 'customers of the large organization (default 100000)' },
  small: { help: 'customers of the small organization (default 1000)' },
  samples: { help: 'timed requests per operation (default 200)' },
});
const LARGE = args.num('customers', 100_000, 10, 1_000_000);
const SMALL = args.num('small', 1_000, 10, 1_000_000);
const SAMPLES = args.num('samples', 200, 10, 100_000);
const TARGET_P99 = 50;

const rand = (n: number): number => 1 + Math.floor(Math.random() * n);

async function main(): Promise<void> {
  const host = hostInfo();
  printHeader('billing configuration at scale: API p50/p99 per operation; evaluation cost vs organization size', host, { customers: LARGE, small: SMALL, samples: SAMPLES });
  const problems: string[] = [];
  const iso = isolation('billing-config', 'bench');
  onInterrupt(async () => void (await cleanup(iso)));
  const svc = await startService({ role: 'ingress', operatorToken: OPERATOR_TOKEN, iso });
  const nc = await connect({ servers: NATS_URL });
  try {
    const large = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    const small = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    const kv = await new Kvm(jetstream(nc)).open(`${iso.natsPrefix}_billing`);
    console.log(`seeding ${LARGE} customers (direct KV puts) …`);
    const seededLarge = await seed(kv, large.id, LARGE);
    console.log(`  ${round(seededLarge.ms / 1000, 1)} s (${Math.round(LARGE / (seededLarge.ms / 1000))} customers/s)`);
    const seededSmall = await seed(kv, small.id, SMALL);
    const planId = seededLarge.planId;

    // --- 2. the API, one request at a time, on the large organization ---
    const ops = new Map<string, LatencyHistogram>();
    const C = '/api/v2/customers';
    const call = async (op: string, method: string, path: string, body?: unknown, expect = [200, 201, 204]): Promise<any> => {
      const t0 = performance.now();
      const r = await http<any>(`${svc.url}${path}`, method, large.liveKey, body);
      const ms = performance.now() - t0;
      if (!expect.includes(r.status)) {
        problems.push(`${op}: ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`);
        return r.body;
      }
      (ops.get(op) ?? ops.set(op, new LatencyHistogram()).get(op)!).record(ms);
      return r.body;
    };
    const deepCursor = Buffer.from(JSON.stringify({ p: LARGE - 150 })).toString('base64url');
    for (let s = 0; s < SAMPLES; s++) {
      const i = rand(LARGE);
      const id = seedId(large.id, 'cus', i);
      const cus = await call('POST customers', 'POST', C, { externalId: `api-${s}-${Math.random()}`, name: 'new' });
      await call('GET customers/:id', 'GET', `${C}/${id}`);
      await call('GET customers (first page, 100)', 'GET', C);
      await call('GET customers (deep cursor, 100)', 'GET', `${C}?cursor=${deepCursor}`);
      await call('PUT units/:u (create)', 'PUT', `${C}/${cus.id}/units/root`, {});
      await call('PUT units/:u (existing customer, child)', 'PUT', `${C}/${id}/units/extra-${s}`, { parentExternalId: 'user' });
      await call('GET units/:u', 'GET', `${C}/${id}/units/user`);
      await call('GET units', 'GET', `${C}/${id}/units`);
      const attr = await call('POST order-line-attributes', 'POST', `${C}/${cus.id}/order-line-attributes`, { planId, eventName: 'tokens', unitPrice: '0.5', currency: 'USD', creditsCurrencyId: CUR, creditsPerUnit: '1' });
      await call('GET order-line-attributes', 'GET', `${C}/${id}/order-line-attributes`);
      const pool = await call('POST credit-pools', 'POST', `${C}/${cus.id}/credit-pools`, { orderLineAttributeId: attr.id, credits: '100' });
      await call('POST top-ups', 'POST', `${C}/${cus.id}/credit-pools/${pool.id}/top-ups`, { credits: '1' });
      await call('GET credit-pools', 'GET', `${C}/${id}/credit-pools`);
      await call('PUT credit-caps', 'PUT', `${C}/${cus.id}/units/root/credit-caps/${CUR}`, { amount: '10', frequency: 'DAILY', effectiveFrom: AT });
      await call('GET credit-caps/:cur', 'GET', `${C}/${id}/units/root/credit-caps/${CUR}`);
      await call('GET credit-caps', 'GET', `${C}/${id}/credit-caps`);
      await call('DELETE credit-caps/:cur', 'DELETE', `${C}/${cus.id}/units/root/credit-caps/${CUR}`);
      await call('POST plans', 'POST', '/api/v2/plans', { name: `p${s}` });
      await call('GET plans', 'GET', '/api/v2/plans');
      await call('POST customers (duplicate externalId → 409)', 'POST', C, { externalId: `ext-${i}` }, [409]);
    }
    console.log(`\nconfiguration API at ${LARGE} customers (${SAMPLES} sequential requests per operation; ms):`);
    const apiRows: Record<string, { p50: number; p99: number }> = {};
    let worst = 0;
    for (const [op, h] of ops) {
      const s = h.summary();
      apiRows[op] = { p50: s.p50, p99: s.p99 };
      worst = Math.max(worst, s.p99);
      console.log(`  ${op.padEnd(46)} p50 ${String(s.p50).padStart(7)}  p99 ${String(s.p99).padStart(7)}  max ${s.max}`);
    }
    if (worst > TARGET_P99) problems.push(`an operation's p99 ${worst} ms is above the target ${TARGET_P99} ms`);

    // --- 3. evaluation of a 10-signal batch: 1k vs 100k customers ---
    const store = new BillingConfigStore(kv, nc.info?.max_payload ?? 1024 * 1024);
    const evalAt = async (orgId: string, n: number): Promise<{ read: ReturnType<LatencyHistogram['summary']>; cpu: ReturnType<LatencyHistogram['summary']>; pinBytes: number }> => {
      const read = new LatencyHistogram();
      const cpu = new LatencyHistogram();
      let pinBytes = 0;
      for (let s = 0; s < SAMPLES; s++) {
        const signals: BillableSignal[] = Array.from({ length: 10 }, (_, j) => {
          const i = rand(n);
          return { id: `sig-${s}-${j}`, eventName: 'tokens', customerId: j % 2 ? `ext-${i}` : seedId(orgId, 'cus', i), unitId: 'user', ts: Date.parse('2024-06-01T00:00:00Z') + j, data: {} };
        });
        const t0 = performance.now();
        const batch = await store.forBatch(orgId, 'live', signals.map((x) => x.customerId));
        const t1 = performance.now();
        // The cap periods the batch touches (the evaluator reads their keys; here: none spent yet).
        const periods: Record<string, PeriodTotal> = {};
        for (const r of capPeriods({ orgId, mode: 'live', config: batch.config, signals })) periods[r.key] = startingTotal(null, 1, undefined);
        const out = evaluate({ orgId, mode: 'live', config: batch.config, state: emptyState(), signals, evaluatedAt: Date.now(), periods });
        const t2 = performance.now();
        if (out.costs.length !== 10) problems.push(`evaluation at ${n}: ${out.costs.length} cost rows for 10 signals`);
        read.record(t1 - t0);
        cpu.record(t2 - t1);
        pinBytes = Math.max(pinBytes, JSON.stringify(batch).length);
      }
      return { read: read.summary(), cpu: cpu.summary(), pinBytes };
    };
    const atSmall = await evalAt(small.id, SMALL);
    const atLarge = await evalAt(large.id, LARGE);
    console.log(`\n10-signal batch (${SAMPLES} batches; ms): configuration read (forBatch = the pin's content) and evaluate():`);
    for (const [label, r] of [[`${SMALL} customers`, atSmall], [`${LARGE} customers`, atLarge]] as const) {
      console.log(`  ${label.padEnd(18)} read p50 ${r.read.p50} p99 ${r.read.p99} | evaluate p50 ${r.cpu.p50} p99 ${r.cpu.p99} | pin ≤ ${r.pinBytes} bytes`);
    }
    appendHistory({ bench: 'billing-config', at: new Date().toISOString(), host, customers: LARGE, small: SMALL, samples: SAMPLES, seedMs: round(seededLarge.ms), seedSmallMs: round(seededSmall.ms), api: apiRows, evaluation: { small: atSmall, large: atLarge } });
    printProblems(problems);
  } finally {
    await nc.close();
    await svc.child.stop(10_000);
    await cleanup(iso);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
