/**
 * Age-based CPU priority of the engine's threads: a statement that has used AGED_AT_CPU_MS of
 * CPU time has the threads working for it lowered to AGED_NICE, so that a short statement
 * started beside long ones takes the CPU first. Age is CPU time used, not time since the start:
 * a statement of moderate work starved by many short ones (another organization's flood of
 * statements each well under a second) keeps its priority, and gets its share as before; aged
 * by the clock it was lowered and starved past its deadline (with one organization running
 * four 70 ms statements at a time, a 0.85 s statement answered 408 in 15 of 18 runs, against
 * none with even priority). The engine cannot stop a block in the making, and a sort of
 * one large array is one block: without this, a small statement started beside a few such
 * runaways gets its share of the CPU only, and passes its deadline (bench/analytics-runaways.ts:
 * on two cores, beside four 20,000,000-element sorts, a 2,000,000-element sort took 3.33 times
 * its time alone at the median, and 1.11 times with the runaways' threads lowered).
 *
 * The threads are the engine's pool threads, which go on to other work: a thread is lowered
 * while the statement it works for now (the CPU ledger's owner, cpu.ts) is aged, and put back
 * to the priority it had once it works for a younger one or its statement ended. The engine
 * itself sets a statement's threads to its `os_thread_priority` (a quarantined organization's
 * at 19) when they take it up, and back to 0 when they leave it: a thread already at
 * AGED_NICE or lower is left alone, and one that the engine has since set elsewhere is not put
 * back. The host's own threads (its event loop and the libuv pool that calls the engine, which
 * also runs inserts) are never lowered; the analytics sessions' threads (remote-session.ts),
 * where the engine analyses the statements they start, are.
 *
 * Putting a thread back to a higher priority needs CAP_SYS_NICE (root has it); without it the
 * host does not lower any (`probe`), as the engine does not apply `os_thread_priority`.
 *
 * Pure bookkeeping over the operations it is given; the host (host.ts) drives it.
 */
import os from 'node:os';
import { readFileSync } from 'node:fs';

/** A statement that has used this much CPU time (ms, the CPU ledger's count) has its threads lowered. */
export const AGED_AT_CPU_MS = 1_000;
/**
 * The nice value of an aged statement's threads: one below the engine's own for an
 * organization's crowded statements (10, `os_thread_priority`), so that a thread the engine set
 * there since is told from one lowered here and left as it is; a quarantined organization's run
 * at 19.
 */
export const AGED_NICE = 11;

export interface NiceOps {
  /** A thread's nice value, or null when it is gone. */
  get(tid: number): number | null;
  /** Sets a thread's nice value; false when it could not (gone, or not allowed). */
  set(tid: number, nice: number): boolean;
  /** The host's own threads, never lowered. */
  own(tid: number): boolean;
}

export class ThreadAging {
  /** Threads lowered here → the nice value they had. */
  private readonly lowered = new Map<number, number>();

  constructor(private readonly ops: NiceOps) {}

  /** How many threads are lowered now. */
  get size(): number {
    return this.lowered.size;
  }

  /**
   * `aged`: the threads working for an aged statement now (the ledger's owners). Lowers those
   * not lowered yet; puts back those lowered that no longer are.
   */
  update(aged: ReadonlySet<number>): void {
    for (const [tid, before] of this.lowered) if (!aged.has(tid)) this.putBack(tid, before);
    for (const tid of aged) {
      if (this.lowered.has(tid) || this.ops.own(tid)) continue;
      const now = this.ops.get(tid);
      if (now === null || now >= AGED_NICE) continue;
      if (this.ops.set(tid, AGED_NICE)) this.lowered.set(tid, now);
    }
  }

  /** No statement runs: every thread lowered is put back. */
  clear(): void {
    for (const [tid, before] of this.lowered) this.putBack(tid, before);
  }

  private putBack(tid: number, before: number): void {
    this.lowered.delete(tid);
    // Set elsewhere since (the engine took it up for a statement of its own priority, or reset it): left as it is.
    if (this.ops.get(tid) === AGED_NICE) this.ops.set(tid, before);
  }
}

function comm(tid: number): string | null {
  try {
    return readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim();
  } catch {
    return null;
  }
}

/**
 * The operations on this process's threads (Linux: a thread id is a `setpriority` target of
 * its own). The host's own threads are those named as the process is (the event loop, and the
 * libuv pool's threads, which take the name their creator had) or as libuv names its workers;
 * the engine names its threads itself.
 */
export function processNice(analyticsThreads: ReadonlySet<number> = new Set()): NiceOps {
  const mine = new Set(['node', comm(process.pid) ?? 'node']);
  return {
    get: (tid) => {
      try {
        return os.getPriority(tid);
      } catch {
        return null;
      }
    },
    set: (tid, nice) => {
      try {
        os.setPriority(tid, nice);
        return true;
      } catch {
        return false;
      }
    },
    own: (tid) => {
      // The analytics sessions' own threads (remote-session.ts) do nothing else: the engine's work done there (a statement's analysis) may be lowered.
      if (analyticsThreads.has(tid)) return false;
      const name = comm(tid);
      return name === null || mine.has(name) || name.startsWith('libuv');
    },
  };
}

/**
 * Whether a thread's priority can be put back once lowered here: the host lowers its own event
 * loop's thread by one and puts it back. Without CAP_SYS_NICE the second step is refused (and
 * the thread stays one lower, which the event loop does not mind).
 */
export function probe(ops: NiceOps = processNice()): boolean {
  const before = ops.get(process.pid);
  if (before === null || before >= 19) return false;
  if (!ops.set(process.pid, before + 1)) return false;
  return ops.set(process.pid, before);
}
