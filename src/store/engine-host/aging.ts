/**
 * CPU priority of the engine's threads by the CPU time already used (least attained service):
 * the threads working for a statement are lowered once it has used AGED_AT_CPU_MS of CPU time,
 * and further as it goes on (`agedNice`: 11 from a second, 14 from two, 17 from four, 18 from
 * eight), so that of the statements running, those that have used less CPU take it first. The
 * engine cannot stop a block in the making, and a sort of one large array is one block:
 * without this, a small statement started beside a few such runaways gets its share of the
 * CPU only, and passes its deadline (bench/analytics-runaways.ts).
 *
 * Age is CPU time used, not time since the start, and it is an organization's as well as a
 * statement's: each statement is lowered by the larger of its own CPU time and its
 * organization's recent CPU time beside others (the ledger's: what its statements used while
 * another organization's ran too, halved every five seconds, cpu.ts). So a
 * statement of moderate work keeps its priority against other organizations' floods of short
 * statements, each too short to age by itself: aged by the clock, a 0.85 s statement beside
 * one organization's four 70 ms statements at a time answered 408 in 15 of 18 runs; aged by its
 * own CPU time only, a statement of two seconds' work beside two organizations' four 0.1–0.3 s
 * statements each answered 408 in 15 of 18 (5 s limit), and beside three such organizations in
 * 5 of 8 (7 s limit). An organization that keeps the engine busy (a runaway, a flood, or one
 * statement after another) ages as a whole; one that used little recently starts young.
 *
 * The threads are the engine's pool threads, which go on to other work: a thread is lowered
 * while the statement it works for now (the CPU ledger's owner, cpu.ts) is aged, and put back
 * to the priority it had once it works for a younger one, or once no statement runs. A thread
 * whose statement ended stays as it is until the next statement that takes it is seen (the
 * host samples every 200 ms): an organization's short statements, each over before it could be
 * seen, mostly run on the threads its earlier ones left lowered, instead of on threads put back
 * between them. The engine
 * itself sets a statement's threads to its `os_thread_priority` (10 for an organization's
 * crowded statements, 19 for a quarantined organization's) when they take it up, and back to
 * 0 when they leave it: a thread already at AGED_NICE or lower that was not lowered here is left
 * alone, and one that the engine has since set elsewhere is not put back. The host's own
 * threads (its event loop and the libuv pool that calls the engine, which also runs inserts)
 * are never lowered; the analytics sessions' threads (remote-session.ts), where the engine
 * analyses the statements they start, are.
 *
 * Putting a thread back to a higher priority needs CAP_SYS_NICE (root has it); without it the
 * host does not lower any (`probe`), as the engine does not apply `os_thread_priority`.
 *
 * Pure bookkeeping over the operations it is given; the host (host.ts) drives it.
 */
import os from 'node:os';
import { readFileSync } from 'node:fs';
import type { ThreadUse } from './cpu.js';

/** A statement that has used this much CPU time (ms, the CPU ledger's count) has its threads lowered. */
export const AGED_AT_CPU_MS = 1_000;
/**
 * The nice value of a statement's threads once it is aged: one below the engine's own for an
 * organization's crowded statements (10, `os_thread_priority`), so that a thread the engine set
 * there since is told from one lowered here and left as it is; a quarantined organization's run
 * at 19, below every level here.
 */
export const AGED_NICE = 11;
/** The levels (CPU time used in ms, nice value), each step of three nice values about halving a thread's share against the level above. */
const LEVELS: readonly (readonly [number, number])[] = [
  [8 * AGED_AT_CPU_MS, 18],
  [4 * AGED_AT_CPU_MS, 17],
  [2 * AGED_AT_CPU_MS, 14],
  [AGED_AT_CPU_MS, AGED_NICE],
];

/** The nice value for a statement that has used `cpuMs` of CPU time; null while it is not aged. */
export function agedNice(cpuMs: number): number | null {
  for (const [at, nice] of LEVELS) if (cpuMs >= at) return nice;
  return null;
}

/** The nice value for a thread working for a statement (null: not lowered): by the larger of its statement's CPU time and its organization's recent CPU time. */
export function loweredNice(use: ThreadUse): number | null {
  return agedNice(Math.max(use.stmtMs, use.orgMs));
}

/** Whether a statement's threads are lowered (the report's `aged`). */
export const isLowered = (use: ThreadUse): boolean => loweredNice(use) !== null;

export interface NiceOps {
  /** A thread's nice value, or null when it is gone. */
  get(tid: number): number | null;
  /** Sets a thread's nice value; false when it could not (gone, or not allowed). */
  set(tid: number, nice: number): boolean;
  /** The host's own threads, never lowered. */
  own(tid: number): boolean;
}

export class ThreadAging {
  /** Threads lowered here → the nice value they had, and the one set here. */
  private readonly lowered = new Map<number, { before: number; set: number }>();

  constructor(private readonly ops: NiceOps) {}

  /** How many threads are lowered now. */
  get size(): number {
    return this.lowered.size;
  }

  /**
   * `targets`: the threads working for a running statement, each with its nice value
   * (`loweredNice` of what it works for; null: not lowered). Lowers those not lowered yet,
   * moves those lowered to their new value, puts back those lowered that work for a statement
   * that is not; a thread not in `targets` (its statement ended) is left as it is.
   */
  update(targets: ReadonlyMap<number, number | null>): void {
    for (const [tid, l] of this.lowered) {
      const target = targets.get(tid);
      if (target === undefined) continue;
      if (target === null) this.putBack(tid, l);
      else if (target !== l.set) {
        // Set elsewhere since (the engine took it up for a statement of its own priority): forgotten, as put back.
        if (this.ops.get(tid) !== l.set) this.lowered.delete(tid);
        else if (this.ops.set(tid, target)) l.set = target;
      }
    }
    for (const [tid, target] of targets) {
      if (target === null || this.lowered.has(tid) || this.ops.own(tid)) continue;
      const now = this.ops.get(tid);
      if (now === null || now >= AGED_NICE) continue;
      if (this.ops.set(tid, target)) this.lowered.set(tid, { before: now, set: target });
    }
  }

  /** No statement runs: every thread lowered is put back. */
  clear(): void {
    for (const [tid, l] of this.lowered) this.putBack(tid, l);
  }

  private putBack(tid: number, l: { before: number; set: number }): void {
    this.lowered.delete(tid);
    // Set elsewhere since (the engine took it up for a statement of its own priority, or reset it): left as it is.
    if (this.ops.get(tid) === l.set) this.ops.set(tid, l.before);
  }
}

function comm(tid: number): string | null {
  try {
    return readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim();
  } catch {
    return null;
  }
}

/** The nice value of each thread working for a running statement (null: not lowered), from what the ledger says it works for (cpu.ts threadUse). */
export function loweredThreads(uses: ReadonlyMap<number, ThreadUse>): Map<number, number | null> {
  const out = new Map<number, number | null>();
  for (const [tid, use] of uses) out.set(tid, loweredNice(use));
  return out;
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
