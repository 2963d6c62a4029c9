/**
 * The packed rows of the pipeline: workers/rows.ts `packed` (each line ending in '\n') and
 * src/pipeline/lines.ts `keptLines` (the lines the claims keep), `keptRefs` and `prefixedLines`
 * (the kept lines, each opened by its identity columns).
 */
import t from 'tap';
import rows, { packed } from '../../workers/rows.js';
import { keptLines, keptRefs, prefixedLines } from '../../src/pipeline/lines.js';
import type { BatchMeta } from '../../src/bus/batch.js';

const meta: BatchMeta = { orgId: 'org_AAAAAAAAAAAAAAAAAAAA', mode: 'live', receivedAtMs: Date.UTC(2026, 0, 31), batchId: 'bat_0000abcdeXXXXXXXXXXXX' };
const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');
const encode = (signals: unknown[]): Uint8Array => new TextEncoder().encode(JSON.stringify({ signals }));

// Texts with newlines, other line breaks and multi-byte characters: none may split a line.
const signals = [
  { eventName: 'a', customer: { externalCustomerId: 'c1' }, idempotencyKey: 'k1', data: { s: 'line1\nline2\r\n', u: 'é € 😀 \u2028 \u2029' } },
  { eventName: 'b\n', customer: { customerId: 'c2' } },
  { eventName: 'c', customer: { externalCustomerId: 'c3\n\n' }, attribution: { externalProductId: 'p\n' }, unitId: 'u\n', idempotencyKey: 'k\n3', data: { n: 1.5 } },
  { eventName: 'd', customer: { externalCustomerId: 'c4' }, data: { deep: { arr: ['x\ny', 2] } } },
];
/** A signal's customer reference as the pipeline carries it: i: a service id, x: an externalId. */
const refOf = (s: { customer: { customerId?: string; externalCustomerId?: string } }): string =>
  s.customer.customerId !== undefined ? `i:${s.customer.customerId}` : `x:${s.customer.externalCustomerId}`;

t.test('packed: the same lines as rows, each ending in a newline', async (t) => {
  const r = rows({ body: encode(signals), meta });
  const p = packed({ body: encode(signals), meta });
  t.equal(text(p.rows), `${r.lines.join('\n')}\n`);
  t.equal(text(p.billable), `${r.billable.join('\n')}\n`);
  t.same(p.ids, r.ids);
  t.same(p.claimKeys, r.claimKeys);
  t.equal(text(p.rows).split('\n').length, signals.length + 1, 'exactly one newline byte per row');
});

t.test('keptLines: the kept lines in order, the input itself when all are kept', async (t) => {
  const r = rows({ body: encode(signals), meta });
  const p = packed({ body: encode(signals), meta });
  t.equal(keptLines(p.rows, [true, true, true, true]), p.rows, 'all kept: the same bytes, not a copy');
  const cases: boolean[][] = [
    [false, true, true, true],
    [true, false, true, false],
    [false, false, false, true],
    [false, false, false, false],
    [true, true, true, false],
  ];
  for (const keep of cases) {
    const want = r.lines.filter((_, i) => keep[i]);
    t.equal(text(keptLines(p.rows, keep)), want.length === 0 ? '' : `${want.join('\n')}\n`, `rows, keep ${keep.join(',')}`);
    const wantB = r.billable.filter((_, i) => keep[i]);
    t.equal(text(keptLines(p.billable, keep)), wantB.length === 0 ? '' : `${wantB.join('\n')}\n`, `billable, keep ${keep.join(',')}`);
    for (const line of text(keptLines(p.rows, keep)).split('\n').filter(Boolean)) JSON.parse(line);
    // the kept lines' customer references, line for line
    t.same([...keptRefs(p.refOf, keep)].map((k) => p.refs[k]), signals.filter((_, i) => keep[i]).map(refOf), `refs, keep ${keep.join(',')}`);
    // the kept lines opened by a prefix of their own (the identity columns, in the pipeline)
    const prefixed = text(prefixedLines(p.rows, keep, (i) => Buffer.from(`{"n":${i},`)));
    t.same(
      prefixed.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>),
      r.lines.flatMap((l, i) => (keep[i] ? [{ n: i, ...(JSON.parse(l) as Record<string, unknown>) }] : [])),
      `prefixed, keep ${keep.join(',')}`,
    );
  }
  t.equal(keptRefs(p.refOf, [true, true, true, true]), p.refOf, 'all kept: the same array');
});

t.test('an empty batch packs to no bytes', async (t) => {
  const p = packed({ body: encode([]), meta });
  t.equal(p.rows.length, 0);
  t.equal(p.billable.length, 0);
  t.equal(keptLines(p.rows, []).length, 0);
});
