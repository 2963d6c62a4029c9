/**
 * kill -9 of the pipeline process in the middle of a stream, twice; after restarts the rows
 * in ClickHouse are exactly the distinct signals sent (idempotency keys once, keyless each).
 * The ingress runs as its own process (ROLE=ingress) and keeps accepting throughout.
 */
import t from 'tap';
import { OPERATOR_TOKEN, ServiceProcess, cleanup, createOrg, drained, http, isolation, sendBatch, sleep, waitFor } from '../helpers/service.js';

const iso = isolation('crash');
const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
// A short ack wait so batches held by the killed process come back within seconds (default 60 s).
const pipelineEnv = { ROLE: 'pipeline', PIPELINE_FLUSH_ROWS: '1500', PIPELINE_FLUSH_MS: '20', PIPELINE_ACK_WAIT_MS: '4000' };
let pipeline = new ServiceProcess(iso, pipelineEnv);

t.teardown(async () => {
  await ingress.stop();
  await pipeline.stop();
  await cleanup(iso);
});

const BATCHES = 60;
/** Batch i: 300 new keys, 100 keys repeated from batch i-1, 100 keyless signals. */
function makeBatch(i: number): { signals: Record<string, unknown>[] } {
  const signals: Record<string, unknown>[] = [];
  for (let j = 0; j < 500; j++) {
    const s: Record<string, unknown> = { eventName: 'tokens', customer: { externalCustomerId: `cus_${j % 13}` }, data: { batch: i, j } };
    if (j < 300) s.idempotencyKey = `k-${i}-${j}`;
    else if (j < 400) s.idempotencyKey = `k-${Math.max(0, i - 1)}-${j - 300}`;
    signals.push(s);
  }
  return { signals };
}
const expected = 300 * BATCHES + 100 * BATCHES;

const stored = async (p: ServiceProcess, orgId: string): Promise<number> => {
  const r = await http(p.url, 'GET', `/admin/v1/organizations/${orgId}/stats`, { token: OPERATOR_TOKEN }).catch(() => null);
  return r && r.status === 200 ? r.body.signals.live : -1;
};

t.test('kill -9 mid-stream, restart, exact row counts', async (t) => {
  await ingress.start();
  await pipeline.start();
  const org = await createOrg(ingress.url, { burst: 1_000_000_000, refillPerSecond: 1_000_000_000 });

  let sent = 0;
  const producer = (async () => {
    for (let i = 0; i < BATCHES; i++) {
      const r = await sendBatch(ingress.url, org.live, makeBatch(i));
      if (r.status !== 202) throw new Error(`batch ${i}: ${r.status} ${JSON.stringify(r.body)}`);
      sent++;
      await sleep(40);
    }
  })();

  for (const threshold of [3_000, 12_000]) {
    const seen = await waitFor(() => stored(pipeline, org.id), (n) => n >= threshold, 60_000);
    t.ok(seen >= threshold, `pipeline had stored ${seen} rows when killed`);
    await pipeline.kill9();
    t.pass(`killed with -9 after ${sent} batches were accepted`);
    pipeline = new ServiceProcess(iso, pipelineEnv);
    await pipeline.start();
  }
  await producer;
  t.equal(sent, BATCHES, 'the ingress accepted every batch while the pipeline was down');
  await drained(iso, 120_000);
  t.equal(await stored(pipeline, org.id), expected, `exactly ${expected} rows: each key once, each keyless signal once`);
});
