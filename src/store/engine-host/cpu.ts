/**
 * The CPU time each running analytics statement of the engine host has used, so that the
 * service can tell, when a statement's deadline passes, whether it used the CPU or was starved
 * of it by other statements (src/store/hosted/blame.ts).
 *
 * The host samples, every SAMPLE_MS while an analytics statement runs, which engine threads
 * each statement has (`thread_ids` of system.processes, read on a session of its own; a
 * statement is named by its `log_comment`, which the service sets) and each thread's CPU time
 * (utime + stime of /proc/self/task/<tid>/stat). A thread's CPU time since the previous sample
 * is counted to the statement that lists it now. Every thread of the host is read at each
 * sample, so a pool thread that served other work (inserts, earlier statements) before a
 * statement took it counts only what it did since; only a thread that did not exist at the
 * previous sample counts all of its time (at most SAMPLE_MS of work). The
 * engine's own ProfileEvents CPU counters are not used: they lag far behind a statement that
 * works on one block (a large sort reads 0 there until it ends).
 *
 * The ledger also keeps each organization's recent CPU time: the time counted to its statements
 * while another organization's statements ran too, halved every ORG_HALF_LIFE_MS (a statement's tag names its organization: `stmt:<n>:<org>`,
 * the organization as a key the service makes; a tag without one is an organization of its
 * own), which the host's priorities read (aging.ts).
 *
 * Pure bookkeeping plus the /proc reader; the host (host.ts) drives it.
 */
import { readFileSync, readdirSync } from 'node:fs';

/** How often the running statements' threads are sampled while an analytics statement runs. */
export const SAMPLE_MS = 200;

/** Clock ticks per second of /proc's utime and stime (USER_HZ: 100 on Linux). */
const TICKS_PER_SECOND = 100;

/** What system.processes lists: the log_comment of each running statement named by the service, and its threads. */
export const PROCESSES_SQL =
  "SELECT Settings['log_comment'] AS tag, thread_ids FROM system.processes WHERE startsWith(Settings['log_comment'], 'stmt:')";

export interface Listed {
  tag: string;
  threads: number[];
}

/** The rows of PROCESSES_SQL in JSONCompact (thread ids as numbers or as quoted 64-bit integers). */
export function parseProcesses(json: string): Listed[] {
  const doc = JSON.parse(json) as { data?: unknown[][] };
  const out: Listed[] = [];
  for (const row of doc.data ?? []) {
    const [tag, threads] = row;
    if (typeof tag !== 'string' || !Array.isArray(threads)) continue;
    out.push({ tag, threads: threads.map((x) => Number(x)).filter((x) => Number.isSafeInteger(x) && x > 0) });
  }
  return out;
}

/** utime + stime of a /proc/<pid>/task/<tid>/stat line, in clock ticks (fields 14 and 15; the name in parentheses may hold spaces). */
export function statTicks(stat: string): number | null {
  const close = stat.lastIndexOf(')');
  if (close < 0) return null;
  const f = stat.slice(close + 2).split(' ');
  // f[0] is field 3 (state): utime is field 14, stime field 15.
  const utime = Number(f[11]);
  const stime = Number(f[12]);
  return Number.isFinite(utime) && Number.isFinite(stime) ? utime + stime : null;
}

/** The thread ids of this process. */
export function ownThreads(): number[] {
  try {
    return readdirSync('/proc/self/task').map(Number).filter((x) => Number.isSafeInteger(x) && x > 0);
  } catch {
    return [];
  }
}

/** The CPU ticks a thread of this process has used, or null when it is gone. */
export function threadTicks(tid: number): number | null {
  try {
    return statTicks(readFileSync(`/proc/self/task/${tid}/stat`, 'utf8'));
  } catch {
    return null;
  }
}

/** How long a statement that ended stays in the report (the service asks about one the engine's own time limit ended). */
export const ENDED_KEPT_MS = 10_000;

/** An organization's recent CPU time halves in this long. */
export const ORG_HALF_LIFE_MS = 5_000;

/** The organization a statement's tag names (`stmt:<n>:<org>`), or the tag itself when it names none. */
export function orgOfTag(tag: string): string {
  const at = tag.indexOf(':', tag.indexOf(':') + 1);
  return at < 0 ? tag : tag.slice(at + 1);
}

/** What the host's priorities read of a thread working for a statement: its statement's CPU time and its organization's recent CPU time, in ms. */
export interface ThreadUse {
  stmtMs: number;
  orgMs: number;
}

const msOf = (ticks: number): number => (ticks * 1000) / TICKS_PER_SECOND;

export class CpuLedger {
  /** Thread → its CPU ticks at the last count that saw it. */
  private readonly seen = new Map<number, number>();
  /** Thread → the statement its time counts to: the last one that listed it anew. */
  private readonly owner = new Map<number, string>();
  /** Statement (tag) → ticks counted to it so far. */
  private readonly used = new Map<string, number>();
  /** Statements no longer listed → their ticks, and when they were last listed. */
  private readonly ended = new Map<string, { ticks: number; at: number }>();
  /** The statements running at the last sample, and their threads. */
  private listed: Listed[] = [];
  /** Organization → its recent CPU time (ms, decayed to `at`). */
  private readonly orgs = new Map<string, { ms: number; at: number }>();

  /**
   * One sample: the statements running now and their threads, each thread's ticks (`ticksOf`,
   * null when the thread is gone) and all threads of the process (`all`: their ticks now are
   * the base of what they count to a statement that lists them later).
   *
   * The engine lists every thread that has worked for a statement, also after the thread went
   * back to the pool and on to another statement: a thread's time counts to the statement that
   * lists it anew (at this sample and not at the previous one), as long as that one runs.
   */
  record(listed: Listed[], ticksOf: (tid: number) => number | null, all: readonly number[], now = Date.now()): void {
    // What the threads did up to now, for the statements that held them at the last sample.
    this.count(ticksOf, now);
    const before = new Map(this.listed.map((l) => [l.tag, new Set(l.threads)]));
    const tags = new Set(listed.map((l) => l.tag));
    for (const [tag, ticks] of this.used)
      if (!tags.has(tag)) {
        this.used.delete(tag);
        this.ended.set(tag, { ticks, at: now });
      }
    for (const [tag, e] of this.ended) if (now - e.at > ENDED_KEPT_MS) this.ended.delete(tag);
    for (const l of listed) {
      const had = before.get(l.tag);
      for (const tid of l.threads) if (!had?.has(tid) || !this.owner.has(tid)) this.owner.set(tid, l.tag);
      if (!this.used.has(l.tag)) this.used.set(l.tag, 0);
    }
    this.listed = listed;
    // Threads that appeared since the last count count all their time to their new statement.
    this.count(ticksOf, now);
    this.baseline(all, ticksOf);
  }

  /**
   * Takes the ticks of the threads in `all` that no listed statement holds as the base of what
   * they count later (the host calls it when a statement starts while none ran: the threads'
   * work since the last sample was not a statement's); forgets threads that are gone.
   */
  baseline(all: readonly number[], ticksOf: (tid: number) => number | null): void {
    const alive = new Set(all);
    for (const tid of this.seen.keys())
      if (!alive.has(tid)) {
        this.seen.delete(tid);
        this.owner.delete(tid);
      }
    const held = new Set(this.listed.flatMap((l) => l.threads));
    for (const tid of all) {
      if (held.has(tid)) continue;
      const now = ticksOf(tid);
      if (now !== null) this.seen.set(tid, now);
    }
  }

  /** Counts the threads' ticks since the last count, for the statements listed at the last sample (cheap: no engine statement). */
  refresh(ticksOf: (tid: number) => number | null, now = Date.now()): void {
    this.count(ticksOf, now);
  }

  /**
   * The CPU time each statement listed at the last sample has used, and each that ended in the
   * last ENDED_KEPT_MS (`ended`), in ms; with `agedAtCpuMs` (the host lowers aged statements'
   * threads, aging.ts), those that have used that much CPU time are `aged`.
   */
  report(lowered?: (use: ThreadUse) => boolean, now = Date.now()): { tag: string; cpuMs: number; ended?: true; aged?: true }[] {
    return [
      ...this.listed.map((l) => {
        const stmtMs = msOf(this.used.get(l.tag) ?? 0);
        return { tag: l.tag, cpuMs: stmtMs, ...(lowered?.({ stmtMs, orgMs: this.orgMs(orgOfTag(l.tag), now) }) ? { aged: true as const } : {}) };
      }),
      ...[...this.ended].map(([tag, e]) => ({ tag, cpuMs: msOf(e.ticks), ended: true as const })),
    ];
  }

  /** An organization's recent CPU time (ms): what was counted to its statements while another organization's ran too, halved every ORG_HALF_LIFE_MS. */
  orgMs(org: string, now = Date.now()): number {
    const o = this.orgs.get(org);
    return o === undefined ? 0 : o.ms * 0.5 ** (Math.max(0, now - o.at) / ORG_HALF_LIFE_MS);
  }

  /** Nothing runs: the statements listed end. */
  idle(now = Date.now()): void {
    for (const [tag, ticks] of this.used) this.ended.set(tag, { ticks, at: now });
    for (const [tag, e] of this.ended) if (now - e.at > ENDED_KEPT_MS) this.ended.delete(tag);
    this.used.clear();
    this.listed = [];
  }

  /** The threads working now for a statement listed at the last sample (each thread's owner: the last statement that listed it anew), with their statement's and its organization's CPU time. */
  threadUse(now = Date.now()): Map<number, ThreadUse> {
    const out = new Map<number, ThreadUse>();
    const orgs = new Map<string, number>();
    for (const [tid, tag] of this.owner) {
      const ticks = this.used.get(tag);
      if (ticks === undefined) continue;
      const org = orgOfTag(tag);
      let orgMs = orgs.get(org);
      if (orgMs === undefined) orgs.set(org, (orgMs = this.orgMs(org, now)));
      out.set(tid, { stmtMs: msOf(ticks), orgMs });
    }
    return out;
  }

  private count(ticksOf: (tid: number) => number | null, at: number): void {
    const tids = new Set(this.listed.flatMap((l) => l.threads));
    // An organization's time counts only while another's statements ran too: alone, it kept nobody waiting.
    const shared = new Set(this.listed.map((l) => orgOfTag(l.tag))).size > 1;
    for (const tid of tids) {
      const now = ticksOf(tid);
      if (now === null) {
        this.seen.delete(tid);
        this.owner.delete(tid);
        continue;
      }
      const before = this.seen.get(tid);
      // A thread id the system reused for a new thread starts again below what was seen.
      const add = before === undefined || now < before ? now : now - before;
      this.seen.set(tid, now);
      const tag = this.owner.get(tid);
      if (tag !== undefined && this.used.has(tag)) {
        this.used.set(tag, this.used.get(tag)! + add);
        if (add > 0 && shared) this.addOrg(orgOfTag(tag), msOf(add), at);
      }
    }
    // Organizations whose time has decayed to nothing are forgotten.
    for (const org of this.orgs.keys()) if (this.orgMs(org, at) < 1) this.orgs.delete(org);
  }

  private addOrg(org: string, ms: number, now: number): void {
    this.orgs.set(org, { ms: this.orgMs(org, now) + ms, at: now });
  }
}
