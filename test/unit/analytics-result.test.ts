/**
 * Shaping the engine's JSONCompact output (src/analytics/result.ts): the line-cutting fast
 * path must give exactly what a full parse gives, for any values the engine prints
 * (strings with quotes, newlines, unicode; nested JSON; 64-bit numbers), and cut at exactly
 * the row limit.
 */
import t from 'tap';
import fc from 'fast-check';
import { openTestStore } from '../helpers/chdb.js';
import { shapeResult } from '../../src/analytics/result.js';

const SETTINGS = { output_format_json_quote_64bit_integers: 1, output_format_json_quote_decimals: 1, readonly: 1 };

function slow(out: Buffer, max: number): { columns: unknown; rows: unknown[]; truncated: boolean } {
  const all = JSON.parse(out.toString('utf8')) as { meta: { name: string; type: string }[]; data: unknown[][] };
  return { columns: all.meta.map((c) => ({ name: c.name, type: c.type })), rows: all.data.slice(0, max), truncated: all.data.length > max };
}

t.test('fast path = full parse, for any strings the engine prints', async (t) => {
  const { store } = await openTestStore(t);
  const lit = (s: string): string => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  await fc.assert(
    fc.asyncProperty(fc.array(fc.string({ unit: 'grapheme', maxLength: 20 }), { maxLength: 30 }), fc.integer({ min: 0, max: 40 }), async (strings, max) => {
      const arr = `[${strings.map(lit).join(',')}]`;
      const out = await store.analytics.select(
        `SELECT s, toUInt64(length(s)) AS n, map(s, 1) AS m, CAST(concat('{"k":', toJSONString(s), '}') AS JSON) AS j FROM (SELECT arrayJoin(${arr === '[]' ? 'CAST([], \'Array(String)\')' : arr}) AS s)`,
        SETTINGS,
      );
      const shaped = shapeResult(out, max);
      const body = JSON.parse(shaped.body.toString('utf8')) as { columns: unknown; rows: unknown[]; meta: { truncated: boolean; rowCount: number } };
      const expected = slow(out, max);
      t.same(body.columns, expected.columns);
      t.same(body.rows, expected.rows);
      t.equal(body.meta.truncated, expected.truncated);
      t.equal(body.meta.rowCount, expected.rows.length);
    }),
    { numRuns: 60 },
  );
});

t.test('exact cut and the fallback when the layout is not one row per line', async (t) => {
  const { store } = await openTestStore(t);
  const out = await store.analytics.select('SELECT number FROM numbers(25)', SETTINGS);
  const a = JSON.parse(shapeResult(out, 10).body.toString());
  t.equal(a.rows.length, 10);
  t.equal(a.meta.truncated, true);
  const b = JSON.parse(shapeResult(out, 25).body.toString());
  t.equal(b.rows.length, 25);
  t.equal(b.meta.truncated, false);
  const empty = JSON.parse(shapeResult(await store.analytics.select('SELECT 1 WHERE 0', SETTINGS), 10).body.toString());
  t.same(empty.rows, []);
  const pretty = JSON.stringify({ meta: [{ name: 'x', type: 'UInt8' }], data: [[1], [2], [3]], rows: 3, statistics: { elapsed: 0.001, rows_read: 3, bytes_read: 3 } }, null, 2);
  const c = JSON.parse(shapeResult(Buffer.from(pretty), 2).body.toString());
  t.same(c.rows, [[1], [2]]);
  t.equal(c.meta.truncated, true);
});

t.test('a failed statement’s partial output never reaches the next statement', async (t) => {
  const { store } = await openTestStore(t);
  // chdb 3.4 prepends a failed statement's partial output to the next statement's output;
  // the store swallows it before anyone else's statement runs.
  await t.rejects(store.analytics.select('SELECT number, throwIf(number = 3) FROM numbers(10)', { ...SETTINGS, max_block_size: 1 }));
  const next = await store.analytics.select('SELECT 42 AS answer', SETTINGS);
  t.same(JSON.parse(next.toString()).data, [[42]], 'one clean JSON document');
  await t.rejects(store.analytics.select('SELECT count() FROM numbers(1000000000000)', { ...SETTINGS, max_execution_time: 0.3 }));
  t.same(await store.countSignals('org_x'), { live: 0, test: 0 }, 'the pipeline’s own reads are clean too');
});

t.test('the byte cap: whole rows within it, from a whole output or one cut anywhere, flagged by which limit cut', async (t) => {
  const { store } = await openTestStore(t);
  const out = await store.analytics.select("SELECT number AS n, repeat('x', 90) AS s FROM numbers(200)", SETTINGS);
  const full = JSON.parse(shapeResult(out, 10_000, 1 << 30).body.toString()) as { rows: [string, string][]; meta: Record<string, unknown> };
  t.equal(full.rows.length, 200);
  t.same(full.meta, { truncated: false, rowCount: 200, elapsedMs: full.meta.elapsedMs });
  const rowBytes = (rows: unknown[]): number => Buffer.byteLength(JSON.stringify(rows)) - 2;
  for (const cap of [0, 50, 1_000, 5_000, 12_345]) {
    const b = JSON.parse(shapeResult(out, 10_000, cap).body.toString()) as { rows: unknown[]; meta: Record<string, unknown> };
    t.ok(b.rows.length < 200 && rowBytes(b.rows) <= cap, `cap ${cap}: ${b.rows.length} rows`);
    t.same(b.rows, full.rows.slice(0, b.rows.length), 'the first rows, whole');
    // The engine's layout puts a tab pair and a line break around each row (4 bytes more than compact JSON).
    t.ok(rowBytes(full.rows.slice(0, b.rows.length + 1)) + 4 * (b.rows.length + 1) > cap, 'as many as fit in the engine layout');
    t.same(b.meta, { truncated: true, truncatedBy: 'bytes', limit: cap, rowCount: b.rows.length, elapsedMs: b.meta.elapsedMs });
  }
  const byRows = JSON.parse(shapeResult(out, 10, 1 << 30).body.toString()) as { meta: Record<string, unknown> };
  t.same(byRows.meta, { truncated: true, truncatedBy: 'rows', limit: 10, rowCount: 10, elapsedMs: byRows.meta.elapsedMs });
  // The store stopped reading somewhere: whatever the cut, whole rows only, flagged by bytes, never an error.
  const open = out.indexOf('"data"');
  for (let end = open + 12; end <= out.length; end += 97) {
    const cutOut = out.subarray(0, end);
    const b = JSON.parse(shapeResult(cutOut, 10_000, 1 << 30, 7).body.toString()) as { rows: unknown[]; meta: Record<string, unknown> };
    t.same(b.rows, full.rows.slice(0, b.rows.length), `cut at ${end}: ${b.rows.length} whole rows`);
    if (b.rows.length < 200) t.same(b.meta, { truncated: true, truncatedBy: 'bytes', limit: 1 << 30, rowCount: b.rows.length, elapsedMs: 7 });
  }
  // More whole rows than the row limit before the cut: the row limit cut it.
  const r = JSON.parse(shapeResult(out.subarray(0, out.length - 200), 10, 1 << 30).body.toString()) as { meta: Record<string, unknown> };
  t.same(r.meta, { truncated: true, truncatedBy: 'rows', limit: 10, rowCount: 10, elapsedMs: 0 });
});
