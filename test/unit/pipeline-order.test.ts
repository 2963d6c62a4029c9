/**
 * The pipeline hands batches to billing in the order they came (src/pipeline/in-order.ts,
 * BillablePartitioner.prepare/publishPrepared): batches processed concurrently are buffered in
 * arrival order whatever order they finish in, and a flush's batches enter each partition in
 * that order even when resolving one batch's customers takes longer than the next's.
 */
import t from 'tap';
import fc from 'fast-check';
import { randomBytes } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { InOrder } from '../../src/pipeline/in-order.js';
import { BillablePartitioner, partitionOf, type CustomerResolver } from '../../src/billing/evaluator/partition.js';
import { topology } from '../../src/bus/topology.js';
import type { Nats } from '../../src/bus/connection.js';
import { NATS_URL } from '../helpers/service.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

t.test('InOrder: results applied in the order taken, whatever order the tasks end in; a failed or empty one is skipped', async (t) => {
  await fc.assert(
    fc.asyncProperty(fc.array(fc.record({ delay: fc.nat(6), outcome: fc.constantFrom('value', 'null', 'throw') }), { maxLength: 12 }), async (tasks) => {
      const order = new InOrder();
      const applied: number[] = [];
      const settled = tasks.map(({ delay, outcome }, i) =>
        order.take(async () => {
          await sleep(delay);
          if (outcome === 'throw') throw new Error(`task ${i}`);
          return outcome === 'null' ? null : () => applied.push(i);
        }),
      );
      const results = await Promise.allSettled(settled);
      const expected = tasks.flatMap((x, i) => (x.outcome === 'value' ? [i] : []));
      if (JSON.stringify(applied) !== JSON.stringify(expected)) throw new Error(`applied ${applied} expected ${expected}`);
      results.forEach((r, i) => {
        if ((r.status === 'rejected') !== (tasks[i]!.outcome === 'throw')) throw new Error(`task ${i} settled ${r.status}`);
      });
    }),
    { numRuns: 60 },
  );
});

t.test('InOrder: a task that ended is applied only after the slower one taken before it', async (t) => {
  const order = new InOrder();
  const applied: string[] = [];
  let release!: () => void;
  const slow = order.take(async () => {
    await new Promise<void>((r) => (release = r));
    return () => applied.push('first');
  });
  let secondSettled = false;
  const fast = order.take(async () => () => applied.push('second')).then(() => (secondSettled = true));
  await sleep(20);
  t.same(applied, [], 'the second waits for the first');
  t.equal(secondSettled, false, "and its promise has not settled (the caller's bound on work in flight holds it)");
  release();
  await Promise.all([slow, fast]);
  t.same(applied, ['first', 'second']);
});

t.test('prepare, then publishPrepared: batches enter a partition in the order given, even when an earlier one resolves its customers last', async (t) => {
  const prefix = `TORD${randomBytes(4).toString('hex')}`;
  const topo = topology(prefix);
  const nc = await connect({ servers: NATS_URL });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: topo.billableParts.stream, subjects: [`${prefix}.billable-p.>`] });
  t.teardown(async () => {
    await jsm.streams.delete(topo.billableParts.stream).catch(() => undefined);
    await nc.close();
  });
  // Batch i names customer `slow-<i>` (unknown to the cache) and `cus_1`: resolving batch 0's
  // takes longest, so without ordering the later batches would be published first.
  const resolver: CustomerResolver = async (_org, _mode, refs) => {
    const slow = refs.find((r) => r.startsWith('slow-'));
    await sleep(slow ? 40 - 10 * Number(slow.slice(5)) : 0);
    return new Map(refs.map((r) => [r, r.startsWith('slow-') ? null : r]));
  };
  const nats = { nc, topology: topo } as unknown as Nats;
  const p = new BillablePartitioner(nats, resolver, 4);
  const line = (i: string, c: string) => `${JSON.stringify({ i, e: 'e', c, u: null, t: 0, d: { q: 1 } })}\n`;
  const batches = [0, 1, 2, 3].map((i) => ({
    meta: { orgId: 'org_o', mode: 'live' as const, batchId: `b${i}`, receivedAtMs: 0 },
    lines: Buffer.from(line(`s${i}a`, `slow-${i}`) + line(`s${i}b`, 'cus_1')),
  }));
  // As the pipeline does: each batch prepared as it is processed (concurrently, finishing in any order), then published in buffer order.
  await p.publishPrepared(await Promise.all(batches.map((b) => p.prepare(b.meta, b.lines))), 5_000);
  const k = partitionOf('org_o', 'live', 'cus_1', 4);
  const js = jetstream(nc);
  const c = await jsm.consumers.add(topo.billableParts.stream, { filter_subject: topo.billableParts.filter(k), ack_policy: 'none' as never });
  const got: string[] = [];
  for await (const m of await js.consumers.get(topo.billableParts.stream, c.name).then((x) => x.fetch({ max_messages: 4, expires: 2_000 }))) {
    got.push(m.headers!.get('Billing-Batch'));
    if (got.length === 4) break;
  }
  t.same(got.map((g) => g.replace(/\.p\d+$/, '')), ['b0', 'b1', 'b2', 'b3'], "cus_1's partition holds the batches in the order given");
  const stored = (await jsm.streams.info(topo.billableParts.stream)).state.messages;
  await p.publishPrepared([await p.prepare({ ...batches[0]!.meta, batchId: 'empty' }, new Uint8Array(0))], 5_000);
  t.equal((await jsm.streams.info(topo.billableParts.stream)).state.messages, stored, 'a batch without billable lines publishes nothing');
});
