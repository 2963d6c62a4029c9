/**
 * A batch that comes back WITHOUT JetStream's redelivery flag (deliveryCount 1) after its
 * rows were stored is not stored again.
 *
 * Seen in test/api/crash.test.ts: a message the killed pipeline process had received came
 * back to its successor with deliveryCount 1. Had the killed process inserted it before the
 * kill (the test kills right after an insert), the successor skipped the existing-row check
 * and stored every kept row of that batch a second time (24,400 rows instead of 24,000).
 *
 * Here the repeat is made deterministically: the batch's own JetStream message (same body,
 * same headers, so the same signal ids) is published once more as a new stream message,
 * which the consumer delivers for the first time. Nothing but the pipeline's own record of
 * having taken the batch up (src/pipeline/dedupe.ts `takeBatch`) can tell it is a repeat.
 */
import t from 'tap';
import { connect, headers as natsHeaders } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { NATS_URL, counts, createOrg, drained, sendBatch, useService, waitFor } from '../helpers/service.js';
import { H_BATCH, H_MODE, H_ORG, H_RECEIVED_AT } from '../../src/bus/batch.js';

const { iso, svc } = useService(t, 'repeat');

t.test('a stored batch delivered again as a first delivery adds no rows', async (t) => {
  const org = await createOrg(svc.url);
  // 6 keyed signals (one key twice: 5 rows) and 4 keyless ones: 9 rows.
  const body = {
    signals: [
      ...Array.from({ length: 6 }, (_, i) => ({ eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: `rk-${i % 5}` })),
      ...Array.from({ length: 4 }, () => ({ eventName: 'e', customer: { externalCustomerId: 'c' } })),
    ],
  };
  const r = await sendBatch(svc.url, org.live, body);
  t.equal(r.status, 202);
  const batchId = r.body.batchId as string;
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 9, test: 0 }, 'stored once');

  const nc = await connect({ servers: NATS_URL });
  t.teardown(() => nc.close());
  const h = natsHeaders();
  h.set(H_ORG, org.id);
  h.set(H_MODE, 'live');
  h.set(H_RECEIVED_AT, String(parseInt(batchId.slice(4, 13), 36)));
  h.set(H_BATCH, batchId);
  // A different Nats-Msg-Id, so that the stream stores it as a new message: its first delivery.
  const ack = await jetstream(nc).publish(`${iso.natsPrefix}.signals.${org.id}`, JSON.stringify(body), { headers: h, msgID: `${batchId}-again` });
  t.notOk(ack.duplicate, 'the stream took the repeat as a new message');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 9, test: 0 }, 'the repeat added nothing');

  // And a new batch still goes through (the repeat was acked, not stuck).
  t.equal((await sendBatch(svc.url, org.live, { signals: [{ eventName: 'e', customer: { externalCustomerId: 'c' } }] })).status, 202);
  const after = await waitFor(() => counts(svc.url, org.id), (c) => c.live === 10);
  t.same(after, { live: 10, test: 0 });
});
