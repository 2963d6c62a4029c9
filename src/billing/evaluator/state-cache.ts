/**
 * What a partition's lane knows of its state keys (`cs.…` customer states and `cp.…` cap
 * periods: consumer.ts) as of its last commit: each key's value and revision, as it read or
 * wrote them. While the lane is the partition's only writer — it uses the pin it wrote last
 * instead of reading it (consumer.ts step 1) — its next group takes them from here instead of
 * reading them again, which was most of a group's reads (a key per customer and per cap
 * period the group names).
 *
 * Why that is exact: only a group that commits in partition k writes k's keys with new
 * values, and a group commits only after its pin's compare-and-set on the revision of the
 * group before. So while no other process has written the pin since this lane's last commit,
 * no key of k has another value than the one known here; and the group is evaluated only once
 * its own pin write (compare-and-set on that same revision) has succeeded (the states are
 * handed over after it, consumer.ts `before`): had anyone written the pin in between, that
 * write fails and nothing is published. A holder that lost a group to an ack-wait expiry may
 * still rewrite a key with the value it already had (same group, same start: the same
 * result), moving its revision: this lane's next compare-and-set on that key then fails, the
 * lane forgets everything (`clear`) and reads again.
 *
 * Values are handed to the evaluation as they are: it never changes its inputs (a property of
 * test/unit/billing-group.test.ts). Bounded (oldest first out): a key not known is read, one
 * round for all of a group's misses.
 */
import type { KvEntry } from '@nats-io/kv';

/** A key's value (parsed JSON; null: no key) and its revision (0: never written). */
export interface Known<T = unknown> {
  value: T | null;
  revision: number;
}

/** Reads keys as `Known`s, one round (a KvReader's getMany, parsed). */
export type ReadKnown = (keys: readonly string[]) => Promise<Known[]>;

export class StateCache {
  private readonly known = new Map<string, Known>();

  constructor(private readonly max: number) {}

  get size(): number {
    return this.known.size;
  }

  clear(): void {
    this.known.clear();
  }

  /** Records a key's value and revision (as read, or as written with that revision). */
  set(key: string, value: unknown, revision: number): void {
    this.known.delete(key);
    this.known.set(key, { value, revision });
    if (this.known.size > this.max) this.known.delete(this.known.keys().next().value!);
  }

  /**
   * The keys' values: those known from here when `trusted` (the lane's own pin is in use),
   * the others through `read`, in one round; everything read is kept.
   */
  async readMany(keys: readonly string[], trusted: boolean, read: ReadKnown): Promise<Known[]> {
    const out = new Array<Known>(keys.length);
    const missing: string[] = [];
    const at: number[] = [];
    keys.forEach((k, i) => {
      const hit = trusted ? this.known.get(k) : undefined;
      if (hit) out[i] = hit;
      else {
        missing.push(k);
        at.push(i);
      }
    });
    if (missing.length > 0) {
      const got = await read(missing);
      got.forEach((g, j) => {
        this.set(missing[j]!, g.value, g.revision);
        out[at[j]!] = this.known.get(missing[j]!)!;
      });
    }
    return out;
  }
}

/** A KV entry as a `Known`: its parsed JSON, or null for no key. */
export function knownOf(e: KvEntry | null | undefined): Known {
  if (!e || e.operation !== 'PUT' || e.length === 0) return { value: null, revision: e ? e.revision : 0 };
  return { value: e.json(), revision: e.revision };
}
