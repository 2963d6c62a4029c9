/**
 * A small analytics statement beside other organizations' runaways.
 *
 * ROLE=all as a child process (embedded engine), with the longest time limit the service takes
 * (--limit-ms, default 30 s: the small statements are done long before the runaways are ended). First the small statement alone, --small times:
 * one block sorting --small-millions million elements (default 2: about 0.5–0.9 s of engine
 * work on a 2-core VM; 6, about 1.5–2.5 s, is a statement of a few seconds' work). Then
 * --runaways organizations each start one statement the engine cannot stop in the middle (one
 * block sorting 20,000,000 elements, 10–16 s alone); once they have run --head-start-ms, the
 * small statement runs --small times, one after another, from another organization.
 *
 * Printed: the small statement's latency alone and beside the runaways (hdr p50/p99/max, ms), the
 * ratio of the p50s, and the runaways' answers. On the embedded engine the host lowers the
 * threads of statements that have run a second (docs/security.md, *Long statements yield to
 * short ones*), so the small statement takes the CPU first.
 *
 *   node dist/bench/analytics-runaways.js [--runaways 4] [--small 5] [--small-millions 2] [--head-start-ms 1500] [--limit-ms 30000]
 */
import { Args } from './lib/args.js';
import { LatencyHistogram, appendHistory, hostInfo, printHeader, printProblems, round, sleep } from './lib/report.js';
import { OPERATOR_TOKEN, createUnlimitedOrg, http } from './lib/api.js';
import { cleanup, isolation, onInterrupt, startBenchService as startService } from '../harness/service.js';

const args = new Args('node dist/bench/analytics-runaways.js [options]', {
  runaways: { help: 'organizations running one runaway statement each (default 4)' },
  small: { help: 'times the small statement runs alone and beside them (default 5)' },
  'small-millions': { help: 'elements the small statement sorts, in millions (default 2; the runaways sort 20)' },
  'head-start-ms': { help: 'how long the runaways run before the small statements start (default 1500)' },
  'limit-ms': { help: "the service's analytics time limit, ANALYTICS_TIMEOUT_MS (default 30000, the most it takes)" },
});
const RUNAWAYS = args.num('runaways', 4, 0, 32);
const SMALL_N = args.num('small', 5, 1, 1_000);
const SMALL_MILLIONS = args.num('small-millions', 2, 1, 19);
const HEAD_START_MS = args.num('head-start-ms', 1_500, 0, 60_000);
const LIMIT_MS = args.num('limit-ms', 30_000, 1_000, 30_000);

const cross = (c: number): string =>
  'SELECT length(arraySort(x -> hex(sipHash64(x)), groupArray(a * 1000000 + b * 1000 + c))) AS n ' +
  `FROM (SELECT arrayJoin(range(1000)) AS a, arrayJoin(range(1, 1001)) AS b, arrayJoin(range(2, ${2 + c})) AS c)`;
const SMALL = cross(SMALL_MILLIONS);
const RUNAWAY = cross(20);

async function main(): Promise<void> {
  const host = hostInfo();
  const params = { runaways: RUNAWAYS, small: SMALL_N, smallMillions: SMALL_MILLIONS, headStartMs: HEAD_START_MS, limitMs: LIMIT_MS, smallQuery: SMALL, runawayQuery: RUNAWAY };
  printHeader('a small analytics statement beside runaways', host, params);
  const iso = isolation('analytics-runaways', 'bench');
  const problems: string[] = [];
  onInterrupt(async () => void (await cleanup(iso)));
  const svc = await startService({ role: 'all', operatorToken: OPERATOR_TOKEN, iso, env: { ANALYTICS_TIMEOUT_MS: String(LIMIT_MS) } });
  try {
    const victim = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    const attackers = await Promise.all(Array.from({ length: RUNAWAYS }, () => createUnlimitedOrg(svc.url, OPERATOR_TOKEN)));
    const query = (key: string, q: string) => http<{ rows?: unknown[][]; code?: string }>(`${svc.url}/api/v2/analytics/query`, 'POST', key, { query: q });
    const timed = async (h: LatencyHistogram): Promise<void> => {
      const at = performance.now();
      const r = await query(victim.liveKey, SMALL);
      h.record(performance.now() - at);
      if (r.status !== 200) problems.push(`small statement: ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`);
    };
    if ((await query(victim.liveKey, 'SELECT 42 AS x')).status !== 200) throw new Error('warm-up query failed');
    const alone = new LatencyHistogram();
    for (let i = 0; i < SMALL_N; i++) await timed(alone);
    const runaways = attackers.map(async (o) => {
      const at = performance.now();
      const r = await query(o.liveKey, RUNAWAY);
      return { status: r.status, ms: round(performance.now() - at, 0) };
    });
    await sleep(HEAD_START_MS);
    const beside = new LatencyHistogram();
    for (let i = 0; i < SMALL_N; i++) await timed(beside);
    const answers = await Promise.all(runaways);
    const a = alone.summary();
    const b = beside.summary();
    const result = { alone: a, beside: b, ratioP50: round(b.p50 / a.p50, 2), runaways: answers };
    console.log('\n--- the small statement, ms');
    console.log(`alone          p50 ${a.p50}  p99 ${a.p99}  max ${a.max}`);
    console.log(`beside ${RUNAWAYS} runaways p50 ${b.p50}  p99 ${b.p99}  max ${b.max}  (p50 ${result.ratioP50}× alone)`);
    console.log(`runaways: ${answers.map((x) => `${x.status} in ${x.ms} ms`).join(', ')}`);
    for (const l of svc.problems()) problems.push(`service: ${l.slice(0, 200)}`);
    printProblems(problems);
    appendHistory({ bench: 'analytics-runaways', at: new Date().toISOString(), host, params, results: result, problems });
  } finally {
    await svc.child.stop(10_000);
    await cleanup(iso);
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
