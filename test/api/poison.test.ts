/**
 * A batch the engine refuses for its content (it cannot come through the API, whose
 * validation refuses it, so the test publishes it straight to the stream) must not block
 * anyone: it is moved to the dead-letter stream with the reason, and the batches around it
 * are stored.
 */
import t from 'tap';
import { connect, headers } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { NATS_URL, batch, counts, createOrg, drained, sendBatch, useService } from '../helpers/service.js';

const { iso, svc } = useService(t, 'poison', { PIPELINE_FLUSH_MS: '300' });

t.test('a poison batch is dead-lettered; the rest is stored', async (t) => {
  const org = await createOrg(svc.url);
  const poison = { signals: [{ eventName: 'e', customer: { externalCustomerId: 'c' }, data: { 'a.b': 1, a: { b: 2 } } }] };
  t.equal((await sendBatch(svc.url, org.live, poison)).status, 400, 'the API refuses it');

  const nc = await connect({ servers: NATS_URL });
  t.teardown(() => nc.close());
  const js = jetstream(nc);
  const h = headers();
  h.set('Billing-Org', org.id);
  h.set('Billing-Mode', 'live');
  h.set('Billing-Received-At', String(Date.now()));
  h.set('Billing-Batch', 'bat_0000000000poisonpoison');
  // Good batches before and after, so the poison shares a flush with them.
  t.equal((await sendBatch(svc.url, org.live, batch(200))).status, 202);
  await js.publish(`${iso.natsPrefix}.signals.${org.id}`, JSON.stringify(poison), { headers: h, msgID: 'bat_0000000000poisonpoison' });
  t.equal((await sendBatch(svc.url, org.live, batch(300))).status, 202);

  await drained(iso, 15_000).catch((e) => { console.error(svc.output.split('\n').filter((l) => /error|warn/.test(l)).join('\n').slice(0, 4000)); throw e; });
  t.same(await counts(svc.url, org.id), { live: 500, test: 0 }, 'the good batches are stored');
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(`${iso.natsPrefix}_SIGNALS_DLQ`);
  t.equal(info.state.messages, 1, 'one batch in the dead-letter stream');
  const m = await jsm.streams.getMessage(`${iso.natsPrefix}_SIGNALS_DLQ`, { seq: info.state.first_seq });
  t.equal(m?.header.get('Billing-Org'), org.id);
  t.match(m?.header.get('Billing-Dead-Letter-Reason') ?? '', /Code: 117/);
  t.same(JSON.parse(new TextDecoder().decode(m!.data)), poison, 'the original body is kept');
});
