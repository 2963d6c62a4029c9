/**
 * A billing partition's fetch loop (src/billing/evaluator/pull.ts) against a real JetStream
 * consumer: when a fetch's end status is never sent (nats-server before 2.9.16 drops a request
 * expiring as a message becomes ready without it: the client then learns of the end only from
 * missed heartbeats, seconds later),
 * the loop pulls again shortly after the fetch's expiry instead of leaving the partition
 * without a pull request; the fetch it stopped waiting for still hands over what reaches it;
 * nothing is received twice; and the loop returns only once such fetches have ended.
 *
 * The lost status is made by wrapping the real fetch: its messages pass through, and once the
 * real fetch has ended the wrapper withholds that end until the test lets it go, then fails
 * as nats.js fails such a fetch ("heartbeats missed"). The test's streams are
 * `TUNIT<random>_pull…`, deleted at the end.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager, type JsMsg } from '@nats-io/jetstream';
import { NATS_URL, sleep } from '../helpers/service.js';
import { pullLoop, settlesWithin, type PullLoop } from '../../src/billing/evaluator/pull.js';

const nc = await connect({ servers: NATS_URL });
const js = jetstream(nc);
const jsm = await jetstreamManager(nc);
const made: string[] = [];
t.teardown(async () => {
  for (const s of made) await jsm.streams.delete(s).catch(() => undefined);
  await nc.close();
});

/** A scratch stream with one pull consumer; `publish` stores a message on it. */
async function scratchConsumer(label: string): Promise<{ consumer: Awaited<ReturnType<typeof js.consumers.get>>; publish: (text: string) => Promise<void> }> {
  const stream = `TUNIT${randomBytes(4).toString('hex')}_${label}`;
  made.push(stream);
  await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
  await jsm.consumers.add(stream, { durable_name: 'c', ack_policy: AckPolicy.Explicit, max_ack_pending: 128 });
  return { consumer: await js.consumers.get(stream, 'c'), publish: async (text) => void (await js.publish(`${stream}.m`, text)) };
}

/**
 * The fetch of `consumer`, each call's end withheld until `release()` and then reported as the
 * client reports a lost end, "heartbeats missed" (`serverExpires`: the request the server
 * holds, when it differs from what the loop asked).
 */
function endWithheld(consumer: { fetch(o: { max_messages: number; expires: number }): Promise<AsyncIterable<JsMsg>> }, serverExpires?: number): { fetch: PullLoop['fetch']; calls: () => number; release: () => void; by: Map<string, number> } {
  let calls = 0;
  /** Which call (1, 2, …) handed over each message, by its text. */
  const by = new Map<string, number>();
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  return {
    calls: () => calls,
    release,
    by,
    fetch: async (opts) => {
      const call = ++calls;
      const real = await consumer.fetch({ ...opts, expires: serverExpires ?? opts.expires });
      return (async function* () {
        for await (const m of real) {
          by.set(m.string(), call);
          yield m;
        }
        await released;
        // As nats.js ends a fetch whose end status never came: its heartbeats missed.
        throw new Error('heartbeats missed');
      })();
    },
  };
}

function loopOf(fetch: PullLoop['fetch'], got: { text: string; at: number }[], overdue: { n: number }): { stop: () => void; done: Promise<void> } {
  let running = true;
  const done = pullLoop({
    fetch,
    receive: (m) => {
      got.push({ text: m.string(), at: performance.now() });
      m.ack();
    },
    room: () => 64,
    roomMade: (ms) => sleep(ms),
    running: () => running,
    overdue: () => overdue.n++,
    expiresMs: 1_000,
    graceMs: 250,
    waitMs: 25,
    partition: 0,
  });
  return { stop: () => (running = false), done };
}

t.test('a fetch whose end is never seen: the loop pulls again after its expiry and grace, and new messages arrive', async (t) => {
  const { consumer, publish } = await scratchConsumer('pull');
  const w = endWithheld(consumer);
  const got: { text: string; at: number }[] = [];
  const overdue = { n: 0 };
  const loop = loopOf(w.fetch, got, overdue);
  await publish('a');
  for (let i = 0; i < 40 && got.length < 1; i++) await sleep(25);
  t.same(got.map((g) => g.text), ['a'], 'the first fetch hands over its message');
  // Past the first fetch's expiry on the server (1 s), before the loop's grace ends: no
  // request of this loop is held by the server now; b waits for the next one.
  await sleep(1_100);
  const sentB = performance.now();
  await publish('b');
  for (let i = 0; i < 120 && got.length < 2; i++) await sleep(25);
  t.same(got.map((g) => g.text), ['a', 'b'], 'b arrives, through the next fetch');
  const waited = got.length >= 2 ? Math.round(got[1]!.at - sentB) : Infinity;
  t.ok(waited < 1_000, `b arrived ${waited} ms after it was stored (the loop's next fetch came at the first's expiry plus grace; waiting for the first's end it would never have come)`);
  t.ok(w.calls() >= 2 && overdue.n >= 1, `fetches: ${w.calls()}, taken as over after their expiry: ${overdue.n}`);

  loop.stop();
  t.equal(await settlesWithin(loop.done, 1_500), false, 'stopped, the loop waits for the fetches it stopped waiting for');
  w.release();
  await loop.done;
  t.same(got.map((g) => g.text), ['a', 'b'], 'nothing received twice');
});

t.test('a fetch still held by the server past the loop\'s expiry keeps handing over what reaches it', async (t) => {
  const { consumer, publish } = await scratchConsumer('pulllong');
  // The server holds each request 4 s while the loop takes them as over after 1.25 s: the
  // oldest request, the first, is still the server's when c is stored, so c goes to it.
  const w = endWithheld(consumer, 4_000);
  const got: { text: string; at: number }[] = [];
  const overdue = { n: 0 };
  const loop = loopOf(w.fetch, got, overdue);
  await sleep(1_500);
  t.ok(w.calls() >= 2 && overdue.n >= 1, 'the loop has pulled again');
  await publish('c');
  for (let i = 0; i < 80 && got.length < 1; i++) await sleep(25);
  t.same(got.map((g) => g.text), ['c'], 'c reaches the lane');
  t.equal(w.by.get('c'), 1, 'through the first fetch, the one the loop no longer waited for');
  loop.stop();
  w.release();
  await loop.done;
  t.same(got.map((g) => g.text), ['c'], 'once');
  const info = await jsm.consumers.info(made.at(-1)!, 'c');
  t.equal(info.num_ack_pending + info.num_pending, 0, 'nothing left pending on the consumer');
});

t.test('settlesWithin: true when fulfilled in time, false when not settled, the rejection thrown', async (t) => {
  t.equal(await settlesWithin(sleep(10), 1_000), true);
  t.equal(await settlesWithin(new Promise(() => undefined), 30), false);
  await t.rejects(settlesWithin(Promise.reject(new Error('boom')), 1_000), /boom/);
});
