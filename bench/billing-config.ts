/**
 * Billing configuration at scale: one organization with 100,000
 * customers and 1,000 organizations on one deployment.
 *
 * 1. Starts the service (ROLE=ingress: the configuration API and the operator API) and
 *    creates, through the operator API (POST /admin/v1/organizations, then PATCH …/limits so
 *    the token bucket never refuses; --create-parallel at a time), the organizations of the
 *    run: the large one, a second one of --small customers, and --orgs more of
 *    --org-customers customers each (default 1,000 × 100).
 * 2. Seeds every organization: --customers customers (default 100,000) in the large one,
 *    each with a unit tree of three (root → team → user), one order line attribute
 *    (credit-priced), one credit pool and one credit cap (on the root unit), and the same
 *    shape in the others. Seeding writes the KV keys of the per-entity layout directly
 *    (bench/lib/billing-seed.ts: customer document, externalId claim, listing position; the
 *    counters), in parallel: going through the API for 200,000 customers × 5 requests would
 *    take most of the run. The --orgs organizations are seeded --seed-orgs at a time.
 * 3. Restarts the service and times it to ready with every organization in the registry
 *    and every key in the billing bucket (the registry loads all organizations on start).
 * 4. Times every configuration operation through the real HTTP API, --samples times each
 *    (default 200), one request at a time, (a) on the large organization and (b) each request
 *    on an organization chosen at random among the --orgs (a request that acts on what an
 *    earlier one of its round created — a unit of the customer just created — goes to that
 *    request's organization), the two interleaved round by round: p50 / p99 (ms) for both.
 *    "deep offset" is 150 before the end of the large organization's customers, and the
 *    middle of a small organization's (100 customers fit on the first page).
 * 5. Evaluation of a 10-signal batch (10 distinct random customers) at --small customers, at
 *    --customers, and in an organization chosen at random among the --orgs for every batch:
 *    what the evaluator does per batch for the configuration, in this process — `forBatch`
 *    (the KV reads of the customers the batch names, i.e. the pin's content) and
 *    `capPeriods` + `evaluate` (the worker's pure functions; cap period keys are not read:
 *    that cost is per batch, unchanged by this layout) — plus the pin's size in bytes. Target: flat.
 *
 *   node dist/bench/billing-config.js [--customers N (100000)] [--small N (1000)] [--orgs N (1000)]
 *     [--org-customers N (100)] [--samples N (200)] [--create-parallel N (16)] [--seed-orgs N (8)]
 */
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { Args } from './lib/args.js';
import { LatencyHistogram, appendHistory, hostInfo, printHeader, printProblems, round } from './lib/report.js';
import { OPERATOR_TOKEN, createUnlimitedOrg, http, type BenchOrg } from './lib/api.js';
import { NATS_URL, cleanup, isolation, onInterrupt, startBenchService as startService, type BenchService } from '../harness/service.js';
import { BillingConfigStore } from '../src/billing/config/store.js';
import { AT, CUR, seed, seedId } from './lib/billing-seed.js';
import { capPeriods, emptyState, evaluate, startingTotal, type BillableSignal, type PeriodTotal } from '../src/billing/evaluator/evaluate.js';

const args = new Args('node dist/bench/billing-config.js [options]', {
  customers: { help: 'customers of the large organization (default 100000)' },
  small: { help: 'customers of the small organization (default 1000)' },
  orgs: { help: 'further organizations on the deployment (default 1000; 0: none)' },
  'org-customers': { help: 'customers of each of those organizations (default 100)' },
  samples: { help: 'timed requests per operation, for each of the two targets (default 200)' },
  'create-parallel': { help: 'organizations created through the operator API at once (default 16)' },
  'seed-orgs': { help: 'organizations seeded at once (default 8)' },
});
const LARGE = args.num('customers', 100_000, 10, 1_000_000);
const SMALL = args.num('small', 1_000, 10, 1_000_000);
const ORGS = args.num('orgs', 1_000, 0, 100_000);
const ORG_CUSTOMERS = args.num('org-customers', 100, 10, 1_000_000);
const SAMPLES = args.num('samples', 200, 10, 100_000);
const CREATE_PARALLEL = args.num('create-parallel', 16, 1, 256);
const SEED_ORGS = args.num('seed-orgs', 8, 1, 256);
const TARGET_P99 = 50;

const rand = (n: number): number => 1 + Math.floor(Math.random() * n);

/** An organization of the run: its keys, its customer count and its seeded plan. */
interface OrgCtx {
  org: BenchOrg;
  n: number;
  planId: string;
}

/** Where a round of requests goes: one organization, or a random one per request. */
interface Target {
  label: string;
  ops: Map<string, LatencyHistogram>;
  pick(): OrgCtx;
}

/** Runs `fn` over `items`, `parallel` at a time. */
async function pool<T, R>(items: readonly T[], parallel: number, fn: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(parallel, items.length) }, worker));
  return out;
}

async function main(): Promise<void> {
  const host = hostInfo();
  printHeader('billing configuration at scale: API p50/p99 per operation on one large organization and across many organizations; evaluation cost vs organization size', host, {
    customers: LARGE,
    small: SMALL,
    orgs: ORGS,
    orgCustomers: ORG_CUSTOMERS,
    samples: SAMPLES,
  });
  const problems: string[] = [];
  const iso = isolation('billing-config', 'bench');
  onInterrupt(async () => void (await cleanup(iso)));
  let t = performance.now();
  let svc: BenchService = await startService({ role: 'ingress', operatorToken: OPERATOR_TOKEN, iso });
  const startMs = performance.now() - t;
  const nc = await connect({ servers: NATS_URL });
  try {
    // --- 1. organizations, through the operator API ---
    const large = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    const small = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    console.log(`creating ${ORGS} organizations through the operator API (${CREATE_PARALLEL} at once) …`);
    t = performance.now();
    const many = await pool(Array.from({ length: ORGS }), CREATE_PARALLEL, () => createUnlimitedOrg(svc.url, OPERATOR_TOKEN));
    const createMs = performance.now() - t;
    if (ORGS > 0) console.log(`  ${round(createMs / 1000, 1)} s (${Math.round(ORGS / (createMs / 1000))} organizations/s, POST + PATCH limits each)`);

    // --- 2. seeding, direct KV puts ---
    const kv = await new Kvm(jetstream(nc)).open(`${iso.natsPrefix}_billing`);
    console.log(`seeding ${LARGE} customers (direct KV puts) …`);
    const seededLarge = await seed(kv, large.id, LARGE);
    console.log(`  ${round(seededLarge.ms / 1000, 1)} s (${Math.round(LARGE / (seededLarge.ms / 1000))} customers/s)`);
    const seededSmall = await seed(kv, small.id, SMALL);
    if (ORGS > 0) console.log(`seeding ${ORGS} organizations × ${ORG_CUSTOMERS} customers (${SEED_ORGS} organizations at once) …`);
    t = performance.now();
    const seededMany = await pool(many, SEED_ORGS, async (org, i) => {
      const r = await seed(kv, org.id, ORG_CUSTOMERS, 48, false);
      if ((i + 1) % 200 === 0) process.stdout.write(`  seeded ${i + 1} / ${ORGS} organizations\n`);
      return r;
    });
    const seedManyMs = performance.now() - t;
    if (ORGS > 0) console.log(`  ${round(seedManyMs / 1000, 1)} s (${Math.round((ORGS * ORG_CUSTOMERS) / (seedManyMs / 1000))} customers/s)`);
    const largeCtx: OrgCtx = { org: large, n: LARGE, planId: seededLarge.planId };
    const smallCtx: OrgCtx = { org: small, n: SMALL, planId: seededSmall.planId };
    const manyCtx: OrgCtx[] = many.map((org, i) => ({ org, n: ORG_CUSTOMERS, planId: seededMany[i]!.planId }));

    // --- 3. a restart with every organization in the registry ---
    await svc.child.stop(10_000);
    t = performance.now();
    svc = await startService({ role: 'ingress', operatorToken: OPERATOR_TOKEN, iso });
    const restartMs = performance.now() - t;
    const orgCount = ORGS + 2;
    console.log(`service start to ready: ${round(startMs)} ms empty, ${round(restartMs)} ms with ${orgCount} organizations and ${LARGE + SMALL + ORGS * ORG_CUSTOMERS} customers`);

    // --- 4. the API, one request at a time: the large organization, and random ones among the many ---
    const C = '/api/v2/customers';
    const call = async (tg: Target, op: string, o: OrgCtx, method: string, path: string, body?: unknown, expect = [200, 201, 204]): Promise<any> => {
      const t0 = performance.now();
      const r = await http<any>(`${svc.url}${path}`, method, o.org.liveKey, body);
      const ms = performance.now() - t0;
      if (!expect.includes(r.status)) {
        problems.push(`${tg.label}: ${op}: ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`);
        return r.body;
      }
      (tg.ops.get(op) ?? tg.ops.set(op, new LatencyHistogram()).get(op)!).record(ms);
      return r.body;
    };
    const deepOffset = (n: number): number => (n >= 300 ? n - 150 : Math.floor(n / 2));
    /** A seeded customer of an organization the target picks. */
    const seeded = (tg: Target): { o: OrgCtx; i: number; id: string } => {
      const o = tg.pick();
      const i = rand(o.n);
      return { o, i, id: seedId(o.org.id, 'cus', i) };
    };
    const roundOf = async (tg: Target, s: number): Promise<void> => {
      // `c`: the organization of the customer this round creates, and of every request on it.
      const c = tg.pick();
      const cus = await call(tg, 'POST customers', c, 'POST', C, { externalId: `api-${s}-${Math.random()}`, name: 'new' });
      let x = seeded(tg);
      await call(tg, 'GET customers/:id', x.o, 'GET', `${C}/${x.id}`);
      await call(tg, 'GET customers (first page, 100)', tg.pick(), 'GET', C);
      const d = tg.pick();
      await call(tg, 'GET customers (deep offset, 100)', d, 'GET', `${C}?offset=${deepOffset(d.n)}`);
      await call(tg, 'PUT units/:u (create)', c, 'PUT', `${C}/${cus.id}/units/root`, {});
      x = seeded(tg);
      await call(tg, 'PUT units/:u (existing customer, child)', x.o, 'PUT', `${C}/${x.id}/units/extra-${s}`, { parentExternalId: 'user' });
      x = seeded(tg);
      await call(tg, 'GET units/:u', x.o, 'GET', `${C}/${x.id}/units/user`);
      x = seeded(tg);
      await call(tg, 'GET units', x.o, 'GET', `${C}/${x.id}/units`);
      const attr = await call(tg, 'POST order-line-attributes', c, 'POST', `${C}/${cus.id}/order-line-attributes`, { planId: c.planId, eventName: 'tokens', unitPrice: '0.5', currency: 'USD', creditsCurrencyId: CUR, creditsPerUnit: '1' });
      x = seeded(tg);
      await call(tg, 'GET order-line-attributes', x.o, 'GET', `${C}/${x.id}/order-line-attributes`);
      const pool = await call(tg, 'POST credit-pools', c, 'POST', `${C}/${cus.id}/credit-pools`, { orderLineAttributeId: attr.id, credits: '100' });
      await call(tg, 'POST top-ups', c, 'POST', `${C}/${cus.id}/credit-pools/${pool.id}/top-ups`, { credits: '1' });
      x = seeded(tg);
      await call(tg, 'GET credit-pools', x.o, 'GET', `${C}/${x.id}/credit-pools`);
      await call(tg, 'PUT credit-caps', c, 'PUT', `${C}/${cus.id}/units/root/credit-caps/${CUR}`, { amount: '10', frequency: 'DAILY', effectiveFrom: AT });
      x = seeded(tg);
      await call(tg, 'GET credit-caps/:cur', x.o, 'GET', `${C}/${x.id}/units/root/credit-caps/${CUR}`);
      x = seeded(tg);
      await call(tg, 'GET credit-caps', x.o, 'GET', `${C}/${x.id}/credit-caps`);
      await call(tg, 'DELETE credit-caps/:cur', c, 'DELETE', `${C}/${cus.id}/units/root/credit-caps/${CUR}`);
      await call(tg, 'POST plans', tg.pick(), 'POST', '/api/v2/plans', { name: `p${s}` });
      await call(tg, 'GET plans', tg.pick(), 'GET', '/api/v2/plans');
      x = seeded(tg);
      await call(tg, 'POST customers (duplicate externalId → 409)', x.o, 'POST', C, { externalId: `ext-${x.i}`, name: `customer ${x.i}` }, [409]);
    };
    const targets: Target[] = [{ label: `1 organization of ${LARGE} customers`, ops: new Map(), pick: () => largeCtx }];
    if (ORGS > 0) targets.push({ label: `a random one of ${ORGS} organizations (${ORG_CUSTOMERS} customers each)`, ops: new Map(), pick: () => manyCtx[rand(ORGS) - 1]! });
    for (let s = 0; s < SAMPLES; s++) for (const tg of targets) await roundOf(tg, s);

    console.log(`\nconfiguration API (${SAMPLES} sequential requests per operation and target, the targets interleaved; ms):`);
    console.log(`  ${''.padEnd(46)} ${'large organization'.padEnd(29)} ${ORGS > 0 ? `random organization of ${ORGS}` : ''}`);
    const apiRows: Record<string, { p50: number; p99: number }>[] = targets.map(() => ({}));
    let worst = 0;
    for (const op of targets[0]!.ops.keys()) {
      const cells = targets.map((tg, k) => {
        const h = tg.ops.get(op);
        if (!h) return 'no sample'.padEnd(29);
        const s = h.summary();
        apiRows[k]![op] = { p50: s.p50, p99: s.p99 };
        worst = Math.max(worst, s.p99);
        return `p50 ${String(s.p50).padStart(6)}  p99 ${String(s.p99).padStart(7)} `.padEnd(29);
      });
      console.log(`  ${op.padEnd(46)} ${cells.join(' ')}`);
    }
    if (worst > TARGET_P99) problems.push(`an operation's p99 ${worst} ms is above the target ${TARGET_P99} ms`);

    // --- 5. evaluation of a 10-signal batch: small, large, a random one of the many ---
    const store = new BillingConfigStore(kv, nc.info?.max_payload ?? 1024 * 1024);
    const evalAt = async (pick: () => OrgCtx): Promise<{ read: ReturnType<LatencyHistogram['summary']>; cpu: ReturnType<LatencyHistogram['summary']>; pinBytes: number }> => {
      const read = new LatencyHistogram();
      const cpu = new LatencyHistogram();
      let pinBytes = 0;
      for (let s = 0; s < SAMPLES; s++) {
        const { org, n } = pick();
        const orgId = org.id;
        const signals: BillableSignal[] = Array.from({ length: 10 }, (_, j) => {
          const i = rand(n);
          // By service id: the pipeline resolves a signal's customer reference (either kind) before billing sees it.
          return { id: `sig-${s}-${j}`, eventName: 'tokens', customerId: seedId(orgId, 'cus', i), unitId: 'user', ts: Date.parse('2024-06-01T00:00:00Z') + j, data: {} };
        });
        const t0 = performance.now();
        const batch = await store.forBatch(orgId, 'live', signals.map((x) => x.customerId));
        const t1 = performance.now();
        // The cap periods the batch touches (the evaluator reads their keys; here: none spent yet).
        const periods: Record<string, PeriodTotal> = {};
        for (const r of capPeriods({ orgId, mode: 'live', config: batch.config, signals })) periods[r.key] = startingTotal(null, 1);
        const out = evaluate({ orgId, mode: 'live', config: batch.config, state: emptyState(), signals, evaluatedAt: Date.now(), periods });
        const t2 = performance.now();
        if (out.costs.length !== 10) problems.push(`evaluation at ${n}: ${out.costs.length} cost rows for 10 signals`);
        read.record(t1 - t0);
        cpu.record(t2 - t1);
        pinBytes = Math.max(pinBytes, JSON.stringify(batch).length);
      }
      return { read: read.summary(), cpu: cpu.summary(), pinBytes };
    };
    const atSmall = await evalAt(() => smallCtx);
    const atLarge = await evalAt(() => largeCtx);
    const atMany = ORGS > 0 ? await evalAt(() => manyCtx[rand(ORGS) - 1]!) : null;
    console.log(`\n10-signal batch (${SAMPLES} batches; ms): configuration read (forBatch = the pin's content) and evaluate():`);
    const evalRows: [string, NonNullable<typeof atMany>][] = [
      [`${SMALL} customers`, atSmall],
      [`${LARGE} customers`, atLarge],
    ];
    if (atMany) evalRows.push([`random org of ${ORGS} (${ORG_CUSTOMERS} customers)`, atMany]);
    for (const [label, r] of evalRows) {
      console.log(`  ${label.padEnd(36)} read p50 ${r.read.p50} p99 ${r.read.p99} | evaluate p50 ${r.cpu.p50} p99 ${r.cpu.p99} | pin ≤ ${r.pinBytes} bytes`);
    }
    for (const p of svc.problems()) problems.push(`service: ${p.slice(0, 300)}`);
    appendHistory({
      bench: 'billing-config',
      at: new Date().toISOString(),
      host,
      customers: LARGE,
      small: SMALL,
      orgs: ORGS,
      orgCustomers: ORG_CUSTOMERS,
      samples: SAMPLES,
      seedMs: round(seededLarge.ms),
      seedSmallMs: round(seededSmall.ms),
      orgsCreateMs: round(createMs),
      orgsSeedMs: round(seedManyMs),
      startMs: round(startMs),
      restartMs: round(restartMs),
      api: apiRows[0],
      apiOrgs: apiRows[1] ?? null,
      evaluation: { small: atSmall, large: atLarge, orgs: atMany },
    });
    printProblems(problems);
  } finally {
    await nc.close();
    await svc.child.stop(10_000);
    const removed = await cleanup(iso);
    console.log(`cleaned up: ${removed.join(', ')}`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
