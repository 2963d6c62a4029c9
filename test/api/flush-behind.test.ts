/**
 * Larger inserts while the pipeline is behind (src/pipeline/consumer.ts `flushRows`): with
 * batches waiting in the stream that the pipeline has not taken yet, a flush waits for
 * PIPELINE_FLUSH_ROWS_BEHIND rows instead of PIPELINE_FLUSH_ROWS (an insert of 50,000 rows
 * costs the engine about a quarter less CPU per row than one of 10,000); once it has caught
 * up, flushes are small again. Every signal is stored once either way.
 *
 * The pipeline is made to fall behind for real: ENGINE_HOST_FAULT=slow-insert holds the first
 * signals insert for SLOW_INSERT_MS while batches keep coming, so they pile up in the stream.
 * Insert sizes are read from the service's own histogram (usage_pipeline_insert_rows).
 */
import t from 'tap';
import { counts, createOrg, drained, logLines, sendBatch, startService, useService, waitFor } from '../helpers/service.js';
import { sampleValue } from '../helpers/promql.js';
import { SLOW_INSERT_MS } from '../../src/store/engine-host/host.js';

const { iso, svc } = useService(t, 'flushbehind', {
  ENGINE_HOST_FAULT: 'slow-insert',
  PIPELINE_FLUSH_ROWS: '100',
  PIPELINE_FLUSH_ROWS_BEHIND: '1000',
  // the ingress must not wait for the pipeline here: the backlog is the point
  INGRESS_HOLD_BACKLOG: '0',
});

const inserts = async (): Promise<{ count: number; sum: number }> => {
  const text = await (await fetch(`${svc.url}/metrics`)).text();
  return {
    count: sampleValue(text, 'usage_pipeline_insert_rows_count', { table: 'signals' }) ?? 0,
    sum: sampleValue(text, 'usage_pipeline_insert_rows_sum', { table: 'signals' }) ?? 0,
  };
};
const batchOf = (b: number) => ({ signals: Array.from({ length: 100 }, (_, i) => ({ eventName: 'e', customerId: `c${i % 4}`, idempotencyKey: `fb-${b}-${i}` })) });

t.test('behind: flushes of PIPELINE_FLUSH_ROWS_BEHIND rows; caught up: of PIPELINE_FLUSH_ROWS', async (t) => {
  const org = await createOrg(svc.url);
  t.equal((await sendBatch(svc.url, org.live, batchOf(0))).status, 202);
  await waitFor(async () => logLines(svc, 'engine host fault: insert held'), (l) => l.length > 0, 30_000);
  const heldAt = Date.now();
  for (let b = 1; b <= 60; b++) t.equal((await sendBatch(svc.url, org.live, batchOf(b))).status, 202, `batch ${b}`);
  t.ok(Date.now() - heldAt < SLOW_INSERT_MS, 'all sent while the first insert was held');
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 6_100, test: 0 }, 'every signal stored, once');
  const behind = await inserts();
  // 6,000 rows behind the held insert: a few inserts of 1,000 to 2,000 (and the held one), where
  // flushes of PIPELINE_FLUSH_ROWS take a dozen or more.
  t.ok(behind.count <= 8, `${behind.count} inserts for ${behind.sum} rows`);

  // Caught up: a batch of 100 rows and another are each flushed at PIPELINE_FLUSH_ROWS.
  for (let b = 61; b <= 62; b++) {
    t.equal((await sendBatch(svc.url, org.live, batchOf(b))).status, 202);
    await drained(iso);
  }
  const after = await inserts();
  t.equal(after.count - behind.count, 2, 'one insert per batch once caught up');
  t.equal(after.sum - behind.sum, 200);
});

t.test('behind while a flush of PIPELINE_FLUSH_ROWS_BEHIND can never fill (the server hands out few batches at a time): every batch is still stored', async (t) => {
  // At most 4 batches held at once: 400 rows, far from the 100,000 of a flush while behind.
  const { iso: iso2, svc: svc2 } = await startService(t, 'flushbehind2', { PIPELINE_MAX_ACK_PENDING: '4', PIPELINE_FLUSH_ROWS_BEHIND: '100000', INGRESS_HOLD_BACKLOG: '0' });
  const org = await createOrg(svc2.url);
  await Promise.all(Array.from({ length: 30 }, (_, b) => sendBatch(svc2.url, org.live, batchOf(b)).then((r) => t.equal(r.status, 202))));
  await drained(iso2);
  t.same(await counts(svc2.url, org.id), { live: 3_000, test: 0 }, 'all stored: the idle flush comes when no batch does');
});
