/**
 * Compressed request bodies, in process (no HTTP): the compression ratio of a typical
 * 500-signal batch (bench/lib/signals.ts), the CPU to inflate one, how long the event loop is
 * held when many are decoded at once by the service's decoder (src/http/content-encoding.ts,
 * zlib's stream API on the thread pool) against zlib's synchronous call, and how far a bomb
 * gets before the decoder stops it. The figures quoted in content-encoding.ts and docs/api.md
 * ("Compressed bodies") come from here.
 *
 *   node dist/bench/decompress.js [--concurrent N] [--limit BYTES]
 */
import zlib from 'node:zlib';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Args } from './lib/args.js';
import { BatchTemplate } from './lib/signals.js';
import { appendHistory, fmt, hostInfo, printHeader, round } from './lib/report.js';
import { decodeBody, DECODE_CHUNK_BYTES, type DecodeProbe } from '../src/http/content-encoding.js';

const args = new Args('node dist/bench/decompress.js [options]', {
  concurrent: { help: 'batches decoded at once for the event-loop measurement (default 64)' },
  limit: { help: 'body limit for the bomb (default 1000000, MAX_BODY_BYTES)' },
});
const concurrent = args.num('concurrent', 64, 1, 10_000);
const limit = args.num('limit', 1_000_000, 1024, 64 * 1024 * 1024);

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * While `work` runs: its wall time, how long the event loop was busy (not waiting for I/O:
 * eventLoopUtilization's active time, which on a loaded machine includes time the thread was
 * preempted) and the worst event-loop delay, sampled every millisecond.
 */
async function loopDelay(work: () => Promise<unknown> | unknown): Promise<{ wallMs: number; loopBusyMs: number; maxDelayMs: number }> {
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  await sleep(5);
  const elu0 = performance.eventLoopUtilization();
  const t0 = performance.now();
  await work();
  const wallMs = performance.now() - t0;
  const elu = performance.eventLoopUtilization(elu0);
  await sleep(5);
  h.disable();
  return { wallMs: round(wallMs, 1), loopBusyMs: round(elu.active, 1), maxDelayMs: round(h.max / 1e6, 1) };
}

async function main(): Promise<void> {
  const host = hostInfo();
  const keyed = Buffer.from(new BatchTemplate({ keyed: () => true, baseTimeMs: Date.now() }).render((i) => `ingest-${Date.now().toString(36)}-${i}`));
  const unkeyed = Buffer.from(new BatchTemplate({ keyed: () => false, baseTimeMs: Date.now() }).render(() => ''));
  printHeader('decompress benchmark: Content-Encoding of request bodies, in process', host, { concurrent, limit });

  const ratios: Record<string, unknown>[] = [];
  for (const [name, body] of [['500 signals, all with idempotency keys', keyed], ['500 signals, no keys', unkeyed]] as const) {
    for (const level of [1, 6, 9]) {
      const gz = zlib.gzipSync(body, { level });
      ratios.push({ batch: name, level, json: body.length, gzip: gz.length, ratio: round(body.length / gz.length, 1) });
      console.log(`ratio     ${name}, gzip level ${level}: ${fmt(body.length)} → ${fmt(gz.length)} bytes = ${round(body.length / gz.length, 1)}×`);
    }
  }

  const gz = zlib.gzipSync(keyed);
  const n = 300;
  let t0 = performance.now();
  for (let i = 0; i < n; i++) zlib.gunzipSync(gz);
  const inflateMs = round((performance.now() - t0) / n, 3);
  t0 = performance.now();
  for (let i = 0; i < n; i++) zlib.gzipSync(keyed);
  const deflateMs = round((performance.now() - t0) / n, 3);
  console.log(`cpu       inflate one batch ${inflateMs} ms; gzip it (level 6, the producer's side) ${deflateMs} ms`);

  // Warm both paths once, then measure.
  await Promise.all(Array.from({ length: concurrent }, () => decodeBody(gz, 'gzip', limit)));
  const asyncRun = await loopDelay(() => Promise.all(Array.from({ length: concurrent }, () => decodeBody(gz, 'gzip', limit))));
  const syncRun = await loopDelay(() => {
    for (let i = 0; i < concurrent; i++) zlib.gunzipSync(gz);
  });
  console.log(`loop      ${concurrent} batches decoded at once by the service's decoder: ${asyncRun.wallMs} ms, event loop busy ${asyncRun.loopBusyMs} ms, worst delay ${asyncRun.maxDelayMs} ms`);
  console.log(`          the same with gunzipSync: ${syncRun.wallMs} ms, event loop busy ${syncRun.loopBusyMs} ms, worst delay ${syncRun.maxDelayMs} ms`);

  const zeros = 10_000_000;
  const bomb = zlib.gzipSync(Buffer.alloc(zeros));
  const probe: DecodeProbe = { produced: 0 };
  const rss0 = process.memoryUsage().rss;
  let answer = 'accepted (!)';
  try {
    await decodeBody(bomb, 'gzip', limit, probe);
  } catch (err) {
    answer = (err as { code?: string }).code ?? String(err);
  }
  await sleep(100);
  const rssGrowth = process.memoryUsage().rss - rss0;
  console.log(`bomb      ${fmt(zeros)} zeros = ${fmt(bomb.length)} bytes of gzip, limit ${fmt(limit)}: ${answer} after producing ${fmt(probe.produced)} bytes (limit + at most one ${fmt(DECODE_CHUNK_BYTES)}-byte chunk); RSS ${rssGrowth >= 0 ? '+' : ''}${round(rssGrowth / 1e6, 1)} MB`);

  appendHistory({
    bench: 'decompress',
    at: new Date().toISOString(),
    host,
    params: { concurrent, limit },
    ratios,
    inflateMsPerBatch: inflateMs,
    gzipMsPerBatch: deflateMs,
    eventLoop: { decoder: asyncRun, gunzipSync: syncRun },
    bomb: { zeros, compressed: bomb.length, answer, produced: probe.produced },
  });
}

main().catch((err: unknown) => {
  process.stderr.write(`decompress benchmark failed: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exitCode = 1;
});
