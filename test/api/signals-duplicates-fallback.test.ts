/**
 * `duplicates` when no pipeline process answers the ingress's dedupe lookup (ROLE=ingress
 * alone): only repeats inside the request are counted. Once a pipeline process runs and has
 * claimed the keys, a resent batch answers every repeat, and everything is stored once.
 */
import t from 'tap';
import { ServiceProcess, cleanup, counts, createOrg, drained, isolation, sendBatch, sleep } from '../helpers/service.js';

const iso = isolation('signals-fallback');
const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
const pipeline = new ServiceProcess(iso, { ROLE: 'pipeline' });

t.teardown(async () => {
  await ingress.stop();
  await pipeline.stop();
  await cleanup(iso);
});

const s = (key: string | null, n: number) => ({ eventName: 'e', customer: { externalCustomerId: 'c' }, ...(key === null ? {} : { idempotencyKey: key }), data: { n } });

t.test('without a pipeline: in-request repeats only; with one: every repeat of a committed key', async (t) => {
  await ingress.start();
  const org = await createOrg(ingress.url);
  const body = { signals: [s('a', 0), s('b', 1), s('a', 2), s(null, 3), s('b', 4)] };
  const first = await sendBatch(ingress.url, org.live, body);
  t.equal(first.status, 202);
  t.match(first.body, { ingested: 3, duplicates: 2, failed: 0, errors: [] }, 'the repeats inside the request');
  const started = Date.now();
  const second = await sendBatch(ingress.url, org.live, body);
  t.match(second.body, { ingested: 3, duplicates: 2, failed: 0 }, 'no pipeline to ask: the keys of the first request are not counted');
  t.ok(Date.now() - started < 1_500, 'no pipeline listening answers at once (no wait for the lookup timeout)');

  await pipeline.start();
  await drained(iso);
  // After finding no pipeline listening, the ingress asks none for 1 s (docs/api.md): a pipeline
  // that started and drained within that second is not asked yet.
  await sleep(Math.max(0, started + 1_200 - Date.now()));
  const third = await sendBatch(ingress.url, org.live, body);
  t.match(third.body, { ingested: 1, duplicates: 4, failed: 0 }, 'a and b are claimed now: only the keyless signal is ingested');
  await drained(iso);
  t.same(await counts(pipeline.url, org.id), { live: 5, test: 0 }, 'a and b once, each of the three keyless signals once');
});
