/**
 * Billing's parts outside the evaluation itself, in process, on the shapes of the billing
 * bench's 500-signal scenario (bench/billing.ts; bench/lib/billing-seed.ts documents: every
 * customer with a unit tree of three, a credit-priced attribute, a pool and a monthly cap):
 *
 *   - the pin of a group (src/billing/evaluator/consumer.ts `pinnedConfig` and `pinBytes`):
 *     --messages partition messages of random organizations, each naming --customers of its
 *     customers, documents kept across groups as the configuration store keeps them;
 *   - a partition message's rows (src/billing/evaluator/rows-body.ts): its cost rows, each
 *     with its credit draw, rendered as the rows body (`renderRows`), and that body read back
 *     as the rows inserter reads it (`readRows`, each table's lines as one insert body);
 *   - the state writes of a group (src/bus/kv-write.ts): --writes compare-and-set writes of
 *     customer-state-sized values in one round, against a real KV bucket.
 *
 * Each is measured twice after a warm-up, the lower kept. CPU of this process
 * (process.cpuUsage: user and system); nats-server's is not counted. String.prototype is
 * brought back to V8's fast mode first, as the service does at start (the harness loads
 * ioredis, which slows every string method call down until then: src/shared/fast-prototypes.ts).
 *
 *   node dist/bench/billing-parts.js [--rounds N (default 2000)] [--messages N (10)] [--customers N (12)] [--signals N (62)] [--writes N (240)]
 */
import { connect } from '@nats-io/transport-node';
import { Kvm } from '@nats-io/kv';
import { randomBytes } from 'node:crypto';
import { pinBytes, pinnedConfig, type Pin, type PinScope } from '../src/billing/evaluator/consumer.js';
import { readRows, renderRows } from '../src/billing/evaluator/rows-body.js';
import type { ConsumptionRow, CostRow } from '../src/billing/evaluator/evaluate.js';
import type { CustomerDoc } from '../src/billing/config/store.js';
import type { BillingConfig } from '../src/billing/model.js';
import { kvWriter } from '../src/bus/kv-write.js';
import { Args } from './lib/args.js';
import { customerDoc } from './lib/billing-seed.js';
import { appendHistory, hostInfo, printHeader, round } from './lib/report.js';
import { NATS_URL } from '../harness/service.js';
import { restoreFastStringPrototype } from '../src/shared/fast-prototypes.js';

const args = new Args('node dist/bench/billing-parts.js [options]', {
  rounds: { help: 'pins and rows messages per measurement (default 2000)' },
  messages: { help: 'partition messages per group: one organization each (default 10)' },
  customers: { help: 'customers each message names (default 12: a 500-signal batch of an organization of 100 over 8 partitions)' },
  signals: { help: 'signals per partition message (default 62)' },
  writes: { help: 'state writes per round (default 240: a customer state and a cap period per customer of a group)' },
});
const ROUNDS = args.num('rounds', 2000, 10, 1_000_000);
const MESSAGES = args.num('messages', 10, 1, 64);
const CUSTOMERS = args.num('customers', 12, 1, 448);
const SIGNALS = args.num('signals', 62, 1, 10_000);
const WRITES = args.num('writes', 240, 1, 10_000);

/** µs of this process's CPU per unit while `f` runs `n` units (the lower of two runs after a warm-up). */
async function usPer(n: number, f: () => unknown): Promise<number> {
  const once = async (): Promise<number> => {
    const c0 = process.cpuUsage();
    await f();
    const c = process.cpuUsage(c0);
    return (c.user + c.system) / n;
  };
  await once();
  return round(Math.min(await once(), await once()), 1);
}

const orgs = Array.from({ length: 100 }, (_, o) => `org_parts${String(o).padStart(11, '0')}`);
const docs = new Map<string, CustomerDoc>();
/** The stored document of a customer, the same object every time (the store keeps documents while the bucket is unchanged). */
function docOf(orgId: string, c: number): CustomerDoc {
  const k = `${orgId}/${c}`;
  let d = docs.get(k);
  if (!d) docs.set(k, (d = customerDoc(orgId, c, 'plan_parts')));
  return d;
}

/** The scopes of group g as the configuration store hands them to pinOf. */
function groupScopes(g: number): PinScope[] {
  return Array.from({ length: MESSAGES }, (_, m) => {
    const orgId = orgs[(g * 7 + m * 13) % orgs.length]!;
    const config: BillingConfig = { customers: {}, plans: {}, attributes: {}, pools: {}, caps: {} };
    const revisions: Record<string, number> = {};
    for (let i = 0; i < CUSTOMERS; i++) {
      const d = docOf(orgId, 1 + ((g + i * 8) % 100));
      config.customers[d.customer.id] = d.customer;
      Object.assign(config.attributes, d.attributes);
      Object.assign(config.pools, d.pools);
      Object.assign(config.caps, d.caps);
      revisions[`cus.${orgId}.live.${d.customer.id}`] = 1_000 + i;
    }
    return { orgId, mode: 'live', revisions, config };
  });
}

/** One partition message's rows: a cost row and a credit draw per signal (evaluate.ts's output). */
function messageRows(): { costs: CostRow[]; consumption: ConsumptionRow[]; unpriced: [] } {
  const costs: CostRow[] = [];
  const consumption: ConsumptionRow[] = [];
  const d = customerDoc(orgs[0]!, 33, 'plan_parts');
  const [attr] = Object.values(d.attributes);
  const [pool] = Object.values(d.pools);
  for (let i = 0; i < SIGNALS; i++) {
    const signal = `sig_${randomBytes(10).toString('hex')}`;
    const at = 1_700_000_000_000 + i;
    costs.push({ org_id: orgs[0]!, livemode: true, signal_id: signal, created_at: at, event_name: 'tokens', customer_id: d.customer.id, unit_id: 'user', plan_id: attr!.planId, order_line_attribute_id: attr!.id, quantity: '1', unit_price: '0.5', cost_amount: '0.5', currency: 'USD' });
    consumption.push({ org_id: orgs[0]!, livemode: true, signal_id: signal, created_at: at, customer_id: d.customer.id, unit_id: 'user', order_line_attribute_id: attr!.id, pool_id: pool!.id, credits_currency_id: pool!.creditsCurrencyId, credits: '1', balance_after: String(999_000 - i) });
  }
  return { costs, consumption, unpriced: [] };
}

async function main(): Promise<void> {
  // As the service does once its modules are loaded (main.ts): the harness loads ioredis,
  // which slows every string method call down until this (src/shared/fast-prototypes.ts).
  restoreFastStringPrototype();
  const host = hostInfo();
  printHeader('billing parts: pins, rows and state writes, in process', host, { rounds: ROUNDS, messages: MESSAGES, customers: CUSTOMERS, signals: SIGNALS, writes: WRITES });

  // Rows: rendered, then read as the inserter reads them.
  const rows = messageRows();
  let bodySize = 0;
  const renderUs = await usPer(ROUNDS, () => {
    for (let i = 0; i < ROUNDS; i++) bodySize = renderRows(rows)!.length;
  });
  const body = renderRows(rows)!;
  const readUs = await usPer(ROUNDS, () => {
    for (let i = 0; i < ROUNDS; i++) {
      const r = readRows(body);
      Buffer.concat(r.costs.lines);
    }
  });
  console.log(`  rows of a message  rendered ${fmtUs(renderUs)} µs, read back as insert bodies ${fmtUs(readUs)} µs CPU (${SIGNALS} signals, ${bodySize.toLocaleString('en-US')} bytes)`);

  // Pins: each group's scopes made anew (as forBatch does), the documents kept.
  const groups = Array.from({ length: 50 }, (_, g) => groupScopes(g));
  let pinSize = 0;
  const pinUs = await usPer(ROUNDS, () => {
    for (let i = 0; i < ROUNDS; i++) {
      const scopes = groups[i % groups.length]!.map((s) => ({ ...s, config: pinnedConfig(s.config) }));
      const pin: Pin = { seq: i + 1, last: i + MESSAGES, seqs: Array.from({ length: MESSAGES }, (_, j) => i + 1 + j), scopes };
      pinSize = pinBytes(pin).length;
    }
  });
  console.log(`  pin of a group     ${fmtUs(pinUs)} µs CPU (${MESSAGES * CUSTOMERS} customers, ${pinSize.toLocaleString('en-US')} bytes)`);

  // State writes: compare-and-set on the revisions the round before wrote.
  const nc = await connect({ servers: NATS_URL });
  const bucket = `BENCHparts${randomBytes(4).toString('hex')}`;
  const kv = await new Kvm(nc).create(bucket, { history: 1 });
  let writeUs: number;
  try {
    const writer = kvWriter(kv);
    const revisions = new Array<number>(WRITES).fill(0);
    let r = 0;
    const value = (i: number): string => JSON.stringify({ seq: r * 1_000 + i, before: { consumed: { [`cp_${i}`]: String(r) }, usage: { [`ola_${i}`]: String(r) } }, after: { consumed: { [`cp_${i}`]: String(r + 1) }, usage: { [`ola_${i}`]: String(r + 1) } } });
    const writeRounds = Math.max(10, Math.floor(ROUNDS / 20));
    writeUs = await usPer(writeRounds * WRITES, async () => {
      for (let n = 0; n < writeRounds; n++, r++) {
        const out = await writer.writeMany(Array.from({ length: WRITES }, (_, i) => ({ key: `cs.org_parts.live.cus_${i}`, value: value(i), revision: revisions[i]! })));
        out.forEach((v, i) => (revisions[i] = v));
      }
    });
  } finally {
    await kv.destroy().catch(() => undefined);
    await nc.close();
  }
  console.log(`  state writes       ${fmtUs(writeUs)} µs CPU per compare-and-set write (${WRITES} a round)`);

  appendHistory({ bench: 'billing-parts', at: new Date().toISOString(), host, params: { rounds: ROUNDS, messages: MESSAGES, customers: CUSTOMERS, signals: SIGNALS, writes: WRITES }, pinUs, pinBytes: pinSize, rowsRenderUs: renderUs, rowsReadUs: readUs, rowsBodyBytes: bodySize, stateWriteUs: writeUs });
}

const fmtUs = (x: number): string => x.toLocaleString('en-US', { maximumFractionDigits: 1 });

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
