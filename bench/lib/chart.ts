/**
 * Charts of the benchmark history for people who would rather look than read JSON: one
 * self-contained HTML file (inline SVG and CSS; no script, no external resource) written next
 * to the history file (bench/results/history.jsonl → bench/results/history.html) every time a
 * bench appends its record, or on demand: `node dist/bench/lib/chart.js [history.jsonl]`.
 *
 * What it draws, per bench, from the records as they are (no per-bench code, so new fields
 * show up by themselves):
 *  - throughput over runs: every numeric field named `…PerSec`, one chart per field name, one
 *    line per place it occurs (e.g. each ingest phase);
 *  - latency over runs: every latency summary (an object with numeric `p50` and `p99`), one
 *    chart per summary, lines p50 and p99;
 *  - within the latest run: every `samples` array of `{ t, … }` per-second samples, the
 *    per-second rate of each counter in it that never decreases (e.g. accepted, stored).
 * Runs that recorded problems are drawn as hollow points; every point's tooltip shows the
 * run's time, commit, value and problems.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

type Rec = Record<string, unknown>;

interface Run {
  at: string;
  commit: string;
  problems: string[];
}

interface Series {
  name: string;
  points: { x: number; y: number; tip: string; hollow: boolean }[];
}

interface Chart {
  title: string;
  unit: string;
  xLabel: 'run' | 'seconds';
  series: Series[];
}

// autocannonLatencyMs: autocannon's own whole-millisecond view of the same requests as latencyMs.
const SKIP = new Set(['host', 'params', 'cpuPercent', 'autocannonLatencyMs', 'statuses', 'statusCounts', 'errorSamples', 'problems', 'loggedProblems']);
const isObj = (v: unknown): v is Rec => typeof v === 'object' && v !== null && !Array.isArray(v);
const num = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

function runOf(r: Rec): Run {
  const host = isObj(r.host) ? r.host : {};
  const problems = Array.isArray(r.problems) ? r.problems.map(String) : [];
  return {
    at: String(r.at ?? r.date ?? ''),
    commit: String(host.commit ?? r.commit ?? ''),
    problems,
  };
}

/** Label of an array element: its phase/name when it has one, else its index. */
const elementLabel = (v: unknown, i: number): string => (isObj(v) && (typeof v.phase === 'string' || typeof v.name === 'string') ? String(v.phase ?? v.name) : String(i));

/** Calls `leaf` for every value below `v` with its path (array elements by label; `samples` skipped). */
function walk(v: unknown, p: string, visit: (path: string, key: string, value: unknown) => void): void {
  if (Array.isArray(v)) {
    v.forEach((e, i) => walk(e, `${p}[${elementLabel(e, i)}]`, visit));
    return;
  }
  if (!isObj(v)) return;
  for (const [k, child] of Object.entries(v)) {
    if (SKIP.has(k) || k === 'samples') continue;
    const cp = p ? `${p}.${k}` : k;
    visit(cp, k, child);
    walk(child, cp, visit);
  }
}

/** A run's problems, shortened for a tooltip or a caption (some runs record hundreds). */
function problemsText(run: Run, sep: string): string {
  const shown = run.problems.slice(0, 3).map((p) => (p.length > 160 ? `${p.slice(0, 160)}…` : p));
  const more = run.problems.length - shown.length;
  return shown.join(sep) + (more > 0 ? `${sep}… and ${more} more` : '');
}

function tipOf(run: Run, what: string, value: string): string {
  return `${run.at}${run.commit ? ` · ${run.commit}` : ''}\n${what}: ${value}${run.problems.length ? `\nproblems:\n- ${problemsText(run, '\n- ')}` : ''}`;
}

/** The charts of one bench's runs (oldest first). */
export function benchCharts(records: Rec[]): Chart[] {
  const runs = records.map(runOf);
  const throughput = new Map<string, Map<string, Series>>();
  const latency = new Map<string, Map<string, Series>>();
  const add = (group: Map<string, Map<string, Series>>, chart: string, name: string, x: number, y: number, tip: string, hollow: boolean): void => {
    let c = group.get(chart);
    if (!c) group.set(chart, (c = new Map()));
    let s = c.get(name);
    if (!s) c.set(name, (s = { name, points: [] }));
    s.points.push({ x, y, tip, hollow });
  };
  records.forEach((r, i) => {
    const run = runs[i]!;
    const hollow = run.problems.length > 0;
    walk(r, '', (p, key, value) => {
      if (num(value) && /PerSec$/.test(key)) {
        add(throughput, key, p.slice(0, -key.length - 1) || key, i, value, tipOf(run, p, fmtNum(value)), hollow);
      } else if (isObj(value) && num(value.p50) && num(value.p99)) {
        for (const q of ['p50', 'p99'] as const) add(latency, p, q, i, value[q] as number, tipOf(run, `${p}.${q}`, `${fmtNum(value[q] as number)} ms`), hollow);
      }
    });
  });
  const charts: Chart[] = [];
  for (const [key, s] of throughput) charts.push({ title: `throughput: ${key}`, unit: unitOf(key), xLabel: 'run', series: [...s.values()] });
  for (const [p, s] of latency) charts.push({ title: `latency: ${p}`, unit: 'ms', xLabel: 'run', series: [...s.values()] });

  // Within the latest run: per-second rates of the counters of its `samples`.
  const last = records.at(-1);
  if (last) {
    const found: { path: string; samples: Rec[] }[] = [];
    const look = (v: unknown, p: string): void => {
      if (Array.isArray(v)) v.forEach((e, i) => look(e, `${p}[${elementLabel(e, i)}]`));
      else if (isObj(v))
        for (const [k, child] of Object.entries(v)) {
          if (k === 'samples' && Array.isArray(child) && child.length > 1 && child.every((e) => isObj(e) && num(e.t))) found.push({ path: p ? `${p}.samples` : 'samples', samples: child as Rec[] });
          else if (!SKIP.has(k)) look(child, p ? `${p}.${k}` : k);
        }
    };
    look(last, '');
    const run = runs.at(-1)!;
    for (const { path: sp, samples } of found) {
      const keys = Object.keys(samples[0]!).filter((k) => k !== 't' && samples.every((e) => num(e[k])) && samples.every((e, i) => i === 0 || (e[k] as number) >= (samples[i - 1]![k] as number)));
      const series: Series[] = keys.map((k) => ({
        name: `${k}/s`,
        points: samples.slice(1).map((e, i) => {
          const prev = samples[i]!;
          const dt = (e.t as number) - (prev.t as number);
          const y = dt > 0 ? ((e[k] as number) - (prev[k] as number)) / dt : 0;
          return { x: e.t as number, y, tip: tipOf(run, `${sp} ${k}/s at t=${fmtNum(e.t as number)} s`, fmtNum(y)), hollow: false };
        }),
      }));
      if (series.length > 0) charts.push({ title: `latest run over time: ${sp} (per second)`, unit: '/s', xLabel: 'seconds', series });
    }
  }
  return charts;
}

function unitOf(key: string): string {
  const m = /^(.*?)PerSec$/.exec(key);
  const what = m?.[1] ?? '';
  return `${what === 'mb' ? 'MB' : what || 'per'}/s`;
}

function fmtNum(x: number): string {
  const a = Math.abs(x);
  return x.toLocaleString('en-US', { maximumFractionDigits: a >= 100 ? 0 : a >= 1 ? 2 : 3 });
}

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];

/** "Nice" axis ceiling: 1, 2, 2.5 or 5 × 10^k at or above `max`. */
function niceMax(max: number): number {
  if (max <= 0) return 1;
  const e = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * e >= max) return m * e;
  return 10 * e;
}

function svgChart(c: Chart, runLabels: string[]): string {
  const W = 760;
  const H = 260;
  const L = 70;
  const R = 16;
  const T = 12;
  const B = 44;
  const xs = c.series.flatMap((s) => s.points.map((p) => p.x));
  const xMin = Math.min(...xs);
  const xMax = Math.max(...xs);
  const yMax = niceMax(Math.max(...c.series.flatMap((s) => s.points.map((p) => p.y))));
  const px = (x: number): number => L + (xMax === xMin ? (W - L - R) / 2 : ((x - xMin) / (xMax - xMin)) * (W - L - R));
  const py = (y: number): number => T + (1 - y / yMax) * (H - T - B);
  const out: string[] = [`<svg viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(c.title)}">`];
  for (let i = 0; i <= 4; i++) {
    const y = (yMax * i) / 4;
    out.push(`<line x1="${L}" x2="${W - R}" y1="${py(y)}" y2="${py(y)}" class="grid"/>`);
    out.push(`<text x="${L - 6}" y="${py(y) + 4}" text-anchor="end">${esc(fmtNum(y))}</text>`);
  }
  out.push(`<text x="12" y="${T + (H - T - B) / 2}" transform="rotate(-90 12 ${T + (H - T - B) / 2})" text-anchor="middle">${esc(c.unit)}</text>`);
  // x ticks: runs by date (at most ~8 labels), or seconds.
  const ticks = c.xLabel === 'run' ? [...new Set(xs)].sort((a, b) => a - b) : [xMin, xMax];
  const step = Math.max(1, Math.ceil(ticks.length / 8));
  ticks.forEach((x, i) => {
    if (i % step !== 0 && i !== ticks.length - 1) return;
    const label = c.xLabel === 'run' ? (runLabels[x] ?? String(x)) : `${fmtNum(x)} s`;
    const anchor = ticks.length > 1 && i === ticks.length - 1 ? 'end' : ticks.length > 1 && i === 0 ? 'start' : 'middle';
    out.push(`<text x="${px(x)}" y="${H - B + 16}" text-anchor="${anchor}">${esc(label)}</text>`);
  });
  out.push(`<text x="${L + (W - L - R) / 2}" y="${H - 6}" text-anchor="middle" class="axis">${c.xLabel === 'run' ? 'run (oldest → newest)' : 'seconds into the run'}</text>`);
  c.series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length]!;
    const pts = [...s.points].sort((a, b) => a.x - b.x);
    if (pts.length > 1) out.push(`<polyline fill="none" stroke="${color}" stroke-width="1.8" points="${pts.map((p) => `${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(' ')}"/>`);
    for (const p of pts) {
      out.push(`<circle cx="${px(p.x).toFixed(1)}" cy="${py(p.y).toFixed(1)}" r="3.5" stroke="${color}" fill="${p.hollow ? '#fff' : color}"><title>${esc(`${s.name}\n${p.tip}`)}</title></circle>`);
    }
  });
  out.push('</svg>');
  const legend = c.series.map((s, i) => `<span><i style="background:${COLORS[i % COLORS.length]}"></i>${esc(s.name)}</span>`).join(' ');
  return `<figure><figcaption>${esc(c.title)}</figcaption>${out.join('')}<div class="legend">${legend}</div></figure>`;
}

/** The whole page for a list of history records (any benches, in file order). */
export function historyChartsHtml(records: Rec[], opts: { source?: string; generatedAt?: string } = {}): string {
  const byBench = new Map<string, Rec[]>();
  for (const r of records) {
    const b = typeof r.bench === 'string' ? r.bench : 'unknown';
    byBench.set(b, [...(byBench.get(b) ?? []), r]);
  }
  const sections: string[] = [];
  for (const [bench, recs] of byBench) {
    const runs = recs.map(runOf);
    const labels = runs.map((r) => r.at.slice(5, 16).replace('T', ' '));
    const charts = benchCharts(recs);
    const last = runs.at(-1)!;
    sections.push(
      `<section><h2>${esc(bench)}</h2><p>${recs.length} run(s); latest ${esc(last.at)}${last.commit ? ` (commit ${esc(last.commit)})` : ''}` +
        `${last.problems.length ? `, with ${last.problems.length} problem(s): ${esc(problemsText(last, '; '))}` : ''}. Hollow points: runs that recorded problems.</p>` +
        (charts.length ? charts.map((c) => svgChart(c, labels)).join('\n') : '<p>No throughput or latency figures in these records.</p>') +
        '</section>',
    );
  }
  const css =
    'body{font:14px system-ui,sans-serif;margin:24px;color:#222}h2{margin-top:32px;border-bottom:1px solid #ccc}' +
    'figure{margin:16px 0}figcaption{font-weight:600;margin-bottom:4px}svg text{font-size:11px;fill:#444}svg .axis{fill:#666}' +
    'svg .grid{stroke:#e5e5e5}.legend span{margin-right:14px;font-size:12px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}';
  return (
    `<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Benchmark history</title><style>${css}</style></head><body>\n` +
    `<h1>Benchmark history</h1><p>Generated ${esc(opts.generatedAt ?? new Date().toISOString())}${opts.source ? ` from ${esc(opts.source)}` : ''}; ` +
    `hover a point for its run, commit and value.</p>\n${sections.join('\n')}\n</body></html>\n`
  );
}

/** Reads a JSON-lines history (unreadable lines are skipped) and writes `<same name>.html` next to it; returns its path. */
export function writeHistoryCharts(historyFile: string): string {
  const records: Rec[] = [];
  for (const line of readFileSync(historyFile, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    try {
      const r: unknown = JSON.parse(line);
      if (isObj(r)) records.push(r);
    } catch {
      /* a torn line (interrupted run): skip it */
    }
  }
  const out = path.join(path.dirname(historyFile), `${path.basename(historyFile, path.extname(historyFile))}.html`);
  writeFileSync(out, historyChartsHtml(records, { source: path.basename(historyFile) }));
  return out;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const file = process.argv[2] ?? fileURLToPath(new URL('../../../bench/results/history.jsonl', import.meta.url));
  console.log(`wrote ${writeHistoryCharts(file)}`);
}
