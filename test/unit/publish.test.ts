/**
 * Durable publish (src/bus/publish.ts) against the real JetStream, now through the connection's
 * one reply subscription (src/bus/replies.ts) instead of nc.request: the outcomes callers tell
 * apart must stay what they were — an ack (stored, a repeat of the message id is a duplicate),
 * a refusal by the stream (PublishError: nothing stored), and no stream at all or no answer in
 * time (a plain Error: the ingress answers "may or may not be stored").
 * The test makes its own stream `TUNIT<random>_publish` and deletes it at the end.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { connect, headers } from '@nats-io/transport-node';
import { jetstreamManager, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { PublishError, publishDurable } from '../../src/bus/publish.js';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const name = `TUNIT${randomBytes(4).toString('hex')}_publish`;
const nc = await connect({ servers: NATS_URL, noAsyncTraces: true } as Parameters<typeof connect>[0]);
const jsm = await jetstreamManager(nc);
await jsm.streams.add({ name, subjects: [`${name}.>`], retention: RetentionPolicy.Limits, storage: StorageType.Memory, max_msg_size: 1024, duplicate_window: 60_000_000_000 });
t.teardown(async () => {
  await jsm.streams.delete(name).catch(() => undefined);
  await nc.close();
});

t.test('stored: the ack names the stream and sequence; the same message id again is a duplicate', async (t) => {
  const a = await publishDurable(nc, `${name}.a`, Buffer.from('one'), headers(), 'm-1', 2_000);
  t.equal(a.stream, name);
  t.ok(a.seq >= 1, 'a sequence');
  t.notOk(a.duplicate, 'first time: not a duplicate');
  const again = await publishDurable(nc, `${name}.a`, Buffer.from('one'), headers(), 'm-1', 2_000);
  t.equal(again.duplicate, true, 'the same Nats-Msg-Id within the window: stored once');
  t.equal(again.seq, a.seq, 'the first copy\'s sequence');
  const b = await publishDurable(nc, `${name}.b`, Buffer.from('two'), headers(), 'm-2', 2_000);
  t.equal(b.seq, a.seq + 1, 'another message: the next sequence');
  const info = await jsm.streams.info(name);
  t.equal(info.state.messages, 2, 'two messages stored');
  // many at once, as the ingress does under load: every one acked with its own sequence
  const many = await Promise.all(Array.from({ length: 50 }, (_, i) => publishDurable(nc, `${name}.m`, Buffer.from(`n${i}`), headers(), `many-${i}`, 2_000)));
  t.equal(new Set(many.map((x) => x.seq)).size, 50, '50 publishes at once: 50 distinct sequences');
});

t.test('refused by the stream: PublishError, nothing stored, not retried', async (t) => {
  const before = (await jsm.streams.info(name)).state.messages;
  const err = await publishDurable(nc, `${name}.big`, Buffer.alloc(4096, 120), headers(), 'big-1', 2_000).then(
    () => null,
    (e: unknown) => e,
  );
  t.ok(err instanceof PublishError, `a message over max_msg_size: PublishError (${String(err)})`);
  t.equal((await jsm.streams.info(name)).state.messages, before, 'nothing stored');
});

t.test('no stream on the subject: a plain Error (not PublishError), as nc.request\'s "no responders" was', async (t) => {
  const started = Date.now();
  const err = await publishDurable(nc, `${name}_nostream.x`, Buffer.from('x'), headers(), 'none-1', 2_000, 1).then(
    () => null,
    (e: unknown) => e,
  );
  t.ok(err instanceof Error && !(err instanceof PublishError), `not a PublishError (${String(err)})`);
  t.match(String(err), /no responders/, 'says why');
  t.ok(Date.now() - started < 1_500, 'answered by the server at once, not by the timeout');
});

t.test('no answer in time: a plain Error after the timeout', async (t) => {
  // A plain subscriber that never answers stands in for a stream that does not reply.
  const silent = `${name}_silent.x`;
  const sub = nc.subscribe(silent, { callback: () => undefined });
  t.teardown(() => sub.unsubscribe());
  await nc.flush();
  const started = Date.now();
  const err = await publishDurable(nc, silent, Buffer.from('x'), headers(), 'silent-1', 150, 1).then(
    () => null,
    (e: unknown) => e,
  );
  t.ok(err instanceof Error && !(err instanceof PublishError), `not a PublishError (${String(err)})`);
  t.ok(Date.now() - started >= 140, 'after the timeout');
});
