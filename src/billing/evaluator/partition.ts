/**
 * Partitions of billing evaluation. Everything the evaluator writes — a pool's consumption,
 * an attribute's cumulative usage, a cap's period totals — belongs to one customer (pools,
 * attributes and caps are a customer's own, model.ts), so the customer is the unit of order:
 * a customer's signals must be applied one batch at a time, in order; different customers
 * need not. Customer c of organization O and mode M belongs to partition
 * `hash(O, M, c) mod P` (P = BILLING_PARTITIONS); each partition is one JetStream consumer with
 * max_ack_pending 1 (streams.ts), and the partitions are evaluated in parallel.
 *
 * Signals name a customer by one of two kinds (`customer.customerId`, the service id, or
 * `customer.externalCustomerId`), carried kind-prefixed (`i:…` / `x:…`, src/pipeline/rows-task.ts),
 * so the pipeline resolves each reference by its kind only to the service id before it splits
 * a batch (a service id through the customer's document, an externalId through its claim key
 * confirmed by the document; the answer never changes once found — an externalId is set once
 * and never changed or removed (config/validate.ts settableOnce), and a deleted customer keeps
 * its externalId reserved — so found ones are cached; a deleted customer's signals still go to
 * its partition, where evaluation finds it deleted and prices nothing). The resolved id
 * travels with the signal (BillableLine `k`) and the evaluator prices the signal for that
 * customer only. A reference that names no customer when the batch is stored is not billed
 * (no customer, nothing priced) and left out of the published lines altogether: evaluation
 * would skip them (a line without `k`, group.ts), and an organization that meters customers it
 * has not configured for billing would otherwise send every signal through billing for nothing.
 */
import { createHash } from 'node:crypto';
import { headers as natsHeaders } from '@nats-io/transport-node';
import type { Nats } from '../../bus/connection.js';
import { publishDurable } from '../../bus/publish.js';
import { H_BATCH, H_MODE, H_ORG } from '../../bus/batch.js';
import type { Mode } from '../../shared/mode.js';

export function partitionOf(orgId: string, mode: Mode, customerId: string, partitions: number): number {
  if (partitions <= 1) return 0;
  const h = createHash('sha1').update(`${orgId}\u0000${mode}\u0000${customerId}`).digest();
  return h.readUInt32BE(0) % partitions;
}

/** Resolves customer references (kind-prefixed: `i:<service id>`, `x:<externalId>`) to service ids; null: no such customer. */
export type CustomerResolver = (orgId: string, mode: Mode, refs: string[]) => Promise<Map<string, string | null>>;

/** The billable lines of one batch, split by partition, each line with its resolved customer (`k`); lines of an externalId naming no customer left out. */
export interface PartitionedLines {
  partition: number;
  lines: string[];
}

/**
 * The customer reference (`c`) of each of a batch's billable lines, as the rows worker read
 * them (src/pipeline/rows-task.ts): the distinct references, and per line the index of its own.
 */
export interface LineRefs {
  refs: readonly string[];
  refOf: ArrayLike<number>;
  /** The service id each of `refs` names (null: none), when the pipeline resolved them already. */
  ids?: readonly (string | null)[];
}

/** A batch's billable lines resolved and split by partition (`prepare`). */
export interface PreparedBatch<M extends BatchRef = BatchRef> {
  meta: M;
  parts: PartitionedLines[];
}

const CACHE_MAX = 200_000;

/** The batch a message of billable lines comes from. */
export interface BatchRef {
  orgId: string;
  mode: Mode;
  batchId: string;
}

/** Where a reference's lines go: the customer's partition, and the prefix `{"k":<service id>,` each line gets. */
interface Target {
  k: number;
  prefix: string;
}

export class BillablePartitioner {
  /** Per `<org>.<mode>`, reference → its target, for references found (partitionOf and the prefix computed once per customer, not once per batch). */
  private readonly cache = new Map<string, Map<string, Target>>();
  private cached = 0;

  constructor(
    private readonly nats: Nats,
    private readonly resolver: CustomerResolver,
    readonly partitions: number,
    /** References kept at most (the oldest go first). */
    private readonly cacheMax = CACHE_MAX,
  ) {}

  /**
   * One batch's billable lines in the pipeline's form (UTF-8, each line ending in '\n'; JSON
   * text holds no raw newline), resolved and split by partition, ready to publish: the
   * pipeline prepares each batch as it processes it, while an earlier insert runs, so that
   * only the publishes wait for the insert (src/pipeline/consumer.ts). Resolving references
   * may wait for the store. `refs`: each line's customer reference as the rows worker read it
   * (without: read from the lines).
   */
  async prepare<M extends BatchRef>(meta: M, lines: Uint8Array, refs?: LineRefs): Promise<PreparedBatch<M>> {
    if (refs) {
      // The references first: a batch none of whose references names a customer (an
      // organization metering customers it has not configured for billing) is never decoded.
      const targets = await this.targets(meta.orgId, meta.mode, refs.refs, refs.ids);
      if (targets.every((x) => x === null)) return { meta, parts: [] };
      return { meta, parts: byPartition(lineTexts(lines), (i) => targets[refs.refOf[i]!] ?? null) };
    }
    const text = lineTexts(lines);
    return { meta, parts: text.length === 0 ? [] : await this.split(meta.orgId, meta.mode, text) };
  }

  /**
   * Publishes prepared batches, entering each partition in the order given: all sent at once,
   * in that order. (A publish that must be retried lands after later ones: those batches are
   * then billed, exactly, in that order.)
   */
  async publishPrepared(batches: readonly PreparedBatch<BatchRef>[], timeoutMs: number): Promise<void> {
    await Promise.all(batches.flatMap(({ meta, parts }) => this.send(meta, parts, timeoutMs)));
  }

  /**
   * Publishes one batch's billable lines, one message per partition it touches, with
   * Nats-Msg-Id = <batch id>.p<k>: a batch published again (a pipeline crash before its ack)
   * is stored once per partition.
   */
  async publish(meta: BatchRef, lines: string[], timeoutMs: number): Promise<void> {
    if (lines.length === 0) return;
    await Promise.all(this.send(meta, await this.split(meta.orgId, meta.mode, lines), timeoutMs));
  }

  /** Sends a batch's parts now (in order: each publish goes out before the call returns), each to its partition. */
  private send(meta: BatchRef, parts: readonly PartitionedLines[], timeoutMs: number): Promise<unknown>[] {
    return parts.map((p) => {
      const h = natsHeaders();
      h.set(H_ORG, meta.orgId);
      h.set(H_MODE, meta.mode);
      h.set(H_BATCH, meta.batchId);
      return publishDurable(this.nats.nc, this.nats.topology.billableParts.subject(p.partition, meta.orgId), Buffer.from(p.lines.join('\n')), h, `${meta.batchId}.p${p.partition}`, timeoutMs);
    });
  }

  async split(orgId: string, mode: Mode, lines: string[]): Promise<PartitionedLines[]> {
    const refs = lines.map(customerRef);
    const distinct = [...new Set(refs)];
    const targets = await this.targets(orgId, mode, distinct);
    const of = new Map(distinct.map((ref, i) => [ref, targets[i]!]));
    return byPartition(lines, (i) => of.get(refs[i]!) ?? null);
  }

  /** Each of the distinct references' target, or null when it names no customer. */
  private async targets(orgId: string, mode: Mode, refs: readonly string[], ids?: readonly (string | null)[]): Promise<(Target | null)[]> {
    // Those known are taken now: the cache may drop them while the others are resolved (other
    // batches, or this one's own new entries, filling it).
    const scope = `${orgId}.${mode}`;
    const known = this.cache.get(scope);
    const out = refs.map((ref) => known?.get(ref) ?? null);
    const missing = refs.filter((_, i) => out[i] === null);
    if (missing.length === 0) return out;
    const resolved = ids ? null : await this.resolver(orgId, mode, missing);
    return refs.map((ref, i) => {
      const had = out[i];
      if (had) return had;
      const id = ids ? ids[i] : resolved!.get(ref);
      if (id === null || id === undefined) return null;
      // The resolved id goes first in the line's object: `{"k":…,` + the rest of it.
      const to = { k: partitionOf(orgId, mode, id, this.partitions), prefix: `{"k":${JSON.stringify(id)},` };
      this.remember(scope, ref, to);
      return to;
    });
  }

  private remember(scope: string, ref: string, to: Target): void {
    let refs = this.cache.get(scope);
    if (!refs) this.cache.set(scope, (refs = new Map()));
    if (refs.has(ref)) return;
    // At most cacheMax: the organizations cached first go first (emptied whole), then this one's oldest.
    for (const [other, o] of this.cache) {
      if (this.cached < this.cacheMax) break;
      if (other === scope) {
        if (refs.size > 0) {
          refs.delete(refs.keys().next().value!);
          this.cached--;
        }
        break;
      }
      this.cached -= o.size;
      this.cache.delete(other);
    }
    refs.set(ref, to);
    this.cached++;
  }
}

/** The lines of a batch's billable bytes (each ending in '\n'). */
function lineTexts(lines: Uint8Array): string[] {
  const text = Buffer.from(lines.buffer, lines.byteOffset, lines.byteLength).toString('utf8').split('\n');
  if (text.at(-1) === '') text.pop();
  return text;
}

/** The lines with a target, each with its customer's id first, grouped by partition (in partition order, lines in order). */
function byPartition(lines: readonly string[], targetOf: (i: number) => Target | null): PartitionedLines[] {
  const parts = new Map<number, string[]>();
  lines.forEach((line, i) => {
    const to = targetOf(i);
    // No customer: not billed, nothing to publish.
    if (!to) return;
    const out = to.prefix + line.slice(1);
    const list = parts.get(to.k);
    if (list) list.push(out);
    else parts.set(to.k, [out]);
  });
  return [...parts].sort((a, b) => a[0] - b[0]).map(([partition, l]) => ({ partition, lines: l }));
}

/** The end (index after the closing quote) of the JSON string starting at `from` (a '"'), or -1. */
export function stringEnd(line: string, from: number): number {
  if (line.charCodeAt(from) !== 0x22) return -1;
  for (let i = from + 1; i < line.length; i++) {
    const c = line.charCodeAt(i);
    if (c === 0x5c) i++; // an escape: skip the escaped character
    else if (c === 0x22) return i + 1;
  }
  return -1;
}

/**
 * The customer reference `c` of a billable line, read from the line's start in the form the
 * rows worker writes (`{"i":"…","e":"…","c":"…",…`, workers/rows.ts) without parsing the
 * rest (the signal's data); any other form is parsed whole.
 */
export function customerRef(line: string): string {
  if (line.startsWith('{"i":')) {
    const idEnd = stringEnd(line, 5);
    if (idEnd > 0 && line.startsWith(',"e":', idEnd)) {
      const eventEnd = stringEnd(line, idEnd + 5);
      if (eventEnd > 0 && line.startsWith(',"c":', eventEnd)) {
        const refEnd = stringEnd(line, eventEnd + 5);
        if (refEnd > 0) return JSON.parse(line.slice(eventEnd + 5, refEnd)) as string;
      }
    }
  }
  return (JSON.parse(line) as { c: string }).c;
}
