/**
 * Billing under failure and concurrency, continued from billing-crash.test.ts (split in two so
 * that the suite's two jobs run them side by side; the shared helpers: test/helpers/billing-crash.ts):
 * a state key from a later sequence, the NATS connection cut between events and commit, a
 * configuration change before a replay, the billing consumers' ack wait, two pipeline processes
 * killed at different points over many customers, a group killed after its events, and pins
 * too large for one NATS message.
 */
import t, { type Test } from 'tap';
import { join } from 'node:path';
import { connect, headers as natsHeaders } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { TcpProxy } from '../helpers/proxy.js';
import { H_BATCH, H_MODE, H_ORG } from '../../src/bus/batch.js';
import { partitionOf } from '../../src/billing/evaluator/partition.js';
import { DEFAULT_BILLING_PARTITIONS } from '../../src/config.js';
import { billed, busEvents, stateKeyNames, stateKeys } from '../helpers/bus.js';
import { acmeWithPool, call } from '../helpers/billing-api.js';
import { NATS_URL, ServiceProcess, cleanup, createOrg, http, isolation, logLines, logsOnFailure, sendBatch, waitFor, type Isolation, type TestOrg } from '../helpers/service.js';
import { ACK_WAIT, batch, checkSerialRun, committed, consumedInState, CUR, customerStates, exitOf, faultLine, killedAt, periodsOf, pinOf, storeIndependent, teardownBoth, withBatches, type GroupPin } from '../helpers/billing-crash.js';

t.test('a state key from a later sequence while no later group is pinned (a recreated stream): the partition stops with an error, publishing nothing, and goes on once mended', async (t) => {
  const iso = isolation('billforeign');
  const pipeline = new ServiceProcess(iso, { ROLE: 'all', PIPELINE_FLUSH_MS: '10', ...ACK_WAIT });
  t.teardown(async () => {
    await pipeline.stop();
    await cleanup(iso);
  });
  await pipeline.start();
  const org = await createOrg(pipeline.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const { c, pool } = await acmeWithPool(pipeline.url, org, '10', CUR);
  // The customer's state as a stream of an earlier life left it: sequence 1,000,000.
  const key = `cs.${org.id}.live.${c.id}`;
  const foreign = { seq: 1_000_000, before: { consumed: {}, usage: {} }, after: { consumed: { [pool.id]: '7' }, usage: {} } };
  const nc = await connect({ servers: NATS_URL });
  t.teardown(() => nc.close());
  const kv = await new Kvm(jetstream(nc)).open(`${iso.natsPrefix}_billing_state`);
  await kv.put(key, JSON.stringify(foreign));
  const signals = (n: number, k: string) => ({ signals: Array.from({ length: n }, (_, i) => ({ eventName: 'e', customer: { externalCustomerId: 'acme' }, unitId: 'root', timestamp: '2026-05-01T10:00:00Z', idempotencyKey: `${k}-${i}` })) });
  t.equal((await sendBatch(pipeline.url, org.live, signals(12, 'a'))).status, 202);
  const stopped = await waitFor(async () => logLines(pipeline, 'billing evaluation failed; retrying in place'), (l) => l.some((x) => /while no later group is pinned/.test(String((x.err as { message?: string })?.message ?? x.err))), 60_000);
  t.ok(stopped.some((x) => /partition \d+: a state key names stream sequence 1000000/.test(JSON.stringify(x))), 'the error names the partition and the sequence');
  t.same(await busEvents(iso, org.id), [], 'nothing published: no depletion from a state that is not the customer\'s');
  t.same((await kv.get(key))?.json(), foreign, 'the key left as it was');
  // Mended (the operator removes the stray key): the partition goes on from no state.
  await kv.purge(key);
  await billed(iso);
  t.same((await busEvents(iso, org.id)).map((e) => e.event).sort(), ['billing-credits-depleted', 'billing-overage-incurred'], '12 credits from a pool of 10');
  t.equal(await consumedInState(iso, org.id), '12');
});

t.test('NATS cut while an evaluation is held between its events and its commit: retried in place, nothing lost or doubled', async (t) => {
  const target = new URL(NATS_URL);
  const proxy = new TcpProxy(target.hostname, Number(target.port || 4222));
  await proxy.start();
  const iso = isolation('billcut');
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  // The first batch with events pauses 3 s after publishing them: the cut happens then.
  const pipeline = new ServiceProcess(iso, { ROLE: 'pipeline', NATS_URL: `nats://127.0.0.1:${proxy.port}`, PIPELINE_FLUSH_MS: '20', ...ACK_WAIT, BILLING_FAULT_POINT: 'after-events', BILLING_FAULT_ACTION: 'pause', BILLING_FAULT_PAUSE_MS: '3000' });
  t.teardown(async () => {
    await ingress.stop();
    await proxy.start(proxy.port).catch(() => undefined);
    await pipeline.stop();
    await proxy.cut();
    await cleanup(iso);
  });
  await Promise.all([ingress.start(), pipeline.start()]);
  const org = await withBatches(t, ingress.url);
  const paused = await waitFor(async () => faultLine(pipeline.output), (l) => l !== undefined, 60_000);
  t.match(paused, { point: 'after-events', action: 'pause', orgId: org.id }, 'an evaluation is held after publishing its events');
  const seq = paused!.seq;
  await proxy.cut();
  t.equal((await busEvents(iso, org.id)).length, paused!.events, 'when NATS was cut its events were published');
  t.notOk(await committed(iso, seq), 'and it was not committed');
  // A JSON log line (fields in any order) with that message and this seq.
  const retried = (l: string): boolean => l.includes('billing evaluation failed; retrying in place') && new RegExp(`"seq":${seq}\\b`).test(l);
  const sawRetry = await waitFor(async () => pipeline.output.slice(pipeline.output.indexOf('billing fault point reached')).split('\n').some(retried), (x) => x, 30_000);
  t.ok(sawRetry, 'the held evaluation failed without NATS and was retried in place');
  await proxy.start(proxy.port);
  await billed(iso);
  t.match(pipeline.output, /nats disconnected[\s\S]*nats reconnected/, 'the pipeline process lost NATS and got it back');
  t.ok(await committed(iso, seq), 'the held batch was committed after the reconnection');
  await checkSerialRun(t, iso, org.id);
});

t.test('a configuration change between a crashed evaluation and its replay does not change what the batch bills', async (t) => {
  const iso = isolation('billpin');
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  const env = { ROLE: 'pipeline', PIPELINE_ACK_WAIT_MS: '3000', PIPELINE_FLUSH_MS: '20', ...ACK_WAIT };
  let pipeline = new ServiceProcess(iso, { ...env, BILLING_FAULT_POINT: 'after-events' });
  t.teardown(async () => {
    await ingress.stop();
    await pipeline.stop();
    await cleanup(iso);
  });
  await Promise.all([ingress.start(), pipeline.start()]);
  const exited = exitOf(pipeline);
  const org = await createOrg(ingress.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const { c, pool } = await acmeWithPool(ingress.url, org, '10', CUR);
  const signals = (n: number, key: string) => ({ signals: Array.from({ length: n }, (_, i) => ({ eventName: 'e', customer: { externalCustomerId: 'acme' }, unitId: 'root', timestamp: '2026-05-01T10:00:00Z', idempotencyKey: `${key}-${i}` })) });

  // 12 credits from a pool of 10: depleted and OverageCredit. Killed once those are published.
  t.equal((await sendBatch(ingress.url, org.live, signals(12, 'a'))).status, 202);
  const crash = await killedAt(t, pipeline, exited, 'after-events');
  t.equal(crash.events, 2);
  const pin = (await pinOf(iso, crash.seq))!;
  t.ok(pin, 'the crashed batch has its configuration pinned');
  t.notOk(pin.done, 'it was not committed');

  // Meanwhile: a top-up that covers the whole batch and a cap the batch alone would reach.
  await call(ingress.url, org, 'POST', `/api/v2/customers/${c.id}/credit-pools/${pool.id}/top-ups`, { credits: '100' });
  await call(ingress.url, org, 'PUT', `/api/v2/customers/${c.id}/units/root/credit-caps/${CUR}`, { amount: '5', frequency: 'DAILY', effectiveFrom: '2026-05-01T00:00:00Z' });
  t.same(pin.scopes.map((sc) => sc.config.caps), [{}], 'the pin holds the document as it was');

  pipeline = new ServiceProcess(iso, env);
  await pipeline.start();
  await billed(iso);
  const afterReplay = await busEvents(iso, org.id);
  t.same(afterReplay.map((e) => e.event).sort(), ['billing-credits-depleted', 'billing-overage-incurred'], 'the replay billed against the pinned revision: no cap event, nothing new');
  t.same(await periodsOf(iso, org.id), [], 'and spent in no cap period');
  t.equal(await consumedInState(iso, org.id), '12');

  // The next batch is evaluated against the new configuration: the cap counts from it on.
  t.equal((await sendBatch(ingress.url, org.live, signals(5, 'b'))).status, 202);
  await billed(iso);
  const caps = (await busEvents(iso, org.id)).filter((e) => e.event === 'billing-credit-cap-reached').map((e) => e.data.usedDecimal);
  t.same(caps, ['5'], 'the cap fires on the 5th credit of the next batch');
  const pools = await call(ingress.url, org, 'GET', `/api/v2/customers/${c.id}/credit-pools`);
  t.match(pools.creditPools, [{ totalCredits: '110', consumedCredits: '17', balance: '93' }]);
});

t.test('BILLING_ACK_WAIT_MS is the ack wait of both billing consumers, an existing one included', storeIndependent, async (t) => {
  const iso = isolation('billackwait');
  t.teardown(() => cleanup(iso));
  const ackWaits = async (): Promise<number[]> => {
    const nc = await connect({ servers: NATS_URL });
    try {
      const jsm = await jetstreamManager(nc);
      const a = await jsm.consumers.info(`${iso.natsPrefix}_BILLABLE_P`, 'billing-p0');
      const b = await jsm.consumers.info(`${iso.natsPrefix}_BILLING_ROWS`, 'billing-rows');
      return [(a.config.ack_wait ?? 0) / 1e6, (b.config.ack_wait ?? 0) / 1e6];
    } finally {
      await nc.close();
    }
  };
  for (const [env, expected] of [[{}, 60_000], [{ BILLING_ACK_WAIT_MS: '2000' }, 2_000], [{ BILLING_ACK_WAIT_MS: '45000' }, 45_000]] as const) {
    const p = new ServiceProcess(iso, { ROLE: 'pipeline', ...env });
    await p.start();
    await p.stop();
    t.same(await ackWaits(), [expected, expected], JSON.stringify(env));
  }
  // Processes that consume none of them leave them as the pipeline set them: an ingress or a
  // dispatcher started later (BILLING_ACK_WAIT_MS unset there: 60 s) does not reset them (it
  // did: a pipeline crash then left its held batches to the others only 60 s later).
  for (const role of ['ingress', 'dispatcher']) {
    const q = new ServiceProcess(iso, { ROLE: role });
    await q.start();
    await q.stop();
    t.same(await ackWaits(), [45_000, 45_000], `a ${role} process started afterwards keeps the pipeline's ack wait`);
  }
  // The partitions made by the first start stay: customers keep their partition.
  const other = new ServiceProcess(iso, { ROLE: 'pipeline', BILLING_PARTITIONS: '4' });
  await other.start();
  await other.stop();
  t.match(logLines(other, 'BILLING_PARTITIONS differs from the partitions in use; keeping those'), [{ configured: 4, inUse: 8 }], 'a different BILLING_PARTITIONS later is logged and not applied');
  const nc = await connect({ servers: NATS_URL });
  try {
    const names: string[] = [];
    for await (const ci of (await jetstreamManager(nc)).consumers.list(`${iso.natsPrefix}_BILLABLE_P`)) names.push(ci.name);
    t.same(names.sort(), Array.from({ length: 8 }, (_, k) => `billing-p${k}`).sort(), 'the 8 partition consumers of the first start (BILLING_PARTITIONS default)');
  } finally {
    await nc.close();
  }
  const bad = new ServiceProcess(iso, { ROLE: 'pipeline', BILLING_ACK_WAIT_MS: '500' });
  await t.rejects(bad.start(), /BILLING_ACK_WAIT_MS=500: must be between 1000 and 3600000/, 'a bad value stops the start with a message naming it');
});

// Many customers over few partitions, two pipeline processes, each killed once at a different
// point, then both replaced. Each customer draws 1 credit per signal, so one serial run's
// outcome per customer is arithmetic on its signal count n (whatever the order): consumed =
// usage = n; the pool empties once when n ≥ granted, goes negative once when n > granted;
// usage passes the included quantity once when n > included; the cap period totals n and
// fires once, at exactly its amount, when n ≥ amount.
const CUSTOMERS = 24;
const MANY_BATCHES = 48;
const MANY_PER = 10;
const spec = (c: number) => ({ granted: 8 + (c % 12), included: 10 + (c % 8), cap: 12 + (c % 6) });

t.test('two pipeline processes killed -9 at different points, many customers over partitions: exactly one serial run per customer', async (t) => {
  const iso = isolation('billmany');
  const isoB = { ...iso, dataDir: `${iso.dataDir}-b` };
  // Every role creates the partitions when it finds none: the same setting everywhere.
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress', BILLING_PARTITIONS: '4' });
  const env = { ROLE: 'pipeline', PIPELINE_ACK_WAIT_MS: '3000', PIPELINE_FLUSH_MS: '10', BILLING_PARTITIONS: '4', ...ACK_WAIT };
  let p1 = new ServiceProcess(iso, { ...env, BILLING_FAULT_POINT: 'after-events' });
  let p2 = new ServiceProcess(isoB, { ...env, BILLING_FAULT_POINT: 'before-state-write' });
  teardownBoth(t, iso, isoB, () => [ingress, p1, p2]);
  await Promise.all([ingress.start(), p1.start(), p2.start()]);
  const exited = [exitOf(p1), exitOf(p2)];
  const org = await createOrg(ingress.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const plan = await call(ingress.url, org, 'POST', '/api/v2/plans', { name: 'Pro' });
  const customers: { id: string; pool: string; ola: string }[] = [];
  for (let c = 0; c < CUSTOMERS; c++) {
    const s = spec(c);
    const cus = await call(ingress.url, org, 'POST', '/api/v2/customers', { externalId: `ext-${c}`, name: `Customer ${c}` });
    await call(ingress.url, org, 'PUT', `/api/v2/customers/${cus.id}/units/root`, {});
    const ola = await call(ingress.url, org, 'POST', `/api/v2/customers/${cus.id}/order-line-attributes`, { planId: plan.id, eventName: 'e', unitPrice: '0.25', currency: 'EUR', includedQuantity: String(s.included), creditsCurrencyId: CUR, creditsPerUnit: '1' });
    const pool = await call(ingress.url, org, 'POST', `/api/v2/customers/${cus.id}/credit-pools`, { orderLineAttributeId: ola.id, credits: String(s.granted) });
    await call(ingress.url, org, 'PUT', `/api/v2/customers/${cus.id}/units/root/credit-caps/${CUR}`, { amount: String(s.cap), frequency: 'YEARLY', effectiveFrom: '2026-01-01T00:00:00Z' });
    customers.push({ id: cus.id, pool: pool.id, ola: ola.id });
  }
  // Signal i of batch b goes to customer (7b + i) mod CUSTOMERS, named by its externalId or
  // its service id in turn (one customer either way: one partition).
  const n = new Array<number>(CUSTOMERS).fill(0);
  const batches = Array.from({ length: MANY_BATCHES }, (_, b) => ({
    signals: Array.from({ length: MANY_PER }, (_, i) => {
      const c = (7 * b + i) % CUSTOMERS;
      n[c]!++;
      return { eventName: 'e', customer: (b + i) % 2 === 0 ? { externalCustomerId: `ext-${c}` } : { customerId: customers[c]!.id }, unitId: 'root', timestamp: '2026-05-01T00:00:00Z', idempotencyKey: `m${b}-${i}` };
    }),
  }));
  const sent = await Promise.all(batches.map((b) => sendBatch(ingress.url, org.live, b)));
  t.ok(sent.every((r) => r.status === 202), 'the ingress accepted every batch');

  // (Each one's batch may already be finished by the other process when both have died.)
  await Promise.all([killedAt(t, p1, exited[0]!, 'after-events'), killedAt(t, p2, exited[1]!, 'before-state-write')]);
  p1 = new ServiceProcess(iso, env);
  p2 = new ServiceProcess(isoB, env);
  await Promise.all([p1.start(), p2.start()]);
  await billed(iso);

  const pins = Object.keys(await stateKeys(iso, 'pin.')).sort();
  t.ok(pins.length > 1 && pins.every((k) => /^pin\.[0-3]$/.test(k)), `the customers' batches went through several of the 4 partitions (${pins.join(', ')})`);
  const states = await customerStates(iso, org.id);
  const periods = await periodsOf(iso, org.id);
  const events = await busEvents(iso, org.id);
  t.equal(new Set(events.map((e) => e.id)).size, events.length, 'no event twice');
  const count = (event: string, customerId: string, type?: string): number =>
    events.filter((e) => e.event === event && (e.data.credits?.customerId ?? e.data.customer?.id ?? e.data.overage?.customerId) === customerId && (type === undefined || e.data.overage?.eventType === type)).length;
  const got: unknown[] = [];
  const want: unknown[] = [];
  customers.forEach((c, i) => {
    const s = spec(i);
    const st = states[`cs.${org.id}.live.${c.id}`];
    got.push([i, st?.after.consumed[c.pool], st?.after.usage[c.ola], count('billing-credits-depleted', c.id), count('billing-overage-incurred', c.id, 'OverageCredit'), count('billing-overage-incurred', c.id, 'OverageUsage'), count('billing-credit-cap-reached', c.id)]);
    want.push([i, String(n[i]), String(n[i]), n[i]! >= s.granted ? 1 : 0, n[i]! > s.granted ? 1 : 0, n[i]! > s.included ? 1 : 0, n[i]! >= s.cap ? 1 : 0]);
  });
  t.same(got, want, 'per customer: consumption, usage and events of one serial run');
  t.same(periods.map((p) => p.after.used).sort(), n.map(String).sort(), 'one cap period per customer, totalling its signals');
  t.equal(periods.filter((p) => p.after.reached).length, n.filter((x, i) => x >= spec(i).cap).length, 'reached where the total reaches the amount');
  t.ok(events.filter((e) => e.event === 'billing-credit-cap-reached').every((e) => e.data.usedDecimal === e.data.cap.amountDecimal), 'each cap fired at its amount');
  const pools = await call(ingress.url, org, 'GET', `/api/v2/customers/${customers[0]!.id}/credit-pools`);
  t.match(pools.creditPools, [{ consumedCredits: String(n[0]), balance: String(spec(0).granted - n[0]!) }], 'the listing reads the customer state');

  // Rows: each process's engine holds what its rows inserter stored. A rows message taken
  // over from a killed process (its insert done, its ack not) is stored again by the other
  // process's own engine: with one shared store it is stored once (rows.ts), here each
  // process has its own, so the union is compared: one row per signal, identical copies.
  await Promise.all([p1.stop(), p2.stop()]);
  const cost = new Map<string, string>();
  const consumption = new Map<string, string>();
  let copiesDiffer = 0;
  const merge = (into: Map<string, string>, rows: string[][]): void => {
    for (const [id, value] of rows) {
      if (into.has(id!) && into.get(id!) !== value) copiesDiffer++;
      into.set(id!, value!);
    }
  };
  for (const dir of [iso, isoB]) {
    const all = new ServiceProcess(dir, { ROLE: 'all' });
    await all.start();
    const q = async (query: string): Promise<string[][]> => (await http(all.url, 'POST', '/api/v2/analytics/query', { token: org.live, body: { query } })).body.rows;
    const [c] = await q('SELECT toString(count()), toString(uniqExact(signal_id)), (SELECT toString(count()) FROM fact_credit_consumption), (SELECT toString(uniqExact(signal_id)) FROM fact_credit_consumption) FROM fact_cost');
    t.same([c![0], c![2]], [c![1], c![3]], `no signal twice within one engine (${dir.dataDir})`);
    merge(cost, await q("SELECT signal_id, concat(customer_id, ' ', toString(quantity), ' ', toString(cost_amount)) FROM fact_cost LIMIT 10000"));
    merge(consumption, await q("SELECT signal_id, concat(pool_id, ' ', toString(credits)) FROM fact_credit_consumption LIMIT 10000"));
    await all.stop();
  }
  const signals = MANY_BATCHES * MANY_PER;
  t.same([cost.size, consumption.size, copiesDiffer], [signals, signals, 0], 'one cost and one consumption row per signal, copies across the engines identical');
  t.equal([...consumption.values()].reduce((sum, v) => sum + Number(v.split(' ')[1]), 0), signals, 'credits exact');
  const perCustomer = new Map<string, number>();
  for (const v of cost.values()) perCustomer.set(v.split(' ')[0]!, (perCustomer.get(v.split(' ')[0]!) ?? 0) + 1);
  t.same(customers.map((c) => perCustomer.get(c.id) ?? 0), n, 'cost rows per customer: its signals');
});

t.test('a group of several messages killed after its events is replayed as exactly that group: as one serial run', async (t) => {
  const iso = isolation('billgroup');
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  const env = { ROLE: 'pipeline', PIPELINE_FLUSH_MS: '10', ...ACK_WAIT };
  let pipeline = new ServiceProcess(iso, { ...env, BILLING_FAULT_POINT: 'after-events' });
  t.teardown(async () => {
    await ingress.stop();
    await pipeline.stop();
    await cleanup(iso);
  });
  await ingress.start(); // creates the streams and the partition consumers
  const org = await createOrg(ingress.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const { c, pool } = await acmeWithPool(ingress.url, org, '10', CUR);
  await call(ingress.url, org, 'PUT', `/api/v2/customers/${c.id}/units/root/credit-caps/${CUR}`, { amount: '7', frequency: 'DAILY', effectiveFrom: '2026-05-01T00:00:00Z' });
  // Six billable messages of the customer's partition, queued before any evaluator runs (as a
  // pipeline leaves them under load): 2 credits each, so the pool of 10 empties in the 5th,
  // the daily cap of 7 is reached in the 4th, and the 6th goes into overage.
  const k = partitionOf(org.id, 'live', c.id, DEFAULT_BILLING_PARTITIONS);
  const seqs = await queueBillable(iso, org.id, k, 'group', Array.from({ length: 6 }, (_, b) => [0, 1].map((i) => ({ k: c.id, i: `sig_g${b}_${i}`, c: i === 0 ? 'x:acme' : `i:${c.id}`, t: Date.parse('2026-05-01T10:00:00Z') + b * 10 + i }))));
  // It evaluates the backlog as soon as it runs: listening comes before (main.ts).
  await pipeline.start('listening');
  const crash = await killedAt(t, pipeline, exitOf(pipeline), 'after-events');
  t.equal(crash.seq, seqs[0], 'the group starts at the oldest message');
  const pin = (await pinOf(iso, crash.seq))!;
  t.same(pin.seqs, seqs, 'one group of all six messages was pinned');
  t.notOk(pin.done, 'and not committed');
  t.ok(crash.events >= 3, `its events were published (${crash.events})`);

  pipeline = new ServiceProcess(iso, env);
  await pipeline.start();
  await billed(iso);
  const done = (await pinOf(iso, crash.seq))!;
  t.same([done.seqs, done.done], [seqs, true], 'the replay committed exactly that group');
  const events = await busEvents(iso, org.id);
  t.equal(new Set(events.map((e) => e.id)).size, events.length, 'no event twice');
  t.same(events.map((e) => e.event).sort(), ['billing-credit-cap-reached', 'billing-credits-depleted', 'billing-overage-incurred'], 'depleted once, the cap reached once, overage once: as one serial run');
  t.equal(await consumedInState(iso, org.id), '12');
  t.same((await periodsOf(iso, org.id)).map((p) => p.after), [{ used: '12', reached: true }]);
  const pools = await call(ingress.url, org, 'GET', `/api/v2/customers/${c.id}/credit-pools`);
  t.match(pools.creditPools, [{ id: pool.id, consumedCredits: '12', balance: '-2' }]);
});

/**
 * Five customers of one partition, each with a document of about 390 KB (520 units with long
 * ids and names), about 245 KB as a pin carries it (no unit names: pinnedConfig): their
 * documents together in a pin (about 1.2 MB) are more than NATS' max_payload (1 MiB) holds.
 * An ingress process has made the streams; nothing evaluates yet.
 */
async function bigCustomers(t: Test, name: string): Promise<{ iso: Isolation; ingress: ServiceProcess; org: TestOrg; k: number; customers: string[]; pools: Map<string, string>; procs: ServiceProcess[] }> {
  const iso = isolation(name);
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  const procs: ServiceProcess[] = [ingress];
  logsOnFailure(t, () => procs);
  t.teardown(async () => {
    for (const p of procs) await p.stop();
    await cleanup(iso);
  });
  await ingress.start(); // creates the streams and the partition consumers
  const org = await createOrg(ingress.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const made = await Promise.all(Array.from({ length: 64 }, (_, i) => call(ingress.url, org, 'POST', '/api/v2/customers', { externalId: `big-${i}`, name: `Big ${i}` }) as Promise<{ id: string }>));
  const byPartition = new Map<number, string[]>();
  for (const c of made) {
    const k = partitionOf(org.id, 'live', c.id, DEFAULT_BILLING_PARTITIONS);
    byPartition.set(k, [...(byPartition.get(k) ?? []), c.id]);
  }
  const [k, all] = [...byPartition].sort((a, b) => b[1].length - a[1].length)[0]!;
  const customers = all.slice(0, 5);
  t.equal(customers.length, 5, `five customers of partition ${k}`);
  const plan = await call(ingress.url, org, 'POST', '/api/v2/plans', { name: 'Pro' });
  const pools = new Map<string, string>();
  for (const id of customers) {
    await call(ingress.url, org, 'PUT', `/api/v2/customers/${id}/units/root`, {});
    const ola = await call(ingress.url, org, 'POST', `/api/v2/customers/${id}/order-line-attributes`, { planId: plan.id, eventName: 'e', unitPrice: '1', currency: 'EUR', creditsCurrencyId: CUR, creditsPerUnit: '1' });
    pools.set(id, (await call(ingress.url, org, 'POST', `/api/v2/customers/${id}/credit-pools`, { orderLineAttributeId: ola.id, credits: '1' })).id); // its one signal empties it: an event
  }
  const units = customers.flatMap((id) => Array.from({ length: 520 }, (_, u) => ({ id, u })));
  for (let i = 0; i < units.length; i += 16) {
    await Promise.all(units.slice(i, i + 16).map(({ id, u }) => call(ingress.url, org, 'PUT', `/api/v2/customers/${id}/units/${`u${u}-`.padEnd(200, 'x')}`, { name: `unit ${u} `.padEnd(255, 'n'), parentExternalId: 'root' })));
  }
  return { iso, ingress, org, k, customers, pools, procs };
}

/**
 * Queues billable messages of partition k before any evaluator runs, as a pipeline leaves them
 * under load: one per entry of `messages`, each a list of signals (event `e` on unit `root`),
 * batch ids `bat_<name><b>`. Their stream sequences.
 */
async function queueBillable(iso: Isolation, orgId: string, k: number, name: string, messages: { k: string; i: string; c: string; t: number }[][]): Promise<number[]> {
  const nc = await connect({ servers: NATS_URL });
  const seqs: number[] = [];
  try {
    const js = jetstream(nc);
    for (const [b, signals] of messages.entries()) {
      const h = natsHeaders();
      h.set(H_ORG, orgId);
      h.set(H_MODE, 'live');
      h.set(H_BATCH, `bat_${name}${b}`);
      h.set('Nats-Msg-Id', `bat_${name}${b}.p${k}`);
      const lines = signals.map((x) => JSON.stringify({ k: x.k, i: x.i, e: 'e', c: x.c, u: 'root', t: x.t, d: {} }));
      seqs.push((await js.publish(`${iso.natsPrefix}.billable-p.${k}.${orgId}`, lines.join('\n'), { headers: h })).seq);
    }
  } finally {
    await nc.close();
  }
  return seqs;
}

/** One signal for each customer of `ids` (message b). */
const oneEach = (ids: string[], b: number) => ids.map((id, i) => ({ k: id, i: `sig_big${b}_${i}`, c: `i:${id}`, t: Date.parse('2026-05-01T10:00:00Z') + b * 10 + i }));

/** Each customer's pool has consumed exactly 1 credit (its one signal, billed once). */
async function eachBilledOnce(t: Test, s: { ingress: ServiceProcess; org: TestOrg; customers: string[]; pools: Map<string, string> }): Promise<void> {
  for (const id of s.customers) {
    const [pool] = (await call(s.ingress.url, s.org, 'GET', `/api/v2/customers/${id}/credit-pools`)).creditPools as { id: string; consumedCredits: string }[];
    t.same([pool!.id, pool!.consumedCredits], [s.pools.get(id), '1'], `customer ${id}: its one signal billed once`);
  }
}

t.test('a group whose pin would not fit in one NATS message pins its first part, and the rest after: each customer billed once', storeIndependent, async (t) => {
  const s = await bigCustomers(t, 'billhalf');
  // One message per customer: one group of five by the group limits (64 messages, 448 customers), not by its pin's size.
  const seqs = await queueBillable(s.iso, s.org.id, s.k, 'big', s.customers.map((id, b) => oneEach([id], b)));
  const pipeline = new ServiceProcess(s.iso, { ROLE: 'pipeline', PIPELINE_FLUSH_MS: '10' });
  s.procs.push(pipeline);
  await pipeline.start();
  await billed(s.iso, 60_000);
  const last = (Object.values(await stateKeys(s.iso, `pin.${s.k}`)) as GroupPin[])[0]!;
  t.equal(last.done, true, 'the last group committed');
  t.equal(last.last, seqs.at(-1), 'up to the last message');
  t.ok(last.seqs.length < seqs.length, `in more than one group (the last pinned ${last.seqs.length} of ${seqs.length})`);
  await eachBilledOnce(t, s);
});

t.test('one message whose pin does not fit in one NATS message: the pin is written in parts, read back after a crash, and removed once committed', storeIndependent, async (t) => {
  const s = await bigCustomers(t, 'billspill');
  const [seq] = await queueBillable(s.iso, s.org.id, s.k, 'big', [oneEach(s.customers, 0)]);
  const env = { ROLE: 'pipeline', PIPELINE_FLUSH_MS: '10', ...ACK_WAIT };
  const first = new ServiceProcess(s.iso, { ...env, BILLING_FAULT_POINT: 'after-events' });
  s.procs.push(first);
  await first.start('listening');
  const crash = await killedAt(t, first, exitOf(first), 'after-events');
  t.equal(crash.seq, seq, 'killed while evaluating the one message');
  // (Its log line saying so is written asynchronously and may not be out before the SIGKILL: the pin itself shows it.)
  const spilled = (await stateKeys(s.iso, `pin.${s.k}`))[`pin.${s.k}`] as { seqs: number[]; spilled?: { parts: number } };
  t.same(spilled.seqs, [seq], 'the pin names the message');
  t.ok((spilled.spilled?.parts ?? 0) >= 2, `in ${spilled.spilled?.parts} parts`);
  t.equal((await stateKeyNames(s.iso, `pinpart.${s.k}.`)).length, spilled.spilled?.parts, 'the parts are in the state bucket');

  const second = new ServiceProcess(s.iso, env);
  s.procs.push(second);
  await second.start();
  await billed(s.iso, 60_000);
  const done = (await stateKeys(s.iso, `pin.${s.k}`))[`pin.${s.k}`] as GroupPin;
  t.same([done.seqs, done.done], [[seq], true], 'the replay committed exactly that message');
  t.same(await stateKeyNames(s.iso, `pinpart.${s.k}.`), [], 'and removed the parts');
  await eachBilledOnce(t, s);
  const events = await busEvents(s.iso, s.org.id);
  t.equal(new Set(events.map((e) => e.id)).size, events.length, 'no event twice');
  t.equal(events.filter((e) => e.event === 'billing-credits-depleted').length, s.customers.length, "each customer's pool depleted once");
});
