/**
 * What every benchmark prints and records: a header naming the host, Node and the commit;
 * latency histograms (hdr-histogram-js, microsecond resolution, reported in ms); CPU use of
 * processes; and one JSON line per run appended to bench/results/history.jsonl, with the
 * charts of that history redrawn next to it (bench/results/history.html, see chart.ts).
 */
import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdirSync, readFileSync, readdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as hdr from 'hdr-histogram-js';
import { writeHistoryCharts } from './chart.js';

/**
 * Repository root: this file runs as dist/bench/lib/report.js, or as bench/lib/report.ts
 * when a test imports it (tap runs TypeScript directly).
 */
export const ROOT = fileURLToPath(new URL(fileURLToPath(import.meta.url).includes(`${path.sep}dist${path.sep}bench${path.sep}`) ? '../../../' : '../../', import.meta.url));
export const HISTORY_FILE = path.join(ROOT, 'bench/results/history.jsonl');

export interface HostInfo {
  hostname: string;
  cpuModel: string;
  cores: number;
  memGiB: number;
  platform: string;
  node: string;
  commit: string;
  /** Uncommitted changes in the working tree when the run started. */
  dirty: boolean;
}

function git(args: string[]): string | null {
  try {
    return execFileSync('git', args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return null;
  }
}

export function hostInfo(): HostInfo {
  const cpus = os.cpus();
  return {
    hostname: os.hostname(),
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    cores: os.availableParallelism(),
    memGiB: Math.round((os.totalmem() / 1024 ** 3) * 10) / 10,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    node: process.version,
    commit: git(['rev-parse', '--short', 'HEAD']) ?? 'unknown',
    dirty: (git(['status', '--porcelain']) ?? '') !== '',
  };
}

export function printHeader(title: string, host: HostInfo, params: Record<string, unknown>): void {
  const line = '='.repeat(78);
  console.log(line);
  console.log(`${title}`);
  console.log(line);
  console.log(`host      ${host.hostname}  (${host.platform})`);
  console.log(`cpu       ${host.cpuModel} × ${host.cores} cores, ${host.memGiB} GiB RAM`);
  console.log(`node      ${host.node}`);
  console.log(`commit    ${host.commit}${host.dirty ? ' (working tree has uncommitted changes)' : ''}`);
  console.log(`date      ${new Date().toISOString()}`);
  for (const [k, v] of Object.entries(params)) console.log(`${k.padEnd(9)} ${typeof v === 'string' ? v : JSON.stringify(v)}`);
  console.log(line);
}

export function appendHistory(record: Record<string, unknown>): void {
  mkdirSync(path.dirname(HISTORY_FILE), { recursive: true });
  appendFileSync(HISTORY_FILE, `${JSON.stringify(record)}\n`);
  console.log(`\nappended one line to ${path.relative(process.cwd(), HISTORY_FILE) || HISTORY_FILE}`);
  try {
    const html = writeHistoryCharts(HISTORY_FILE);
    console.log(`charts of the history: ${path.relative(process.cwd(), html) || html}`);
  } catch (err) {
    // The JSON line is the result; a chart that cannot be drawn must not fail the run.
    console.log(`charts not written: ${(err as Error).message}`);
  }
}

/** Loud banner for runs whose figures must not be trusted as they stand. */
export function printProblems(problems: string[]): void {
  if (problems.length === 0) return;
  const bar = '!'.repeat(78);
  console.log(`\n${bar}`);
  console.log(`!!! THIS RUN HAD ${problems.length} PROBLEM(S): its figures are not a clean measurement`);
  for (const p of problems) console.log(`!!!   - ${p}`);
  console.log(bar);
}

export interface Percentiles {
  count: number;
  p50: number;
  p99: number;
  p999: number;
  max: number;
  mean: number;
}

/** Latency histogram: records milliseconds (fractions kept to the microsecond). */
export class LatencyHistogram {
  private readonly h = hdr.build({ useWebAssembly: false, lowestDiscernibleValue: 1, highestTrackableValue: 120_000_000, numberOfSignificantValueDigits: 3 });

  record(ms: number): void {
    this.h.recordValue(Math.max(1, Math.round(ms * 1000)));
  }

  /** Records with coordinated-omission correction for an open-loop sender (expected interval in ms). */
  recordExpected(ms: number, expectedIntervalMs: number): void {
    this.h.recordValueWithExpectedInterval(Math.max(1, Math.round(ms * 1000)), Math.max(1, Math.round(expectedIntervalMs * 1000)));
  }

  summary(): Percentiles {
    // hdr reports the highest value equivalent to the bucket; never above the true maximum.
    const us = (p: number): number => round(Math.min(this.h.getValueAtPercentile(p), this.h.maxValue) / 1000, 3);
    return {
      count: this.h.totalCount,
      p50: us(50),
      p99: us(99),
      p999: us(99.9),
      max: round(this.h.maxValue / 1000, 3),
      mean: round(this.h.mean / 1000, 3),
    };
  }
}

export const round = (x: number, digits = 1): number => {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
};

/** 1234567.8 → "1,234,568" */
export const fmt = (x: number, digits = 0): string => x.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

let clockTicks: number | null = null;
function ticksPerSecond(): number {
  if (clockTicks === null) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

/** CPU seconds (user + system) a process has used so far, from /proc (Linux); null elsewhere. */
export function processCpuSeconds(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 2 (comm) may contain spaces; fields after the closing parenthesis are fixed.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const utime = Number(rest[11]);
    const stime = Number(rest[12]);
    return (utime + stime) / ticksPerSecond();
  } catch {
    return null;
  }
}

/** Pids of local processes by command name (e.g. nats-server, redis-server), to show their CPU share too. */
export function pidsByName(names: string[]): Record<string, number | undefined> {
  const out: Record<string, number | undefined> = {};
  try {
    for (const d of readdirSync('/proc')) {
      if (!/^\d+$/.test(d)) continue;
      let comm: string;
      try {
        comm = readFileSync(`/proc/${d}/comm`, 'utf8').trim();
      } catch {
        continue;
      }
      if (names.includes(comm) && out[comm] === undefined) out[comm] = Number(d);
    }
  } catch {
    /* not Linux */
  }
  return out;
}

/** Pids of the direct children of a process (e.g. the service's engine host), from /proc (Linux); [] elsewhere. */
export function childPids(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((tid) => readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number));
  } catch {
    return [];
  }
}

/** Busy and total jiffies of the whole machine (all cores), from /proc/stat; null elsewhere. */
function systemTicks(): { busy: number; total: number } | null {
  try {
    const first = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!;
    const v = first.trim().split(/\s+/).slice(1, 9).map(Number);
    const total = v.reduce((a, b) => a + b, 0);
    const idle = (v[3] ?? 0) + (v[4] ?? 0);
    return { busy: total - idle, total };
  } catch {
    return null;
  }
}

/**
 * Measures the CPU share (percent of one core) of a set of processes over an interval, plus
 * the whole machine ("system") and what none of them used ("other": background load that
 * makes a run on a shared machine not a clean measurement).
 */
export class CpuMeter {
  private readonly startWall = performance.now();
  private readonly startSelf = process.cpuUsage();
  private readonly startSystem = systemTicks();
  private readonly startOthers: Map<string, { pid: number; cpu: number | null }>;

  constructor(others: Record<string, number | undefined>) {
    this.startOthers = new Map(
      Object.entries(others)
        .filter((e): e is [string, number] => e[1] !== undefined)
        .map(([name, pid]) => [name, { pid, cpu: processCpuSeconds(pid) }]),
    );
  }

  /** name → CPU-seconds used since construction; "bench" is this process. */
  seconds(): Record<string, number | null> {
    const self = process.cpuUsage(this.startSelf);
    const out: Record<string, number | null> = { bench: round((self.user + self.system) / 1e6, 2) };
    for (const [name, { pid, cpu }] of this.startOthers) {
      const now = processCpuSeconds(pid);
      out[name] = now === null || cpu === null ? null : round(now - cpu, 2);
    }
    return out;
  }

  /** name → percent of one core since construction; "bench" is this process. */
  read(): Record<string, number | null> {
    const wall = (performance.now() - this.startWall) / 1000;
    const self = process.cpuUsage(this.startSelf);
    const out: Record<string, number | null> = { bench: round(((self.user + self.system) / 1e6 / wall) * 100, 0) };
    for (const [name, { pid, cpu }] of this.startOthers) {
      const now = processCpuSeconds(pid);
      out[name] = now === null || cpu === null ? null : round(((now - cpu) / wall) * 100, 0);
    }
    const sys = systemTicks();
    if (sys && this.startSystem && sys.total > this.startSystem.total) {
      const cores = os.cpus().length;
      const system = ((sys.busy - this.startSystem.busy) / (sys.total - this.startSystem.total)) * cores * 100;
      const known = Object.values(out).reduce<number>((a, b) => a + (b ?? 0), 0);
      out.system = round(system, 0);
      out.other = round(Math.max(0, system - known), 0);
    }
    return out;
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
