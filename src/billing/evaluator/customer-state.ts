/**
 * The evaluator's running state, one KV key per customer (the owner of every pool, attribute
 * and cap, model.ts), in the state bucket:
 *
 *   cs.<org>.<mode>.<customerId>   {seq, before, after}: the stream sequence of the batch that
 *                                  last changed the customer's state, and the state
 *                                  ({consumed per pool id, cumulative usage per attribute id})
 *                                  before and after that batch.
 *
 * A batch reads and writes only the keys of the customers it names. The state before batch S
 * is the key's `before` when the key's seq is S (S wrote it, then crashed before its commit)
 * and its `after` otherwise (that batch committed: a customer's batches commit in order, in
 * its one partition). No key: nothing consumed, no usage.
 */
import type { KV, KvEntry } from '@nats-io/kv';
import { kvReader, type KvReader } from '../../bus/kv-read.js';
import type { KvWrite } from '../../bus/kv-write.js';
import type { BillingConfig } from '../model.js';
import type { Mode } from '../../shared/mode.js';
import type { BillingState } from './evaluate.js';
import { knownOf, type ReadKnown } from './state-cache.js';
import { partitionOf } from './partition.js';
import { pendingFrom, pinKey } from './pins.js';

export interface CustomerState {
  /** Credits consumed per pool id (the customer's pools). */
  consumed: Record<string, string>;
  /** Cumulative quantity per order line attribute id (the customer's attributes). */
  usage: Record<string, string>;
}

export interface CustomerEntry {
  seq: number;
  before: CustomerState;
  after: CustomerState;
}

export const customerStateKey = (orgId: string, mode: Mode, customerId: string): string => `cs.${orgId}.${mode}.${customerId}`;

/** The state of every customer a batch names, as read before it. */
export interface ReadStates {
  /** Merged over the batch's customers (pool and attribute ids are unique): the evaluator's input. */
  state: BillingState;
  /** Per customer id: the state before the batch and the entry's revision (0: no key). */
  customers: Map<string, { start: CustomerState; revision: number }>;
  /**
   * The largest `seq` among the keys read (0: none): above the group's own, a later group of
   * the partition has written a key, so the group is committed and these are not its starting
   * states (consumer.ts, step 3).
   */
  newest: number;
}

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
      const customers = new Map<string, { start: CustomerState; revision: number }>();
      let newest = 0;
      ids[i]!.forEach((id, j) => {
        const e = mine[j]!;
        let start: CustomerState;
        if (e.value !== null) {
          const stored = e.value as CustomerEntry;
          newest = Math.max(newest, stored.seq);
          start = stored.seq === seq ? stored.before : stored.after;
        } else start = { consumed: {}, usage: {} };
        customers.set(id, { start, revision: e.revision });
        Object.assign(state.consumed, start.consumed);
        Object.assign(state.usage, start.usage);
      });
      return { state, customers, newest };
    });
  }

  /**
   * The writes of the state after batch (or group) `seq` of each customer it changed,
   * compare-and-set on the revision read (0: create): a holder that lost the batch to an
   * ack-wait expiry cannot overwrite a later batch's state.
   */
  writesOf(orgId: string, mode: Mode, config: BillingConfig, seq: number, read: ReadStates, after: BillingState): (KvWrite & { entry: CustomerEntry })[] {
    const out: (KvWrite & { entry: CustomerEntry })[] = [];
    const owned = ownedIds(config);
    for (const [id, { start, revision }] of read.customers) {
      const next = sliceOf(after, config, id, owned);
      if (sameState(start, next)) continue;
      const entry: CustomerEntry = { seq, before: start, after: next };
      out.push({ key: customerStateKey(orgId, mode, id), value: JSON.stringify(entry), revision, entry });
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
