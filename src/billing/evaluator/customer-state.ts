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
 * its one partition). No key: what the former layout's one document per organization and
 * mode (`st.<org>.<mode>`, no longer written) holds for the customer's pools and attributes,
 * else nothing. Such a document is read in place, never rewritten; since nothing writes it
 * any more, a process keeps one it found (an absent one costs a KV get per batch that names a
 * customer without a key of its own: a new customer's first batch).
 */
import type { KV, KvEntry } from '@nats-io/kv';
import { kvReader, type KvReader } from '../../bus/kv-read.js';
import type { BillingConfig } from '../model.js';
import type { Mode } from '../../shared/mode.js';
import type { BillingState } from './evaluate.js';

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
export const formerStateKey = (orgId: string, mode: Mode): string => `st.${orgId}.${mode}`;

/** The state of every customer a batch names, as read before it. */
export interface ReadStates {
  /** Merged over the batch's customers (pool and attribute ids are unique): the evaluator's input. */
  state: BillingState;
  /** Per customer id: the state before the batch and the entry's revision (0: no key). */
  customers: Map<string, { start: CustomerState; revision: number }>;
  /** The former layout's document of the organization and mode, when there is one. */
  former: BillingState | null;
}

const FORMER_CACHE = 64;

export class CustomerStates {
  /** Documents of the former layout found, by key. They are never written any more. */
  private readonly former = new Map<string, Promise<BillingState | null>>();

  /**
   * @param kv the state bucket (writes)
   * @param reader its reads: direct gets, a batch's keys in one round (bus/kv-read.ts)
   */
  constructor(
    private readonly kv: KV,
    private readonly reader: KvReader = kvReader(kv),
  ) {}

  formerState(orgId: string, mode: Mode): Promise<BillingState | null> {
    const key = formerStateKey(orgId, mode);
    const cached = this.former.get(key);
    if (cached) return cached;
    const p = this.reader.get(key).then((e) => (present(e) ? (e.json() as BillingState) : null));
    // Only a document found is kept (it no longer changes); an absent one is asked again.
    void p.then(
      (doc) => {
        if (doc === null) return;
        if (this.former.size >= FORMER_CACHE) this.former.delete(this.former.keys().next().value!);
        this.former.set(key, p);
      },
      () => undefined,
    );
    return p;
  }

  /** The state before batch `seq` of every customer in `config` (the customers it names). */
  async read(orgId: string, mode: Mode, config: BillingConfig, seq: number): Promise<ReadStates> {
    const ids = Object.keys(config.customers);
    const entries = await this.reader.getMany(ids.map((id) => customerStateKey(orgId, mode, id)));
    const needFormer = entries.some((e) => !present(e));
    const former = needFormer ? await this.formerState(orgId, mode) : null;
    const state: BillingState = { lastSeq: 0, consumed: {}, usage: {} };
    const customers = new Map<string, { start: CustomerState; revision: number }>();
    ids.forEach((id, i) => {
      const e = entries[i];
      let start: CustomerState;
      if (present(e)) {
        const stored = e.json() as CustomerEntry;
        start = stored.seq === seq ? stored.before : stored.after;
      } else start = former ? sliceOf(former, config, id) : { consumed: {}, usage: {} };
      customers.set(id, { start, revision: e ? e.revision : 0 });
      Object.assign(state.consumed, start.consumed);
      Object.assign(state.usage, start.usage);
    });
    return { state, customers, former };
  }

  /**
   * Writes the state after batch `seq` of each customer it changed, compare-and-set on the
   * revision read (create when there was no key): a holder that lost the batch to an ack-wait
   * expiry cannot overwrite a later batch's state.
   */
  async write(orgId: string, mode: Mode, config: BillingConfig, seq: number, read: ReadStates, after: BillingState): Promise<void> {
    await Promise.all(
      [...read.customers].map(async ([id, { start, revision }]) => {
        const next = sliceOf(after, config, id);
        if (sameState(start, next)) return;
        const value = JSON.stringify({ seq, before: start, after: next } satisfies CustomerEntry);
        const key = customerStateKey(orgId, mode, id);
        if (revision === 0) await this.kv.create(key, value);
        else await this.kv.update(key, value, revision);
      }),
    );
  }

  /** Credits consumed per pool id of one customer, as evaluated so far (GET …/credit-pools). */
  async consumed(orgId: string, mode: Mode, customerId: string): Promise<Record<string, string>> {
    const e = await this.reader.get(customerStateKey(orgId, mode, customerId));
    if (present(e)) return (e.json() as CustomerEntry).after.consumed;
    // Pool ids are unique: the former document's map answers for this customer's pools.
    return (await this.formerState(orgId, mode))?.consumed ?? {};
  }
}

/** One customer's part of a (merged or former) state: its pools' consumption, its attributes' usage. */
export function sliceOf(state: Pick<BillingState, 'consumed' | 'usage'>, config: BillingConfig, customerId: string): CustomerState {
  const out: CustomerState = { consumed: {}, usage: {} };
  for (const p of Object.values(config.pools)) if (p.customerId === customerId && Object.hasOwn(state.consumed, p.id)) out.consumed[p.id] = state.consumed[p.id]!;
  for (const a of Object.values(config.attributes)) if (a.customerId === customerId && Object.hasOwn(state.usage, a.id)) out.usage[a.id] = state.usage[a.id]!;
  return out;
}

function sameState(a: CustomerState, b: CustomerState): boolean {
  const same = (x: Record<string, string>, y: Record<string, string>): boolean => Object.keys(x).length === Object.keys(y).length && Object.entries(x).every(([k, v]) => y[k] === v);
  return same(a.consumed, b.consumed) && same(a.usage, b.usage);
}

function present(e: KvEntry | null | undefined): e is KvEntry {
  return !!e && e.operation === 'PUT' && e.length > 0;
}
