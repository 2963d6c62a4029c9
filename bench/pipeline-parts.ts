/**
 * The pipeline's parts, in process, CPU per 500-signal batch of the pipeline bench's batches
 * (half keyed): the rows worker (`rows`, and `packed` as the pipeline runs it), the
 * idempotency claims of a batch with its batch mark (src/pipeline/dedupe.ts, against a real
 * claim log: this process's CPU and nats-server's), and — billing on — the configuration
 * read the evaluator makes for a batch that names 500 distinct customers (one KV get each, as
 * src/billing/config/store.ts `forBatch` did for customers named by externalId), measured
 * both ways, alternately A, B, A, B (the lower of each kept): `kv.get` per key, and the
 * batched reader the evaluator now uses (src/bus/kv-read.ts: direct gets, one shared reply
 * subscription, one timer per batch). The pipeline's
 * "where the time goes" figures (docs/benchmarks.md) come from here. CPU of this process is
 * process.cpuUsage (the main thread does all the work here); nats-server's is read from /proc.
 *
 *   node dist/bench/pipeline-parts.js [--batches N (default 200)]
 */
import { randomBytes } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import rows, { packed } from '../workers/rows.js';
import { IdempotencyClaims } from '../src/pipeline/dedupe.js';
import { kvReader } from '../src/bus/kv-read.js';
import type { BatchMeta } from '../src/bus/batch.js';
import { Args } from './lib/args.js';
import { BatchTemplate, SIGNALS_PER_BATCH } from './lib/signals.js';
import { appendHistory, hostInfo, pidsByName, printHeader, processCpuSeconds, round } from './lib/report.js';
import { NATS_URL } from '../harness/service.js';

const args = new Args('node dist/bench/pipeline-parts.js [options]', {
  batches: { help: 'batches per measurement (default 200)' },
});
const batches = args.num('batches', 200, 10, 100_000);

/** ms of this process's CPU per batch while `f` runs over `n` batches. */
async function cpuPerBatch(n: number, f: () => unknown): Promise<number> {
  const c0 = process.cpuUsage();
  await f();
  const c = process.cpuUsage(c0);
  return round((c.user + c.system) / 1000 / n, 3);
}

async function main(): Promise<void> {
  const host = hostInfo();
  const template = new BatchTemplate({ keyed: (i) => i % 2 === 0, baseTimeMs: Date.now() - 60_000 });
  const tag = randomBytes(4).toString('hex');
  const bodies = Array.from({ length: batches }, (_, n) => Buffer.from(template.render((i) => `${tag}-${n}-${i}`)));
  const meta = (n: number): BatchMeta => ({ orgId: 'org_PARTSPARTSPARTSPART', mode: 'live', receivedAtMs: Date.now(), batchId: `bat_${tag}${String(n).padStart(17, '0')}` });
  printHeader('pipeline parts: CPU per 500-signal batch, in process', host, {
    batches: `${batches} batches of ${SIGNALS_PER_BATCH} signals (${template.keyedCount} keyed), ${bodies[0]!.length} bytes each`,
  });

  // Warm up the JIT, then measure each twice and keep the lower.
  const all = (f: (body: Buffer, n: number) => unknown) => () => bodies.forEach((b, n) => f(b, n));
  await cpuPerBatch(batches, all((body, n) => packed({ body, meta: meta(n) })));
  const rowsMs = Math.min(await cpuPerBatch(batches, all((body, n) => rows({ body, meta: meta(n) }))), await cpuPerBatch(batches, all((body, n) => rows({ body, meta: meta(n) }))));
  const packedMs = Math.min(await cpuPerBatch(batches, all((body, n) => packed({ body, meta: meta(n) }))), await cpuPerBatch(batches, all((body, n) => packed({ body, meta: meta(n) }))));
  const parseMs = await cpuPerBatch(batches, all((body) => JSON.parse(body.toString('utf8'))));

  const natsPid = pidsByName(['nats-server'])['nats-server'];
  const natsCpu = (): number | null => (natsPid === undefined ? null : processCpuSeconds(natsPid));
  const nc = await connect({ servers: NATS_URL, noAsyncTraces: true });
  const jsm = await jetstreamManager(nc);
  const bucket = `BENCHPARTS${tag}`;
  const kv = await new Kvm(jetstream(nc)).create(bucket, { history: 1 });
  try {
    // The claim log as the service makes it (src/pipeline/streams.ts ensureClaimLog).
    await jsm.streams.add({ name: `${bucket}_CLAIMS`, subjects: [`${bucket}.claims.>`], storage: StorageType.File });
    const claims = new IdempotencyClaims({ nc, apiPrefix: '$JS.API', stream: `${bucket}_CLAIMS`, subject: (scope) => `${bucket}.claims.signals.${scope}` });
    const made = bodies.map((body, n) => ({ r: rows({ body, meta: meta(n) }), m: meta(n) }));
    const n0 = natsCpu();
    const t0 = performance.now();
    const claimsMs = await cpuPerBatch(batches, async () => {
      for (const { r, m } of made) await claims.claimBatch(r.claimKeys, r.ids, m);
    });
    const claimsWallMs = round((performance.now() - t0) / batches, 2);
    const n1 = natsCpu();
    const claimsNatsMs = n0 !== null && n1 !== null ? round(((n1 - n0) * 1000) / batches, 2) : null;

    // 500 distinct customers named by externalId, none configured: a KV get each (per key),
    // or one batched read of the 500 keys (the reader), alternately, each twice.
    const reader = kvReader(kv);
    const perKey = (b: number): Promise<unknown> => Promise.all(Array.from({ length: SIGNALS_PER_BATCH }, (_, i) => kv.get(`xid.org.live.${tag}_${b}_${i}`)));
    const batched = (b: number): Promise<unknown> => reader.getMany(Array.from({ length: SIGNALS_PER_BATCH }, (_, i) => `xid.org.live.${tag}_${b}_${i}`));
    const measure = async (f: (b: number) => Promise<unknown>): Promise<{ ms: number; nats: number | null; wall: number }> => {
      const n0 = natsCpu();
      const t0 = performance.now();
      const ms = await cpuPerBatch(batches, async () => {
        for (let b = 0; b < batches; b++) await f(b);
      });
      const wall = round((performance.now() - t0) / batches, 2);
      const n1 = natsCpu();
      return { ms, nats: n0 !== null && n1 !== null ? round(((n1 - n0) * 1000) / batches, 2) : null, wall };
    };
    const lower = (a: { ms: number; nats: number | null; wall: number }, b: { ms: number; nats: number | null; wall: number }) => ({
      ms: Math.min(a.ms, b.ms),
      nats: a.nats === null || b.nats === null ? null : Math.min(a.nats, b.nats),
      wall: Math.min(a.wall, b.wall),
    });
    const a1 = await measure(perKey);
    const b1 = await measure(batched);
    const a2 = await measure(perKey);
    const b2 = await measure(batched);
    const { ms: lookupsMs, nats: lookupsNatsMs, wall: lookupsWallMs } = lower(a1, a2);
    const { ms: readerMs, nats: readerNatsMs, wall: readerWallMs } = lower(b1, b2);

    console.log(`rows()                     ${rowsMs} ms CPU per batch (of which JSON.parse of the body ${parseMs})`);
    console.log(`packed() (pipeline's form) ${packedMs} ms CPU per batch`);
    console.log(`claims + batch mark        ${claimsMs} ms CPU per batch here, nats-server ${claimsNatsMs ?? '?'} ms; ${claimsWallMs} ms wall per batch (one at a time)`);
    console.log(`500 KV gets (billing read) ${lookupsMs} ms CPU per batch here, nats-server ${lookupsNatsMs ?? '?'} ms; ${lookupsWallMs} ms wall per batch`);
    console.log(`500 keys, batched reader   ${readerMs} ms CPU per batch here, nats-server ${readerNatsMs ?? '?'} ms; ${readerWallMs} ms wall per batch`);
    console.log(`per million signals: rows ${round((packedMs * 1e6) / SIGNALS_PER_BATCH / 1000, 2)} CPU-s, claims ${round(((claimsMs + (claimsNatsMs ?? 0)) * 1e6) / SIGNALS_PER_BATCH / 1000, 2)} CPU-s, billing reads ${round(((lookupsMs + (lookupsNatsMs ?? 0)) * 1e6) / SIGNALS_PER_BATCH / 1000, 2)} CPU-s per key, ${round(((readerMs + (readerNatsMs ?? 0)) * 1e6) / SIGNALS_PER_BATCH / 1000, 2)} CPU-s batched`);
    appendHistory({
      bench: 'pipeline-parts',
      at: new Date().toISOString(),
      host,
      params: { batches, signalsPerBatch: SIGNALS_PER_BATCH, keyedPerBatch: template.keyedCount },
      perBatchMs: { rows: rowsMs, packed: packedMs, parse: parseMs, claims: claimsMs, claimsNats: claimsNatsMs, claimsWall: claimsWallMs, lookups: lookupsMs, lookupsNats: lookupsNatsMs, lookupsWall: lookupsWallMs, reader: readerMs, readerNats: readerNatsMs, readerWall: readerWallMs },
      ok: true,
      problems: [],
    });
  } finally {
    await jsm.streams.delete(`KV_${bucket}`).catch(() => undefined);
    await jsm.streams.delete(`${bucket}_CLAIMS`).catch(() => undefined);
    await nc.close();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`pipeline-parts benchmark failed: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exitCode = 1;
});
