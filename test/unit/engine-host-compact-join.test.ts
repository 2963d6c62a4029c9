/**
 * The engine host's joining of chdb's streamed JSONCompact blocks (each a document of its own,
 * laid out as chdb prints them) into one document, the one the service's StreamShaper reads.
 */
import t from 'tap';
import { CompactJoin } from '../../src/store/engine-host/compact-join.js';
import { StreamShaper } from '../../src/analytics/result.js';

/** A block as chdb prints it: the head with `meta`, the rows one per line, the block's tail. */
function block(rows: string[], extraTail = ''): Buffer {
  const data = rows.length === 0 ? '\n' : `${rows.map((r) => `\t\t${r}`).join(',\n')}\n`;
  return Buffer.from(
    `{\n\t"meta":\n\t[\n\t\t{\n\t\t\t"name": "n",\n\t\t\t"type": "UInt64"\n\t\t},\n\t\t{\n\t\t\t"name": "s",\n\t\t\t"type": "String"\n\t\t}\n\t],\n\n\t"data":\n\t[\n${data}\t],\n\n${extraTail}\t"rows": ${rows.length},\n\n\t"statistics":\n\t{\n\t\t"elapsed": 0.001,\n\t\t"rows_read": 0,\n\t\t"bytes_read": 0\n\t}\n}\n`,
  );
}

const rowsOf = (from: number, n: number): string[] => Array.from({ length: n }, (_, i) => `[${from + i}, "v,${from + i}\\n]"]`);

function joined(blocks: Buffer[], counts: number[]): string {
  const j = new CompactJoin();
  const out: Buffer[] = [];
  blocks.forEach((b, i) => out.push(...j.push(b, counts[i]!)));
  out.push(j.end(0.25));
  return Buffer.concat(out).toString('utf8');
}

t.test('blocks, empty ones among them, join into one document of all rows in order', async (t) => {
  const text = joined([block(rowsOf(0, 3)), block([]), block(rowsOf(3, 2)), block(rowsOf(5, 1))], [3, 0, 2, 1]);
  const doc = JSON.parse(text) as { meta: unknown; data: unknown[][]; rows: number; statistics: { elapsed: number } };
  t.same(doc.meta, [{ name: 'n', type: 'UInt64' }, { name: 's', type: 'String' }]);
  t.same(doc.data.map((r) => r[0]), [0, 1, 2, 3, 4, 5]);
  t.equal(doc.data[4]![1], 'v,4\n]', 'a row’s strings pass as they are');
  t.equal(doc.rows, 6);
  t.same(doc.statistics, { elapsed: 0.25 }, 'the host’s elapsed time; rows and bytes read are not claimed');
  t.match(text, /\n\t\t\[5, "v,5\\n\]"\]\n\t\],\n/, 'the engine’s layout: one row per line, no comma after the last');
  // What the service makes of it, read in small pieces.
  const shaper = new StreamShaper();
  const body: Buffer[] = [];
  const b = Buffer.from(text);
  for (let i = 0; i < b.length; i += 7) body.push(...shaper.push(b.subarray(i, i + 7)));
  body.push(shaper.end(0));
  const api = JSON.parse(Buffer.concat(body).toString('utf8')) as { rows: unknown[][]; meta: { rowCount: number; elapsedMs: number } };
  t.equal(api.rows.length, 6);
  t.same([api.meta.rowCount, api.meta.elapsedMs], [6, 250], 'the service’s shaper takes it: row count and elapsed agree');
});

t.test('only empty blocks: a document without rows', async (t) => {
  const doc = JSON.parse(joined([block([]), block([])], [0, 0])) as { data: unknown[]; rows: number };
  t.same([doc.data, doc.rows], [[], 0]);
  const shaper = new StreamShaper();
  const body = [...shaper.push(Buffer.from(joined([block([])], [0]))), shaper.end(0)];
  t.same((JSON.parse(Buffer.concat(body).toString('utf8')) as { rows: unknown[] }).rows, []);
});

t.test('what cannot be joined throws', async (t) => {
  t.throws(() => new CompactJoin().push(Buffer.from('{"meta": [], "data": []}'), 0), /no data section/);
  t.throws(() => new CompactJoin().push(block(rowsOf(0, 1)).subarray(0, 130), 1), /no end of its data section/);
  t.throws(() => new CompactJoin().push(block(rowsOf(0, 1), '\t"totals": [1, "x"],\n\n'), 1), /totals or extremes/);
  t.throws(() => new CompactJoin().end(0), /without a block/);
});
