/**
 * Billing under failure and concurrency: kill -9 of the process evaluating billing, twice,
 * mid-stream; two pipeline processes evaluating one organization's stream at once; and the
 * NATS connection cut while evaluations run.
 * Afterwards the balances, rows and events are exactly those of one orderly run.
 */
import t, { type Test } from 'tap';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { TcpProxy } from '../helpers/proxy.js';
import { billed, busEvents } from '../helpers/bus.js';
import { NATS_URL, ServiceProcess, cleanup, createOrg, http, isolation, sendBatch, sleep, type Isolation, type TestOrg } from '../helpers/service.js';

const CUR = '9a1c2b1e-0000-4000-8000-00000000c0de';



async function consumedInState(i: Isolation, orgId: string): Promise<string | undefined> {
  const nc = await connect({ servers: NATS_URL });
  try {
    const kv = await new Kvm(jetstream(nc)).open(`${i.natsPrefix}_billing_state`);
    const e = await kv.get(`st.${orgId}.live`);
    const state = e?.json<{ consumed: Record<string, string> }>();
    return state ? Object.values(state.consumed)[0] : undefined;
  } finally {
    await nc.close();
  }
}

async function configure(base: string, org: TestOrg, granted: string): Promise<void> {
  const call = async (method: string, path: string, body?: unknown): Promise<any> => {
    const r = await http(base, method, path, { token: org.live, body });
    if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const c = await call('POST', '/api/v2/customers', { externalId: 'acme' });
  await call('PUT', `/api/v2/customers/${c.id}/units/root`, {});
  const plan = await call('POST', '/api/v2/plans', { name: 'Pro' });
  const ola = await call('POST', `/api/v2/customers/${c.id}/order-line-attributes`, { planId: plan.id, eventName: 'e', unitPrice: '0.001', currency: 'EUR', includedQuantity: '1000', creditsCurrencyId: CUR, creditsPerUnit: '0.5' });
  await call('POST', `/api/v2/customers/${c.id}/credit-pools`, { orderLineAttributeId: ola.id, credits: granted });
  await call('PUT', `/api/v2/customers/${c.id}/units/root/credit-caps/${CUR}`, { amount: '400', frequency: 'YEARLY', effectiveFrom: '2026-01-01T00:00:00Z' });
}

const batch = (b: number, n: number) => ({ signals: Array.from({ length: n }, (_, i) => ({ eventName: 'e', customerId: 'acme', unitId: 'root', timestamp: '2026-05-01T00:00:00Z', idempotencyKey: `b${b}-${i}` })) });

function checkEvents(t: Test, events: { id: string; event: string; data: any }[]): void {
  t.equal(new Set(events.map((e) => e.id)).size, events.length, 'no event twice');
  const dep = events.filter((e) => e.event === 'billing-credits-depleted');
  t.equal(dep.length, 1, 'one depletion');
  t.equal(dep[0]?.data.credits.remainingCreditsDecimal, '0', 'the 1,200th half-credit empties the pool exactly');
  const over = events.filter((e) => e.event === 'billing-overage-incurred').map((e) => e.data.overage.eventType).sort();
  t.same(over, ['OverageCredit', 'OverageUsage']);
  const caps = events.filter((e) => e.event === 'billing-credit-cap-reached');
  t.equal(caps.length, 1);
  t.equal(caps[0]?.data.usedDecimal, '400');
}

// 60 batches × 40 signals = 2,400 signals at 0.5 credits: 1,200 credits against a pool of 600.
const BATCHES = 60;
const PER = 40;
const GRANTED = '600';

t.test('kill -9 of the evaluating process, twice, mid-stream', async (t) => {
  const iso = isolation('billcrash');
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  const env = { ROLE: 'pipeline', PIPELINE_ACK_WAIT_MS: '3000', PIPELINE_FLUSH_MS: '20' };
  let pipeline = new ServiceProcess(iso, env);
  t.teardown(async () => {
    await ingress.stop();
    await pipeline.stop();
    await cleanup(iso);
  });
  await ingress.start();
  await pipeline.start();
  const org = await createOrg(ingress.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  await configure(ingress.url, org, GRANTED);
  for (let kill = 0; kill < 2; kill++) {
    const sends = Array.from({ length: BATCHES / 2 }, (_, i) => sendBatch(ingress.url, org.live, batch(kill * 100 + i, PER)));
    await sleep(150 + kill * 100);
    await pipeline.kill9();
    t.ok((await Promise.all(sends)).every((r) => r.status === 202), 'the ingress kept accepting');
    pipeline = new ServiceProcess(iso, env);
    await pipeline.start();
  }
  await billed(iso);
  const events = await busEvents(iso, org.id);
  checkEvents(t, events);
  t.equal(await consumedInState(iso, org.id), '1200', 'the pool consumed exactly 2,400 × 0.5 credits');
  // Analytics are served by ROLE=all with the embedded engine: read the pipeline's data directory through one.
  await pipeline.stop();
  const all = new ServiceProcess(iso, { ROLE: 'all' });
  await all.start();
  t.teardown(() => all.stop());
  const rows = (await http(all.url, 'POST', '/api/v2/analytics/query', { token: org.live, body: { query: 'SELECT count(), toString(sum(credits)), toString(min(balance_after)), (SELECT count() FROM fact_cost), (SELECT count() FROM fact_signal) FROM fact_credit_consumption' } })).body;
  t.same(rows.rows, [['2400', '1200', '-600', '2400', '2400']], 'one cost and one consumption row per signal, exact balance');
});

t.test('two pipeline processes evaluating at once', async (t) => {
  const iso = isolation('billtwo');
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  // Two pipeline processes need two engines (chdb has one owner per data directory): rows
  // split between them, but balances (KV) and events (bus) are shared and must be exact.
  const isoB = { ...iso, dataDir: `${iso.dataDir}-b` };
  const p1 = new ServiceProcess(iso, { ROLE: 'pipeline', PIPELINE_FLUSH_MS: '10' });
  const p2 = new ServiceProcess(isoB, { ROLE: 'pipeline', PIPELINE_FLUSH_MS: '10' });
  t.teardown(async () => {
    await ingress.stop();
    await p1.stop();
    await p2.stop();
    await cleanup(iso);
    await cleanup(isoB).catch(() => undefined);
  });
  await Promise.all([ingress.start(), p1.start(), p2.start()]);
  const org = await createOrg(ingress.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  await configure(ingress.url, org, GRANTED);
  const sent = await Promise.all(Array.from({ length: BATCHES }, (_, i) => sendBatch(ingress.url, org.live, batch(i, PER))));
  t.ok(sent.every((r) => r.status === 202));
  await billed(iso);
  checkEvents(t, await busEvents(iso, org.id));
  t.equal(await consumedInState(iso, org.id), '1200');
});

t.test('NATS cut while billing evaluates: retried in place, nothing lost or doubled', async (t) => {
  const target = new URL(NATS_URL);
  const proxy = new TcpProxy(target.hostname, Number(target.port || 4222));
  await proxy.start();
  const iso = isolation('billcut');
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  const pipeline = new ServiceProcess(iso, { ROLE: 'pipeline', NATS_URL: `nats://127.0.0.1:${proxy.port}`, PIPELINE_FLUSH_MS: '20' });
  t.teardown(async () => {
    await ingress.stop();
    await proxy.start(proxy.port).catch(() => undefined);
    await pipeline.stop();
    await proxy.cut();
    await cleanup(iso);
  });
  await Promise.all([ingress.start(), pipeline.start()]);
  const org = await createOrg(ingress.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  await configure(ingress.url, org, GRANTED);
  const sent = await Promise.all(Array.from({ length: BATCHES }, (_, i) => sendBatch(ingress.url, org.live, batch(i, PER))));
  t.ok(sent.every((r) => r.status === 202));
  await sleep(200);
  await proxy.cut();
  await sleep(1_500);
  await proxy.start(proxy.port);
  await billed(iso);
  t.match(pipeline.output, /nats disconnected[\s\S]*nats reconnected/, 'the pipeline process lost NATS and got it back');
  checkEvents(t, await busEvents(iso, org.id));
  t.equal(await consumedInState(iso, org.id), '1200');
});
