/**
 * Billing under failure and concurrency: the evaluating process killed at precise points of
 * the commit order (the test-only fault hook, src/billing/evaluator/fault.ts), twice on the
 * same batch; two pipeline processes evaluating one organization's stream at once; the NATS
 * connection cut while an evaluation is held between its events and its commit; and a
 * configuration change between a crashed evaluation and its replay (continued in billing-crash-2.test.ts;
 * the shared helpers: test/helpers/billing-crash.ts).
 * Every fault is checked to have happened where it was meant to (events published, state not
 * committed, …). Afterwards the balances, rows and events are exactly those of one orderly run.
 * The billing consumers run with a 2 s ack wait (BILLING_ACK_WAIT_MS), so a message held by
 * a dead process comes back quickly.
 */
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { partitionOf } from '../../src/billing/evaluator/partition.js';
import { DEFAULT_BILLING_PARTITIONS } from '../../src/config.js';
import { billed, busEvents, stateKeys } from '../helpers/bus.js';
import { acmeWithPool, call } from '../helpers/billing-api.js';
import { NATS_URL, ServiceProcess, cleanup, createOrg, http, isolation, logLines, logsOnFailure, sendBatch, waitFor } from '../helpers/service.js';
import { ACK_WAIT, batch, checkSerialRun, committed, consumedInState, CUR, customerStates, exitOf, faultLine, finishedAsOneSerialRun, killedAt, PER, periodsOf, storeIndependent, teardownBoth, withBatches, type GroupPin } from '../helpers/billing-crash.js';

t.test('kill -9 of the evaluating process after its events, then of the replay after its period writes', async (t) => {
  const iso = isolation('billcrash');
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  const env = { ROLE: 'pipeline', PIPELINE_ACK_WAIT_MS: '3000', PIPELINE_FLUSH_MS: '20', ...ACK_WAIT };
  let pipeline = new ServiceProcess(iso, { ...env, BILLING_FAULT_POINT: 'after-events' });
  t.teardown(async () => {
    await ingress.stop();
    await pipeline.stop();
    await cleanup(iso);
  });
  await ingress.start();
  await pipeline.start();
  let exited = exitOf(pipeline);
  const org = await withBatches(t, ingress.url);

  // 1. Killed after publishing a batch's events, before its period keys and state.
  const first = await killedAt(t, pipeline, exited, 'after-events');
  t.equal(first.orgId, org.id);
  t.equal((await busEvents(iso, org.id)).length, first.events, "the batch's events were on the bus when it died (it is the first batch with events)");
  t.notOk(await committed(iso, first.seq), 'it was not committed');
  t.same(Object.values(await customerStates(iso, org.id)).filter((c) => c.seq === first.seq), [], 'nor its customer state written');
  t.same((await periodsOf(iso, org.id)).filter((p) => p.seq === first.seq), [], 'nor its cap period');

  // 2. The replay of that batch killed after writing its period key, before the state.
  pipeline = new ServiceProcess(iso, { ...env, BILLING_FAULT_POINT: 'before-state-write' });
  // Until it listens only: the held batch comes back at once and may reach the point before `ready`.
  await pipeline.start('listening');
  exited = exitOf(pipeline);
  const second = await killedAt(t, pipeline, exited, 'before-state-write');
  t.equal(second.seq, first.seq, 'the held batch came back first and was replayed');
  t.notOk(await committed(iso, second.seq), 'it was not committed');
  t.equal(Object.values(await customerStates(iso, org.id)).filter((c) => c.seq === second.seq).length, 1, 'its customer state key was written');
  const written = (await periodsOf(iso, org.id)).filter((p) => p.seq === second.seq);
  t.equal(written.length, 1, 'its cap period key was written');
  t.equal(written[0]?.after.reached, true, 'with the cap reached in it');

  // 3. A process without faults replays it once more (its own period write undone) and finishes.
  await finishedAsOneSerialRun(t, iso, env, org);
});

t.test('kill -9 of the evaluating process after its state writes, before any row or event is published (the two run at once otherwise)', storeIndependent, async (t) => {
  const iso = isolation('billcrashst');
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  const env = { ROLE: 'pipeline', PIPELINE_ACK_WAIT_MS: '3000', PIPELINE_FLUSH_MS: '20', ...ACK_WAIT };
  const pipeline = new ServiceProcess(iso, { ...env, BILLING_FAULT_POINT: 'after-states' });
  logsOnFailure(t, () => [ingress, pipeline]);
  t.teardown(async () => {
    await ingress.stop();
    await pipeline.stop();
    await cleanup(iso);
  });
  await ingress.start();
  await pipeline.start();
  const exited = exitOf(pipeline);
  const org = await withBatches(t, ingress.url);

  const crash = await killedAt(t, pipeline, exited, 'after-states');
  t.equal(crash.orgId, org.id);
  t.same(await busEvents(iso, org.id), [], "none of the group's events was on the bus when it died (it is the first group with events)");
  t.notOk(await committed(iso, crash.seq), 'it was not committed');
  t.equal(Object.values(await customerStates(iso, org.id)).filter((c) => c.seq === crash.seq).length, 1, 'its customer state key was written');
  t.equal((await periodsOf(iso, org.id)).filter((p) => p.seq === crash.seq).length, 1, 'and its cap period key');

  // A process without faults replays the group from the keys' `before` and finishes.
  await finishedAsOneSerialRun(t, iso, env, org);
});

t.test('a configuration change made while a group is in flight applies to the batch sent after it, whose pin is made ahead (after that group\'s writes, before its commit)', storeIndependent, async (t) => {
  const iso = isolation('billahead');
  // The first group with events pauses after publishing them: the next batch is held meanwhile.
  const pipeline = new ServiceProcess(iso, { ROLE: 'all', PIPELINE_FLUSH_MS: '10', ...ACK_WAIT, BILLING_FAULT_POINT: 'after-events', BILLING_FAULT_ACTION: 'pause', BILLING_FAULT_PAUSE_MS: '8000' });
  logsOnFailure(t, () => [pipeline]);
  t.teardown(async () => {
    await pipeline.stop();
    await cleanup(iso);
  });
  await pipeline.start();
  const org = await createOrg(pipeline.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const { c } = await acmeWithPool(pipeline.url, org, '10', CUR);
  const signals = (event: string, n: number, k: string) => ({ signals: Array.from({ length: n }, (_, i) => ({ eventName: event, customer: { externalCustomerId: 'acme' }, unitId: 'root', timestamp: '2026-05-01T10:00:00Z', idempotencyKey: `${k}-${i}` })) });
  // 12 credits from a pool of 10: a depletion and an overage, so the fault point acts on this group.
  t.equal((await sendBatch(pipeline.url, org.live, signals('e', 12, 'a'))).status, 202);
  const paused = await waitFor(async () => logLines(pipeline, 'billing fault point reached'), (l) => l.length > 0, 60_000);
  t.match(paused, [{ point: 'after-events', action: 'pause', orgId: org.id }], 'the first group is held after publishing its events');

  // Event `f` priced from now on; then a batch of it, sent after the change.
  const plan = await call(pipeline.url, org, 'POST', '/api/v2/plans', { name: 'Extra' });
  await call(pipeline.url, org, 'POST', `/api/v2/customers/${c.id}/order-line-attributes`, { planId: plan.id, eventName: 'f', unitPrice: '2', currency: 'EUR' });
  t.equal((await sendBatch(pipeline.url, org.live, signals('f', 5, 'b'))).status, 202);
  // Observed, not assumed: the second batch is held by the evaluator (delivered, not acked) beside the paused first one.
  const k = partitionOf(org.id, 'live', c.id, DEFAULT_BILLING_PARTITIONS);
  const nc = await connect({ servers: NATS_URL });
  t.teardown(() => nc.close());
  const jsm = await jetstreamManager(nc);
  const held = await waitFor(async () => (await jsm.consumers.info(`${iso.natsPrefix}_BILLABLE_P`, `billing-p${k}`)).num_ack_pending, (n) => n === 2, 6_000);
  t.equal(held, 2, "both batches' messages held (the first one's group paused, not acked)");

  await billed(iso);
  const costs = (await http(pipeline.url, 'POST', '/api/v2/analytics/query', { token: org.live, body: { query: 'SELECT event_name, count() FROM fact_cost GROUP BY event_name ORDER BY event_name' } })).body;
  t.same(costs.rows, [['e', '12'], ['f', '5']], 'the batch sent after the change is priced by it');
});

t.test('kill -9 right after a commit, before the ack: the committed group is only acked, the rest billed once (the commit being the next group\'s pin, made ahead)', storeIndependent, async (t) => {
  const iso = isolation('billcrashack');
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  // Groups of one 40-signal message: while one is evaluated the next ones are held, so the next group's pin is made ahead.
  const env = { ROLE: 'pipeline', PIPELINE_ACK_WAIT_MS: '3000', PIPELINE_FLUSH_MS: '20', BILLING_INLINE_SIGNALS: String(PER), ...ACK_WAIT };
  let pipeline = new ServiceProcess(iso, { ...env, BILLING_FAULT_POINT: 'after-state-write' });
  logsOnFailure(t, () => [ingress, pipeline]);
  t.teardown(async () => {
    await ingress.stop();
    await pipeline.stop();
    await cleanup(iso);
  });
  await ingress.start();
  const org = await withBatches(t, ingress.url);
  // Started once every batch waits: its billable messages come faster than one-message groups
  // are evaluated (until it listens only: the point may come before `ready`).
  await pipeline.start('listening');
  const exited = exitOf(pipeline);

  const crash = await killedAt(t, pipeline, exited, 'after-state-write');
  t.ok(await committed(iso, crash.seq), 'the group was committed when it died');
  const pins = Object.values(await stateKeys(iso, 'pin.')) as GroupPin[];
  const pin = pins.find((p) => p.seq >= crash.seq);
  // One customer: every billable message in one partition, at consecutive sequences.
  t.ok(pin && pin.seq === crash.seq + 1 && pin.done !== true, "committed by the next message's group's pin, pending (made ahead while the group published), not by a done pin of its own");
  t.equal((await busEvents(iso, org.id)).length, crash.events, "its events were on the bus (it is the first group with events)");

  pipeline = new ServiceProcess(iso, env);
  await pipeline.start();
  await billed(iso);
  const acked = logLines(pipeline, 'billable messages already committed (by another holder, or their ack was lost)');
  t.ok(acked.some((l) => (l.seqs as number[]).includes(crash.seq)), 'the replay found the group committed and only acked it');
  await checkSerialRun(t, iso, org.id);
});

t.test('two pipeline processes evaluating at once', async (t) => {
  const iso = isolation('billtwo');
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  // Two pipeline processes need two engines (chdb has one owner per data directory): rows
  // split between them, but balances (KV) and events (bus) are shared and must be exact.
  const isoB = { ...iso, dataDir: `${iso.dataDir}-b` };
  const p1 = new ServiceProcess(iso, { ROLE: 'pipeline', PIPELINE_FLUSH_MS: '10', ...ACK_WAIT });
  const p2 = new ServiceProcess(isoB, { ROLE: 'pipeline', PIPELINE_FLUSH_MS: '10', ...ACK_WAIT });
  teardownBoth(t, iso, isoB, () => [ingress, p1, p2]);
  await Promise.all([ingress.start(), p1.start(), p2.start()]);
  const org = await withBatches(t, ingress.url);
  await billed(iso);
  await checkSerialRun(t, iso, org.id);
});

t.test('a process stalled past the ack wait between its pin and its reads: its group is finished elsewhere, and it publishes nothing from the later state', async (t) => {
  const iso = isolation('billstall');
  const isoB = { ...iso, dataDir: `${iso.dataDir}-b` };
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  // A signals batch the stalled process had already pulled comes back to the other within 3 s.
  // BILLING_INLINE_SIGNALS: the 80-signal group below on a worker, as larger groups are by default.
  const env = { ROLE: 'pipeline', PIPELINE_ACK_WAIT_MS: '3000', PIPELINE_FLUSH_MS: '10', BILLING_INLINE_SIGNALS: '64', ...ACK_WAIT };
  // Stalled (main thread blocked, as by a long GC on a starved CPU) until the test releases
  // it: its held messages come back to the other process, its heartbeat lapses (members.ts).
  const release = join(mkdtempSync(join(tmpdir(), 'billstall-')), 'release');
  t.teardown(() => rmSync(dirname(release), { recursive: true, force: true }));
  const p1 = new ServiceProcess(iso, { ...env, BILLING_FAULT_POINT: 'before-states', BILLING_FAULT_ACTION: 'stall', BILLING_FAULT_PAUSE_MS: '300000', BILLING_FAULT_RELEASE_FILE: release });
  let p2: ServiceProcess | null = null;
  teardownBoth(t, iso, isoB, () => [ingress, p1, ...(p2 ? [p2] : [])]);
  await Promise.all([ingress.start(), p1.start()]);
  const org = await createOrg(ingress.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const { c } = await acmeWithPool(ingress.url, org, '100', CUR);
  await call(ingress.url, org, 'PUT', `/api/v2/customers/${c.id}/units/root/credit-caps/${CUR}`, { amount: '90', frequency: 'DAILY', effectiveFrom: '2026-05-01T00:00:00Z' });
  const signals = (n: number, key: string) => ({ signals: Array.from({ length: n }, (_, i) => ({ eventName: 'e', customer: { externalCustomerId: 'acme' }, unitId: 'root', timestamp: '2026-05-01T10:00:00Z', idempotencyKey: `${key}-${i}` })) });

  // 80 credits (evaluated on a worker: more than the inline limit), under the cap and the pool.
  t.equal((await sendBatch(ingress.url, org.live, signals(80, 'a'))).status, 202);
  const stalledLine = await waitFor(async () => faultLine(p1.output), (l) => l !== undefined, 60_000);
  t.match(stalledLine, { point: 'before-states', action: 'stall', orgId: org.id }, 'p1 pinned the group and stalled before reading its states');
  const seq1 = stalledLine!.seq;
  t.notOk(await committed(iso, seq1), 'the group is pinned, not committed');

  // p2 takes the partition (the group's messages come back to it after the ack wait) and
  // finishes the group, then evaluates the next batch: 15 credits, the cap of 90 reached.
  p2 = new ServiceProcess(isoB, env);
  await p2.start();
  t.ok(await waitFor(() => committed(iso, seq1), (v) => v, 60_000), 'p2 committed the stalled group');
  t.equal((await sendBatch(ingress.url, org.live, signals(15, 'b'))).status, 202);
  t.ok(
    await waitFor(async () => Object.values(await customerStates(iso, org.id)).some((s) => s.seq > seq1), (v) => v, 60_000),
    "the next batch's state is written: a later group's",
  );
  await waitFor(async () => (await busEvents(iso, org.id)).length, (n) => n >= 1, 20_000);
  const outputAt = p1.output;
  t.equal(outputAt.slice(outputAt.indexOf('billing fault point reached')).trim().split('\n').length, 1, 'p1 was still stalled meanwhile: nothing written after its fault line');

  // p1 wakes and reads the states: the later group's. It abandons its evaluation.
  writeFileSync(release, '');
  const abandoned = await waitFor(async () => logLines(p1, 'billing group committed by another holder while this one evaluated it; abandoned before publishing, looking again'), (l) => l.length > 0, 60_000);
  t.match(abandoned, [{ seq: seq1 }], 'p1 saw a later sequence in the state it read and abandoned the group');
  await billed(iso);
  const events = await busEvents(iso, org.id);
  t.same(events.map((e) => e.event), ['billing-credit-cap-reached'], 'only the cap, reached once in the second batch: no depletion from a state counted twice');
  t.equal(events[0]?.data.usedDecimal, '90');
  t.equal(await consumedInState(iso, org.id), '95', 'the pool consumed 80 + 15 credits: the stalled process wrote nothing');
  t.same((await periodsOf(iso, org.id)).map((p) => p.after), [{ used: '95', reached: true }]);
});

t.test('a process stalled past the ack wait right after a commit that wrote the next group\'s pin: that group is finished elsewhere, and the stalled one publishes nothing from the states it kept', storeIndependent, async (t) => {
  const iso = isolation('billstallfold');
  const isoB = { ...iso, dataDir: `${iso.dataDir}-b` };
  const ingress = new ServiceProcess(iso, { ROLE: 'ingress' });
  // Groups of one 40-signal message, so that each commit writes the next message's pin.
  const env = { ROLE: 'pipeline', PIPELINE_ACK_WAIT_MS: '3000', PIPELINE_FLUSH_MS: '10', BILLING_INLINE_SIGNALS: '40', ...ACK_WAIT };
  const release = join(mkdtempSync(join(tmpdir(), 'billstallfold-')), 'release');
  t.teardown(() => rmSync(dirname(release), { recursive: true, force: true }));
  const p1 = new ServiceProcess(iso, { ...env, BILLING_FAULT_POINT: 'after-state-write', BILLING_FAULT_ACTION: 'stall', BILLING_FAULT_PAUSE_MS: '300000', BILLING_FAULT_RELEASE_FILE: release });
  let p2: ServiceProcess | null = null;
  teardownBoth(t, iso, isoB, () => [ingress, p1, ...(p2 ? [p2] : [])]);
  await ingress.start();
  const org = await createOrg(ingress.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const { c } = await acmeWithPool(ingress.url, org, '50', CUR);
  const signals = (key: string) => ({ signals: Array.from({ length: 40 }, (_, i) => ({ eventName: 'e', customer: { externalCustomerId: 'acme' }, unitId: 'root', timestamp: '2026-05-01T10:00:00Z', idempotencyKey: `${key}-${i}` })) });
  // a: 40 of 50 credits; b: the pool depleted (events); c: more overage. All waiting before p1 starts.
  for (const key of ['a', 'b', 'c']) t.equal((await sendBatch(ingress.url, org.live, signals(key))).status, 202);
  // Until it listens only: the stall may come before `ready`.
  await p1.start('listening');
  const stalledLine = await waitFor(async () => faultLine(p1.output), (l) => l !== undefined, 60_000);
  t.match(stalledLine, { point: 'after-state-write', action: 'stall', orgId: org.id }, "p1 committed b's group and stalled before acking it");
  const seqB = stalledLine!.seq;
  const k = partitionOf(org.id, 'live', c.id, DEFAULT_BILLING_PARTITIONS);
  const pin = (await stateKeys(iso, `pin.${k}`))[`pin.${k}`] as GroupPin | undefined;
  t.ok(pin && pin.seq === seqB + 1 && pin.done !== true, "the commit was c's pin, pending");

  // p2 gets b and c back after the ack wait, acks b (committed) and finishes c.
  p2 = new ServiceProcess(isoB, env);
  await p2.start();
  t.ok(await waitFor(() => committed(iso, seqB + 1), (v) => v, 60_000), "p2 committed c's group");
  const outputAt = p1.output;
  t.equal(outputAt.slice(outputAt.indexOf('billing fault point reached')).trim().split('\n').length, 1, 'p1 was still stalled meanwhile');

  // p1 wakes holding c under the pin it wrote: it reads the pin beside the states, finds it moved, and looks again.
  writeFileSync(release, '');
  const lost = await waitFor(async () => logLines(p1, 'billing evaluation lost a compare-and-set; looking again'), (l) => l.length > 0, 60_000);
  t.same(lost[0]?.keys, [`pin.${k}`], "p1's check that failed was the pin's, before anything was published (not a state key's, after)");
  await billed(iso);
  t.same((await busEvents(iso, org.id)).map((e) => e.event).sort(), ['billing-credits-depleted', 'billing-overage-incurred'], 'the depletion and the overage, once each');
  t.equal(await consumedInState(iso, org.id), '120', 'the pool consumed 3 × 40 credits');
});
