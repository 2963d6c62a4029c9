/**
 * Bench charts (bench/lib/chart.ts): from a small synthetic history, the HTML page is
 * produced, self-contained (no URL, no script, no external resource), with one chart per
 * throughput field and per latency summary, a point per run at the right place, problems
 * marked and escaped; the file is written next to the history, skipping a torn line.
 */
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { benchCharts, historyChartsHtml, writeHistoryCharts } from '../../bench/lib/chart.js';

const ingest = (at: string, raw: number, svc: number, p99: number, problems: string[] = []) => ({
  bench: 'ingest',
  at,
  host: { commit: `c${at.slice(11, 13)}`, cores: 2 },
  params: { connections: 8, rateLimitPerSec: 999 },
  phases: [
    { phase: 'raw uWS', signalsPerSec: raw, latencyMs: { count: 10, p50: 4, p99, p999: p99 + 1, max: p99 + 2, mean: 5 }, autocannonLatencyMs: { p50: 4, p99: 13 }, cpuPercent: { server: 100 } },
    { phase: 'service', signalsPerSec: svc, latencyMs: { count: 10, p50: 10, p99: 2 * p99, p999: 1, max: 1, mean: 1 } },
  ],
  problems,
});
const pipeline = {
  bench: 'pipeline',
  at: '2026-11-23T10:00:00.000Z',
  host: { commit: 'abc1234' },
  service: {
    acceptedPerSec: 20_000,
    postLatencyMs: { count: 5, p50: 50, p99: 120 },
    samples: [
      { t: 1, accepted: 1000, stored: 500, pending: 3 },
      { t: 2, accepted: 3000, stored: 2500, pending: 1 },
      { t: 4, accepted: 7000, stored: 6500, pending: 2 },
    ],
  },
  problems: [],
};
const history = [
  ingest('2026-11-22T18:00:00.000Z', 700_000, 300_000, 13),
  ingest('2026-11-22T19:00:00.000Z', 720_000, 310_000, 15, ['<script>alert(1)</script> in a problem', ...Array.from({ length: 50 }, (_, i) => `problem ${i}`)]),
  pipeline,
];

t.test('charts from the records, without per-bench code', async (t) => {
  const charts = benchCharts(history.slice(0, 2));
  t.same(
    charts.map((c) => c.title),
    ['throughput: signalsPerSec', 'latency: phases[raw uWS].latencyMs', 'latency: phases[service].latencyMs'],
    'PerSec fields and latency summaries; params, cpu and autocannon figures left out',
  );
  const tp = charts[0]!;
  t.same(tp.series.map((s) => s.name), ['phases[raw uWS]', 'phases[service]']);
  t.same(tp.series[0]!.points.map((p) => [p.x, p.y, p.hollow]), [[0, 700_000, false], [1, 720_000, true]], 'one point per run; the run with problems is hollow');
  t.same(charts[1]!.series.map((s) => [s.name, s.points.map((p) => p.y)]), [['p50', [4, 4]], ['p99', [13, 15]]]);

  const pc = benchCharts([pipeline]);
  const over = pc.find((c) => c.title.startsWith('latest run over time'))!;
  t.ok(over, 'per-second samples of the latest run are charted');
  t.same(over.series.map((s) => s.name), ['accepted/s', 'stored/s'], 'only counters that never decrease (not pending)');
  t.same(over.series[0]!.points.map((p) => [p.x, p.y]), [[2, 2000], [4, 2000]], 'rates divide by the time between samples');
});

t.test('the page is self-contained and escapes what it shows', async (t) => {
  const html = historyChartsHtml(history, { generatedAt: '2026-11-24T00:00:00.000Z', source: 'history.jsonl' });
  t.match(html, /^<!doctype html>/);
  t.equal((html.match(/<svg /g) ?? []).length, 3 + 3, 'ingest: 3 charts; pipeline: throughput, latency, samples');
  t.equal((html.match(/<section>/g) ?? []).length, 2, 'one section per bench');
  t.notMatch(html, /https?:\/\//i, 'no URL at all (not even an SVG namespace)');
  t.notMatch(html, /<script|<link|<img|<iframe|\bsrc=|@import|url\(/i, 'no script and no external resource');
  t.notMatch(html, /<script>alert/, 'problems are escaped');
  t.match(html, /&lt;script&gt;alert\(1\)&lt;\/script&gt;/);
  t.match(html, /and 48 more/, 'long problem lists are shortened');
  t.match(html, /<title>phases\[raw uWS\]\n2026-11-22T19:00:00.000Z · c19\nphases\[raw uWS\].signalsPerSec: 720,000\nproblems:/, 'a point tells its run, commit and value');
});

t.test('written next to the history; a torn line is skipped', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'bench-chart-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'history.jsonl');
  writeFileSync(file, `${history.map((r) => JSON.stringify(r)).join('\n')}\n{"bench":"ingest","at":"2026-11-2`);
  const out = writeHistoryCharts(file);
  t.equal(out, path.join(dir, 'history.html'));
  const html = readFileSync(out, 'utf8');
  t.equal((html.match(/<svg /g) ?? []).length, 6);
  t.match(html, /2 run\(s\); latest 2026-11-22T19:00:00.000Z/);
});
