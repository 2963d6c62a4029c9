/**
 * An insert slower than the pipeline's ack wait must not let JetStream hand its batches out
 * again: another pipeline process would take them while this one is still storing them, find
 * none of their rows stored, and store them a second time. And batches that arrive meanwhile
 * (waiting behind the full buffer, not yet processed) must not be handed out again either.
 *
 * ENGINE_HOST_FAULT=slow-insert: the first signals insert waits SLOW_INSERT_MS (8 s) in the
 * engine host before it runs and answers. PIPELINE_ACK_WAIT_MS is 2 s, so without the pipeline
 * marking what it holds as in progress, every batch it holds is redelivered several times over
 * during the wait. JetStream counts deliveries on the consumer (delivered.consumer_seq, and
 * num_redelivered for what is pending); one process ignores copies of what it holds, so those
 * counts are where a second process would have been handed a batch.
 */
import t from 'tap';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { NATS_URL, counts, createOrg, drained, logLines, sendBatch, useService, waitFor } from '../helpers/service.js';
import { SLOW_INSERT_MS } from '../../src/store/engine-host/host.js';

const ACK_WAIT_MS = 2_000;
const { iso, svc } = useService(t, 'slowins', {
  ENGINE_HOST_FAULT: 'slow-insert',
  PIPELINE_ACK_WAIT_MS: String(ACK_WAIT_MS),
  // A small buffer: the batches sent during the held insert fill it and then wait their turn.
  PIPELINE_FLUSH_ROWS: '50',
});

t.test('batches held through an insert slower than the ack wait are not handed out again', async (t) => {
  const org = await createOrg(svc.url);
  const keyed = (b: number) => ({
    signals: Array.from({ length: 50 }, (_, i) => ({ eventName: 'e', customer: { externalCustomerId: `c${i % 5}` }, idempotencyKey: `si-${b}-${i}` })),
  });
  t.equal((await sendBatch(svc.url, org.live, keyed(0))).status, 202);
  const held = await waitFor(async () => logLines(svc, 'engine host fault: insert held'), (l) => l.length > 0, 30_000);
  t.equal(held.length, 1, 'the engine host holds the first insert');
  const heldAt = Date.now();
  // More batches while the insert is held: processed and buffered (two flushes' worth), then waiting.
  for (let b = 1; b <= 12; b++) t.equal((await sendBatch(svc.url, org.live, keyed(b))).status, 202, `batch ${b} accepted`);

  const nc = await connect({ servers: NATS_URL });
  t.teardown(() => nc.close());
  const jsm = await jetstreamManager(nc);
  const info = () => jsm.consumers.info(`${iso.natsPrefix}_SIGNALS`, 'pipeline');
  // While the insert is still held (several ack waits), everything is held by the one process.
  const during = await waitFor(info, () => Date.now() - heldAt >= SLOW_INSERT_MS - 1_500, SLOW_INSERT_MS);
  t.ok(logLines(svc, 'engine host fault: held insert ran').length === 0, 'the insert was still held when the consumer was read');
  t.ok(Date.now() - heldAt >= 3 * ACK_WAIT_MS, `read ${Date.now() - heldAt} ms into the hold: past three ack waits`);
  t.equal(during.num_ack_pending, 13, 'all 13 batches are held, none handed back');
  t.equal(during.num_redelivered, 0, 'no batch was handed out again during the held insert');
  t.equal(during.delivered.consumer_seq, 13, 'each batch delivered once so far');

  const ran = await waitFor(async () => logLines(svc, 'engine host fault: held insert ran'), (l) => l.length > 0, 30_000);
  t.equal(ran.length, 1, 'the held insert ran');
  await drained(iso, 60_000);
  t.equal((await info()).delivered.consumer_seq, 13, 'each batch delivered exactly once in all');
  t.same(await counts(svc.url, org.id), { live: 650, test: 0 }, 'every row once');
});
