/**
 * Back-pressure: when the signal stream is full (STREAM_MAX_BYTES, discard new), the
 * ingress answers 503 saying nothing was ingested, and gives the tokens back.
 * ROLE=ingress, so nothing consumes the stream.
 */
import t from 'tap';
import { Redis } from 'ioredis';
import { REDIS_URL, batch, createOrg, sendBatch, useService } from '../helpers/service.js';

const { iso, svc } = useService(t, 'backpressure', { ROLE: 'ingress', STREAM_MAX_BYTES: String(1024 * 1024) });

t.test('a full stream refuses with 503 QUEUE_UNAVAILABLE and refunds the tokens', async (t) => {
  const org = await createOrg(svc.url, { burst: 100_000, refillPerSecond: 0.001 });
  const body = batch(500, (i) => ({ data: { pad: 'p'.repeat(200), i } }));
  let accepted = 0;
  let refused: Awaited<ReturnType<typeof sendBatch>> | null = null;
  for (let i = 0; i < 40 && !refused; i++) {
    const r = await sendBatch(svc.url, org.live, body);
    if (r.status === 202) accepted++;
    else refused = r;
  }
  t.ok(accepted > 0, `${accepted} batches fit before the stream was full`);
  t.ok(refused, 'the stream filled up');
  t.equal(refused!.status, 503);
  t.same(refused!.body, {
    error: 'Service Unavailable',
    code: 'QUEUE_UNAVAILABLE',
    details: 'the signal queue is unavailable; nothing was ingested and no tokens were used, retry later',
  });
  // Tokens: 100,000 at the start, 500 per accepted batch; the refused batch's came back.
  const redis = new Redis(REDIS_URL);
  t.teardown(() => redis.disconnect());
  const tokens = Number(await redis.hget(`${iso.redisPrefix}bucket:{${org.id}}:live`, 'tokens'));
  t.ok(Math.abs(tokens - (100_000 - 500 * accepted)) < 1, `bucket holds ${tokens}, expected ${100_000 - 500 * accepted}`);
});
