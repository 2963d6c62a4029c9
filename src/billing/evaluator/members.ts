/**
 * Which pipeline process pulls which billing partitions. Every process may evaluate any
 * partition — the evaluator's order rules (consumer.ts: only the oldest uncommitted messages,
 * contiguous, one pin per partition) keep billing exact whatever process holds what — but two
 * processes pulling one partition take turns on it, each waiting for the other's group to
 * commit. So the partitions are shared out: the key `members` of the KV bucket
 * `<P>_billing_members` holds every process's last heartbeat ({id: epoch ms}); each process
 * writes its own into it every HEARTBEAT_MS (read, then compare-and-set), and a heartbeat
 * older than MEMBER_TTL_MS no longer counts, so a process that dies drops out by itself (one
 * that stops removes itself). One key, read by a direct get: listing keys (an ordered
 * consumer per look) came back incomplete on a loaded process, and two processes then both
 * took the same partitions. The members, sorted by id, take partition k when k mod n is
 * their index. A process looks again every HEARTBEAT_MS and
 * starts or stops pulling accordingly (what it already holds of a partition it gives up, it
 * evaluates first). While the members' views differ (a process joining or leaving) a
 * partition may be pulled by two processes for a moment: slower, never wrong.
 */
import type { KV } from '@nats-io/kv';
import { StorageType } from '@nats-io/jetstream';
import type { Nats } from '../../bus/connection.js';
import { ensure } from '../../bus/topology.js';
import { billingLog as log } from '../../log.js';

export const HEARTBEAT_MS = 2_000;
export const MEMBER_TTL_MS = 10_000;
const MEMBERS_KEY = 'members';

export function membersBucket(nats: Nats): Promise<KV> {
  // Who is alive right now, nothing else: in memory; the one key goes if nobody has written it for 10 × MEMBER_TTL_MS.
  return ensure(nats, { bucket: nats.topology.buckets.billingMembers, options: { history: 1, storage: StorageType.Memory, ttl: 10 * MEMBER_TTL_MS } });
}

/** The partitions of member `index` of `count` among `partitions`. */
export function assigned(index: number, count: number, partitions: number): number[] {
  const out: number[] = [];
  if (index < 0 || count <= 0) return out;
  for (let k = 0; k < partitions; k++) if (k % count === index) out.push(k);
  return out;
}

export class Members {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> = Promise.resolve();

  /**
   * @param onAssign called with this process's partitions after every look whose answer changed
   */
  constructor(
    private readonly kv: KV,
    readonly id: string,
    private readonly partitions: number,
    private readonly onAssign: (partitions: number[]) => Promise<void>,
  ) {}

  private last = '';

  /** Joins, takes this process's partitions, and keeps both up to date until stop. */
  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => {
      this.running = this.running.then(() => this.beat()).catch((err: unknown) => log.warn('billing membership heartbeat failed', { err }));
    }, HEARTBEAT_MS);
    this.timer.unref();
  }

  /** The live members' ids, sorted (read, expired heartbeats dropped and written back). */
  async members(): Promise<string[]> {
    return Object.keys(await this.update((m) => m)).sort();
  }

  /** Applies `change` to the members' heartbeats (expired ones dropped) with compare-and-set, again on a conflict. */
  private async update(change: (m: Record<string, number>) => Record<string, number>): Promise<Record<string, number>> {
    for (let attempt = 0; ; attempt++) {
      const e = await this.kv.get(MEMBERS_KEY);
      const now = Date.now();
      const seen = e && e.operation === 'PUT' && e.length > 0 ? e.json<Record<string, number>>() : {};
      const live: Record<string, number> = {};
      for (const [id, at] of Object.entries(seen)) if (now - at <= MEMBER_TTL_MS) live[id] = at;
      const next = change(live);
      try {
        if (e) await this.kv.update(MEMBERS_KEY, JSON.stringify(next), e.revision);
        else await this.kv.create(MEMBERS_KEY, JSON.stringify(next));
        return next;
      } catch (err) {
        if (attempt >= 20) throw err;
        await new Promise((r) => setTimeout(r, 5 + Math.random() * 20));
      }
    }
  }

  private async beat(): Promise<void> {
    const ids = Object.keys(await this.update((m) => ({ ...m, [this.id]: Date.now() }))).sort();
    const mine = assigned(ids.indexOf(this.id), ids.length, this.partitions);
    const key = mine.join(',');
    if (key === this.last) return;
    this.last = key;
    log.info('billing partitions taken', { member: this.id, members: ids.length, partitions: mine });
    await this.onAssign(mine);
  }

  /** Leaves: stops the heartbeat and removes itself, so the others take the partitions at their next look. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
    await this.update((m) => {
      const { [this.id]: _gone, ...rest } = m;
      return rest;
    }).catch(() => undefined);
  }
}

/** A member id: sortable, unique per process start. */
export const memberId = (random: string): string => `${Date.now().toString(36)}-${random}`;
