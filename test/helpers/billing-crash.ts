/**
 * What the billing crash tests share (test/api/billing-crash.test.ts and billing-crash-2.test.ts,
 * split in two so that the suite's two jobs run them side by side): the fault hook's lines, the
 * state and pin reads, the organization and batches each kill test bills, and one serial run's
 * results to compare with.
 */
import type { Test } from 'tap';
import { billed, busEvents, stateKeys } from './bus.js';
import { call } from './billing-api.js';
import { ServiceProcess, cleanup, createOrg, http, logsOnFailure, sendBatch, type Isolation, type TestOrg } from './service.js';

export const CUR = '9a1c2b1e-0000-4000-8000-00000000c0de';
export const ACK_WAIT = { BILLING_ACK_WAIT_MS: '2000' };

export interface CustomerEntry {
  seq: number;
  after: { consumed: Record<string, string>; usage: Record<string, string> };
}

/** The running state of every customer of an organization (cs.<org>.live.<customer>), by key. */
export async function customerStates(i: Isolation, orgId: string): Promise<Record<string, CustomerEntry>> {
  return (await stateKeys(i, `cs.${orgId}.live.`)) as Record<string, CustomerEntry>;
}

/** Credits consumed by the organization's (one) customer's pool. */
export async function consumedInState(i: Isolation, orgId: string): Promise<string | undefined> {
  const [only] = Object.values(await customerStates(i, orgId));
  return only ? Object.values(only.after.consumed)[0] : undefined;
}

export interface GroupPin {
  seq: number;
  last: number;
  seqs: number[];
  done?: boolean;
  scopes: { orgId: string; config: { caps: Record<string, unknown> } }[];
}

/** Whether the group of first sequence `seq` is committed: its partition's pin names it, done, or names a later group. */
export async function committed(i: Isolation, seq: number): Promise<boolean> {
  const pins = Object.values(await stateKeys(i, 'pin.')) as GroupPin[];
  return pins.some((p) => p.seq > seq || (p.seq === seq && p.done === true));
}

/** The pin of the group of first sequence `seq`. */
export async function pinOf(i: Isolation, seq: number): Promise<GroupPin | undefined> {
  return (Object.values(await stateKeys(i, 'pin.')) as GroupPin[]).find((p) => p.seq === seq);
}

export interface PeriodEntry {
  seq: number;
  before: { used: string; reached: boolean };
  after: { used: string; reached: boolean };
}

/**
 * The cap periods of an organization, {seq, before, after} by period key: each as its
 * customer's key holds it (`periods` of cs.<org>.live.<customer>), else as its own key
 * (cp.<org>.live.…) holds it — the evaluator's own rule (src/billing/evaluator/customer-state.ts).
 */
export async function periodEntries(i: Isolation, orgId: string): Promise<Record<string, PeriodEntry>> {
  const out = { ...((await stateKeys(i, `cp.${orgId}.live.`)) as Record<string, PeriodEntry>) };
  const customers = (await stateKeys(i, `cs.${orgId}.live.`)) as Record<string, { periods?: Record<string, PeriodEntry & { spilled?: number }> }>;
  for (const c of Object.values(customers)) {
    for (const [key, { spilled: _s, ...held }] of Object.entries(c.periods ?? {})) out[key] = held;
  }
  return out;
}

/** The cap periods of an organization (periodEntries), in key order. */
export async function periodsOf(i: Isolation, orgId: string): Promise<PeriodEntry[]> {
  const all = await periodEntries(i, orgId);
  return Object.keys(all)
    .sort()
    .map((k) => all[k]!);
}

export interface FaultLine {
  point: string;
  seq: number;
  orgId: string;
  events: number;
}

/** The fault hook's log line in a process's output, if it has acted. */
export function faultLine(output: string): FaultLine | undefined {
  for (const line of output.split('\n')) {
    if (!line.includes('billing fault point reached')) continue;
    return JSON.parse(line) as FaultLine;
  }
  return undefined;
}

/** Resolves when the process exits on its own (the fault hook's SIGKILL), with how. */
export function exitOf(p: ServiceProcess): Promise<{ code: number | null; signal: string | null }> {
  const proc = p.proc!;
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve({ code: proc.exitCode, signal: proc.signalCode });
  return new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
}

export async function killedAt(t: Test, p: ServiceProcess, exited: Promise<{ code: number | null; signal: string | null }>, point: string): Promise<FaultLine> {
  let timer: NodeJS.Timeout | undefined;
  const how = await Promise.race([exited, new Promise<null>((r) => (timer = setTimeout(() => r(null), 90_000)))]);
  clearTimeout(timer);
  t.same(how, { code: null, signal: 'SIGKILL' }, `the evaluating process killed itself at ${point}`);
  const line = faultLine(p.output);
  t.match(line, { point, action: 'kill' }, 'at the requested point, on a batch with events');
  if (!line) throw new Error(`no fault line in:\n${p.output}`);
  return line;
}

/** At the end: stops the processes (those current then) and removes both isolations (two pipeline processes need two data directories). */
export function teardownBoth(t: Test, iso: Isolation, isoB: Isolation, procs: () => ServiceProcess[]): void {
  logsOnFailure(t, procs);
  t.teardown(async () => {
    for (const p of procs()) await p.stop();
    await cleanup(iso);
    await cleanup(isoB).catch(() => undefined);
  });
}

export async function configure(base: string, org: TestOrg, granted: string): Promise<void> {
  const c = await call(base, org, 'POST', '/api/v2/customers', { externalId: 'acme', name: 'Acme' });
  await call(base, org, 'PUT', `/api/v2/customers/${c.id}/units/root`, {});
  const plan = await call(base, org, 'POST', '/api/v2/plans', { name: 'Pro' });
  const ola = await call(base, org, 'POST', `/api/v2/customers/${c.id}/order-line-attributes`, { planId: plan.id, eventName: 'e', unitPrice: '0.001', currency: 'EUR', includedQuantity: '1000', creditsCurrencyId: CUR, creditsPerUnit: '0.5' });
  await call(base, org, 'POST', `/api/v2/customers/${c.id}/credit-pools`, { orderLineAttributeId: ola.id, credits: granted });
  await call(base, org, 'PUT', `/api/v2/customers/${c.id}/units/root/credit-caps/${CUR}`, { amount: '400', frequency: 'YEARLY', effectiveFrom: '2026-01-01T00:00:00Z' });
}

export const batch = (b: number, n: number) => ({ signals: Array.from({ length: n }, (_, i) => ({ eventName: 'e', customer: { externalCustomerId: 'acme' }, unitId: 'root', timestamp: '2026-05-01T00:00:00Z', idempotencyKey: `b${b}-${i}` })) });

export function checkEvents(t: Test, events: { id: string; event: string; data: any }[]): void {
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
export const BATCHES = 60;
export const PER = 40;
export const GRANTED = '600';

/** An organization configured as `configure` does, with BATCHES batches of PER signals sent to it through `url`: every one accepted. */
export async function withBatches(t: Test, url: string): Promise<TestOrg> {
  const org = await createOrg(url, { burst: 1_000_000, refillPerSecond: 1_000_000 });
  await configure(url, org, GRANTED);
  const sent = await Promise.all(Array.from({ length: BATCHES }, (_, i) => sendBatch(url, org.live, batch(i, PER))));
  t.ok(sent.every((r) => r.status === 202), 'the ingress accepted every batch');
  return org;
}

/**
 * A process without faults (`env`) finishes what is left; then one serial run's results (checkSerialRun), and its rows
 * read through a ROLE=all process on the pipeline's data directory (the embedded engine serves analytics there).
 */
export async function finishedAsOneSerialRun(t: Test, iso: Isolation, env: Record<string, string>, org: TestOrg): Promise<void> {
  const pipeline = new ServiceProcess(iso, env);
  t.teardown(() => pipeline.stop());
  await pipeline.start();
  await billed(iso);
  await checkSerialRun(t, iso, org.id);
  await pipeline.stop();
  const all = new ServiceProcess(iso, { ROLE: 'all' });
  t.teardown(() => all.stop());
  await all.start();
  const rows = (await http(all.url, 'POST', '/api/v2/analytics/query', { token: org.live, body: { query: 'SELECT count(), toString(sum(credits)), toString(min(balance_after)), (SELECT count() FROM fact_cost), (SELECT count() FROM fact_signal) FROM fact_credit_consumption' } })).body;
  t.same(rows.rows, [['2400', '1200', '-600', '2400', '2400']], 'one cost and one consumption row per signal, exact balance');
}

/** What one serial run of those batches leaves: its events, the pool's consumption and the cap period's total, each once. */
export async function checkSerialRun(t: Test, iso: Isolation, orgId: string): Promise<void> {
  checkEvents(t, await busEvents(iso, orgId));
  t.equal(await consumedInState(iso, orgId), '1200', 'the pool consumed exactly 2,400 × 0.5 credits');
  t.same((await periodsOf(iso, orgId)).map((p) => p.after), [{ used: '1200', reached: true }], "the cap period's total counts every signal once");
}

/**
 * Tests of what no store mode changes (the pin's spill into parts, the consumers' ack wait):
 * run once, in the embedded mode; the server-mode file (test/server-store/billing-crash.test.ts)
 * skips them rather than repeat 90 s of the same NATS-only work.
 */
export const storeIndependent = process.env.TEST_STORE === 'server' ? { skip: 'store-independent: runs in test/api/billing-crash*.test.ts (embedded store)' } : {};
