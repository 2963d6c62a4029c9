/**
 * GET …/credit-pools shows what billing has committed: a group's customer state keys are
 * written beside its events, before its commit (src/billing/evaluator/consumer.ts, steps 5–8),
 * and while the group is pending in its partition's pin the balance shown is the one before it
 * (src/billing/evaluator/customer-state.ts `consumed`). Observed with the evaluator paused right
 * after its state writes (BILLING_FAULT_POINT=after-states, which writes the states before the
 * events), then let go.
 */
import t from 'tap';
import { billed, busEvents, stateKeys } from '../helpers/bus.js';
import { acmeWithPool, call } from '../helpers/billing-api.js';
import { ServiceProcess, cleanup, createOrg, isolation, logLines, logsOnFailure, sendBatch, waitFor } from '../helpers/service.js';

const CUR = '9a1c2b1e-0000-4000-8000-00000000c0de';

t.test('credit pools show the committed balance: not the state a pending group has written, until it commits', async (t) => {
  const iso = isolation('billview');
  const svc = new ServiceProcess(iso, { ROLE: 'all', PIPELINE_FLUSH_MS: '10', BILLING_ACK_WAIT_MS: '2000', BILLING_FAULT_POINT: 'after-states', BILLING_FAULT_ACTION: 'pause', BILLING_FAULT_PAUSE_MS: '6000' });
  logsOnFailure(t, () => [svc]);
  t.teardown(async () => {
    await svc.stop();
    await cleanup(iso);
  });
  await svc.start();
  const org = await createOrg(svc.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  const { c, pool } = await acmeWithPool(svc.url, org, '10', CUR);
  const pools = async () => (await call(svc.url, org, 'GET', `/api/v2/customers/${c.id}/credit-pools`)).creditPools.map((p: { consumedCredits: string; balance: string }) => [p.consumedCredits, p.balance]);

  // 12 credits from a pool of 10: a depletion and an overage, so the fault point acts on this group.
  const signals = { signals: Array.from({ length: 12 }, (_, i) => ({ eventName: 'e', customer: { externalCustomerId: 'acme' }, unitId: 'root', timestamp: '2026-05-01T10:00:00Z', idempotencyKey: `a-${i}` })) };
  t.equal((await sendBatch(svc.url, org.live, signals)).status, 202);
  const paused = await waitFor(async () => logLines(svc, 'billing fault point reached'), (l) => l.length > 0, 60_000);
  t.match(paused, [{ point: 'after-states', action: 'pause', orgId: org.id }], 'the group is held after its state writes');
  // Observed, not assumed: the customer's key already holds the state after the group, and no event is out yet.
  const written = (await stateKeys(iso, `cs.${org.id}.live.`))[`cs.${org.id}.live.${c.id}`] as { before: { consumed: Record<string, string> }; after: { consumed: Record<string, string> } };
  t.same([written.before.consumed[pool.id], written.after.consumed[pool.id]], [undefined, '12'], "the state key holds the group's result");
  t.same(await busEvents(iso, org.id), [], 'no event published yet');
  t.same(await pools(), [['0', '10']], 'the balance shown is the committed one, before the pending group');

  await billed(iso);
  t.same(await pools(), [['12', '-2']], 'once the group is committed, its balance');
  t.same((await busEvents(iso, org.id)).map((e) => e.event).sort(), ['billing-credits-depleted', 'billing-overage-incurred'], 'and its events');
});
