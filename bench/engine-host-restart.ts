/**
 * What a restart of the embedded engine's host costs (the service kills it when an analytics
 * statement passes its deadline): fills a data directory with signal rows, then kills the host
 * (SIGKILL) several times and measures, from the kill,
 *   serving   until the new host process answers (sessions open, lanes ready)
 *   insert    until a 500-row insert through the service's store code has been stored
 *   query     until an analytics read of all rows answers
 *
 *   node dist/bench/engine-host-restart.js [--rows 200000] [--rounds 5]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/config.js';
import { HostedStore } from '../src/store/hosted/index.js';
import { Args } from './lib/args.js';
import { appendHistory, hostInfo, printHeader, round } from './lib/report.js';

const args = new Args('node dist/bench/engine-host-restart.js [options]', {
  rows: { help: 'signal rows in the data directory before the kills (default 200000)' },
  rounds: { help: 'kills to measure (default 5)' },
});
const ROWS = args.num('rows', 200_000, 1_000, 100_000_000);
const ROUNDS = args.num('rounds', 5, 1, 100);

function rows(from: number, n: number): Buffer {
  const out: string[] = [];
  for (let i = from; i < from + n; i++) {
    const ts = new Date(Date.UTC(2026, 10, 1) + i * 1000).toISOString().replace('T', ' ').replace('Z', '');
    out.push(JSON.stringify({ org_id: `org_${i % 20}`, livemode: true, signal_id: `sig_${i}`, batch_id: `bat_${Math.floor(i / 500)}`, event_name: 'tokens', customer_id: `cus_${i % 97}`, unit_id: null, idempotency_key: null, timestamp: ts, received_at: ts, data: { n: i, region: i % 2 ? 'eu' : 'us' } }));
  }
  return Buffer.from(`${out.join('\n')}\n`);
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'billing-bench-host-'));
  const cfg = loadConfig({ OPERATOR_TOKEN: 'bench-operator-token-0123', DATA_DIR: dir, ROLE: 'pipeline' }, []);
  const store = new HostedStore(cfg);
  printHeader('engine host restart', hostInfo(), { rows: ROWS, rounds: ROUNDS, sessions: `${cfg.analytics.engineSessions} analytics + 2 writer` });
  try {
    await store.init();
    for (let i = 0; i < ROWS; i += 50_000) await store.insertSignals(rows(i, Math.min(50_000, ROWS - i)));
    const serving: number[] = [];
    const insert: number[] = [];
    const query: number[] = [];
    let next = ROWS;
    for (let r = 0; r < ROUNDS; r++) {
      const g = await store.supervisor.current();
      const t0 = performance.now();
      store.supervisor.kill(g.n, 'benchmark');
      await g.exited;
      await store.supervisor.current(60_000);
      serving.push(performance.now() - t0);
      await store.insertSignals(rows(next, 500));
      next += 500;
      insert.push(performance.now() - t0);
      await store.analytics.select(`SELECT count() FROM ${cfg.clickhouseDatabase}.signals`, {});
      query.push(performance.now() - t0);
    }
    const counts = await store.countSignals('org_1');
    const stored = counts.live;
    const summary = { servingMs: round(median(serving)), insertMs: round(median(insert)), queryMs: round(median(query)), maxServingMs: round(Math.max(...serving)) };
    console.log(`rows of org_1 after the kills: ${stored} (expected ${Math.floor(next / 20)})`);
    console.log(`median from kill: serving ${summary.servingMs} ms, insert stored ${summary.insertMs} ms, query answered ${summary.queryMs} ms (max serving ${summary.maxServingMs} ms)`);
    console.log(`each round (serving/insert/query ms): ${serving.map((s, i) => `${Math.round(s)}/${Math.round(insert[i]!)}/${Math.round(query[i]!)}`).join('  ')}`);
    appendHistory({ bench: 'engine-host-restart', at: new Date().toISOString(), host: hostInfo(), rows: ROWS, rounds: ROUNDS, ...summary });
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
