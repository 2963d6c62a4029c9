/**
 * An insert whose answer is lost while the engine host goes on running it (a reset socket,
 * a client timeout) must not make the batch's rows stored twice.
 *
 * ENGINE_HOST_FAULT=lose-insert: the host drops the connection of the first signals insert
 * and runs that insert LOSE_INSERT_DELAY_MS (6 s) later. The pipeline naks the batch and it
 * comes back 2 s later; had its existing-row check run while the host still held the lost
 * insert, it would have found nothing, inserted the rows again, and then the lost insert
 * would have landed too. The hosted store ends the host generation of a lost insert before
 * the error goes back (src/store/hosted/index.ts), so the lost insert either landed before
 * the check or never does.
 */
import t from 'tap';
import { counts, createOrg, drained, logLines, sendBatch, useService, waitFor } from '../helpers/service.js';

const { iso, svc } = useService(t, 'lostins', { ENGINE_HOST_FAULT: 'lose-insert' });

t.test('a lost insert the host would still run: each row once', async (t) => {
  const org = await createOrg(svc.url);
  const body = {
    signals: [
      ...Array.from({ length: 30 }, (_, i) => ({ eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: `li-${i}` })),
      ...Array.from({ length: 20 }, () => ({ eventName: 'e', customer: { externalCustomerId: 'c' } })),
    ],
  };
  t.equal((await sendBatch(svc.url, org.live, body)).status, 202);
  const lost = await waitFor(async () => logLines(svc, 'engine host fault: insert answer lost').length, (n) => n > 0, 30_000);
  t.equal(lost, 1, 'the host dropped the answer of the first insert');
  await drained(iso, 60_000);
  // The lost insert would land LOSE_INSERT_DELAY_MS after it was dropped, unless its host was ended.
  const settled = await waitFor(
    async () => ({
      ran: logLines(svc, 'engine host fault: lost insert ran').length,
      killed: logLines(svc, 'killing the engine host').length,
    }),
    (s) => s.ran > 0 || s.killed > 0,
    30_000,
  );
  t.equal(settled.ran, 0, 'the lost insert never ran');
  t.equal(settled.killed, 1, 'its host generation was ended before the batch was retried');
  t.same(await counts(svc.url, org.id), { live: 50, test: 0 }, 'every row once');
});
