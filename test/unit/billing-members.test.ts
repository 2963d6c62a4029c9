/**
 * The share-out of billing partitions between pipeline processes (src/billing/evaluator/
 * members.ts), against real NATS: members see each other through the members bucket and take
 * disjoint partitions that cover them all; a member that leaves hands its partitions over at
 * the others' next look; one that dies (stops beating without leaving) drops out once its key
 * outlives the bucket's TTL.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import { HEARTBEAT_MS, MEMBER_TTL_MS, Members, assigned } from '../../src/billing/evaluator/members.js';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const name = `TUNIT${randomBytes(4).toString('hex')}_members`;
const nc = await connect({ servers: NATS_URL, noAsyncTraces: true } as Parameters<typeof connect>[0]);
const jsm = await jetstreamManager(nc);
const kv: KV = await new Kvm(jetstream(nc)).create(name, { history: 1, ttl: MEMBER_TTL_MS });
t.teardown(async () => {
  await jsm.streams.delete(`KV_${name}`).catch(() => undefined);
  await nc.close();
});

const P = 16;

t.test('assigned: member i of n takes the partitions k with k mod n = i', async (t) => {
  t.same(assigned(0, 1, 4), [0, 1, 2, 3]);
  t.same(assigned(1, 3, 8), [1, 4, 7]);
  t.same(assigned(-1, 2, 4), [], 'not a member: none');
  for (const n of [1, 2, 3, 5, 16, 17]) {
    const all = Array.from({ length: n }, (_, i) => assigned(i, n, P)).flat().sort((a, b) => a - b);
    t.same(all, Array.from({ length: P }, (_, k) => k), `${n} members: every partition exactly once`);
  }
});

/** A member recording what it was given. */
function member(id: string): { m: Members; got: () => number[] } {
  let last: number[] = [];
  const m = new Members(kv, id, P, async (p) => {
    last = p;
  });
  return { m, got: () => last };
}

async function until(cond: () => boolean, ms = 10 * HEARTBEAT_MS): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (cond()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return cond();
}

t.test('members share the partitions out, and take them back when one leaves or dies', async (t) => {
  const a = member('a');
  const b = member('b');
  await a.m.start();
  t.same(a.got(), Array.from({ length: P }, (_, k) => k), 'alone: every partition');
  await b.m.start();
  t.ok(await until(() => a.got().length === P / 2 && b.got().length === P / 2), 'two members: half each, at the next look');
  t.same([...a.got(), ...b.got()].sort((x, y) => x - y), Array.from({ length: P }, (_, k) => k), 'disjoint, covering all');
  t.same(await a.m.members(), ['a', 'b']);

  await b.m.stop();
  t.ok(await until(() => a.got().length === P), 'b left: a takes everything back');

  // c dies: its heartbeat stops, its key is not removed.
  const c = member('c');
  await c.m.start();
  t.ok(await until(() => a.got().length === P / 2), 'c joined');
  (c.m as unknown as { timer: NodeJS.Timeout }).timer && clearInterval((c.m as unknown as { timer: NodeJS.Timeout }).timer);
  const died = Date.now();
  t.ok(await until(() => a.got().length === P, MEMBER_TTL_MS + 5 * HEARTBEAT_MS), 'c died: a takes everything back');
  t.ok(Date.now() - died >= MEMBER_TTL_MS - 2 * HEARTBEAT_MS, 'once its key outlived the TTL, not before');
  await a.m.stop();
});
