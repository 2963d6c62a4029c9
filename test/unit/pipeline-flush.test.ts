/**
 * The pipeline's flushes while it is behind (src/pipeline/consumer.ts): a flush may wait for
 * PIPELINE_FLUSH_ROWS_BEHIND rows, but never indefinitely. Found by a review: a batch buffered
 * while behind, then a second batch whose processing failed after the idle flush had given up
 * (a batch in flight), left the first one buffered forever (the flush timer kept waiting for a
 * flush's worth that no delivery would bring: another process had taken the rest). The real Pipeline runs here with a fake consumer, worker pool,
 * claim log, store and billable publisher, so the moment of each insert and ack is observed.
 */
import t from 'tap';
import { BEHIND_FLUSH_WAITS, Pipeline } from '../../src/pipeline/consumer.js';
import { packed } from '../../workers/rows.js';
import * as batch from '../../src/bus/batch.js';

const FLUSH_MS = 50;
const cfg = { publishTimeoutMs: 1000, pipeline: { workers: 1, maxAckPending: 256, ackWaitMs: 30_000, flushRows: 10, flushRowsBehind: 1000, flushMs: FLUSH_MS, flushIdleMs: 10 } };

function harness() {
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
    data: Buffer.from(`{"signals":[{"eventName":"e","customerId":"c","idempotencyKey":"k${seq}"}]}`),
    // accepted 5 s ago: the pipeline is behind (BEHIND_LAG_MS)
    headers: { get: (k: string) => ({ [batch.H_ORG]: 'org_A', [batch.H_MODE]: 'live', [batch.H_RECEIVED_AT]: String(Date.now() - 5_000), [batch.H_BATCH]: `bat_${seq}` })[k] },
    info: { pending, deliveryCount: 1 },
    redelivered: false,
    ack: () => note(`ack ${seq}`),
    nak: () => note(`nak ${seq}`),
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
  const store = { insertSignals: async (b: Buffer) => note(`insert ${b.toString().split('\n').length - 1}`), existingSignalIds: async () => new Set() };
  const billable = { prepare: async (meta: unknown) => ({ meta }), publishPrepared: async () => undefined };
  const pipeline = new Pipeline(cfg as never, nats as never, store as never, claims as never, pool as never, billable as never, null);
  return { pipeline, push, msg, failing, events };
}

const until = async (f: () => boolean, ms: number): Promise<boolean> => {
  const end = performance.now() + ms;
  while (!f() && performance.now() < end) await new Promise((r) => setTimeout(r, 5));
  return f();
};

t.test('behind, a batch buffered and the next one failing: the first is still stored, within the longest wait', async (t) => {
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
  // The longest wait is BEHIND_FLUSH_WAITS (5) flush intervals: 250 ms here. (Without that bound,
  // only the consumer's pending count going stale, after 1 s, would end the wait.)
  t.equal(BEHIND_FLUSH_WAITS, 5);
  t.ok(acked <= 600, `within five flush intervals and a little (${Math.round(acked)} ms)`);
  t.ok(h.events.some((e) => e.what === 'nak 2'), 'the failed batch was given back');
});

t.test('behind with batches coming: one insert of a flush\'s worth, not one per flush interval', async (t) => {
  const h = harness();
  await h.pipeline.start();
  t.teardown(() => h.pipeline.stop());
  // 30 one-signal batches accepted 5 s ago: below the 1,000 rows of a flush while behind,
  // so they go together when the longest wait ends (or on the idle flush once they stop coming).
  for (let seq = 1; seq <= 30; seq++) {
    h.push(h.msg(seq, 100));
    await new Promise((r) => setTimeout(r, 5));
  }
  t.ok(await until(() => h.events.filter((e) => e.what.startsWith('ack')).length === 30, 3_000), 'all stored');
  const inserts = h.events.filter((e) => e.what.startsWith('insert'));
  t.ok(inserts.length <= 2, `${inserts.length} inserts (${inserts.map((e) => e.what).join(', ')}); flushes of 10 rows would be 3 or more`);
});
