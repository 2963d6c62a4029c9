/**
 * Group evaluation (src/billing/evaluator/group.ts) and group formation (consumer.ts
 * formGroup, readPin).
 *
 * Property: evaluating a partition's messages as groups — any split of the message sequence
 * into consecutive groups, messages of two organizations and both modes interleaved — gives the
 * same rows, events, final states and cap period totals as evaluating each message alone, one
 * after another, with the state and totals threaded through (one serial run); and a group's
 * evaluation leaves the states and totals it is given unchanged.
 */
import t from 'tap';
import fc from 'fast-check';
import { capPeriods, evaluate, type BillableSignal, type BillingState, type EmittedEvent, type PeriodTotal } from '../../src/billing/evaluator/evaluate.js';
import { configsOf, evaluateGroup, groupCapPeriods, parseBillable, scopeOf, type GroupLookups, type GroupUnit } from '../../src/billing/evaluator/group.js';
import { billedCustomers, formGroup, GROUP_CUSTOMERS, GROUP_MESSAGES, pinnedConfig, pinText, readPin, type Pin } from '../../src/billing/evaluator/consumer.js';
import { capKey, emptyConfig, type BillingConfig } from '../../src/billing/model.js';
import { renderRows } from '../../src/billing/evaluator/rows-body.js';
import type { KvEntry } from '@nats-io/kv';

const CUR = '6f1c2b1e-0000-4000-8000-000000000001';
const D0 = Date.parse('2026-01-01T00:00:00Z');
const now = '2026-01-01T00:00:00Z';

/** Two customers, each with a unit tree, a credit-priced attribute with included quantity, a small pool and caps. */
function config(): BillingConfig {
  const c = emptyConfig();
  const unit = (id: string, parent: string | null) => ({ externalId: id, externalType: null, name: `unit ${id}`, parentExternalId: parent, createdAt: now, updatedAt: now });
  c.plans.plan_1 = { id: 'plan_1', name: 'Pro', createdAt: now };
  for (const n of [1, 2]) {
    const cus = `cus_${n}`;
    c.customers[cus] = { id: cus, externalId: `ext-${n}`, name: `customer ${n}`, createdAt: now, updatedAt: now, units: { root: unit('root', null), dev: unit('dev', 'root') } };
    c.attributes[`ola_${n}`] = { id: `ola_${n}`, customerId: cus, planId: 'plan_1', eventName: 'e', quantity: { kind: 'path', path: 'q' }, unitPrice: '0.5', currency: 'USD', includedQuantity: '7', creditsCurrencyId: CUR, creditsPerUnit: '1.5', createdAt: now };
    c.pools[`cp_${n}`] = { id: `cp_${n}`, customerId: cus, orderLineAttributeId: `ola_${n}`, creditsCurrencyId: CUR, granted: '20', topUps: [], createdAt: now };
    c.caps[capKey(cus, 'root', CUR)] = { customerId: cus, unitExternalId: 'root', creditsCurrencyId: CUR, amount: '9', frequency: 'DAILY', effectiveFrom: now, updatedAt: now };
  }
  return c;
}

const ORGS = ['org_a', 'org_b'];
const MODES = ['live', 'test'] as const;
const signalArb = fc.record({ customer: fc.constantFrom('cus_1', 'ext-2', 'cus_2', 'nobody'), q: fc.integer({ min: 0, max: 4 }), day: fc.integer({ min: 0, max: 2 }), unit: fc.constantFrom('root', 'dev') });
const messageArb = fc.record({ org: fc.constantFrom(...ORGS), mode: fc.constantFrom(...MODES), signals: fc.array(signalArb, { minLength: 0, maxLength: 6 }) });

function units(messages: { org: string; mode: 'live' | 'test'; signals: { customer: string; q: number; day: number; unit: string }[] }[]): GroupUnit[] {
  return messages.map((m, i) => ({
    orgId: m.org,
    mode: m.mode,
    evaluatedAt: D0 + i * 1000,
    signals: m.signals.map((s, j): BillableSignal => ({ id: `sig_${i}_${j}`, eventName: 'e', customerId: s.customer, unitId: s.unit, ts: D0 + s.day * 86_400_000 + j, data: { q: s.q } })),
  }));
}

const empty = (): BillingState => ({ lastSeq: 0, consumed: {}, usage: {} });

t.test('a group evaluates like its messages one after another, whatever the split', async (t) => {
  const cfg = config();
  const configs: Record<string, BillingConfig> = {};
  for (const o of ORGS) for (const m of MODES) configs[scopeOf(o, m)] = cfg;
  // Organization b's test mode prices nothing: its messages are part of groups all the same.
  configs[scopeOf('org_b', 'test')] = emptyConfig();
  fc.assert(
    fc.property(fc.array(messageArb, { minLength: 1, maxLength: 12 }), fc.array(fc.integer({ min: 1, max: 5 }), { minLength: 12, maxLength: 12 }), (messages, cuts) => {
      const us = units(messages);
      // Serial: one message at a time.
      const serialStates: Record<string, BillingState> = {};
      const serialTotals: Record<string, PeriodTotal> = {};
      const serial: { rows: Uint8Array | null; costs: number; events: EmittedEvent[] }[] = [];
      for (const u of us) {
        const scope = scopeOf(u.orgId, u.mode);
        const config = configs[scope]!;
        if (Object.keys(config.attributes).length === 0) {
          serial.push({ rows: null, costs: 0, events: [] });
          continue;
        }
        const periods: Record<string, PeriodTotal> = {};
        for (const r of capPeriods({ orgId: u.orgId, mode: u.mode, config, signals: u.signals })) periods[r.key] = serialTotals[r.key] ?? { used: '0', reached: false };
        const out = evaluate({ orgId: u.orgId, mode: u.mode, config, state: serialStates[scope] ?? empty(), signals: u.signals, evaluatedAt: u.evaluatedAt, periods });
        serialStates[scope] = out.state;
        Object.assign(serialTotals, out.periods);
        serial.push({ rows: renderRows(out), costs: out.costs.length, events: out.events });
      }
      // Grouped: consecutive groups of the sizes `cuts` gives.
      const states: Record<string, BillingState> = {};
      const totals: Record<string, PeriodTotal> = {};
      const grouped: typeof serial = [];
      // Its inputs are left as they were: the evaluator hands it the states and totals its lane keeps (state-cache.ts).
      let untouched = true;
      for (let at = 0, c = 0; at < us.length; c++) {
        const group = us.slice(at, (at += cuts[c % cuts.length]!));
        // Every other group as the worker evaluates it: one set of lookups for its listing and its evaluation (each signal resolved once).
        const lookups: GroupLookups | undefined = c % 2 === 0 ? new Map() : undefined;
        const refs = groupCapPeriods({ configs, units: group }, lookups);
        t.equal(new Set(refs.map((r) => r.key)).size, refs.length);
        const periods: Record<string, PeriodTotal> = {};
        for (const r of refs) periods[r.key] = totals[r.key] ?? { used: '0', reached: false };
        const before: Record<string, BillingState> = {};
        for (const u of group) before[scopeOf(u.orgId, u.mode)] = states[scopeOf(u.orgId, u.mode)] ?? empty();
        const given = JSON.stringify({ before, periods });
        const out = evaluateGroup({ configs, units: group, states: before, periods }, lookups);
        untouched &&= JSON.stringify({ before, periods }) === given;
        Object.assign(states, out.states);
        Object.assign(totals, out.periods);
        grouped.push(...out.units);
        for (const key of Object.keys(out.periods)) t.ok(refs.some((r) => r.key === key), 'only listed periods change');
      }
      const strip = (s: Record<string, BillingState>) => Object.fromEntries(Object.entries(s).filter(([k]) => k !== scopeOf('org_b', 'test')).map(([k, v]) => [k, { consumed: v.consumed, usage: v.usage }]));
      return untouched && JSON.stringify(grouped) === JSON.stringify(serial) && JSON.stringify(strip(states)) === JSON.stringify(strip(serialStates)) && JSON.stringify(totals) === JSON.stringify(serialTotals);
    }),
    { numRuns: 300 },
  );
});

t.test("a pin's configuration (top-ups folded into their sum, timestamps and unit names left out) evaluates exactly like the stored one", async (t) => {
  const credits = fc.oneof(fc.constantFrom('0', '0.000001', '999999999999.999999', '999999999999999999999999999999', '999999999999999999999999999999.999999'), fc.tuple(fc.nat(10_000), fc.nat(999_999)).map(([i, f]) => `${i}.${String(f).padStart(6, '0')}`.replace(/\.?0+$/, '') || '0'));
  fc.assert(
    fc.property(fc.array(credits, { maxLength: 40 }), fc.array(credits, { maxLength: 3 }), fc.array(messageArb, { minLength: 1, maxLength: 8 }), (ups1, ups2, messages) => {
      const cfg = config();
      cfg.pools.cp_1 = { ...cfg.pools.cp_1!, granted: '3', topUps: ups1.map((c, i) => ({ id: `tu_${i}`, credits: c, at: now })) };
      cfg.pools.cp_2 = { ...cfg.pools.cp_2!, granted: '1', topUps: ups2.map((c, i) => ({ id: `tv_${i}`, credits: c, at: now })) };
      const given = JSON.stringify(cfg);
      const pinned = pinnedConfig(cfg);
      if (JSON.stringify(cfg) !== given) return false; // its input is left as it was
      // Folded unless the sum would not parse as one top-up (over 30 integer digits).
      const micros = (c: string) => BigInt(c.split('.')[0]!) * 1_000_000n + BigInt((c.split('.')[1] ?? '').padEnd(6, '0'));
      const folds = (ups: string[]) => ups.length > 1 && ups.reduce((n, c) => n + micros(c), 0n) < 10n ** 36n;
      if (pinned.pools.cp_1!.topUps.length !== (folds(ups1) ? 1 : ups1.length) || pinned.pools.cp_2!.topUps.length !== (folds(ups2) ? 1 : ups2.length)) return false;
      // Nothing else changes but the fields evaluation never reads, left out: timestamps, unit names.
      const bare = (c: BillingConfig) => JSON.stringify(c, (k, v: unknown) => (k === 'createdAt' || k === 'updatedAt' || k === 'topUps' ? undefined : v));
      const unitNames = (c: BillingConfig) => Object.values(c.customers).flatMap((x) => Object.values(x.units).map((u) => u.name));
      if (bare({ ...pinned, customers: {} }) !== bare({ ...cfg, customers: {} })) return false;
      if (JSON.stringify(pinned).includes('"createdAt"') || JSON.stringify(pinned).includes('"updatedAt"') || unitNames(pinned).some((n) => n !== undefined)) return false;
      if (Object.keys(pinned.customers).join() !== Object.keys(cfg.customers).join()) return false;
      const run = (c: BillingConfig) => {
        const configs: Record<string, BillingConfig> = {};
        for (const o of ORGS) for (const m of MODES) configs[scopeOf(o, m)] = c;
        const us = units(messages);
        const periods: Record<string, PeriodTotal> = {};
        for (const r of groupCapPeriods({ configs, units: us })) periods[r.key] = { used: '0', reached: false };
        const states: Record<string, BillingState> = {};
        for (const u of us) states[scopeOf(u.orgId, u.mode)] = empty();
        return JSON.stringify(evaluateGroup({ configs, units: us, states, periods }));
      };
      // As a worker gets it: the pin's JSON text.
      return run(pinned) === run(cfg) && run(JSON.parse(JSON.stringify(pinned)) as BillingConfig) === run(cfg);
    }),
    { numRuns: 200 },
  );
});

/** A held message as formGroup sees it. */
const held = (seq: number, delivery: number, redelivered = false, customers: string[] = ['c1']) => ({
  seq,
  m: { redelivered, info: { deliverySequence: delivery } } as never,
  unit: { orgId: 'o', mode: 'live' as const, customers },
});

t.test('a group takes the held messages while each was delivered right after the one before, fresh', async (t) => {
  const seqs = (g: { seq: number }[]) => g.map((h) => h.seq);
  t.same(seqs(formGroup([held(5, 10), held(7, 11), held(9, 12)])), [5, 7, 9], 'consecutive deliveries');
  t.same(seqs(formGroup([held(5, 10), held(7, 12), held(9, 13)])), [5], 'a delivery between them went elsewhere: stop there');
  t.same(seqs(formGroup([held(5, 10, true), held(7, 11)])), [5], 'a redelivered first message goes alone (older messages may be held elsewhere)');
  t.same(seqs(formGroup([held(5, 10), held(7, 11, true)])), [5], 'a redelivery is never appended');
  const many = Array.from({ length: GROUP_MESSAGES + 10 }, (_, i) => held(i + 1, i + 1));
  t.equal(formGroup(many).length, GROUP_MESSAGES, 'at most GROUP_MESSAGES messages');
  const wide = Array.from({ length: 10 }, (_, i) => held(i + 1, i + 1, false, Array.from({ length: 100 }, (_, j) => `c${i}-${j}`)));
  t.equal(formGroup(wide).length, Math.floor(GROUP_CUSTOMERS / 100), 'at most GROUP_CUSTOMERS customers');
  const same = Array.from({ length: 10 }, (_, i) => held(i + 1, i + 1, false, Array.from({ length: 100 }, (_, j) => `c-${j}`)));
  t.equal(formGroup(same).length, 10, 'customers counted once');
  const huge = [held(1, 1, false, Array.from({ length: GROUP_CUSTOMERS * 2 }, (_, j) => `c-${j}`)), held(2, 2)];
  t.equal(formGroup(huge).length, 1, 'a message over the limit alone still forms a group');
  const sized = Array.from({ length: 10 }, (_, i) => held(i + 1, i + 1, false, Array.from({ length: 62 }, () => `c-${i}`)));
  t.equal(formGroup(sized, 200).length, 3, 'at most maxSignals billed signals: 3 × 62, a fourth would make 248');
  t.equal(formGroup(sized, 186).length, 3, 'exactly maxSignals fits');
  t.equal(formGroup(sized, 10).length, 1, 'a first message over maxSignals still forms a group, alone');
  t.equal(formGroup(sized).length, 10, 'no bound by default');
});

t.test("a pin's text is JSON.stringify's, documents with odd ids included, whether or not their texts were kept by an earlier pin", async (t) => {
  const ids = fc.oneof(fc.constantFrom('__proto__', 'constructor', '0', '17', '-1', '1.5', 'a"b\\c', '\u2028', '\ud800'), fc.string({ maxLength: 6 }));
  fc.assert(
    fc.property(fc.array(ids, { maxLength: 6 }), fc.array(fc.nat(1_000_000), { minLength: 1, maxLength: 5 }), (odd, seqs) => {
      const cfg = config();
      for (const id of odd) {
        const put = (r: Record<string, unknown>, v: unknown) => Object.defineProperty(r, id, { value: v, enumerable: true, writable: true, configurable: true });
        put(cfg.customers, { ...cfg.customers.cus_1!, id });
        put(cfg.plans, { id, name: id, createdAt: now });
        put(cfg.attributes, { ...cfg.attributes.ola_1!, id });
        put(cfg.pools, { ...cfg.pools.cp_1!, id, topUps: [{ id: 'a', credits: '1', at: now }, { id: 'b', credits: '2.5', at: now }] });
        put(cfg.caps, { ...Object.values(cfg.caps)[0]!, unitExternalId: id });
      }
      const pin: Pin = { seq: seqs[0]!, last: seqs.at(-1)!, seqs, scopes: [{ orgId: 'org_a', mode: 'live', revisions: Object.fromEntries(odd.map((id, i) => [id, i])), config: pinnedConfig(cfg) }, { orgId: 'org_"b', mode: 'test', revisions: {}, config: pinnedConfig(emptyConfig()) }] };
      return pinText(pin) === JSON.stringify(pin) && pinText(pin) === JSON.stringify(pin);
    }),
    { numRuns: 300 },
  );
});

t.test('a pin is read as written; no pin, or a deleted one, is none', async (t) => {
  const entry = (v: unknown): KvEntry => ({ operation: 'PUT', length: 1, revision: 3, json: () => v }) as unknown as KvEntry;
  const group = { seq: 4, last: 8, seqs: [4, 8], scopes: [], done: true };
  t.same(readPin(entry(group)), group, 'the group form as it is');
  t.equal(readPin(null), null);
  t.equal(readPin({ operation: 'DEL', length: 0 } as unknown as KvEntry), null);
});

t.test('a worker task carries the configurations as objects or as the pin text, to the same effect', async (t) => {
  const cfg = config();
  const pin = { seq: 1, last: 2, seqs: [1, 2], scopes: [{ orgId: 'org_a', mode: 'live', revisions: {}, config: cfg }, { orgId: 'org_b', mode: 'test', revisions: {}, config: emptyConfig() }] };
  const configs = { [scopeOf('org_a', 'live')]: cfg, [scopeOf('org_b', 'test')]: emptyConfig() };
  t.same(configsOf({ pinJson: JSON.stringify(pin) }), configs);
  t.equal(configsOf({ configs }), configs, 'objects as they are');
});

t.test("a message's billed customers read from its lines' starts, as parsing them would", async (t) => {
  const line = (k: string | undefined, c: string) => JSON.stringify({ ...(k === undefined ? {} : { k }), i: 'sig_1', e: 'e', c, u: null, t: 1, d: { q: '"k":"x' } });
  const text = [line('cus_a', 'ext-a'), line(undefined, 'nobody'), line('cus_"b\\', 'x'), ''].join('\n');
  t.same(billedCustomers(text), ['cus_a', 'cus_"b\\'], 'lines without k are not billed');
  t.same(billedCustomers(text), parseBillable(text).map((s) => s.customerId));
  t.same(billedCustomers('{"i":"sig","k":"cus_z","e":"e","c":"c","u":null,"t":1,"d":{}}'), ['cus_z'], 'k elsewhere: parsed whole');
});

t.test('the worker task (workers/billing.ts evaluateAsking): asks for exactly the cap periods, evaluates from the answer, or gives up on an error', async (t) => {
  const { evaluateAsking } = await import('../../workers/billing.js');
  const { MessageChannel } = await import('node:worker_threads');
  const cfg = config();
  const configs = { [scopeOf('org_a', 'live')]: cfg };
  const [unit] = units([{ org: 'org_a', mode: 'live', signals: [{ customer: 'cus_1', q: 4, day: 0, unit: 'dev' }, { customer: 'cus_1', q: 4, day: 1, unit: 'root' }] }]);
  const lines = unit!.signals.map((s) => JSON.stringify({ i: s.id, e: s.eventName, k: s.customerId, u: s.unitId, t: s.ts, d: s.data })).join('\n');
  const task = { pinJson: JSON.stringify({ scopes: [{ orgId: 'org_a', mode: 'live', config: cfg }] }), units: [{ orgId: 'org_a', mode: 'live' as const, evaluatedAt: unit!.evaluatedAt, text: `${lines}\n` }] };
  const refs = groupCapPeriods({ configs, units: [unit!] });
  t.equal(refs.length, 2, 'two days of the daily cap');
  // Day 0 already at 8 of 9 before the group: the first signal (4 × 1.5 credits) reaches it.
  const periods = Object.fromEntries(refs.map((r, i) => [r.key, { used: i === 0 ? '8' : '0', reached: false }]));
  const states = { [scopeOf('org_a', 'live')]: { lastSeq: 0, consumed: { cp_1: '19' }, usage: {} } };
  const { port1, port2 } = new MessageChannel();
  const asked: unknown[] = [];
  port1.on('message', (m) => {
    asked.push(m);
    port1.postMessage({ states, periods });
  });
  const out = await evaluateAsking({ ...task, port: port2 });
  port1.close();
  t.same(asked, [refs], 'asked once, for the periods the group touches');
  t.same(out, evaluateGroup({ configs, units: [unit!], states, periods }), 'the same output as the group evaluated from those states and totals');
  t.ok(out.units[0]!.events.some((e) => e.event === 'billing-credit-cap-reached'), 'from the answer: day 0 went on from 8');

  const failing = new MessageChannel();
  failing.port1.once('message', () => failing.port1.postMessage({ error: 'state read failed' }));
  await t.rejects(evaluateAsking({ ...task, port: failing.port2 }), /billing evaluation abandoned: state read failed/);
  failing.port1.close();
});

t.test('a pin keeps every id as an own key, "__proto__" and "constructor" included', async (t) => {
  const cfg = JSON.parse(JSON.stringify(config())) as BillingConfig;
  const cus = Object.keys(cfg.customers)[0]!;
  cfg.customers[cus]!.units = JSON.parse('{"__proto__":{"externalId":"__proto__","externalType":null,"name":"n","parentExternalId":null,"createdAt":"x","updatedAt":"x"},"constructor":{"externalId":"constructor","externalType":null,"name":"n","parentExternalId":"__proto__","createdAt":"x","updatedAt":"x"}}') as BillingConfig['customers'][string]['units'];
  const units = pinnedConfig(cfg).customers[cus]!.units;
  t.same(Object.keys(units), ['__proto__', 'constructor']);
  t.ok(Object.hasOwn(units, '__proto__') && units['__proto__']!.parentExternalId === null, 'an own unit, not the prototype');
  t.same(JSON.parse(JSON.stringify(units)), { ['__proto__']: { externalId: '__proto__', externalType: null, parentExternalId: null }, constructor: { externalId: 'constructor', externalType: null, parentExternalId: '__proto__' } });
});
