/**
 * Shaping the engine's JSONCompact output (src/analytics/result.ts): the line-cutting fast
 * path must give exactly what a full parse gives, for any values the engine prints
 * (strings with quotes, newlines, unicode; nested JSON; 64-bit numbers), and cut at exactly
 * the row limit.
 */
import t from 'tap';
import fc from 'fast-check';
import { openTestStore } from '../helpers/chdb.js';
import { StreamShaper, shapeResult } from '../../src/analytics/result.js';

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

/** The body StreamShaper makes from `out` given in pieces of these sizes (cycled), and what it held at most. */
function streamed(out: Buffer, sizes: number[], maxRows: number, maxBytes: number, ms = 0): { body: Buffer; maxHeld: number; read: number } {
  const s = new StreamShaper(maxRows, maxBytes);
  const parts: Buffer[] = [];
  let maxHeld = 0;
  let pos = 0;
  for (let i = 0; pos < out.length && s.cut === null; i++) {
    const n = Math.max(1, sizes[i % sizes.length]!);
    parts.push(...s.push(out.subarray(pos, pos + n)));
    pos += n;
    maxHeld = Math.max(maxHeld, s.held);
  }
  parts.push(s.end(ms));
  return { body: Buffer.concat(parts), maxHeld, read: Math.min(pos, out.length) };
}

t.test('streamed: the same body as shapeResult, whatever the pieces; a cut reads no further than the row that cuts', async (t) => {
  const { store } = await openTestStore(t);
  const outs = [
    await store.analytics.select("SELECT number AS n, repeat('x', number % 97) AS s, toString(number) || '\\n\"' AS q FROM numbers(300)", SETTINGS),
    await store.analytics.select('SELECT 1 AS x WHERE 0', SETTINGS),
    await store.analytics.select("SELECT 'ü\\t\\\\' AS s, [1, 2] AS a, map('k', number) AS m FROM numbers(3)", SETTINGS),
  ];
  await fc.assert(
    fc.property(
      fc.integer({ min: 0, max: outs.length - 1 }),
      fc.array(fc.integer({ min: 1, max: 700 }), { minLength: 1, maxLength: 8 }),
      fc.integer({ min: 0, max: 400 }),
      fc.oneof(fc.integer({ min: 0, max: 20_000 }), fc.constant(1 << 30)),
      (which, sizes, maxRows, maxBytes) => {
        const out = outs[which]!;
        const whole = JSON.parse(shapeResult(out, maxRows, maxBytes).body.toString()) as { columns: unknown; rows: unknown[]; meta: Record<string, unknown> };
        const got = streamed(out, sizes, maxRows, maxBytes, 5);
        const b = JSON.parse(got.body.toString()) as typeof whole;
        t.same(b.columns, whole.columns);
        t.same(b.rows, whole.rows);
        // A cut stops reading before the engine's figures: the service's time stands in.
        t.same(b.meta, { ...whole.meta, elapsedMs: whole.meta.truncated ? 5 : whole.meta.elapsedMs });
        // The rows pass through as the engine laid them out: the same bytes as the whole answer.
        t.equal(got.body.length - JSON.stringify(b.meta).length, shapeResult(out, maxRows, maxBytes).body.length - JSON.stringify(whole.meta).length);
      },
    ),
    { numRuns: 300 },
  );
});

t.test('streamed: a row that cannot fit cuts before its end; what is held stays within a row', async (t) => {
  const { store } = await openTestStore(t);
  // Rows of ~10 KB: the cap of 25,000 bytes takes two.
  const out = await store.analytics.select("SELECT number AS n, repeat('abcdefghij', 1000) AS s FROM numbers(50)", SETTINGS);
  const got = streamed(out, [512], 10_000, 25_000);
  const b = JSON.parse(got.body.toString()) as { rows: unknown[]; meta: Record<string, unknown> };
  t.equal(b.rows.length, 2);
  t.same(b.meta, { truncated: true, truncatedBy: 'bytes', limit: 25_000, rowCount: 2, elapsedMs: 0 });
  t.ok(got.read < 3 * 10_100 + 1_000, `read ${got.read} bytes of ${out.length}: the third row cut as soon as it could not fit`);
  t.ok(got.maxHeld <= 10_100, `held at most ${got.maxHeld} bytes`);
  // The row limit: the comma after the last row allowed says another comes; it is not read.
  const rows = streamed(out, [100_000], 3, 1 << 30);
  t.same((JSON.parse(rows.body.toString()) as { meta: Record<string, unknown> }).meta, { truncated: true, truncatedBy: 'rows', limit: 3, rowCount: 3, elapsedMs: 0 });
});

t.test('streamed: an output that breaks off or is not one row per line throws (it cannot be taken back)', async (t) => {
  const { store } = await openTestStore(t);
  const out = await store.analytics.select('SELECT number AS n FROM numbers(20)', SETTINGS);
  for (const end of [10, out.indexOf('[') + 3, out.length - 40]) {
    const s = new StreamShaper();
    s.push(out.subarray(0, end));
    t.throws(() => s.end(0), `broken off at ${end}`);
  }
  const pretty = Buffer.from(JSON.stringify({ meta: [{ name: 'x', type: 'UInt8' }], data: [[1], [2]], rows: 2 }, null, 2));
  const p = new StreamShaper();
  t.throws(() => {
    p.push(pretty);
    p.end(0);
  }, 'not the engine layout');
  const rowsPretty = Buffer.from(out.toString().replace('\t\t["1"]', '\t\t[\n"1"]'));
  t.throws(() => new StreamShaper().push(rowsPretty), 'a row over two lines');
  const lying = Buffer.from(out.toString().replace(/"rows": 20/, '"rows": 21'));
  const s = new StreamShaper();
  s.push(lying);
  t.throws(() => s.end(0), 'a row count that disagrees');
});
