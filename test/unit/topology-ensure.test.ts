/**
 * Streams made at start-up by several processes at once (src/bus/topology.ts ensure): every
 * process that finds the stream made by another one a moment before goes on with it (nats-server
 * 2.9 answers such a late create with "subjects overlap with an existing stream"); a stream that
 * cannot be made because another stream owns its subjects is still a clear startup error.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { ensure } from '../../src/bus/topology.js';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const prefix = `TUNIT${randomBytes(4).toString('hex')}`;
const nc = await connect({ servers: NATS_URL, noAsyncTraces: true } as Parameters<typeof connect>[0]);
const jsm = await jetstreamManager(nc);
const admin = { js: jetstream(nc), jsm, replicas: 1 };
t.teardown(async () => {
  for (const name of [`${prefix}_RACE`, `${prefix}_OWNER`]) await jsm.streams.delete(name).catch(() => undefined);
  await nc.close();
});

t.test('eight processes ensuring one new stream at once: all go on, one stream', async (t) => {
  // Two roles ask for it with settings of their own (as the pipeline and the dispatcher do the
  // events stream): the server refuses the later create of a different configuration.
  const stream = (i: number) => ({ name: `${prefix}_RACE`, subjects: [`${prefix}.race.>`], max_msgs: i % 2 === 0 ? 1_000 : 2_000 });
  const results = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => ensure(admin, { stream: stream(i), existing: i % 4 < 2 ? 'update' : 'keep' })));
  t.same(results.map((r) => r.status), Array(8).fill('fulfilled'), JSON.stringify(results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason))));
  const names: string[] = [];
  for await (const s of jsm.streams.list()) if (s.config.name.startsWith(prefix)) names.push(s.config.name);
  t.same(names, [`${prefix}_RACE`]);
});

t.test('a stream whose subjects another stream owns: a startup error that says so', async (t) => {
  await jsm.streams.add({ name: `${prefix}_OWNER`, subjects: [`${prefix}.owned.>`] });
  await t.rejects(ensure(admin, { stream: { name: `${prefix}_OTHER`, subjects: [`${prefix}.owned.x`] }, existing: 'update' }), /cannot create JetStream stream .*_OTHER/);
});
