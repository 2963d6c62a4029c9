/**
 * Back-pressure in one process (ROLE=all, src/shared/backlog-gate.ts): while the pipeline is
 * more than INGRESS_HOLD_BACKLOG batches behind, the ingress holds each 202 (the batch is
 * durable already) up to INGRESS_HOLD_MAX_MS; the answer itself is unchanged, nothing is lost
 * or refused, and once the pipeline has caught up answers are no longer held.
 *
 * The pipeline is made to fall behind for real: ENGINE_HOST_FAULT=slow-insert holds the first
 * signals insert in the engine host for SLOW_INSERT_MS, so every batch sent meanwhile waits
 * in the pipeline (taken, not stored). Where the hold happened is observed, not slept for: the
 * engine host logs the held insert, and the service counts held answers
 * (usage_ingress_answers_held_total).
 */
import t from 'tap';
import { counts, createOrg, drained, logLines, sendBatch, useService, waitFor } from '../helpers/service.js';
import { sampleValue } from '../helpers/promql.js';
import { SLOW_INSERT_MS } from '../../src/store/engine-host/host.js';

const HOLD_MS = 1_500;
const { iso, svc } = useService(t, 'ingresshold', {
  ENGINE_HOST_FAULT: 'slow-insert',
  PIPELINE_FLUSH_ROWS: '20',
  INGRESS_HOLD_BACKLOG: '3',
  INGRESS_HOLD_MAX_MS: String(HOLD_MS),
});

const held = async (): Promise<number> => sampleValue(await (await fetch(`${svc.url}/metrics`)).text(), 'usage_ingress_answers_held_total') ?? 0;
const batchOf = (b: number) => ({ signals: Array.from({ length: 20 }, (_, i) => ({ eventName: 'e', customer: { externalCustomerId: `c${i % 4}` }, idempotencyKey: `ih-${b}-${i}` })) });

t.test('answers are held while the pipeline is behind, and only then', async (t) => {
  const org = await createOrg(svc.url);
  t.equal(await held(), 0, 'nothing held before any traffic');
  t.equal((await sendBatch(svc.url, org.live, batchOf(0))).status, 202);
  await waitFor(async () => logLines(svc, 'engine host fault: insert held'), (l) => l.length > 0, 30_000);
  const heldAt = Date.now();

  // The insert is held: the batches sent now wait in the pipeline, and the backlog passes 3.
  const times: number[] = [];
  for (let b = 1; b <= 6; b++) {
    const start = Date.now();
    const r = await sendBatch(svc.url, org.live, batchOf(b));
    times.push(Date.now() - start);
    t.equal(r.status, 202, `batch ${b}: accepted`);
    t.match(r.body, { ingested: 20, duplicates: 0, failed: 0 }, `batch ${b}: the usual answer`);
  }
  t.ok(Date.now() - heldAt < SLOW_INSERT_MS, 'all sent while the insert was still held');
  const heldCount = await held();
  t.ok(heldCount >= 2, `answers held once the pipeline was more than 3 batches behind (${heldCount} of 6)`);
  t.ok(times.filter((ms) => ms >= HOLD_MS - 100).length >= 2, `those answers waited the hold time (${times.join(', ')} ms)`);
  t.ok(times.every((ms) => ms < HOLD_MS + 1_000), 'and no longer');

  // The insert goes through; the pipeline catches up and stores every signal once.
  await drained(iso);
  t.same(await counts(svc.url, org.id), { live: 140, test: 0 }, 'every signal stored, once');
  const before = await held();
  for (let b = 7; b <= 9; b++) t.equal((await sendBatch(svc.url, org.live, batchOf(b))).status, 202);
  t.equal(await held(), before, 'caught up: no answer held');
});
