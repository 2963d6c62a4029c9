/**
 * Back-pressure: when the signal stream is full (STREAM_MAX_BYTES, discard new), the
 * ingress answers 503 saying nothing was ingested, and gives the tokens back.
 * ROLE=ingress, so nothing consumes the stream.
 */
import t from 'tap';
import { Redis } from 'ioredis';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { NATS_URL, REDIS_URL, ServiceProcess, batch, cleanup, createOrg, isolation, sendBatch, useService } from '../helpers/service.js';

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

t.test("the ingress's STREAM_MAX_BYTES is the stream's: the other roles, started later with another (here the default), leave it; another ingress applies its own", async (t) => {
  const iso2 = isolation('streambound');
  t.teardown(() => cleanup(iso2));
  const bound = async (): Promise<number> => {
    const nc = await connect({ servers: NATS_URL });
    try {
      return (await (await jetstreamManager(nc)).streams.info(`${iso2.natsPrefix}_SIGNALS`)).config.max_bytes;
    } finally {
      await nc.close();
    }
  };
  const run = async (env: Record<string, string>): Promise<void> => {
    const p = new ServiceProcess(iso2, env);
    await p.start();
    await p.stop();
  };
  // A pipeline first: it creates the stream (nothing there yet) with its own setting.
  await run({ ROLE: 'pipeline', STREAM_MAX_BYTES: String(5 * 1024 ** 2) });
  t.equal(await bound(), 5 * 1024 ** 2, 'a process finding no stream creates it with its setting');
  await run({ ROLE: 'ingress', STREAM_MAX_BYTES: String(3 * 1024 ** 2) });
  t.equal(await bound(), 3 * 1024 ** 2, "an ingress applies its own to the existing stream");
  for (const role of ['pipeline', 'dispatcher']) {
    await run({ ROLE: role });
    t.equal(await bound(), 3 * 1024 ** 2, `a ${role} process started afterwards, STREAM_MAX_BYTES unset, leaves the ingress's bound`);
  }
  await run({ ROLE: 'all', STREAM_MAX_BYTES: String(4 * 1024 ** 2) });
  t.equal(await bound(), 4 * 1024 ** 2, 'ROLE=all runs an ingress: its setting applies');
});
