/**
 * The evaluator's running state, one KV key per customer (the owner of every pool, attribute
 * and cap, model.ts), in the state bucket:
 *
 *   cs.<org>.<mode>.<customerId>   {seq, before, after, periods?}: the stream sequence of the
 *                                  group that last changed the customer's state, the state
 *                                  ({consumed per pool id, cumulative usage per attribute id})
 *                                  before and after that group, and the customer's cap periods
 *                                  it holds (below).
 *
 * A group reads and writes only the keys of the customers it names. The state before group S
 * is the key's `before` when the key's seq is S (S wrote it, then crashed before its commit)
 * and its `after` otherwise (that group committed: a customer's groups commit in order, in
 * its one partition). No key: nothing consumed, no usage.
 *
 * **Cap periods held in the customer's key.** A cap is on one customer's unit, so each cap
 * period belongs to one customer. The key holds, under `periods`, the entries of the customer's
 * most recent cap periods, each as a period key would hold it ({seq, before, after} of the
 * group that last changed the period, evaluate.ts PeriodEntry), so a group that changes a
 * customer's state and its periods writes one key, not one per customer and one per period.
 * A period's total before group S is read from the customer's key when it holds the period,
 * from the period's own key `cp.…` otherwise, by the same before/after rule. At most
 * HELD_PERIODS are kept: when a group rewrites the key, the periods it touches stay, then the
 * held ones by their end, latest first; each one left over is **spilled**: written to its own
 * `cp.…` key (compare-and-set, in the same round as the customer's key) and still held in the
 * customer's key, flagged `spilled: S`, until the customer's key is next rewritten by a later
 * group (which finds it committed in its `cp.…` key and drops it). A replay of S counts S's own
 * spills as held and spills them again: the same decision, from the same inputs.
 */
import type { KV, KvEntry } from '@nats-io/kv';
import { kvReader, type KvReader } from '../../bus/kv-read.js';
import type { KvWrite } from '../../bus/kv-write.js';
import type { BillingConfig } from '../model.js';
import type { Mode } from '../../shared/mode.js';
import { startingTotal, type BillingState, type PeriodEntry, type PeriodTotal } from './evaluate.js';
import { knownOf, type ReadKnown } from './state-cache.js';
import { partitionOf } from './partition.js';
import { pendingFrom, pinKey } from './pins.js';

export interface CustomerState {
  /** Credits consumed per pool id (the customer's pools). */
  consumed: Record<string, string>;
  /** Cumulative quantity per order line attribute id (the customer's attributes). */
  usage: Record<string, string>;
}

/** A cap period as a customer's key holds it: its period entry, and the group that also wrote it to its `cp.…` key, if any. */
export interface HeldPeriod extends PeriodEntry {
  spilled?: number;
}

export interface CustomerEntry {
  seq: number;
  before: CustomerState;
  after: CustomerState;
  /** The customer's cap periods held here, by period key (none: absent). */
  periods?: Record<string, HeldPeriod>;
}

/** Cap periods a customer's key holds at most, besides those the group that writes it touches beyond this number (all of which it holds). */
export const HELD_PERIODS = 8;

/** What a group changed of one customer's cap periods: each period's total before and after the group, by period key. */
export type ChangedPeriods = Record<string, { before: PeriodTotal; after: PeriodTotal }>;

/**
 * The cap periods a customer's key holds for group `seq`: every period of `entry`, except those
 * spilled by an earlier group (committed in their `cp.…` keys). A period spilled by `seq`
 * itself (a replay after a crash) counts as held.
 */
export function heldPeriods(entry: CustomerEntry | null, seq: number): Record<string, PeriodEntry> {
  const out: Record<string, PeriodEntry> = {};
  if (!entry?.periods) return out;
  for (const k of Object.keys(entry.periods)) {
    const { spilled, ...e } = entry.periods[k]!;
    if (spilled === undefined || spilled === seq) out[k] = e;
  }
  return out;
}

/** A period key's end (epoch ms, its last part: evaluate.ts periodKey). */
const endOf = (key: string): number => Number(key.slice(key.lastIndexOf('.') + 1));

/**
 * The held periods a rewrite of the customer's key by a group spills: those the group does not
 * touch (`touched`: the customer's period keys the group lists) beyond what is left of
 * HELD_PERIODS once the touched ones are counted, latest end kept first. Known before the
 * group is evaluated (so their `cp.…` keys are read beside the others) and the same on a replay.
 */
export function spillsOf(held: Record<string, PeriodEntry>, touched: ReadonlySet<string>): string[] {
  const others = Object.keys(held).filter((k) => !touched.has(k));
  others.sort((a, b) => endOf(b) - endOf(a) || (a < b ? -1 : a > b ? 1 : 0));
  return others.slice(Math.max(0, HELD_PERIODS - touched.size));
}

/** The periods the customer's key holds after group `seq`: the held ones (spilled ones flagged), and those the group changed. */
export function periodsAfter(held: Record<string, PeriodEntry>, seq: number, touched: ReadonlySet<string>, changed: ChangedPeriods): Record<string, HeldPeriod> {
  const out: Record<string, HeldPeriod> = {};
  const spill = new Set(spillsOf(held, touched));
  for (const k of Object.keys(held)) if (!Object.hasOwn(changed, k)) out[k] = spill.has(k) ? { ...held[k]!, spilled: seq } : held[k]!;
  for (const k of Object.keys(changed)) out[k] = { seq, before: changed[k]!.before, after: changed[k]!.after };
  return out;
}

/** A period's total before group `seq` when the customer's key holds it (else undefined: read its `cp.…` key). */
export function heldTotal(held: Record<string, PeriodEntry>, key: string, seq: number): PeriodTotal | undefined {
  return Object.hasOwn(held, key) ? startingTotal(held[key]!, seq) : undefined;
}

export const customerStateKey = (orgId: string, mode: Mode, customerId: string): string => `cs.${orgId}.${mode}.${customerId}`;

/** The state of every customer a batch names, as read before it. */
export interface ReadStates {
  /** Merged over the batch's customers (pool and attribute ids are unique): the evaluator's input. */
  state: BillingState;
  /** Per customer id: the state before the group, the entry's revision (0: no key) and the cap periods it holds (heldPeriods). */
  customers: Map<string, ReadCustomer>;
  /**
   * The largest `seq` among the keys read (0: none): above the group's own, a later group of
   * the partition has written a key, so the group is committed and these are not its starting
   * states (consumer.ts, step 3).
   */
  newest: number;
}

export interface ReadCustomer {
  start: CustomerState;
  revision: number;
  held: Record<string, PeriodEntry>;
}

/** A write of the state bucket, with the entry it writes (kept by the lane: state-cache.ts). */
export type EntryWrite = KvWrite & { entry: CustomerEntry | PeriodEntry };

export class CustomerStates {
  /**
   * @param kv the state bucket
   * @param reader its reads: direct gets, a batch's keys in one round (bus/kv-read.ts)
   */
  constructor(
    kv: KV,
    private readonly reader: KvReader = kvReader(kv),
    /** The partitions in use (ensureBillingStreams): `consumed` tells a committed state from a pending one by partition (0: it does not). */
    private readonly partitions = 0,
    /** Partition k's ack floor: the stream sequence up to which all its messages are acked (null: not known, e.g. no consumer yet). */
    private readonly ackFloor: (k: number) => Promise<number | null> = async () => null,
  ) {}

  /**
   * The state before the group `seq` (its first message's sequence, consumer.ts) of every
   * customer each organization and mode's `config` names, all keys in one batched round
   * (through `read`: the evaluator's lane answers those it knows, state-cache.ts).
   */
  async readMany(scopes: readonly { orgId: string; mode: Mode; config: BillingConfig }[], seq: number, read: ReadKnown = async (keys) => (await this.reader.getMany(keys, { markers: true })).map(knownOf)): Promise<ReadStates[]> {
    const ids = scopes.map((s) => Object.keys(s.config.customers));
    const keys = scopes.flatMap((s, i) => ids[i]!.map((id) => customerStateKey(s.orgId, s.mode, id)));
    const entries = await read(keys);
    let at = 0;
    return scopes.map((_s, i) => {
      const mine = entries.slice(at, (at += ids[i]!.length));
      const state: BillingState = { lastSeq: 0, consumed: {}, usage: {} };
      const customers = new Map<string, ReadCustomer>();
      let newest = 0;
      ids[i]!.forEach((id, j) => {
        const e = mine[j]!;
        let start: CustomerState;
        let held: Record<string, PeriodEntry> = {};
        if (e.value !== null) {
          const stored = e.value as CustomerEntry;
          newest = Math.max(newest, stored.seq);
          start = stored.seq === seq ? stored.before : stored.after;
          held = heldPeriods(stored, seq);
        } else start = { consumed: {}, usage: {} };
        customers.set(id, { start, revision: e.revision, held });
        Object.assign(state.consumed, start.consumed);
        Object.assign(state.usage, start.usage);
      });
      return { state, customers, newest };
    });
  }

  /**
   * The writes of group `seq` for each customer whose state or cap periods it changed: the
   * customer's key (compare-and-set on the revision read, 0: create), and the `cp.…` key of
   * each held period the rewrite spills (compare-and-set on `periodRevision`, the revision its
   * key was read at: spillsOf is known before evaluation, and step 3 reads those keys). A holder
   * that lost the group to an ack-wait expiry cannot overwrite a later group's values.
   * `touched`: per customer id, the period keys of the customer the group lists; `changed`:
   * per customer id, the periods it changed.
   */
  writesOf(orgId: string, mode: Mode, config: BillingConfig, seq: number, read: ReadStates, after: BillingState, touched: ReadonlyMap<string, ReadonlySet<string>>, changed: ReadonlyMap<string, ChangedPeriods>, periodRevision: (key: string) => number): EntryWrite[] {
    const out: EntryWrite[] = [];
    const owned = ownedIds(config);
    const none = new Set<string>();
    for (const [id, { start, revision, held }] of read.customers) {
      const next = sliceOf(after, config, id, owned);
      const periods = changed.get(id);
      if (sameState(start, next) && (!periods || Object.keys(periods).length === 0)) continue;
      const mine = touched.get(id) ?? none;
      const holds = periodsAfter(held, seq, mine, periods ?? {});
      const entry: CustomerEntry = Object.keys(holds).length > 0 ? { seq, before: start, after: next, periods: holds } : { seq, before: start, after: next };
      out.push({ key: customerStateKey(orgId, mode, id), value: JSON.stringify(entry), revision, entry });
      for (const k of spillsOf(held, mine)) {
        const spilled = held[k]!;
        out.push({ key: k, value: JSON.stringify(spilled), revision: periodRevision(k), entry: spilled });
      }
    }
    return out;
  }

  /**
   * Credits consumed per pool id of one customer, as committed (GET …/credit-pools). The key's
   * `after` is written before its group's commit, beside the group's events (consumer.ts, steps
   * 5–7): while the group is pending in the customer's partition's pin, the key's `before` is
   * what is committed — the balance shown never runs ahead of the events published (a publish
   * that keeps failing holds the commit back for as long as it fails).
   *
   * The partition's ack floor is asked beside the key: a group's messages are acked only once
   * it is committed, so a key whose group's first message is at or below the floor is committed
   * — the common case, answered without the pin (a pending one holds its group's documents, up
   * to max_payload). Above it (the group in flight, or committed and not yet acked) the pin
   * decides (pendingFrom).
   */
  async consumed(orgId: string, mode: Mode, customerId: string): Promise<Record<string, string>> {
    const k = this.partitions > 0 ? partitionOf(orgId, mode, customerId, this.partitions) : null;
    const [e, floor] = await Promise.all([this.reader.get(customerStateKey(orgId, mode, customerId)), k === null ? null : this.ackFloor(k).catch(() => null)]);
    if (present(e)) {
      const entry = e.json() as CustomerEntry;
      if (k === null || (floor !== null && entry.seq <= floor)) return entry.after.consumed;
      // The key's seq is its group's first message's, the pin's `seq` (as the evaluator's own read, readMany).
      return pendingFrom(await this.reader.get(pinKey(k))) === entry.seq ? entry.before.consumed : entry.after.consumed;
    }
    return {};
  }
}

/** Per customer id, the ids of its pools and its attributes, in the configuration's order. */
type OwnedIds = Map<string, { pools: string[]; attributes: string[] }>;

/** Every customer's pool and attribute ids of `config`, listed once (a group's configuration names hundreds of customers). */
function ownedIds(config: BillingConfig): OwnedIds {
  const out: OwnedIds = new Map();
  const of = (id: string) => {
    let o = out.get(id);
    if (!o) out.set(id, (o = { pools: [], attributes: [] }));
    return o;
  };
  for (const p of Object.values(config.pools)) of(p.customerId).pools.push(p.id);
  for (const a of Object.values(config.attributes)) of(a.customerId).attributes.push(a.id);
  return out;
}

/** One customer's part of a merged state: its pools' consumption, its attributes' usage. */
export function sliceOf(state: Pick<BillingState, 'consumed' | 'usage'>, config: BillingConfig, customerId: string, owned: OwnedIds = ownedIds(config)): CustomerState {
  const out: CustomerState = { consumed: {}, usage: {} };
  const mine = owned.get(customerId);
  if (!mine) return out;
  for (const id of mine.pools) if (Object.hasOwn(state.consumed, id)) out.consumed[id] = state.consumed[id]!;
  for (const id of mine.attributes) if (Object.hasOwn(state.usage, id)) out.usage[id] = state.usage[id]!;
  return out;
}

function sameState(a: CustomerState, b: CustomerState): boolean {
  const same = (x: Record<string, string>, y: Record<string, string>): boolean => Object.keys(x).length === Object.keys(y).length && Object.entries(x).every(([k, v]) => y[k] === v);
  return same(a.consumed, b.consumed) && same(a.usage, b.usage);
}

function present(e: KvEntry | null | undefined): e is KvEntry {
  return !!e && e.operation === 'PUT' && e.length > 0;
}
