/**
 * Webhook latency and throughput.
 *
 * Phase 1 (crossing → delivery): ROLE=all with webhooks to a local receiver (plain HTTP,
 * verifying every delivery per spec 5.2). --customers customers each get a pool of 1 credit;
 * one signal per customer (open loop, --rate signals/s) depletes its pool. Latency = from the
 * 202 of the signal's POST to the moment the receiver has verified the
 * billing-credits-depleted delivery for that customer (hdr histogram).
 * Phase 2 (deliveries/s): --events payment events published through the operator API as fast
 * as it takes them; rate at which the receiver verifies them.
 *
 * Target: p99 ≤ 250 ms at moderate load.
 *
 *   node dist/bench/webhooks.js [--customers N (200)] [--rate R (20)] [--events N (2000)] [--flush-ms MS (service default)]
 */
import http from 'node:http';
import { createHmac } from 'node:crypto';
import { Args } from './lib/args.js';
import { LatencyHistogram, appendHistory, hostInfo, printHeader, printProblems, round, sleep } from './lib/report.js';
import { OPERATOR_TOKEN, createUnlimitedOrg, http as call } from './lib/api.js';
import { cleanup, isolation, onInterrupt, startBenchService as startService } from '../harness/service.js';

const args = new Args('node dist/bench/webhooks.js [options]', {
  customers: { help: 'customers, one depletion each (default 200)' },
  rate: { help: 'signals per second in phase 1 (default 20)' },
  events: { help: 'payment events in phase 2 (default 2000)' },
  'flush-ms': { help: 'PIPELINE_FLUSH_MS for the service (default: the service default, 200)' },
});
const CUSTOMERS = args.num('customers', 200, 1, 900);
const RATE = args.num('rate', 20, 1, 1000);
const EVENTS = args.num('events', 2000, 10, 100_000);
const FLUSH = args.num('flush-ms', undefined, 1, 60_000);
const TARGET_P99 = 250;
const CUR = '7e1c2b1e-0000-4000-8000-0000000000be';

async function main(): Promise<void> {
  const host = hostInfo();
  printHeader('webhooks: threshold crossing → verified delivery; deliveries per second', host, { customers: CUSTOMERS, rate: RATE, events: EVENTS, flushMs: FLUSH ?? 'default (200)' });
  const problems: string[] = [];
  let secret = '';
  const arrived = new Map<string, number>();
  let verified = 0;
  let unverified = 0;
  const receiver = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const m = /^t=(\d+),s=(.+)$/.exec(String(req.headers['x-webhook-signature'] ?? ''));
      const ok = m !== null && createHmac('sha256', secret).update(`${m[1]}.`).update(raw).digest('base64') === m[2];
      res.writeHead(ok ? 200 : 401).end();
      if (!ok) return void unverified++;
      verified++;
      const env = JSON.parse(raw.toString()) as { event: string; data: { credits?: { customerId: string }; payment?: { id: string } } };
      const key = env.data.credits?.customerId ?? env.data.payment?.id;
      if (key && !arrived.has(key)) arrived.set(key, performance.now());
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hook`;

  const iso = isolation('webhooks', 'bench');
  onInterrupt(async () => void (await cleanup(iso)));
  const svc = await startService({
    role: 'all',
    operatorToken: OPERATOR_TOKEN,
    iso,
    env: {
      WEBHOOK_ENCRYPTION_KEY: 'ab'.repeat(32),
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_NETWORKS: '127.0.0.0/8',
      ...(FLUSH !== undefined ? { PIPELINE_FLUSH_MS: String(FLUSH) } : {}),
    },
  });
  const latency = new LatencyHistogram();
  let deliveriesPerSec = 0;
  try {
    const org = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    const ok = async (method: string, path: string, body?: unknown, token = org.liveKey): Promise<any> => {
      const r = await call<any>(`${svc.url}${path}`, method, token, body);
      if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
      return r.body;
    };
    secret = (await ok('POST', '/api/v2/webhooks/rotate-secret')).signingSecret;
    await ok('PATCH', '/api/v2/webhooks/billing-credits-depleted', { url, enabled: true });
    await ok('PATCH', '/api/v2/webhooks/billing-payment-succeeded', { url, enabled: true });
    const plan = await ok('POST', '/api/v2/plans', { name: 'bench' });
    const customers: string[] = [];
    for (let i = 0; i < CUSTOMERS; i++) {
      const c = await ok('POST', '/api/v2/customers', { externalId: `bench-${i}`, name: `Bench ${i}` });
      const ola = await ok('POST', `/api/v2/customers/${c.id}/order-line-attributes`, { planId: plan.id, eventName: 'call', unitPrice: '1', currency: 'USD', creditsCurrencyId: CUR, creditsPerUnit: '1' });
      await ok('POST', `/api/v2/customers/${c.id}/credit-pools`, { orderLineAttributeId: ola.id, credits: '1' });
      customers.push(c.id);
    }
    console.log(`configured ${CUSTOMERS} customers with 1-credit pools`);

    // Phase 1: open loop at RATE signals/s; each depletes one pool.
    const accepted = new Map<string, number>();
    const interval = 1000 / RATE;
    const t0 = performance.now();
    const posts: Promise<void>[] = [];
    for (let i = 0; i < CUSTOMERS; i++) {
      const due = t0 + i * interval;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
      const id = customers[i]!;
      posts.push(
        call(`${svc.url}/api/v2/signals/bulk`, 'POST', org.liveKey, { signals: [{ eventName: 'call', customer: { customerId: id } }] }).then((r) => {
          if (r.status !== 202) problems.push(`signal ${i}: ${r.status}`);
          accepted.set(id, performance.now());
        }),
      );
    }
    await Promise.all(posts);
    const end = Date.now() + 60_000;
    while (customers.some((c) => !arrived.has(c)) && Date.now() < end) await sleep(50);
    for (const c of customers) {
      const a = accepted.get(c);
      const d = arrived.get(c);
      if (a !== undefined && d !== undefined) latency.record(Math.max(0, d - a));
      else problems.push(`customer ${c}: no delivery`);
    }

    // Phase 2: deliveries per second.
    const before = verified;
    const p0 = performance.now();
    const queue = Array.from({ length: EVENTS }, (_, i) => i);
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        for (let i = queue.shift(); i !== undefined; i = queue.shift()) {
          await ok('POST', `/admin/v1/organizations/${org.id}/events`, { mode: 'live', event: 'billing-payment-succeeded', data: { payment: { id: `pay_${i}`, invoiceId: null, invoiceNumber: null, customerId: 'c', customerName: null, amount: 1, currency: 'USD', status: 'posted', paymentDate: '2026-11-01T00:00:00Z', paymentType: 'card', externalPaymentId: null } } }, OPERATOR_TOKEN);
        }
      }),
    );
    const end2 = Date.now() + 120_000;
    while (verified - before < EVENTS && Date.now() < end2) await sleep(20);
    const secs = (performance.now() - p0) / 1000;
    deliveriesPerSec = round((verified - before) / secs, 0);
    if (verified - before < EVENTS) problems.push(`phase 2: ${verified - before} of ${EVENTS} delivered`);
    for (const l of svc.problems()) problems.push(`service: ${l.slice(0, 200)}`);
  } finally {
    await svc.child.stop(10_000);
    await cleanup(iso);
    receiver.closeAllConnections();
    receiver.close();
  }
  const s = latency.summary();
  console.log('\n--- signal accepted (202) → verified billing-credits-depleted delivery');
  console.log(`  n ${s.count}   p50 ${s.p50} ms   p99 ${s.p99} ms   p999 ${s.p999} ms   max ${s.max} ms   (${RATE} signals/s)`);
  console.log('\n--- deliveries per second (payment events from the operator API, receiver answering at once)');
  console.log(`  ${deliveriesPerSec} deliveries/s (${EVENTS} events)`);
  if (unverified > 0) problems.push(`${unverified} deliveries did not verify`);
  if (s.p99 > TARGET_P99) problems.push(`p99 ${s.p99} ms > target ${TARGET_P99} ms`);
  printProblems(problems);
  appendHistory({ bench: 'webhooks', at: new Date().toISOString(), host, customers: CUSTOMERS, rate: RATE, flushMs: FLUSH ?? null, latency: s, deliveriesPerSec, problems });
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
