/**
 * Billing partitions (src/billing/evaluator/partition.ts): a customer's partition depends on
 * its organization, mode and service id only; a batch's lines are split by partition with the
 * resolved service id in each line (`k`), a customer named by externalId and by service id
 * landing in the same partition; references that name no customer are left out (not billed,
 * not published) and asked again next time, found ones are not. And a customer's slice of a state (customer-state.ts).
 */
import t from 'tap';
import fc from 'fast-check';
import { BillablePartitioner, customerRef, partitionOf, type CustomerResolver } from '../../src/billing/evaluator/partition.js';
import { sliceOf } from '../../src/billing/evaluator/customer-state.js';
import { emptyConfig } from '../../src/billing/model.js';
import type { Nats } from '../../src/bus/connection.js';

t.test('partitionOf: stable, in range, spread, and depends on organization, mode and customer', async (t) => {
  t.equal(partitionOf('org_a', 'live', 'cus_1', 1), 0, 'one partition: always 0');
  const ks = Array.from({ length: 400 }, (_, i) => partitionOf('org_a', 'live', `cus_${i}`, 16));
  t.ok(ks.every((k) => Number.isInteger(k) && k >= 0 && k < 16), 'in range');
  t.same(Array.from({ length: 400 }, (_, i) => partitionOf('org_a', 'live', `cus_${i}`, 16)), ks, 'the same every time');
  t.equal(new Set(ks).size, 16, '400 customers reach all 16 partitions');
  const differs = (f: (i: number) => [string, 'live' | 'test', string]) => Array.from({ length: 64 }, (_, i) => f(i)).some(([o, m, c], i) => partitionOf(o, m, c, 16) !== partitionOf('org_a', 'live', `cus_${i}`, 16));
  t.ok(differs((i) => ['org_b', 'live', `cus_${i}`]), 'another organization spreads differently');
  t.ok(differs((i) => ['org_a', 'test', `cus_${i}`]), 'so does the other mode');
});

t.test('split: by resolved customer, with k; unresolved references without it', async (t) => {
  const asked: string[][] = [];
  const resolver: CustomerResolver = async (_org, _mode, refs) => {
    asked.push([...refs]);
    return new Map(refs.map((r) => [r, r.startsWith('cus_') ? r : r === 'acme' ? 'cus_acme' : null]));
  };
  // split() never publishes: no connection is needed.
  const p = new BillablePartitioner(null as unknown as Nats, resolver, 8);
  const line = (i: string, c: string) => JSON.stringify({ i, e: 'e', c, u: null, t: 0, d: { q: 1 } });
  const lines = [line('s1', 'acme'), line('s2', 'cus_acme'), line('s3', 'nobody'), line('s4', 'cus_other')];
  const parts = await p.split('org_a', 'live', lines);
  const byId = new Map(parts.flatMap((x) => x.lines.map((l) => [JSON.parse(l).i as string, { k: JSON.parse(l).k as string | undefined, c: JSON.parse(l).c as string, partition: x.partition }])));
  t.same(byId.get('s1'), { k: 'cus_acme', c: 'acme', partition: partitionOf('org_a', 'live', 'cus_acme', 8) }, 'an externalId resolves to its customer');
  t.same(byId.get('s2'), { k: 'cus_acme', c: 'cus_acme', partition: partitionOf('org_a', 'live', 'cus_acme', 8) }, 'the service id: same customer, same partition');
  t.equal(byId.get('s3'), undefined, 'no such customer: not billed, not published');
  t.equal(byId.get('s4')?.k, 'cus_other');
  t.same(parts.map((x) => x.partition), [...parts.map((x) => x.partition)].sort((a, b) => a - b), 'partitions in order');
  t.equal(parts.reduce((n, x) => n + x.lines.length, 0), 3, 'every line naming a customer once');
  t.same(byId.get('s1') && JSON.parse(parts.flatMap((x) => x.lines).find((l) => JSON.parse(l).i === 's1')!).d, { q: 1 }, 'the rest of the line kept');
  await p.split('org_a', 'live', lines);
  t.same(asked, [['acme', 'cus_acme', 'nobody', 'cus_other'], ['nobody']], 'found references are cached, a missing one is asked again');
  await p.split('org_a', 'test', [line('s5', 'acme')]);
  t.same(asked.at(-1), ['acme'], 'per mode');
});

t.test('prepare with the rows worker\'s references: the parts split gives, and a batch naming no customer resolved without reading its lines', async (t) => {
  const asked: string[][] = [];
  const resolver: CustomerResolver = async (_org, _mode, refs) => {
    asked.push([...refs]);
    return new Map(refs.map((r) => [r, r.startsWith('cus_') ? r : r === 'acme' ? 'cus_acme' : null]));
  };
  const p = new BillablePartitioner(null as unknown as Nats, resolver, 8);
  const meta = { orgId: 'org_a', mode: 'live' as const, batchId: 'bat_1' };
  const cs = ['acme', 'nobody', 'cus_x', 'acme', 'nobody', 'cus_y'];
  const lines = cs.map((c, i) => JSON.stringify({ i: `s${i}`, e: 'e', c, u: null, t: 0, d: { q: i } }));
  const bytes = Buffer.from(lines.map((l) => `${l}\n`).join(''));
  const refs = { refs: ['acme', 'nobody', 'cus_x', 'cus_y'], refOf: Uint16Array.from([0, 1, 2, 0, 1, 3]) };
  const given = await p.prepare(meta, bytes, refs);
  const read = await new BillablePartitioner(null as unknown as Nats, resolver, 8).prepare(meta, bytes);
  t.same(given.parts, read.parts, 'the same parts as references read from the lines');
  t.equal(given.parts.reduce((n, x) => n + x.lines.length, 0), 4, 'the lines naming a customer');
  t.same(asked[0], ['acme', 'nobody', 'cus_x', 'cus_y'], 'each reference asked once');
  // Lines that are not JSON at all: never read when no reference names a customer.
  asked.length = 0;
  const none = await p.prepare(meta, Buffer.from('not json\nnot json either\n'), { refs: ['nobody', 'nobody2'], refOf: Uint16Array.from([0, 1]) });
  t.same(none.parts, [], 'nothing to publish');
  t.same(asked, [['nobody', 'nobody2']], 'the missing references asked again');
});

t.test('split: every line naming a customer in partitionOf of its organization, mode and customer, however often the same references come (the partitioner memoizes them); the others left out', async (t) => {
  const resolver: CustomerResolver = async (_org, _mode, refs) => new Map(refs.map((r) => [r, r.startsWith('x') ? `cus_${r}` : r.startsWith('cus_') ? r : null]));
  const line = (i: number, c: string) => JSON.stringify({ i: `s${i}`, e: 'e', c, u: null, t: 0, d: {} });
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 1, max: 16 }),
      fc.array(fc.record({ org: fc.constantFrom('org_a', 'org_b'), mode: fc.constantFrom('live' as const, 'test' as const), refs: fc.array(fc.constantFrom('x1', 'x2', 'cus_1', 'cus_2', 'nobody', 'n\u0000o'), { minLength: 1, maxLength: 8 }) }), { minLength: 1, maxLength: 12 }),
      async (partitions, batches) => {
        const p = new BillablePartitioner(null as unknown as Nats, resolver, partitions);
        for (const b of batches) {
          const seen: string[] = [];
          for (const part of await p.split(b.org, b.mode, b.refs.map((c, i) => line(i, c)))) {
            for (const l of part.lines) {
              const { k, i, c } = JSON.parse(l) as { k?: string; i: string; c: string };
              // The customer the resolver gives for the line's own reference, in that customer's partition.
              if (k === undefined || k !== (c.startsWith('x') ? `cus_${c}` : c) || part.partition !== partitionOf(b.org, b.mode, k, partitions)) return false;
              seen.push(i);
            }
          }
          const named = b.refs.flatMap((c, i) => (c.startsWith('x') || c.startsWith('cus_') ? [`s${i}`] : []));
          if (seen.sort().join() !== named.sort().join()) return false;
        }
        return true;
      },
    ),
  );
  t.pass('every line in its partition');
});

t.test('split: a customer known before its batch is resolved keeps its lines when the cache drops it meanwhile', async (t) => {
  const resolver: CustomerResolver = async (_org, _mode, refs) => new Map(refs.map((r) => [r, `cus_${r}`]));
  const line = (i: string, c: string) => JSON.stringify({ i, e: 'e', c, u: null, t: 0, d: {} });
  // Room for two references: resolving `c` below pushes `a`, the oldest, out of the cache.
  const p = new BillablePartitioner(null as unknown as Nats, resolver, 4, 2);
  await p.split('org_a', 'live', [line('s1', 'a'), line('s2', 'b')]);
  const parts = await p.split('org_a', 'live', [line('s3', 'a'), line('s4', 'c'), line('s5', 'a')]);
  const ids = parts.flatMap((x) => x.lines.map((l) => (JSON.parse(l) as { i: string; k: string }))).sort((x, y) => x.i.localeCompare(y.i));
  t.same(ids.map((x) => [x.i, x.k]), [['s3', 'cus_a'], ['s4', 'cus_c'], ['s5', 'cus_a']], "a's lines kept, with its customer");
});

t.test('the cache of found references is bounded over organizations: the organization cached first goes first, and is asked again', async (t) => {
  const asked: string[] = [];
  const resolver: CustomerResolver = async (org, _mode, refs) => {
    asked.push(...refs.map((r) => `${org}:${r}`));
    return new Map(refs.map((r) => [r, `cus_${r}`]));
  };
  const line = (i: string, c: string) => JSON.stringify({ i, e: 'e', c, u: null, t: 0, d: {} });
  const p = new BillablePartitioner(null as unknown as Nats, resolver, 4, 3);
  await p.split('org_a', 'live', [line('s1', 'a'), line('s2', 'b')]);
  await p.split('org_b', 'live', [line('s3', 'c'), line('s4', 'd')]);
  asked.length = 0;
  await p.split('org_b', 'live', [line('s5', 'c'), line('s6', 'd')]);
  t.same(asked, [], "org_b's references are still known");
  const parts = await p.split('org_a', 'live', [line('s7', 'a')]);
  t.same(asked, ['org_a:a'], "org_a's went to make room, and are asked again");
  t.equal(JSON.parse(parts[0]!.lines[0]!).k, 'cus_a', 'with the same answer');
  await p.split('org_a', 'live', [line('s8', 'a'), line('s9', 'b')]);
  t.same(asked, ['org_a:a', 'org_a:b'], 'at most three kept: one more asked');
});

t.test("sliceOf: a customer's pools and attributes only", async (t) => {
  const c = emptyConfig();
  const now = '2026-01-01T00:00:00Z';
  for (const id of ['cus_1', 'cus_2']) {
    c.attributes[`ola_${id}`] = { id: `ola_${id}`, customerId: id, planId: 'plan_1', eventName: 'e', quantity: { kind: 'count' }, unitPrice: '1', currency: 'EUR', includedQuantity: null, creditsCurrencyId: null, creditsPerUnit: null, createdAt: now };
    c.pools[`cp_${id}`] = { id: `cp_${id}`, customerId: id, orderLineAttributeId: `ola_${id}`, creditsCurrencyId: null, granted: '1', topUps: [], createdAt: now };
  }
  const state = { consumed: { cp_cus_1: '1.5', cp_cus_2: '2', cp_gone: '9' }, usage: { ola_cus_1: '3', ola_cus_2: '4' } };
  t.same(sliceOf(state, c, 'cus_1'), { consumed: { cp_cus_1: '1.5' }, usage: { ola_cus_1: '3' } });
  t.same(sliceOf(state, c, 'cus_3'), { consumed: {}, usage: {} });
});

t.test('customerRef reads `c` from the start of a line, as JSON.parse would, whatever the strings hold', async (t) => {
  const text = fc.string({ unit: 'binary', maxLength: 12 });
  fc.assert(
    fc.property(text, text, text, fc.jsonValue(), (i, e, c, d) => {
      // The rows worker's form (workers/rows.ts): i, e, c first, then the rest.
      const line = `{"i":${JSON.stringify(i)},"e":${JSON.stringify(e)},"c":${JSON.stringify(c)},"u":null,"t":1,"d":${JSON.stringify(d)}}`;
      return customerRef(line) === c;
    }),
    { numRuns: 500 },
  );
  t.equal(customerRef('{"c":"other-order","i":"x","e":"y"}'), 'other-order', 'another form: parsed whole');
  t.equal(customerRef('{"i":"a\\"b","e":"q\\\\","c":"x\\"y","d":{}}'), 'x"y', 'escaped quotes and backslashes');
});
