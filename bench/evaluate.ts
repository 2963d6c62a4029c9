/**
 * The billing evaluator's worker task, in process: what workers/billing.ts does
 * for one group — parse the pin's configurations and the messages' texts, list the cap
 * periods the group touches, evaluate every message in order and render its rows — on groups
 * shaped like the billing bench's 500-signal scenario: --messages partition messages per
 * group, each from a random one of --orgs organizations of --customers customers
 * (bench/lib/billing-seed.ts: every signal priced, drawing credits, counted against a
 * monthly cap), --signals signals each (a 500-signal batch split over 8 partitions), half
 * naming their customer by externalId. The pin holds the documents of the customers the
 * group names, as the evaluator's pin does: a group names only its partition's share of each organization's customers (--partitions, 8). Prints CPU µs per signal and the per-group time
 * (hdr-histogram p50/p99/p999); no NATS, no engine.
 *
 *   node dist/bench/evaluate.js [--groups N (400)] [--messages N (16)] [--signals N (62)] [--orgs N (100)] [--customers N (100)] [--partitions N (8)]
 */
import { Args } from './lib/args.js';
import { customerDoc } from './lib/billing-seed.js';
import { LatencyHistogram, appendHistory, hostInfo, printHeader, round } from './lib/report.js';
import { configsOf, evaluateGroup, groupCapPeriods, scopeOf, unitsOf, type GroupLookups, type UnitText } from '../src/billing/evaluator/group.js';
import { ZERO_PERIOD, type BillingState, type PeriodTotal } from '../src/billing/evaluator/evaluate.js';
import type { BillingConfig } from '../src/billing/model.js';
import { pinnedConfig } from '../src/billing/evaluator/consumer.js';
import type { BillableLine } from '../src/bus/batch.js';

const args = new Args('node dist/bench/evaluate.js [options]', {
  groups: { help: 'groups evaluated (default 400, after 50 not counted)' },
  messages: { help: 'partition messages per group (default 16)' },
  signals: { help: 'signals per message (default 62: a 500-signal batch over 8 partitions)' },
  orgs: { help: 'organizations (default 100)' },
  customers: { help: 'customers per organization (default 100)' },
  partitions: { help: 'billing partitions the customers are spread over (default 8, the service default): a group names only its partition\'s share of each organization' },
});
const GROUPS = args.num('groups', 400, 1, 1_000_000);
const MESSAGES = args.num('messages', 16, 1, 1_000);
const SIGNALS = args.num('signals', 62, 1, 10_000);
const ORGS = args.num('orgs', 100, 1, 10_000);
const CUSTOMERS = args.num('customers', 100, 1, 100_000);
const PARTITIONS = args.num('partitions', 8, 1, 1_024);
const WARMUP = 50;

const orgIds = Array.from({ length: ORGS }, (_, o) => `org_bench${String(o).padStart(8, '0')}`);
const planOf = (orgId: string): string => `plan_${orgId.slice(-8)}`;
const pick = (n: number): number => Math.floor(Math.random() * n);

/** One group as the worker gets it: the pin's JSON and the messages' texts. */
function makeGroup(seq: number): { pinJson: string; units: UnitText[]; signals: number } {
  const configs = new Map<string, BillingConfig>();
  const units: UnitText[] = [];
  const now = Date.now();
  for (let m = 0; m < MESSAGES; m++) {
    const orgId = orgIds[pick(ORGS)]!;
    let config = configs.get(orgId);
    if (!config) configs.set(orgId, (config = { customers: {}, plans: { [planOf(orgId)]: { id: planOf(orgId), name: 'Bench', createdAt: '2024-01-01T00:00:00.000Z' } }, attributes: {}, pools: {}, caps: {} } as unknown as BillingConfig));
    const lines: string[] = [];
    for (let i = 0; i < SIGNALS; i++) {
      // A customer of this group's partition (the customers c ≡ 1 mod PARTITIONS, standing for those hashed to it).
      const c = pick(Math.ceil(CUSTOMERS / PARTITIONS)) * PARTITIONS + 1;
      const doc = customerDoc(orgId, c, planOf(orgId));
      config.customers[doc.customer.id] = doc.customer;
      Object.assign(config.attributes, doc.attributes);
      Object.assign(config.pools, doc.pools);
      Object.assign(config.caps, doc.caps);
      const line: BillableLine = { k: doc.customer.id, i: `sig_${seq}_${m}_${i}`, e: 'tokens', c: i % 2 === 0 ? `x:ext-${c}` : `i:${doc.customer.id}`, u: 'user', t: now + i, d: { b: seq, i } };
      lines.push(JSON.stringify(line));
    }
    units.push({ orgId, mode: 'live', evaluatedAt: now, text: `${lines.join('\n')}\n` });
  }
  // As the evaluator pins them (consumer.ts pinnedConfig), with a revision per document.
  const scopes = [...configs].map(([orgId, config]) => ({ orgId, mode: 'live', revisions: Object.fromEntries(Object.keys(config.customers).map((id, i) => [`cust.${orgId}.live.${id}`, 1000 + i])), config: pinnedConfig(config) }));
  return { pinJson: JSON.stringify({ seq, last: seq + MESSAGES - 1, seqs: units.map((_, i) => seq + i), scopes }), units, signals: MESSAGES * SIGNALS };
}

/** What workers/billing.ts evaluateAsking does, the main thread's answer given at once (running states and totals some earlier group left). */
function run(g: { pinJson: string; units: UnitText[] }): number {
  const configs = configsOf({ pinJson: g.pinJson });
  const units = unitsOf({ units: g.units });
  const lookups: GroupLookups = new Map();
  const refs = groupCapPeriods({ configs, units }, lookups);
  const states: Record<string, BillingState> = {};
  for (const u of units) {
    const scope = scopeOf(u.orgId, u.mode);
    if (states[scope]) continue;
    const consumed: Record<string, string> = {};
    for (const id of Object.keys(configs[scope]!.pools)) consumed[id] = '1234';
    states[scope] = { lastSeq: 0, consumed, usage: {} };
  }
  const periods: Record<string, PeriodTotal> = {};
  for (const r of refs) periods[r.key] = r.key.length % 2 === 0 ? ZERO_PERIOD : { used: '4321', reached: false };
  const out = evaluateGroup({ configs, units, states, periods }, lookups);
  return out.units.reduce((n, u) => n + u.costs, 0);
}

async function main(): Promise<void> {
  printHeader('billing evaluation: the worker task of a group, in process', hostInfo(), { groups: GROUPS, messages: MESSAGES, signals: SIGNALS, orgs: ORGS, customers: CUSTOMERS, partitions: PARTITIONS });
  const made = Array.from({ length: 20 }, (_, i) => makeGroup(1 + i * MESSAGES));
  const pinBytes = Math.round(made.reduce((n, g) => n + Buffer.byteLength(g.pinJson), 0) / made.length);
  let costs = 0;
  for (let i = 0; i < WARMUP; i++) costs += run(made[i % made.length]!);
  const h = new LatencyHistogram();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < GROUPS; i++) {
    const s = performance.now();
    costs += run(made[i % made.length]!);
    h.record(performance.now() - s);
  }
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const signals = GROUPS * MESSAGES * SIGNALS;
  const cpuUsPerSignal = round((cpu.user + cpu.system) / signals, 2);
  const group = h.summary();
  if (costs === 0) throw new Error('nothing priced: the bench groups are not what they should be');
  console.log(`  per signal     ${cpuUsPerSignal} µs CPU (${round((wallMs * 1000) / signals, 2)} µs wall), ${round(signals / (wallMs / 1000), 0)} signals/s on one thread`);
  console.log(`  pin            ${pinBytes} bytes per group on average (the configuration of the customers it names)`);
  console.log(`  per group (ms) p50 ${group.p50} p99 ${group.p99} p999 ${group.p999} max ${group.max} (${MESSAGES * SIGNALS} signals)`);
  appendHistory({ bench: 'evaluate', at: new Date().toISOString(), host: hostInfo(), params: { groups: GROUPS, messages: MESSAGES, signals: SIGNALS, orgs: ORGS, customers: CUSTOMERS, partitions: PARTITIONS }, cpuUsPerSignal, pinBytes, signalsPerSec: round(signals / (wallMs / 1000), 0), groupMs: group });
}

await main();
