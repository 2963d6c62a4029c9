/**
 * The pipeline's flushes while it is behind (src/pipeline/consumer.ts): a flush may wait for
 * PIPELINE_FLUSH_ROWS_BEHIND rows, but never indefinitely. Found by a review: a batch buffered
 * while behind, then a second batch whose processing failed after the idle flush had given up
 * (a batch in flight), left the first one buffered forever (the flush timer kept waiting for a
 * flush's worth that no delivery would bring: another process had taken the rest). The real Pipeline runs here with a fake consumer, worker pool,
 * claim log, store and billable publisher, so the moment of each insert and ack is observed.
 */
import t from 'tap';
import { Pipeline } from '../../src/pipeline/consumer.js';
import { packed } from '../../workers/rows.js';
import * as batch from '../../src/bus/batch.js';

const FLUSH_MS = 50;
const cfg = { publishTimeoutMs: 1000, pipeline: { workers: 1, maxAckPending: 256, ackWaitMs: 30_000, flushRows: 10, flushMs: FLUSH_MS, flushIdleMs: 10 } };

function harness(opts: { holdInserts?: boolean; failInserts?: boolean; nakThrows?: boolean } = {}) {
  const queue: unknown[] = [];
  let wake: (() => void) | null = null;
  const push = (m: unknown): void => {
    queue.push(m);
    wake?.();
  };
  let closed = false;
  const messages = {
    async *[Symbol.asyncIterator]() {
      while (!closed) {
        while (queue.length > 0) yield queue.shift();
        if (closed) break;
        await new Promise<void>((r) => (wake = r));
        wake = null;
      }
    },
    close: async () => {
      closed = true;
      wake?.();
    },
  };
  const events: { at: number; what: string }[] = [];
  const note = (what: string): void => void events.push({ at: performance.now(), what });
  const msg = (seq: number, pending: number) => ({
    seq,
    data: Buffer.from(`{"signals":[{"eventName":"e","customer":{"externalCustomerId":"c"},"idempotencyKey":"k${seq}"}]}`),
    // accepted 5 s ago: the pipeline is behind
    headers: { get: (k: string) => ({ [batch.H_ORG]: 'org_A', [batch.H_MODE]: 'live', [batch.H_RECEIVED_AT]: String(Date.now() - 5_000), [batch.H_BATCH]: `bat_${seq}` })[k] },
    info: { pending, deliveryCount: 1 },
    redelivered: false,
    ack: () => note(`ack ${seq}`),
    nak: () => {
      note(`nak ${seq}`);
      if (opts.nakThrows) throw new Error('CONNECTION_CLOSED');
    },
    working: () => undefined,
  });
  const failing = new Set<number>();
  const nats = { js: { consumers: { get: async () => ({ consume: async () => messages }) } }, topology: { signals: { stream: 's', consumer: 'c' } } };
  const pool = { maxThreads: 1, capacity: 2, run: async (task: Parameters<typeof packed>[0]) => packed(task) };
  const claims = {
    claimBatch: async (keys: unknown[], _ids: unknown, meta: { batchId: string }) => {
      if (failing.has(Number(meta.batchId.slice(4)))) {
        await new Promise((r) => setTimeout(r, 40)); // longer than the idle flush waits
        throw new Error('claim log request timed out');
      }
      return { claims: { keep: keys.map(() => true), reclaimed: false }, first: true };
    },
  };
  /** Inserts held until the test releases them (holdInserts). */
  const held: (() => void)[] = [];
  const store = {
    insertSignals: async (b: Buffer) => {
      note(`insert ${b.toString().split('\n').length - 1}`);
      if (opts.holdInserts) await new Promise<void>((r) => held.push(r));
      if (opts.failInserts) throw new Error('engine host gone');
    },
    existingSignalIds: async () => new Set(),
  };
  const billable = {
    prepare: async (meta: unknown) => ({ meta }),
    publishPrepared: async (prepared: { meta: { batchId: string } }[]) => note(`publish ${prepared.map((p) => p.meta.batchId.slice(4)).join(',')}`),
  };
  const pipeline = new Pipeline(cfg as never, nats as never, store as never, claims as never, pool as never, billable as never, null);
  return { pipeline, push, msg, failing, events, held };
}

const until = async (f: () => boolean, ms: number): Promise<boolean> => {
  const end = performance.now() + ms;
  while (!f() && performance.now() < end) await new Promise((r) => setTimeout(r, 5));
  return f();
};

t.test('behind, a batch buffered and the next one failing: the first is still stored, at the flush timer', async (t) => {
  const h = harness();
  await h.pipeline.start();
  t.teardown(() => h.pipeline.stop());
  h.failing.add(2);
  const start = performance.now();
  h.push(h.msg(1, 5)); // accepted 5 s ago: behind
  await new Promise((r) => setTimeout(r, 2));
  h.push(h.msg(2, 5));
  t.ok(await until(() => h.events.some((e) => e.what === 'ack 1'), 3_000), `batch 1 stored and acked: ${JSON.stringify(h.events.map((e) => e.what))}`);
  const acked = h.events.find((e) => e.what === 'ack 1')!.at - start;
  t.ok(acked <= 4 * FLUSH_MS, `within a flush interval and a little (${Math.round(acked)} ms)`);
  // Its claim fails 40 ms after it was asked: on a loaded machine that can come after batch 1's flush.
  t.ok(await until(() => h.events.some((e) => e.what === 'nak 2'), 3_000), 'the failed batch was given back');
});

t.test('behind: a second flush inserts while the first one\'s insert runs, and publishes after it', async (t) => {
  const h = harness({ holdInserts: true });
  await h.pipeline.start();
  t.teardown(async () => {
    for (const r of h.held) r();
    await h.pipeline.stop();
  });
  const what = (): string[] => h.events.map((e) => e.what);
  const inserts = (): string[] => what().filter((w) => w.startsWith('insert'));
  for (let i = 1; i <= 10; i++) h.push(h.msg(i, 0));
  t.ok(await until(() => inserts().length === 1, 3_000), 'a flush of 10 rows (PIPELINE_FLUSH_ROWS) started; its insert is held');
  // Fewer than two flushes' worth waiting: no second flush, not even at the flush timer.
  for (let i = 11; i <= 15; i++) h.push(h.msg(i, 0));
  await new Promise((r) => setTimeout(r, 3 * FLUSH_MS));
  t.same(inserts(), ['insert 10'], `5 rows waiting: they wait for the running flush (${JSON.stringify(what())})`);
  // Two flushes' worth waiting (the pipeline is behind): a second flush inserts now.
  for (let i = 16; i <= 40; i++) h.push(h.msg(i, 0));
  t.ok(await until(() => inserts().length === 2, 3_000), `a second insert runs beside the first: ${JSON.stringify(inserts())}`);
  t.equal(h.held.length, 2, 'both inserts in flight');
  t.notOk(what().some((w) => w.startsWith('publish') || w.startsWith('ack')), 'nothing published or acked yet');
  // The second insert ends first: it publishes only after the first flush has.
  h.held[1]!();
  await new Promise((r) => setTimeout(r, 30));
  t.notOk(what().some((w) => w.startsWith('publish') || w.startsWith('ack')), 'the second flush waits for the first to publish');
  h.held[0]!();
  t.ok(await until(() => what().filter((w) => w.startsWith('ack')).length >= 20, 3_000), 'both flushes acked');
  const publishes = what().filter((w) => w.startsWith('publish'));
  t.match(publishes[0], /^publish 1,2,3,4,5,6,7,8,9,10$/, 'the first flush published first');
  t.match(publishes[1], /^publish 11,/, 'then the second');
  t.ok(what().indexOf(publishes[0]!) < what().indexOf('ack 11'), "the second flush's messages acked after the first flush published");
});

t.test('a failed insert whose nak cannot be sent (the connection closing) settles its flush without a rejection', async (t) => {
  const h = harness({ failInserts: true, nakThrows: true });
  const rejections: unknown[] = [];
  const onRejection = (err: unknown): void => void rejections.push(err);
  process.on('unhandledRejection', onRejection);
  t.teardown(() => void process.off('unhandledRejection', onRejection));
  await h.pipeline.start();
  t.teardown(() => h.pipeline.stop());
  for (let i = 1; i <= 10; i++) h.push(h.msg(i, 0));
  const what = (): string[] => h.events.map((e) => e.what);
  t.ok(await until(() => what().filter((w) => w.startsWith('nak')).length === 10, 3_000), `every message of the failed flush was naked (and each nak threw): ${JSON.stringify(what())}`);
  await new Promise((r) => setTimeout(r, 20));
  t.same(rejections, [], 'no unhandled rejection');
  t.notOk(what().some((w) => w.startsWith('ack')), 'nothing acked');
});
