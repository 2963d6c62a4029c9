/**
 * Back-pressure from billing in one process (ROLE=all, src/shared/backlog-gate.ts): while the
 * oldest billable message the evaluator holds and has not committed was stored more than
 * INGRESS_HOLD_BILLING_LAG_MS ago, the ingress holds each 202 up to INGRESS_HOLD_MAX_MS —
 * though the pipeline itself keeps up; the answer is unchanged, and once billing has caught up
 * answers are no longer held.
 *
 * Billing is made to lag for real: the evaluator's fault hook pauses it (BILLING_FAULT_POINT
 * before-states, action pause) on its first priced group, for PAUSE_MS. Where it lags is
 * observed, not slept for: the hook logs that it is pausing, and the service counts held
 * answers (usage_ingress_answers_held_total).
 */
import t from 'tap';
import { sampleValue } from '../helpers/promql.js';
import { billed } from '../helpers/bus.js';
import { counts, createOrg, http, logLines, sendBatch, startService, useService, waitFor, type TestOrg } from '../helpers/service.js';
import type { ServiceProcess } from '../../harness/service.js';

const HOLD_MS = 1_000;
const PAUSE_MS = 8_000;
const { iso, svc } = useService(t, 'holdbilling', {
  BILLING_FAULT_POINT: 'before-states',
  BILLING_FAULT_ACTION: 'pause',
  BILLING_FAULT_PAUSE_MS: String(PAUSE_MS),
  INGRESS_HOLD_BILLING_LAG_MS: '300',
  INGRESS_HOLD_MAX_MS: String(HOLD_MS),
});
const CUR = '7e1c2b1e-0000-4000-8000-0000000000aa';

const heldOn = async (p: ServiceProcess): Promise<number> => sampleValue(await (await fetch(`${p.url}/metrics`)).text(), 'usage_ingress_answers_held_total') ?? 0;
const held = (): Promise<number> => heldOn(svc);
const callOn = async (p: ServiceProcess, org: TestOrg, method: string, path: string, body?: unknown): Promise<any> => {
  const r = await http(p.url, method, path, { token: org.live, body });
  if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
};
const call = (org: TestOrg, method: string, path: string, body?: unknown): Promise<any> => callOn(svc, org, method, path, body);
/** Customer acme with a root unit, an attribute pricing event `e` and a pool: its signals are priced. */
async function pricedAcme(p: ServiceProcess, org: TestOrg): Promise<void> {
  const c = await callOn(p, org, 'POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme' });
  await callOn(p, org, 'PUT', `/api/v2/customers/${c.id}/units/root`, {});
  const plan = await callOn(p, org, 'POST', '/api/v2/plans', { name: 'Pro' });
  const ola = await callOn(p, org, 'POST', `/api/v2/customers/${c.id}/order-line-attributes`, { planId: plan.id, eventName: 'e', unitPrice: '1', currency: 'EUR', creditsCurrencyId: CUR, creditsPerUnit: '1' });
  await callOn(p, org, 'POST', `/api/v2/customers/${c.id}/credit-pools`, { orderLineAttributeId: ola.id, credits: '1000' });
}
/** `n` signals of event `e` for customer acme (priced when `priced`), unit root. */
const batchOf = (key: string, n = 5, priced = true) => ({ signals: Array.from({ length: n }, (_, i) => ({ eventName: priced ? 'e' : 'unpriced', customer: { externalCustomerId: 'acme' }, unitId: 'root', idempotencyKey: `${key}-${i}` })) });

t.test('answers are held while billing lags, though the pipeline keeps up, and only then', async (t) => {
  const org = await createOrg(svc.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  await pricedAcme(svc, org);
  t.equal(await held(), 0, 'nothing held before any traffic');

  // The first priced group pauses in the evaluator: its message waits, its lag grows.
  t.equal((await sendBatch(svc.url, org.live, batchOf('first'))).status, 202);
  const pausedAt = Date.now();
  const [line] = await waitFor(async () => logLines(svc, 'billing fault point reached'), (l) => l.length > 0, 60_000);
  t.match(line, { point: 'before-states', action: 'pause', orgId: org.id }, 'billing is paused on the first group');

  // Batches of another (unpriced) event go through the pipeline at once; the answers wait once
  // the paused message is 300 ms old (one every 50 ms until one is held, for at most 5 s).
  const times: number[] = [];
  for (let b = 0; Date.now() - pausedAt < 5_000 && (await held()) === 0; b++) {
    if (b > 0) await new Promise((r) => setTimeout(r, 50));
    const start = Date.now();
    const r = await sendBatch(svc.url, org.live, batchOf(`during-${b}`, 5, false));
    times.push(Date.now() - start);
    t.equal(r.status, 202, `batch ${b}: accepted`);
    t.match(r.body, { ingested: 5, duplicates: 0, failed: 0 }, `batch ${b}: the usual answer`);
  }
  t.ok(Date.now() - pausedAt < PAUSE_MS - 1_000, 'all sent while billing was still paused');
  t.ok((await held()) >= 1, 'an answer was held while billing lagged');
  t.ok(times.some((ms) => ms >= HOLD_MS - 100), `it waited the hold time (${times.join(', ')} ms)`);
  t.ok(times.every((ms) => ms < HOLD_MS + 1_000), 'and no longer');

  // The pause ends; billing commits its backlog and its lag falls: answers are no longer held.
  await billed(iso);
  t.same(await counts(svc.url, org.id), { live: 5 + 5 * times.length, test: 0 }, 'every signal stored, once');
  const before = await held();
  for (let b = 0; b < 3; b++) t.equal((await sendBatch(svc.url, org.live, batchOf(`after-${b}`))).status, 202);
  t.equal(await held(), before, 'caught up: no answer held');
});

t.test('a partition that stops moving (paused for 25 s here) no longer holds answers once it has committed nothing for 10 s', async (t) => {
  const { svc: p } = await startService(t, 'holdstuck', {
    BILLING_FAULT_POINT: 'before-states',
    BILLING_FAULT_ACTION: 'pause',
    BILLING_FAULT_PAUSE_MS: '25000',
    INGRESS_HOLD_BILLING_LAG_MS: '300',
    INGRESS_HOLD_MAX_MS: String(HOLD_MS),
  });
  const org = await createOrg(p.url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  await pricedAcme(p, org);
  t.equal((await sendBatch(p.url, org.live, batchOf('first'))).status, 202);
  await waitFor(async () => logLines(p, 'billing fault point reached'), (l) => l.length > 0, 60_000);
  const pausedAt = Date.now();
  // Held at first (the paused message is over 300 ms old) …
  await waitFor(async () => {
    await sendBatch(p.url, org.live, batchOf(`s-${Date.now()}`, 2, false));
    return heldOn(p);
  }, (n) => n > 0, 5_000);
  t.ok((await heldOn(p)) > 0, 'answers held while the paused partition is young');
  // … then, the partition having committed nothing for 10 s, answered at once again, the pause still on.
  let quick = -1;
  for (let b = 0; Date.now() - pausedAt < 20_000; b++) {
    const start = Date.now();
    t.equal((await sendBatch(p.url, org.live, batchOf(`late-${b}`, 2, false))).status, 202);
    if (Date.now() - start < HOLD_MS / 2 && Date.now() - pausedAt > 10_000) {
      quick = Date.now() - pausedAt;
      break;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  t.ok(quick > 0, `answered without a hold ${quick} ms into a 25 s pause`);
  const before = await heldOn(p);
  for (let b = 0; b < 3; b++) await sendBatch(p.url, org.live, batchOf(`after-${b}`, 2, false));
  t.equal(await heldOn(p), before, 'and from then on');
  await p.kill9(); // not a graceful stop: that would wait for the rest of the pause
});
