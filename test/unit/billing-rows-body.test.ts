/**
 * The billing rows message body (src/billing/evaluator/rows-body.ts): rows rendered once as
 * JSONCompactEachRow lines (arrays, in the column order the header gives per table, a credit
 * draw in its cost line) with a header of counts, read back per table with each line's signal id; a body in no other form, a body whose header disagrees with its lines,
 * whose column list is not exactly its table's columns, or with a line that is not one row of
 * that shape with a string signal id, refused.
 */
import t from 'tap';
import fc from 'fast-check';
import { RENDER_COLUMNS, arrayLine, readRows, renderRows, scannedArrayId, type TableLines } from '../../src/billing/evaluator/rows-body.js';
import { BILLING_COLUMNS, schemaStatements } from '../../src/store/schema.js';
import type { ConsumptionRow, CostRow, UnpricedRow } from '../../src/billing/evaluator/evaluate.js';

const enc = new TextEncoder();
/** scannedArrayId of a whole line given as text. */
const scan = (line: string, arity: number, at: number): string | null => {
  const b = Buffer.from(line);
  return scannedArrayId(b, 0, b.length, arity, at);
};
const text = fc.string({ unit: 'binary', maxLength: 10 });
const id = fc.stringMatching(/^sig_[A-Za-z0-9]{1,20}$/);
const base = (signal: string, name: string) => ({ org_id: 'org_abcdefghijklmnopqrst', livemode: true, signal_id: signal, created_at: 1, event_name: name, customer_id: 'cus_1', unit_id: name, plan_id: 'plan_1', order_line_attribute_id: 'ola_1' });
const costArb = fc.record({ s: id, name: text }).map(({ s, name }): CostRow => ({ ...base(s, name), quantity: '1', unit_price: '0.5', cost_amount: '0.5', currency: 'USD' }));
const drawOf = (c: CostRow, n: number): ConsumptionRow => ({ org_id: c.org_id, livemode: c.livemode, signal_id: c.signal_id, created_at: c.created_at, customer_id: c.customer_id, unit_id: c.unit_id, order_line_attribute_id: c.order_line_attribute_id, pool_id: `cp_${n}`, credits_currency_id: n % 2 ? null : 'c', credits: String(n), balance_after: `-${n}` });
const unpricedArb = fc.record({ s: id, name: text, detail: text }).map(({ s, name, detail }): UnpricedRow => ({ ...base(s, name), reason: 'QUANTITY_MISSING', detail }) as UnpricedRow);
/** The draw columns of a cost line and the consumption row's field each holds. */
const DRAW = { draw_pool_id: 'pool_id', draw_credits_currency_id: 'credits_currency_id', draw_credits: 'credits', draw_balance_after: 'balance_after' } as const;

t.test('rendered rows read back per table, line for line, each credit draw in its cost line', async (t) => {
  fc.assert(
    // A message prices each of its signals once: its cost rows name distinct signals.
    fc.property(fc.uniqueArray(fc.tuple(costArb, fc.option(fc.nat(99))), { maxLength: 5, selector: ([c]) => c.signal_id }), fc.array(unpricedArb, { maxLength: 5 }), (priced, unpriced) => {
      const costs = priced.map(([c]) => c);
      // As evaluate.ts gives them: a draw after its cost row, in the same order.
      const consumption = priced.flatMap(([c, n]) => (n === null ? [] : [drawOf(c, n)]));
      const body = renderRows({ costs, consumption, unpriced });
      if (costs.length + unpriced.length === 0) return body === null;
      const back = readRows(body!);
      // Each array line (ending in its newline), zipped with its column list, is the row object (every field, same values).
      const text = (l: Uint8Array) => Buffer.from(l).toString('utf8');
      if (![back.costs, back.unpriced].every((tl) => tl.lines.every((l) => l.indexOf(10) === l.length - 1 && l[l.length - 2] === 0x5d))) return false;
      const objects = (t: TableLines) => t.lines.map((l) => Object.fromEntries((JSON.parse(text(l)) as unknown[]).map((v, i) => [t.columns![i]!, v])));
      const same = (a: object[], b: object[]) => a.length === b.length && a.every((x, i) => JSON.stringify(Object.entries(x).sort()) === JSON.stringify(Object.entries(b[i]!).sort()));
      const ids = (t: TableLines, rows: { signal_id: string }[]) => JSON.stringify(t.ids) === JSON.stringify(rows.map((r) => r.signal_id));
      const merged = priced.map(([c, n]) => {
        const d = n === null ? null : drawOf(c, n);
        return { ...c, ...Object.fromEntries(Object.entries(DRAW).map(([col, field]) => [col, d === null ? null : d[field]])) };
      });
      return same(objects(back.costs), merged) && same(objects(back.unpriced), unpriced) && ids(back.costs, costs) && ids(back.unpriced, unpriced);
    }),
    { numRuns: 300 },
  );
});

t.test('a credit draw without its cost row, or out of its order, is never rendered', async (t) => {
  const [a, b] = fc.sample(costArb, 2).map((c, i) => ({ ...c, signal_id: `sig_${i}` }));
  t.throws(() => renderRows({ costs: [], consumption: [drawOf(a!, 1)], unpriced: [] }), /without its cost row/);
  t.throws(() => renderRows({ costs: [a!, b!], consumption: [drawOf(b!, 1), drawOf(a!, 2)], unpriced: [] }), /is not after its cost row/);
  t.throws(() => renderRows({ costs: [a!], consumption: [drawOf(b!, 1)], unpriced: [] }), /is not after its cost row/);
});

t.test('a body in another form, that disagrees with its header, names other columns, or holds a line that is not one row, is refused', async (t) => {
  t.throws(() => readRows(enc.encode(JSON.stringify({ costs: [{ signal_id: 'sig_a', cost_amount: '1' }] }))), /not a body of this form/, 'one object of row lists');
  t.throws(() => readRows(enc.encode('{"v":2,"costs":1,"consumption":0,"unpriced":0}\n{"signal_id":"sig_a"}\n')), /not a body of this form/, 'JSONEachRow lines');
  const reversed = [...RENDER_COLUMNS.costs].reverse();
  const line = JSON.stringify(reversed.map((c) => (c === 'signal_id' ? 'sig_r' : null)));
  const other = readRows(enc.encode(`{"v":4,"costs":1,"unpriced":0,"columns":{"costs":${JSON.stringify(reversed)}}}\n${line}\n`)).costs;
  t.same(
    { columns: other.columns, lines: other.lines.map((l) => Buffer.from(l).toString('utf8')), ids: other.ids },
    { columns: reversed, lines: [`${line}\n`], ids: ['sig_r'] },
    'in another order (another version): read with its own column list',
  );
  t.throws(() => readRows(enc.encode(`{"v":4,"costs":2,"unpriced":0,"columns":{"costs":${JSON.stringify(RENDER_COLUMNS.costs)}}}\n${JSON.stringify(RENDER_COLUMNS.costs.map((c) => (c === 'signal_id' ? 'sig_a' : null)))}\n`)), /header counts 2 lines, the body has 1/);
  t.throws(() => readRows(enc.encode('{"v":4,"costs":0,"unpriced":0}')), /a header without lines/);
  const all = RENDER_COLUMNS.costs;
  for (const columns of [[...all, 'drop_table'], [...all, 'signal_id'], all.filter((c) => c !== 'org_id'), ['signal_id', 'cost_amount'], 'signal_id', [...all.slice(1), 1]]) {
    t.throws(() => readRows(enc.encode(`{"v":4,"costs":1,"unpriced":0,"columns":{"costs":${JSON.stringify(columns)}}}\n["sig_a"]\n`)), /column|no column list|lacks/, `columns ${JSON.stringify(columns)}`);
  }
  t.throws(() => readRows(enc.encode('{"v":4,"costs":1,"unpriced":0}\n["sig_a"]\n')), /no column list for its costs/);
  const v4 = (l: string) => enc.encode(`{"v":4,"costs":1,"unpriced":0,"columns":{"costs":${JSON.stringify(all)}}}\n${l}\n`);
  const row = (id: unknown) => JSON.stringify(all.map((c) => (c === 'signal_id' ? id : 'x')));
  t.ok(readRows(v4(row('sig_ok'))), 'a well-formed line');
  const bad: [string, string][] = [
    [row(123), 'a number for an id'],
    [row(null), 'null for an id'],
    [row({ a: 1 }), 'an object for an id'],
    [row('sig"x'), 'an id that needs escaping'],
    [row(''), 'an empty id'],
    [`${row('sig_a')} ${row('sig_h')}`, 'two rows on one line'],
    [`${row('sig_a')}x`, 'trailing text'],
    [JSON.stringify(['sig_a']), 'too few values'],
    [JSON.stringify({ signal_id: 'sig_a' }), 'an object line'],
    ['', 'an empty line'],
  ];
  for (const [l, why] of bad) t.throws(() => readRows(v4(l)), /billing rows body|JSON/, why);
  t.throws(() => readRows(enc.encode('{"nothing":1}')), /not a body of this form/);
  t.throws(() => readRows(enc.encode('not json')));
});

t.test('a body is read as bytes exactly as its decoded text reads: the same lines, ids and refusals, whatever bytes its lines hold', async (t) => {
  const columns = RENDER_COLUMNS.costs;
  /** The text reading of a body: decoded whole (U+FFFD for bytes that are not UTF-8), split into lines, each parsed. */
  const byText = (data: Uint8Array): { lines: string; ids: string[] } => {
    const text = new TextDecoder().decode(data);
    const lines = text.slice(text.indexOf('\n') + 1).split('\n');
    if (lines.at(-1) === '') lines.pop();
    const ids = lines.map((l) => {
      const row = JSON.parse(l) as unknown;
      if (!Array.isArray(row) || row.length !== columns.length || typeof row[0] !== 'string' || !/^[\w-]{1,200}$/.test(row[0])) throw new Error('not a row');
      return row[0];
    });
    return { lines: lines.map((l) => `${l}\n`).join(''), ids };
  };
  const piece = fc.oneof(
    fc.constantFrom('a', 'Z', '0', ' ', ',', '"', '\\', '\\u0041', '\\"', 'é', '\u2028', '😀', '\u007f', '\t', ']', '['),
    fc.uint8Array({ minLength: 1, maxLength: 3 }).map((b) => Buffer.from(b).toString('latin1')),
  );
  const value = fc.oneof(fc.array(piece, { maxLength: 5 }).map((p) => `"${p.join('')}"`), fc.constantFrom('1', '-2.5e3', 'true', 'null', '01', '{}', '"x"'));
  const line = fc.oneof(
    fc.tuple(fc.stringMatching(/^sig_[a-z0-9]{1,6}$/), fc.array(value, { minLength: columns.length - 1, maxLength: columns.length - 1 })).map(([id, vs]) => `["${id}",${vs.join(',')}]`),
    fc.array(value, { minLength: columns.length - 1, maxLength: columns.length + 1 }).map((vs) => `[${vs.join(',')}]`),
  );
  fc.assert(
    fc.property(fc.array(line, { minLength: 1, maxLength: 6 }), fc.boolean(), (lines, lastNewline) => {
      const head = `{"v":4,"costs":${lines.length},"unpriced":0,"columns":{"costs":${JSON.stringify(columns)}}}\n`;
      // Lines as latin1 text: each char one byte, so bytes 0x80–0xff stand alone (not UTF-8 unless they form it).
      const data = Buffer.concat([Buffer.from(head), Buffer.from(lines.join('\n') + (lastNewline ? '\n' : ''), 'latin1')]);
      let want: { lines: string; ids: string[] } | null = null;
      try {
        want = byText(data);
      } catch {
        want = null;
      }
      let got: { lines: string; ids: string[] } | null = null;
      try {
        const r = readRows(data);
        got = { lines: Buffer.concat(r.costs.lines).toString('utf8'), ids: r.costs.ids };
      } catch {
        got = null;
      }
      return JSON.stringify(got) === JSON.stringify(want);
    }),
    { numRuns: 5_000 },
  );
});

t.test("BILLING_COLUMNS are the billing tables' columns, as created", async (t) => {
  const statements = schemaStatements('db');
  for (const [table, columns] of Object.entries(BILLING_COLUMNS)) {
    const create = statements.find((s) => s.includes(`TABLE IF NOT EXISTS db.${table} (`))!;
    const body = create.slice(create.indexOf('(') + 1, create.indexOf(') ENGINE'));
    const names = body.split('\n').map((l) => l.trim()).filter(Boolean).map((l) => l.split(/\s+/)[0]!);
    t.same(columns, names, table);
  }
  for (const [part, columns] of Object.entries(RENDER_COLUMNS)) t.equal(columns[0], 'signal_id', `${part}: signal_id first`);
});

t.test('a row line is written value by value exactly as JSON.stringify writes the array of its values', async (t) => {
  const value = fc.oneof(
    fc.string({ unit: 'binary', maxLength: 12 }),
    fc.string({ unit: fc.constantFrom('"', '\\', '\u0000', '\u001f', '\u007f', '\u2028', '\ud800', '\udfff', 'a', 'é', '😀'), maxLength: 6 }),
    fc.double(),
    fc.integer(),
    fc.constantFrom(null, undefined, true, false, -0, Number.MAX_SAFE_INTEGER, 1e21, 5e-7),
  );
  fc.assert(
    fc.property(fc.array(value, { minLength: 1, maxLength: 8 }), (values) => {
      const columns = values.map((_, i) => `c${i}`);
      const row = Object.fromEntries(values.map((v, i) => [`c${i}`, v]));
      return arrayLine(row, columns).toString('utf8') === `${JSON.stringify(values.map((v) => v ?? null))}\n`;
    }),
    { numRuns: 5_000 },
  );
  t.equal(arrayLine({ a: 'x"y', b: '\ud800' }, ['a', 'b', 'missing']).toString('utf8'), '["x\\"y","\\ud800",null]\n', 'escapes, a lone surrogate, a missing column');
});

t.test('a line read without parsing: the same signal id as JSON.parse, or no answer (then JSON.parse decides)', async (t) => {
  const scalar = fc.oneof(
    fc.string({ unit: fc.constantFrom('a', 'Z', '0', '_', '-', ' ', 'é', '\u2028', '\ud800', '\u007f'), maxLength: 8 }).map((s) => JSON.stringify(s)),
    fc.string({ unit: 'binary', maxLength: 6 }).map((s) => JSON.stringify(s)),
    fc.double().map((x) => JSON.stringify(x)),
    fc.integer().map(String),
    fc.constantFrom('true', 'false', 'null', '0', '-0', '1e5', '1E-5', '-1.25e+3', '01', '1.', '-', '.5', '"\\u0041"', '"a\\"b"', '[]', '{}', '[1]', 'tru', 'nul', '"', '"\t"', ' 1', '1 '),
  );
  const lineArb = fc.tuple(fc.array(scalar, { minLength: 0, maxLength: 6 }), fc.constantFrom('', ' ', ',', ']', 'x'), fc.boolean()).map(([values, junk, wrap]) => (wrap ? `[${values.join(',')}]${junk}` : `${values.join(',')}${junk}`));
  fc.assert(
    fc.property(lineArb, fc.integer({ min: 1, max: 6 }), fc.integer({ min: 0, max: 5 }), (line, arity, at) => {
      const quick = scan(line, arity, at);
      if (quick === null) return true;
      const row = JSON.parse(line) as unknown;
      return Array.isArray(row) && row.length === arity && row[at] === quick;
    }),
    { numRuns: 20_000 },
  );
  // The lines this version renders are read without parsing.
  const rendered = arrayLine({ org_id: 'org_1', livemode: true, signal_id: 'sig_A-1', created_at: 1_700_000_000_000, unit_id: null, quantity: '0.5' }, ['signal_id', 'org_id', 'livemode', 'created_at', 'unit_id', 'quantity']).toString('utf8').slice(0, -1);
  t.equal(scan(rendered, 6, 0), 'sig_A-1');
  t.equal(scan(rendered, 5, 0), null, 'one value more than the columns');
  t.equal(scan(rendered, 7, 0), null, 'one value fewer');
  t.equal(scan('["a\\u0062",1]', 2, 0), null, 'an escape: JSON.parse decides');
  t.equal(scan('[1,"x"]', 2, 0), null, 'the id is not a string');
  t.equal(scan('["x",1][', 2, 0), null, 'text after the array');
  t.equal(scan('["x","é"]', 2, 0), null, 'a byte outside ASCII: decoded, and JSON.parse decides');
  const b = Buffer.from('junk["sig_1",2]\nmore');
  t.equal(scannedArrayId(b, 4, 15, 2, 0), 'sig_1', 'a line within a body, by its bounds');
});
