/**
 * Failure drills by hand, at a larger scale than the tests: `node dist/bench/drills.js
 * --rounds N --duration S [--only name,name]`. Runs each drill of DRILLS in turn against
 * real engines started on loopback ports, and prints per drill: rounds, signals
 * acknowledged, faults injected, lost, duplicated, the drill's own figures and any broken
 * promise. Exit status 1 when a drill found a problem.
 *
 * A drill is a module under bench/drills/ exporting a `Drill` (bench/drills/drill.ts); add
 * it to DRILLS below.
 */
import { Args } from './lib/args.js';
import { appendHistory, hostInfo, printHeader } from './lib/report.js';
import type { Drill, DrillResult } from './drills/drill.js';
import { natsCluster } from './drills/nats-cluster.js';
import { redisFailover } from './drills/redis-failover.js';

export const DRILLS: Drill[] = [redisFailover, natsCluster];

const args = new Args('node dist/bench/drills.js [--rounds N] [--duration S] [--only name,…]', {
  rounds: { help: 'faults per drill (default 3)' },
  duration: { help: 'seconds of load per round (default 10)' },
  only: { help: `comma-separated drills to run (${DRILLS.map((d) => d.name).join(', ')})` },
});
const rounds = Math.floor(args.num('rounds', 3, 1, 1000));
const durationS = args.num('duration', 10, 2, 3600);
const only = args.str('only') ?? '';
const chosen: Drill[] = [];
for (const n of only === '' ? DRILLS.map((d) => d.name) : only.split(',').map((x) => x.trim())) {
  const d = DRILLS.find((x) => x.name === n);
  if (!d) {
    process.stderr.write(`--only: unknown drill ${JSON.stringify(n)} (known: ${DRILLS.map((x) => x.name).join(', ')})\n`);
    process.exit(2);
  }
  chosen.push(d);
}

printHeader('failure drills', hostInfo(), { rounds, durationS, drills: chosen.map((d) => d.name) });
const results: DrillResult[] = [];
for (const d of chosen) {
  process.stderr.write(`\n== ${d.name}: ${d.summary}\n`);
  const started = Date.now();
  try {
    const { drill, rounds: r, signals, faults, lost, duplicated, figures, problems } = await d.run({ rounds, durationMs: durationS * 1000, log: (l) => process.stderr.write(`${l}\n`) });
    results.push({ drill, rounds: r, signals, faults, lost, duplicated, figures, problems });
  } catch (err) {
    results.push({ drill: d.name, rounds: 0, signals: 0, faults: 0, lost: 0, duplicated: 0, figures: {}, problems: [`the drill failed to run: ${(err as Error).stack ?? String(err)}`] });
  }
  const r = results[results.length - 1]!;
  console.log(`\n${r.drill} (${((Date.now() - started) / 1000).toFixed(0)} s)`);
  console.log(`  rounds ${r.rounds}  signals ${r.signals}  faults injected ${r.faults}  lost ${r.lost}  duplicated ${r.duplicated}`);
  for (const [k, v] of Object.entries(r.figures)) console.log(`  ${k}: ${JSON.stringify(v)}`);
  console.log(r.problems.length === 0 ? '  contract held' : `  PROBLEMS:\n${r.problems.map((p) => `    - ${p}`).join('\n')}`);
}
appendHistory({ bench: 'drills', rounds, durationS, results });
process.exit(results.some((r) => r.problems.length > 0) ? 1 : 0);
