/**
 * Large analytics results beside another organization's small queries.
 *
 * ROLE=all as a child process (embedded engine). Organization "big" runs, for --duration
 * seconds, loops of one statement whose result is at or over the byte cap: 10,000 rows of
 * --row-kb KB of strings each (numbers(10000) and leftPad: the engine makes them, nothing is
 * seeded). --fast loops read their answers as fast as they come; --slow loops read theirs at
 * --slow-kbps KB/s (a raw socket, paused between reads: the kernel's buffers fill and TCP
 * pushes back on the service). Meanwhile organization "small" runs --small loops of
 * `SELECT 42 AS x`, each request after the previous answer.
 *
 * Sampled every 250 ms: the service's and its engine host's resident memory (/proc), and the
 * service's worst event-loop delay since the previous sample (nodejs_eventloop_lag_max_seconds
 * of its own /metrics, which prom-client resets at each scrape), and the bytes of results it
 * says it holds (usage_analytics_result_held_bytes, where it has that metric). Printed: the small
 * organization's latency (hdr p50/p99/p999/max), the service's RSS before the load and its peak
 * (VmHWM) and largest sample above it, the engine host's largest sample, the worst event-loop
 * delay, and the big organization's answers (count, bytes, whether each was flagged
 * truncatedBy "bytes", and how the slow readers' answers ended).
 *
 *   node dist/bench/analytics-results.js [--duration 20] [--fast 2] [--slow 4] [--slow-kbps 1024] [--row-kb 2] [--small 2]
 */
import net from 'node:net';
import { readFileSync, readdirSync } from 'node:fs';
import { Args } from './lib/args.js';
import { LatencyHistogram, appendHistory, hostInfo, printHeader, printProblems, round, sleep } from './lib/report.js';
import { OPERATOR_TOKEN, createUnlimitedOrg, http } from './lib/api.js';
import { cleanup, isolation, onInterrupt, startBenchService as startService } from '../harness/service.js';

const args = new Args('node dist/bench/analytics-results.js [options]', {
  duration: { help: 'seconds of load (default 20)' },
  fast: { help: 'loops of the big statement read at full speed (default 2)' },
  slow: { help: 'loops of the big statement read slowly (default 4)' },
  'slow-kbps': { help: 'how fast a slow loop reads, KB/s (default 1024)' },
  'row-kb': { help: 'KB of strings per row of the big statement (default 2: 10,000 rows are ~20 MB, over the 16 MiB cap)' },
  small: { help: "loops of the other organization's SELECT 42 (default 2)" },
});
const DURATION_S = args.num('duration', 20, 2, 3_600);
const FAST = args.num('fast', 2, 0, 64);
const SLOW = args.num('slow', 4, 0, 64);
const SLOW_KBPS = args.num('slow-kbps', 1024, 1, 1_000_000);
const ROW_KB = args.num('row-kb', 2, 1, 500);
const SMALL = args.num('small', 2, 1, 64);

/** 10,000 rows of ROW_KB strings of 1,000 characters (plus the row number). */
const BIG = `SELECT number AS n, arrayWithConstant(${ROW_KB}, leftPad(toString(number), 1000, 'x')) AS s FROM numbers(10000)`;
const CAP = 16 * 1024 * 1024;

function status(pid: number): { rss: number; peak: number } | null {
  try {
    const s = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? 0) * 1024;
    return { rss: kb('VmRSS'), peak: kb('VmHWM') };
  } catch {
    return null;
  }
}

/** The engine host: the child of the service whose process title says so (it is replaced after a kill). */
function engineHostPid(servicePid: number): number | null {
  try {
    for (const task of readdirSync(`/proc/${servicePid}/task`)) {
      for (const c of readFileSync(`/proc/${servicePid}/task/${task}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)) {
        if (readFileSync(`/proc/${c}/cmdline`, 'utf8').includes('engine-host') || readFileSync(`/proc/${c}/comm`, 'utf8').startsWith('billing-engine')) return Number(c);
      }
    }
  } catch {
    /* gone */
  }
  return null;
}

interface BigAnswer {
  status: number;
  bytes: number;
  /** How the body ended: whole (its framing complete), or cut (the connection ended before). */
  whole: boolean;
  truncatedBy: string | null;
  rowCount: number | null;
  ms: number;
}

/**
 * One POST over its own connection, the answer read at `kbps` KB/s (Infinity: as it comes).
 * Keeps only the head and the last 4 KB of the (de-chunked) body, where `meta` is.
 */
function rawQuery(port: number, key: string, query: string, kbps: number): Promise<BigAnswer> {
  const body = JSON.stringify({ query });
  const started = performance.now();
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let head: string | null = null;
    let pending: Buffer = Buffer.alloc(0);
    let tail: Buffer = Buffer.alloc(0);
    let bodyBytes = 0;
    let length = -1;
    let chunked = false;
    /** Chunked: bytes left of the current chunk's data, or -1 while reading a size line. */
    let left = -1;
    let done = false;
    let budget = Infinity;
    let timer: NodeJS.Timeout | undefined;
    const finish = (whole: boolean): void => {
      if (done) return;
      done = true;
      clearInterval(timer);
      sock.destroy();
      const m = /"meta":(\{[^}]*\})\}$/.exec(tail.toString('utf8'));
      const meta = ((): { truncatedBy?: string; rowCount?: number } | null => {
        try {
          return m ? (JSON.parse(m[1]!) as { truncatedBy?: string; rowCount?: number }) : null;
        } catch {
          return null;
        }
      })();
      const statusCode = head ? Number(/^HTTP\/1\.1 (\d+)/.exec(head)?.[1] ?? 0) : 0;
      resolve({ status: statusCode, bytes: bodyBytes, whole, truncatedBy: meta?.truncatedBy ?? null, rowCount: meta?.rowCount ?? null, ms: performance.now() - started });
    };
    const data = (b: Buffer): void => {
      bodyBytes += b.length;
      tail = tail.length + b.length > 8192 ? Buffer.concat([tail, b]).subarray(-4096) : Buffer.concat([tail, b]);
    };
    /** Feeds body bytes; finishes at the body's end. */
    const onBody = (b: Buffer): void => {
      if (!chunked) {
        data(b);
        if (length >= 0 && bodyBytes >= length) finish(true);
        return;
      }
      pending = pending.length > 0 ? Buffer.concat([pending, b]) : b;
      for (;;) {
        if (left > 0) {
          const n = Math.min(left, pending.length);
          if (n === 0) return;
          data(pending.subarray(0, n));
          pending = pending.subarray(n);
          left -= n;
          if (left === 0) left = -2;
          continue;
        }
        if (left === -2) {
          // The CRLF after a chunk's data.
          if (pending.length < 2) return;
          pending = pending.subarray(2);
          left = -1;
          continue;
        }
        const eol = pending.indexOf('\r\n');
        if (eol < 0) return;
        const size = parseInt(pending.subarray(0, eol).toString('latin1'), 16);
        pending = pending.subarray(eol + 2);
        if (size === 0) return finish(true);
        left = size;
      }
    };
    sock.on('data', (b: Buffer) => {
      if (head === null) {
        pending = Buffer.concat([pending, b]);
        const at = pending.indexOf('\r\n\r\n');
        if (at < 0) return;
        head = pending.subarray(0, at).toString('latin1');
        const cl = /\r\ncontent-length: *(\d+)/i.exec(head);
        length = cl ? Number(cl[1]) : -1;
        chunked = /\r\ntransfer-encoding: *chunked/i.test(head);
        const rest = pending.subarray(at + 4);
        pending = Buffer.alloc(0);
        if (length === 0) finish(true);
        else if (rest.length > 0) onBody(rest);
      } else onBody(b);
      if (kbps !== Infinity) {
        budget -= b.length;
        if (budget <= 0) sock.pause();
      }
    });
    sock.on('end', () => finish(false));
    sock.on('close', () => finish(false));
    sock.on('error', () => finish(false));
    if (kbps !== Infinity) {
      // A budget of 1/20 of the rate every 50 ms (a piece read past it is paid for by the next ones).
      const tick = (kbps * 1024) / 20;
      budget = tick;
      timer = setInterval(() => {
        budget = Math.min(budget + tick, tick);
        if (budget > 0) sock.resume();
      }, 50);
    }
    sock.write(
      `POST /api/v2/analytics/query HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  });
}

async function main(): Promise<void> {
  const host = hostInfo();
  const params = { duration: DURATION_S, fast: FAST, slow: SLOW, slowKbps: SLOW_KBPS, rowKb: ROW_KB, small: SMALL, query: BIG };
  printHeader('large analytics results beside small queries', host, params);
  const iso = isolation('analytics-results', 'bench');
  const problems: string[] = [];
  onInterrupt(async () => void (await cleanup(iso)));
  const svc = await startService({ role: 'all', operatorToken: OPERATOR_TOKEN, iso });
  const pid = svc.child.pid;
  try {
    const big = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    const small = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    const lim = await http(`${svc.url}/admin/v1/organizations/${big.id}/limits`, 'PATCH', OPERATOR_TOKEN, { analyticsConcurrency: Math.max(1, FAST + SLOW) });
    if (lim.status !== 200) throw new Error(`limits: ${lim.status} ${JSON.stringify(lim.body)}`);
    const query = (key: string, q: string) => http<{ rows?: unknown[]; code?: string }>(`${svc.url}/api/v2/analytics/query`, 'POST', key, { query: q });
    // Warm: both organizations, the big statement once.
    for (const org of [big, small]) if ((await query(org.liveKey, 'SELECT 42 AS x')).status !== 200) throw new Error('warm-up query failed');
    const warm = await rawQuery(svc.port, big.liveKey, BIG, Infinity);
    console.log(`the big statement alone: ${warm.status}, ${warm.bytes} bytes, truncatedBy ${warm.truncatedBy}, ${Math.round(warm.ms)} ms`);
    await sleep(1_000);
    const before = status(pid)!;
    const hostBefore = status(engineHostPid(pid) ?? -1);

    let running = true;
    let rssMax = before.rss;
    let hostRssMax = hostBefore?.rss ?? 0;
    let lagMax = 0;
    /** The service's own figure of result bytes it holds (usage_analytics_result_held_bytes), where it has one. */
    let heldMax: number | null = null;
    const lagSamples: number[] = [];
    const sampler = (async () => {
      while (running) {
        await sleep(250);
        const s = status(pid);
        if (s) rssMax = Math.max(rssMax, s.rss);
        const h = status(engineHostPid(pid) ?? -1);
        if (h) hostRssMax = Math.max(hostRssMax, h.rss);
        try {
          const res = await fetch(`${svc.url}/metrics`);
          const text = await res.text();
          const held = /^usage_analytics_result_held_bytes (\S+)$/m.exec(text);
          if (held) heldMax = Math.max(heldMax ?? 0, Number(held[1]));
          const m = /^nodejs_eventloop_lag_max_seconds (\S+)$/m.exec(text);
          if (m) {
            const ms = Number(m[1]) * 1000;
            lagSamples.push(ms);
            lagMax = Math.max(lagMax, ms);
          }
        } catch {
          /* the next one */
        }
      }
    })();
    // Reset the event-loop histogram: the first sample covers the load only.
    await fetch(`${svc.url}/metrics`).then((r) => r.text());

    const smallH = new LatencyHistogram();
    const smallErrors: string[] = [];
    const smallLoops = Array.from({ length: SMALL }, async () => {
      while (running) {
        const t0 = performance.now();
        const r = await query(small.liveKey, 'SELECT 42 AS x');
        const ms = performance.now() - t0;
        if (r.status === 200) smallH.record(ms);
        else smallErrors.push(`${r.status} ${JSON.stringify(r.body).slice(0, 120)}`);
      }
    });
    const answers: { fast: BigAnswer[]; slow: BigAnswer[] } = { fast: [], slow: [] };
    const bigLoops = [
      ...Array.from({ length: FAST }, async () => {
        while (running) answers.fast.push(await rawQuery(svc.port, big.liveKey, BIG, Infinity));
      }),
      ...Array.from({ length: SLOW }, async (_, i) => {
        await sleep(i * 200);
        while (running) answers.slow.push(await rawQuery(svc.port, big.liveKey, BIG, SLOW_KBPS));
      }),
    ];
    await sleep(DURATION_S * 1000);
    running = false;
    // The loops end with their current request: a slow reader's may take a while.
    await Promise.all([...smallLoops, sampler]);
    const bigDone = Promise.all(bigLoops);
    await Promise.race([bigDone, sleep(120_000)]);
    const after = status(pid)!;

    const s = smallH.summary();
    const mb = (b: number): number => round(b / 1048576, 1);
    const describe = (xs: BigAnswer[]) => {
      const ok = xs.filter((a) => a.status === 200 && a.whole);
      return {
        answers: xs.length,
        whole200: ok.length,
        flaggedBytes: ok.filter((a) => a.truncatedBy === 'bytes').length,
        statuses: [...new Set(xs.map((a) => `${a.status}${a.whole ? '' : ' cut'}`))],
        bytesMax: Math.max(0, ...ok.map((a) => a.bytes)),
        msP50: xs.length ? round(xs.map((a) => a.ms).sort((a, b) => a - b)[Math.floor(xs.length / 2)]!, 0) : null,
      };
    };
    const fast = describe(answers.fast);
    const slow = describe(answers.slow);
    const result = {
      small: { ...s, errors: smallErrors.length },
      serviceRssBeforeMb: mb(before.rss),
      serviceRssPeakMb: mb(after.peak),
      serviceRssMaxSampleMb: mb(rssMax),
      serviceRssGrowthMb: mb(Math.max(after.peak, rssMax) - before.rss),
      engineHostRssBeforeMb: hostBefore ? mb(hostBefore.rss) : null,
      engineHostRssMaxSampleMb: mb(hostRssMax),
      resultBytesHeldMaxMb: heldMax === null ? null : mb(heldMax),
      eventLoopWorstMs: round(lagMax, 1),
      eventLoopSamplesOver100Ms: lagSamples.filter((x) => x > 100).length,
      big: { fast, slow },
    };
    console.log('\n--- the small organization (SELECT 42), ms');
    console.log(`requests ${s.count}  p50 ${s.p50}  p99 ${s.p99}  p999 ${s.p999}  max ${s.max}  errors ${smallErrors.length}`);
    console.log('\n--- the service');
    console.log(`RSS before ${result.serviceRssBeforeMb} MB, peak ${result.serviceRssPeakMb} MB (largest sample ${result.serviceRssMaxSampleMb} MB): grew ${result.serviceRssGrowthMb} MB`);
    console.log(`result bytes held (the service's gauge), largest sample: ${result.resultBytesHeldMaxMb === null ? 'no such metric' : `${result.resultBytesHeldMaxMb} MB`}`);
    console.log(`engine host RSS before ${result.engineHostRssBeforeMb} MB, largest sample ${result.engineHostRssMaxSampleMb} MB`);
    console.log(`worst event-loop delay ${result.eventLoopWorstMs} ms (${result.eventLoopSamplesOver100Ms} of ${lagSamples.length} samples over 100 ms)`);
    console.log('\n--- the big organization');
    for (const [name, d] of Object.entries({ fast, slow })) console.log(`${name.padEnd(5)} ${JSON.stringify(d)}`);
    if (smallErrors.length > 0) problems.push(`small organization: ${smallErrors.length} errors, e.g. ${smallErrors[0]}`);
    for (const [name, d] of Object.entries({ fast, slow })) {
      if (d.answers > 0 && d.whole200 === 0) problems.push(`${name} readers: no whole 200 answer (${d.statuses.join(', ')})`);
      if (d.whole200 > 0 && d.flaggedBytes !== d.whole200) problems.push(`${name} readers: ${d.whole200 - d.flaggedBytes} whole answers not flagged truncatedBy bytes`);
      if (d.bytesMax > CAP + 64 * 1024) problems.push(`${name} readers: an answer of ${d.bytesMax} bytes (cap ${CAP})`);
    }
    for (const l of svc.problems()) problems.push(`service: ${l.slice(0, 200)}`);
    printProblems(problems);
    appendHistory({ bench: 'analytics-results', at: new Date().toISOString(), host, params, results: result, problems });
  } finally {
    await svc.child.stop(10_000);
    await cleanup(iso);
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
