/**
 * Analytics API overhead: what POST /api/v2/analytics/query adds to the engine's own time.
 *
 * Phase 1 (service): ROLE=all as a child process (isolated prefixes, temp DATA_DIR); one
 * organization ingests --signals signals, and the bench waits until all are stored. Then,
 * for each query, --requests sequential requests over one keep-alive connection, timed at the
 * client (hdr histogram). Queries:
 *   aggregate      a small GROUP BY over a JSON path (3 rows)
 *   aggregate-cold the same with a unique comment per request: the compiler's cache misses,
 *                  so each request is parsed, resolved and printed
 *   rows-10k       10,000 rows of 5 columns (the row limit), ~0.6 MB of JSON
 * Phase 2 (engine alone, after the service stopped): the same data directory opened by the
 * store in this process, and the same statements with the same settings run --requests times
 * (timed around the store call: the engine's own time including the chdb call).
 *
 * Overhead = API p50 − engine p50, per query. Target: at most 5 ms at p50.
 *
 *   node dist/bench/analytics.js [--signals N (default 20000)] [--requests N (default 300)]
 */
import { loadConfig } from '../src/config.js';
import { ChdbStore } from '../src/store/chdb/index.js';
import { QueryCompiler } from '../src/analytics/compiler/index.js';
import { engineSettings } from '../src/analytics/service.js';
import { VIEW_SCHEMAS } from '../src/store/views.js';
import { Args } from './lib/args.js';
import { LatencyHistogram, appendHistory, hostInfo, printHeader, printProblems, round, sleep, type Percentiles } from './lib/report.js';
import { OPERATOR_TOKEN, createUnlimitedOrg, http } from './lib/api.js';
import { cleanup, isolation, onInterrupt, startBenchService as startService } from '../harness/service.js';

const TARGET_MS = 5;
const args = new Args('node dist/bench/analytics.js [options]', {
  signals: { help: 'signals to ingest before querying (default 20000)' },
  requests: { help: 'timed requests per query (default 300)' },
});
const SIGNALS = args.num('signals', 20_000, 500, 10_000_000);
const REQUESTS = args.num('requests', 300, 10, 100_000);
const WARMUP = 20;

const QUERIES: Record<string, string> = {
  aggregate: 'SELECT data.region::String AS region, count() AS n, sum(data.n::Int64) AS total FROM fact_signal GROUP BY region ORDER BY region',
  'rows-10k': 'SELECT id, created_at, event_name, customer_id, data.n::Int64 AS n FROM fact_signal ORDER BY created_at, id LIMIT 10000',
};

interface QueryResult {
  api: Percentiles;
  engine: Percentiles | null;
  /** Median over requests of (client latency − engine's reported elapsed time). */
  perRequestOverheadP50: number;
  overheadP50: number | null;
  rows: number;
  bytes: number;
}

async function main(): Promise<void> {
  const host = hostInfo();
  printHeader('analytics API overhead over the engine', host, { signals: SIGNALS, requests: REQUESTS, queries: Object.keys(QUERIES).concat('aggregate-cold') });
  const iso = isolation('analytics', 'bench');
  const problems: string[] = [];
  onInterrupt(async () => void (await cleanup(iso)));
  const svc = await startService({ role: 'all', operatorToken: OPERATOR_TOKEN, iso });
  const results: Record<string, QueryResult> = {};
  let orgId = '';
  try {
    const org = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    orgId = org.id;
    const regions = ['eu', 'us', 'apac'];
    for (let sent = 0; sent < SIGNALS; sent += 500) {
      const signals = Array.from({ length: Math.min(500, SIGNALS - sent) }, (_, i) => ({
        eventName: 'api_call',
        customer: { externalCustomerId: `cus_${(sent + i) % 97}` },
        timestamp: new Date(Date.UTC(2026, 0, 1) + (sent + i) * 1000).toISOString(),
        data: { region: regions[(sent + i) % 3], n: sent + i },
      }));
      const r = await http(`${svc.url}/api/v2/signals/bulk`, 'POST', org.liveKey, { signals });
      if (r.status !== 202) throw new Error(`ingest: ${r.status} ${JSON.stringify(r.body)}`);
    }
    const end = Date.now() + 300_000;
    for (;;) {
      const s = await http<{ signals: { live: number } }>(`${svc.url}/admin/v1/organizations/${org.id}/stats`, 'GET', OPERATOR_TOKEN);
      if (s.body.signals?.live === SIGNALS) break;
      if (Date.now() > end) throw new Error(`only ${s.body.signals?.live} of ${SIGNALS} signals stored`);
      await sleep(250);
    }
    console.log(`stored ${SIGNALS} signals`);

    const run = async (name: string, text: (i: number) => string): Promise<void> => {
      const h = new LatencyHistogram();
      const overhead: number[] = [];
      let rows = 0;
      let bytes = 0;
      for (let i = -WARMUP; i < REQUESTS; i++) {
        const t0 = performance.now();
        const res = await fetch(`${svc.url}/api/v2/analytics/query`, {
          method: 'POST',
          headers: { authorization: `Bearer ${org.liveKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ query: text(i) }),
        });
        const body = await res.text();
        const ms = performance.now() - t0;
        if (res.status !== 200) throw new Error(`${name}: ${res.status} ${body.slice(0, 300)}`);
        if (i < 0) continue;
        const parsed = JSON.parse(body) as { rows: unknown[]; meta: { elapsedMs: number } };
        h.record(ms);
        overhead.push(ms - parsed.meta.elapsedMs);
        rows = parsed.rows.length;
        bytes = body.length;
      }
      overhead.sort((a, b) => a - b);
      results[name] = { api: h.summary(), engine: null, perRequestOverheadP50: round(overhead[Math.floor(overhead.length / 2)]!, 3), overheadP50: null, rows, bytes };
    };
    await run('aggregate', () => QUERIES.aggregate!);
    await run('aggregate-cold', (i) => `${QUERIES.aggregate!} /* ${i} */`);
    await run('rows-10k', () => QUERIES['rows-10k']!);
    for (const l of svc.problems()) problems.push(`service: ${l.slice(0, 200)}`);
  } finally {
    await svc.child.stop(10_000);
  }

  // Phase 2: the engine alone, same data, same statements, same settings.
  const cfg = loadConfig({ OPERATOR_TOKEN: 'bench-engine-phase-token', DATA_DIR: iso.dataDir }, []);
  const store = new ChdbStore(cfg);
  await store.init();
  try {
    const compiler = new QueryCompiler(VIEW_SCHEMAS, cfg.analytics.database);
    const settings = engineSettings({ timeoutMs: 30_000, maxMemoryBytes: cfg.analytics.maxMemoryBytes });
    for (const [name, q] of Object.entries(QUERIES)) {
      const sql = compiler.compile(q, { orgId, mode: 'live' });
      const h = new LatencyHistogram();
      for (let i = -WARMUP; i < REQUESTS; i++) {
        const t0 = performance.now();
        await store.analytics.select(sql, settings);
        if (i >= 0) h.record(performance.now() - t0);
      }
      results[name]!.engine = h.summary();
    }
    results['aggregate-cold']!.engine = results.aggregate!.engine;
  } finally {
    await store.close();
    await cleanup(iso);
  }

  console.log('\n--- client latency of the API vs the engine alone (ms)');
  console.log('query            rows     API p50   p99     p999    engine p50  p99     overhead p50   per-request p50');
  for (const [name, r] of Object.entries(results)) {
    r.overheadP50 = r.engine ? round(r.api.p50 - r.engine.p50, 3) : null;
    console.log(
      `${name.padEnd(16)} ${String(r.rows).padEnd(8)} ${String(r.api.p50).padEnd(9)} ${String(r.api.p99).padEnd(7)} ${String(r.api.p999).padEnd(7)} ${String(r.engine?.p50 ?? '?').padEnd(11)} ${String(r.engine?.p99 ?? '?').padEnd(7)} ${String(r.overheadP50).padEnd(14)} ${r.perRequestOverheadP50}`,
    );
    if (r.overheadP50 !== null && r.overheadP50 > TARGET_MS) problems.push(`${name}: overhead ${r.overheadP50} ms at p50 (target ≤ ${TARGET_MS} ms)`);
  }
  console.log(`\noverhead = API p50 − engine p50; per-request = median of (client latency − the engine's own elapsed time in meta.elapsedMs). Target ≤ ${TARGET_MS} ms at p50.`);
  printProblems(problems);
  appendHistory({ bench: 'analytics', date: new Date().toISOString(), commit: host.commit, dirty: host.dirty, signals: SIGNALS, requests: REQUESTS, results, problems });
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
