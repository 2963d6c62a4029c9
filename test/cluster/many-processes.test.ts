/**
 * Many processes on one shared store: 2 ingress + 2 pipeline + 1 dispatcher processes (ROLE=…,
 * one NATS prefix, one Redis prefix), all in server mode (CLICKHOUSE_URL) against one engine.
 * The embedded engine belongs to one process, so the store runs as its own process: the engine
 * host's test front (src/store/engine-host/standalone.ts; not a ClickHouse server), whose
 * `writer` and `analytics` users stand for CLICKHOUSE_USER and CLICKHOUSE_ANALYTICS_USER.
 *
 * Under load through both ingress processes (priced signals against a credit pool and a cap,
 * unpriced load batches, payment events), one pipeline process is killed with -9 repeatedly
 * and restarted. Afterwards: exact row counts, exact billing (pool balance, cost and
 * consumption rows equal to the model), and every event on the bus delivered to the webhook
 * receiver on loopback (each at least once, verified signatures; counted once per event).
 */
import t from 'tap';
import http from 'node:http';
import { createHmac } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { billed, busEvents, stateKeys } from '../helpers/bus.js';
import { sampleValue } from '../helpers/promql.js';
import { isAlive } from '../../bench/lib/nats-cluster.js';
import { OPERATOR_TOKEN, ServiceProcess, cleanup, createOrg, http as call, isolation, logsOnFailure, sendBatch, sleep, waitFor, type TestOrg } from '../helpers/service.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const STANDALONE = path.join(ROOT, 'dist/src/store/engine-host/standalone.js');
const CUR = '9a1c2b1e-0000-4000-8000-00000000c0de';

interface Front {
  proc: ChildProcess;
  env: Record<string, string>;
}

/** The engine host's test front on a fresh directory; resolves with the settings it prints. */
async function startFront(dir: string): Promise<Front> {
  const proc = spawn(process.execPath, [STANDALONE, '--dir', dir, '--writer-sessions', '4', '--analytics-sessions', '2'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const reap = (): void => void proc.kill('SIGKILL');
  process.once('exit', reap);
  proc.once('exit', () => process.removeListener('exit', reap));
  let out = '';
  let err = '';
  proc.stderr!.on('data', (b: Buffer) => (err = (err + b.toString()).slice(-10_000)));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`engine host test front did not start:\n${err}`)), 60_000);
    proc.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (!line || !out.includes('\n')) return;
      clearTimeout(timer);
      const info = JSON.parse(line) as { testFront: boolean; env: Record<string, string> };
      if (!info.testFront) reject(new Error('not the test front'));
      resolve({ proc, env: info.env });
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`engine host test front exited with ${code}:\n${err}`));
    });
  });
}

async function ok(base: string, org: TestOrg, method: string, p: string, body?: unknown): Promise<any> {
  const r = await call(base, method, p, { token: org.live, body });
  if (r.status >= 300) throw new Error(`${method} ${p}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

// The billing model (as in test/api/billing-crash.test.ts): 0.5 credits per `e` signal, a pool
// of 600 credits, a yearly cap of 400 credits. 60 batches × 40 signals = 2,400 signals = 1,200
// credits: the pool is emptied exactly by the 1,200th signal, the rest is overage.
const PRICED_BATCHES = 60;
const PER = 40;
const GRANTED = '600';
const LOAD_BATCHES = 40;
const PAYMENTS = 12;
const BILLED_EVENTS = ['billing-credits-depleted', 'billing-overage-incurred', 'billing-credit-cap-reached', 'billing-payment-succeeded'] as const;

t.test('2 ingress + 2 pipeline + 1 dispatcher on one store, a pipeline process killed -9 repeatedly', async (t) => {
  const started = Date.now();
  const storeDir = mkdtempSync(path.join(tmpdir(), 'billing-front-'));
  const front = await startFront(path.join(storeDir, 'chdb'));
  const iso = isolation('many');
  const common = {
    ...front.env,
    PIPELINE_FLUSH_MS: '20',
    PIPELINE_ACK_WAIT_MS: '3000',
    BILLING_ACK_WAIT_MS: '2000',
    PIPELINE_WORKERS: '1',
  };
  const ingress = [new ServiceProcess(iso, { ...common, ROLE: 'ingress' }), new ServiceProcess(iso, { ...common, ROLE: 'ingress' })];
  const pipelineEnv = { ...common, ROLE: 'pipeline' };
  const pipelines = [new ServiceProcess(iso, pipelineEnv), new ServiceProcess(iso, pipelineEnv)];
  const dispatcher = new ServiceProcess(iso, { ...common, ROLE: 'dispatcher', WEBHOOK_TIMEOUT_MS: '2000', DISPATCHER_ACK_WAIT_MS: '4000', WEBHOOK_RETRY_SCHEDULE_MS: '200,200,200,200,200' });

  // The webhook receiver: every delivery verified with the organization's secret.
  let secret = '';
  let badSignatures = 0;
  const received = new Map<string, number>();
  const receiver = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const m = /^t=(\d+),s=(.+)$/.exec(String(req.headers['x-webhook-signature'] ?? ''));
      if (!(m && createHmac('sha256', secret).update(`${m[1]}.`).update(raw).digest('base64') === m[2])) badSignatures++;
      const b = JSON.parse(raw.toString()) as { event: string; data: unknown };
      // Deliveries carry no event id: an event is known by its name and payload (distinct per event, checked below).
      const key = `${b.event} ${JSON.stringify(b.data)}`;
      received.set(key, (received.get(key) ?? 0) + 1);
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const hookUrl = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hook`;

  logsOnFailure(t, () => [...ingress, ...pipelines, dispatcher]);
  t.teardown(async () => {
    for (const p of [...ingress, ...pipelines, dispatcher]) await p.stop().catch(() => undefined);
    receiver.closeAllConnections();
    receiver.close();
    front.proc.kill('SIGTERM');
    await new Promise((r) => (front.proc.exitCode !== null || front.proc.signalCode !== null ? r(null) : front.proc.once('exit', r)));
    rmSync(storeDir, { recursive: true, force: true });
    await cleanup(iso);
  });

  // The pipelines first (they create the store's tables and views), then the others.
  await Promise.all(pipelines.map((p) => p.start()));
  await Promise.all([...ingress.map((p) => p.start()), dispatcher.start()]);
  t.comment(`5 processes and the store ready after ${Date.now() - started} ms`);
  for (const p of pipelines) {
    const ready = p.output.split('\n').find((l) => l.includes('"msg":"ready"'));
    t.match(ready, /"store":"clickhouse"/, 'pipeline in server mode (CLICKHOUSE_URL)');
  }

  const [a, b] = ingress.map((p) => p.url) as [string, string];
  const org = await createOrg(a, { burst: 1_000_000_000, refillPerSecond: 1_000_000_000 });
  // Billing configuration through one ingress, webhooks through the other: shared state.
  const c = await ok(a, org, 'POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme' });
  await ok(a, org, 'PUT', `/api/v2/customers/${c.id}/units/root`, {});
  const plan = await ok(a, org, 'POST', '/api/v2/plans', { name: 'Pro' });
  const ola = await ok(a, org, 'POST', `/api/v2/customers/${c.id}/order-line-attributes`, { planId: plan.id, eventName: 'e', unitPrice: '0.001', currency: 'EUR', includedQuantity: '1000', creditsCurrencyId: CUR, creditsPerUnit: '0.5' });
  await ok(a, org, 'POST', `/api/v2/customers/${c.id}/credit-pools`, { orderLineAttributeId: ola.id, credits: GRANTED });
  await ok(a, org, 'PUT', `/api/v2/customers/${c.id}/units/root/credit-caps/${CUR}`, { amount: '400', frequency: 'YEARLY', effectiveFrom: '2026-01-01T00:00:00Z' });
  secret = (await ok(b, org, 'POST', '/api/v2/webhooks/rotate-secret')).signingSecret;
  for (const e of BILLED_EVENTS) await ok(b, org, 'PATCH', `/api/v2/webhooks/${e}`, { url: hookUrl, enabled: true });

  // Load: priced batches and 500-signal unpriced batches, alternating between the ingress
  // processes; payment events through the operator API. A 503 is resent with the same keys.
  const statuses = new Map<number, number>();
  const send = async (i: number, body: unknown, base: string): Promise<void> => {
    const end = Date.now() + 30_000;
    for (;;) {
      const r = await sendBatch(base, org.live, body);
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      if (r.status === 202) return;
      if (r.status !== 503 || Date.now() > end) throw new Error(`batch ${i}: ${r.status} ${JSON.stringify(r.body)}`);
      await sleep(100);
    }
  };
  const priced = (i: number) => ({ signals: Array.from({ length: PER }, (_, j) => ({ eventName: 'e', customer: { externalCustomerId: 'acme' }, unitId: 'root', timestamp: '2026-05-01T00:00:00Z', idempotencyKey: `p${i}-${j}` })) });
  const load = (i: number) => ({ signals: Array.from({ length: 500 }, (_, j) => ({ eventName: 'load', customer: { externalCustomerId: `cus_${j % 17}` }, idempotencyKey: `l${i}-${j}`, data: { i, j } })) });
  let sent = 0;
  const producer = (async () => {
    for (let i = 0; i < Math.max(PRICED_BATCHES, LOAD_BATCHES); i++) {
      const base = i % 2 === 0 ? a : b;
      if (i < PRICED_BATCHES) await send(i, priced(i), base);
      if (i < LOAD_BATCHES) await send(i, load(i), base === a ? b : a);
      if (i < PAYMENTS) {
        const r = await call(base, 'POST', `/admin/v1/organizations/${org.id}/events`, {
          token: OPERATOR_TOKEN,
          body: { mode: 'live', event: 'billing-payment-succeeded', data: { payment: { id: `pay_${i}`, invoiceId: null, invoiceNumber: null, customerId: 'acme', customerName: null, amount: i + 1, currency: 'EUR', status: 'posted', paymentDate: '2026-11-01T00:00:00Z', paymentType: 'sepa', externalPaymentId: null } } },
        });
        if (r.status !== 202) throw new Error(`payment ${i}: ${r.status} ${JSON.stringify(r.body)}`);
      }
      sent = i + 1;
      await sleep(150);
    }
  })();

  // Kill -9 the first pipeline process three times while the load runs, restarting it each time.
  const stored = async (): Promise<number> => {
    for (const p of pipelines) {
      const r = await call(p.url, 'GET', `/admin/v1/organizations/${org.id}/stats`, { token: OPERATOR_TOKEN }).catch(() => null);
      if (r?.status === 200) return r.body.signals.live as number;
    }
    return -1;
  };
  const kills: string[] = [];
  for (const threshold of [2_000, 8_000, 14_000]) {
    const seen = await waitFor(stored, (n) => n >= threshold, 40_000);
    const pid = pipelines[0]!.proc!.pid!;
    await pipelines[0]!.kill9();
    t.notOk(isAlive(pid), `pipeline pid ${pid} killed with -9 at ${seen} stored rows (${sent} rounds sent)`);
    kills.push(`${seen}`);
    pipelines[0] = new ServiceProcess(iso, pipelineEnv);
    await pipelines[0].start();
  }
  await producer;
  t.equal(kills.length, 3, 'three kills');
  t.same([...statuses.keys()].filter((s) => s !== 202 && s !== 503), [], `only 202 (and 503 resent) answers: ${JSON.stringify(Object.fromEntries(statuses))}`);

  await billed(iso);
  // The billing partitions shared out between the two live pipeline processes
  // (src/billing/evaluator/members.ts: a killed process's heartbeat counts until MEMBER_TTL_MS).
  const pulled = (): Promise<(number | undefined)[]> => Promise.all(pipelines.map(async (p) => sampleValue(await (await fetch(`${p.url}/metrics`)).text(), 'billing_pulled_partitions')));
  t.same(await waitFor(pulled, (s) => s[0] === 4 && s[1] === 4, 30_000), [4, 4], 'the two live pipeline processes pull four of the eight billing partitions each');
  const expectedSignals = PRICED_BATCHES * PER + LOAD_BATCHES * 500;
  t.equal(await waitFor(stored, (n) => n >= expectedSignals, 20_000), expectedSignals, `exactly ${expectedSignals} signal rows`);

  // Billing: the state, the events and the rows equal the model.
  // The running state of each customer (cs.<org>.live.<customer>, src/billing/evaluator/customer-state.ts): one here.
  const states = Object.values(await stateKeys(iso, `cs.${org.id}.live.`)) as { after: { consumed: Record<string, string> } }[];
  t.same(states.flatMap((st) => Object.values(st.after.consumed)), ['1200'], 'the pool consumed exactly 2,400 × 0.5 credits');
  const events = await busEvents(iso, org.id);
  t.equal(new Set(events.map((e) => e.id)).size, events.length, 'no event twice on the bus');
  const dep = events.filter((e) => e.event === 'billing-credits-depleted');
  t.equal(dep.length, 1, 'one depletion');
  t.equal(dep[0]?.data.credits.remainingCreditsDecimal, '0', 'the pool emptied exactly');
  t.same(events.filter((e) => e.event === 'billing-overage-incurred').map((e) => e.data.overage.eventType).sort(), ['OverageCredit', 'OverageUsage'], 'overage events');
  const caps = events.filter((e) => e.event === 'billing-credit-cap-reached');
  t.equal(caps.length, 1, 'one cap reached');
  t.equal(caps[0]?.data.usedDecimal, '400');
  t.equal(events.filter((e) => e.event === 'billing-payment-succeeded').length, PAYMENTS, 'every payment event on the bus');

  // The rows, read through an ingress process as the read-only analytics user of the store.
  const q = await call(a, 'POST', '/api/v2/analytics/query', {
    token: org.live,
    body: { query: "SELECT count(), toString(sum(credits)), toString(min(balance_after)), (SELECT count() FROM fact_cost), (SELECT count() FROM fact_signal), (SELECT count() FROM fact_signal WHERE event_name = 'load') FROM fact_credit_consumption" },
  });
  t.equal(q.status, 200, `analytics through the analytics user: ${JSON.stringify(q.body).slice(0, 300)}`);
  t.same(q.body.rows, [['2400', '1200', '-600', '2400', String(expectedSignals), String(LOAD_BATCHES * 500)]], 'one cost and one consumption row per priced signal, exact balance, every signal once');

  // Every event delivered: the receiver saw each bus event (by name and payload) at least once, nothing else.
  const keys = events.filter((e) => (BILLED_EVENTS as readonly string[]).includes(e.event)).map((e) => `${e.event} ${JSON.stringify(e.data)}`);
  t.equal(new Set(keys).size, keys.length, 'each event has a distinct payload (so the receiver can tell them apart)');
  await waitFor(async () => keys.filter((k) => received.has(k)).length, (n) => n === keys.length, 30_000);
  t.same(keys.filter((k) => !received.has(k)), [], `every one of the ${keys.length} events delivered`);
  t.same([...received.keys()].filter((k) => !keys.includes(k)), [], 'nothing delivered that is not on the bus');
  t.equal(badSignatures, 0, 'every delivery verifies');
  const repeats = [...received.values()].filter((n) => n > 1).length;
  t.comment(`figures: ${expectedSignals} signals, ${kills.length} pipeline kills (at ${kills.join(', ')} stored rows), ${events.length} events, ${repeats} delivered more than once (deduped by the receiver), answers ${JSON.stringify(Object.fromEntries(statuses))}, ${Date.now() - started} ms in all`);
});
