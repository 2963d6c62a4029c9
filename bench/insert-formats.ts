/**
 * The embedded engine's insert of the pipeline's signal rows in each text format its insert
 * API takes (chdb's raw insert accepts JSONEachRow, JSONCompactEachRow, CSV and TSV; no binary
 * format): the same rows (the rows worker over the pipeline bench's batches, workers/rows.ts),
 * rendered once per format, inserted in turn into one session in this process, --rounds
 * times. Prints rows/s, CPU-seconds per million rows and bytes per insert for each format
 * (what a cheaper format would save the engine; its `data` JSON column is parsed
 * from text in every one).
 *
 *   node dist/bench/insert-formats.js [--rows N (10000 per insert)] [--inserts N (30 per format and round)] [--rounds N (2)]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import rowsOf from '../workers/rows.js';
import { schemaStatements } from '../src/store/schema.js';
import { newBatchId } from '../src/bus/batch.js';
import { identityPrefix } from '../src/pipeline/identities.js';
import { Args } from './lib/args.js';
import { BatchTemplate, SIGNALS_PER_BATCH } from './lib/signals.js';
import { appendHistory, hostInfo, printHeader, round } from './lib/report.js';

const args = new Args('node dist/bench/insert-formats.js [options]', {
  rows: { help: 'rows per insert (default 10000, the pipeline flush size)' },
  inserts: { help: 'inserts per format and round (default 30)' },
  rounds: { help: 'rounds over the formats (default 2)' },
});
const ROWS = args.num('rows', 10_000, SIGNALS_PER_BATCH, 1_000_000);
const INSERTS = args.num('inserts', 30, 1, 10_000);
const ROUNDS = args.num('rounds', 2, 1, 100);
const CHUNKS = 5;
const DB = 'billing';
/** The signals table's columns the pipeline writes (ingested_at is the engine's default). */
const COLUMNS = ['org_id', 'livemode', 'signal_id', 'batch_id', 'event_name', 'customer_id', 'external_customer_id', 'product_id', 'external_product_id', 'unit_id', 'idempotency_key', 'timestamp', 'received_at', 'data'] as const;
type Format = 'JSONEachRow' | 'JSONCompactEachRow' | 'TSV';

/** TSV's escapes for a value (backslash, tab, newline); `\N` for null. */
const tsvField = (v: unknown): string => {
  if (v === null || v === undefined) return '\\N';
  const s = typeof v === 'object' ? JSON.stringify(v) : String(v);
  return s.replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n');
};

function render(rows: Record<string, unknown>[], format: Format): Buffer {
  if (format === 'JSONEachRow') return Buffer.from(rows.map((r) => `${JSON.stringify(r)}\n`).join(''));
  if (format === 'JSONCompactEachRow') return Buffer.from(rows.map((r) => `${JSON.stringify(COLUMNS.map((c) => r[c] ?? null))}\n`).join(''));
  return Buffer.from(rows.map((r) => `${COLUMNS.map((c) => tsvField(r[c])).join('\t')}\n`).join(''));
}

const cpuSeconds = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

async function main(): Promise<void> {
  const { Session } = await import('chdb');
  printHeader('insert formats: the embedded engine inserting the pipeline rows', hostInfo(), { rows: ROWS, inserts: INSERTS, rounds: ROUNDS, formats: 'JSONEachRow, JSONCompactEachRow, TSV' });
  const dir = mkdtempSync(path.join(tmpdir(), 'insert-formats-'));
  const session = new Session(dir);
  try {
    for (const sql of schemaStatements(DB)) await session.queryAsync(sql);
    const template = new BatchTemplate({ keyed: (i) => i % 2 === 0, baseTimeMs: Date.now() - 60_000 });
    const rowSets: Record<string, unknown>[][] = [];
    let n = 0;
    for (let c = 0; c < CHUNKS; c++) {
      const rows: Record<string, unknown>[] = [];
      for (let b = 0; b < Math.ceil(ROWS / SIGNALS_PER_BATCH); b++, n++) {
        const at = Date.now();
        const r = rowsOf({ body: Buffer.from(template.render((i) => `fmt-${n}-${i}`)), meta: { orgId: 'org_formats', mode: 'live', receivedAtMs: at, batchId: newBatchId(at) } });
        // Each line opened by its identity columns, as the pipeline inserts it (nothing resolved: no customer configured).
        r.lines.forEach((l, i) => rows.push(JSON.parse(Buffer.from(identityPrefix(r.customers[i]!, null, r.products[i]!, null)).toString() + l.slice(1)) as Record<string, unknown>));
      }
      rowSets.push(rows.slice(0, ROWS));
    }
    const formats: Format[] = ['JSONEachRow', 'JSONCompactEachRow', 'TSV'];
    const bodies = new Map(formats.map((f) => [f, rowSets.map((rows) => render(rows, f))]));
    const results: Record<string, { rowsPerSec: number[]; cpuSecondsPerMillion: number[]; bytes: number }> = {};
    let inserted = 0;
    for (let round_ = 0; round_ < ROUNDS; round_++) {
      for (const f of formats) {
        const chunks = bodies.get(f)!;
        const insert = (i: number) => session.insert({ table: `${DB}.signals`, values: chunks[i % CHUNKS]!, format: f, columns: [...COLUMNS], settings: { max_partitions_per_insert_block: 0 } });
        await insert(0); // warm-up, not counted
        const c0 = cpuSeconds();
        const t0 = performance.now();
        for (let i = 0; i < INSERTS; i++) await insert(i);
        const seconds = (performance.now() - t0) / 1000;
        const cpu = cpuSeconds() - c0;
        inserted += (INSERTS + 1) * ROWS;
        const r = (results[f] ??= { rowsPerSec: [], cpuSecondsPerMillion: [], bytes: chunks[0]!.length });
        r.rowsPerSec.push(round((INSERTS * ROWS) / seconds, 0));
        r.cpuSecondsPerMillion.push(round((cpu / (INSERTS * ROWS)) * 1e6, 2));
      }
    }
    const count = await session.queryAsync(`SELECT count() AS n FROM ${DB}.signals`, { format: 'JSONEachRow' });
    const stored = Number((JSON.parse(count.text().trim()) as { n: string | number }).n);
    console.log(`\n${'format'.padEnd(20)}${'rows/s (each round)'.padEnd(28)}${'CPU-s / 1M rows'.padEnd(24)}bytes per insert`);
    for (const f of formats) {
      const r = results[f]!;
      console.log(`${f.padEnd(20)}${r.rowsPerSec.join(' / ').padEnd(28)}${r.cpuSecondsPerMillion.join(' / ').padEnd(24)}${r.bytes}`);
    }
    console.log(`\nexact count: ${stored === inserted ? 'MATCH' : 'MISMATCH'} (stored ${stored}, inserted ${inserted})`);
    appendHistory({ bench: 'insert-formats', at: new Date().toISOString(), host: hostInfo(), params: { rows: ROWS, inserts: INSERTS, rounds: ROUNDS }, results, countMatches: stored === inserted });
  } finally {
    session.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
