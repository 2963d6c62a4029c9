/**
 * Whose work the engine host is killed for when an analytics statement's deadline passes
 * (src/store/hosted/index.ts). Pure: the CPU time each running statement has used comes from
 * the engine host's ledger (src/store/engine-host/cpu.ts).
 *
 * The rule: the kill is made for the organization whose statements used the CPU, not for the
 * one whose deadline fired. What each running statement used is summed by organization, the
 * overdue statement's own included in its organization's; a statement run again after a kill
 * starts from nothing, so what it "used" is the most CPU time one of its attempts used (a small
 * statement run again after kills does not add up to a consumer).
 * - When another organization's statements used at least MARGIN times as much CPU time as the
 *   overdue statement's organization (an organization in quarantine, whose statement ended the
 *   engine's work lately: as much), and at least MIN_CULPRIT_MS, that organization (of several,
 *   the one that used the most) is blamed: the host is killed for it, and the overdue statement
 *   is given its time back and run again.
 * - Otherwise, a statement that used at least STARVED_SHARE of its wall-clock time in the
 *   engine as CPU time, or whose organization's other statements used more than it, or whose
 *   organization is in quarantine, is blamed on its own organization (its answer is ended; its
 *   work too, and the organization is quarantined, as below).
 * - Otherwise it was starved, and no organization's work stands out (the rest of the machine,
 *   or several organizations alike, starved it): nobody is blamed, and it is given back the
 *   time it did not get, once (the caller keeps that), and goes on. Starved so again, it is
 *   blamed on its own organization.
 *
 * - A statement blamed on its own organization, which is not in quarantine, has its answer ended
 *   first without a kill (the engine's own time limit, never later than the deadline, stops it
 *   at its next block): a kill ends every organization's work, and a small statement past its
 *   deadline (starved, or using its share beside several runaways, none of which stands out)
 *   is no runaway. Only one that keeps working after that
 *   (`afterStop`) has the host killed for its organization, which is then quarantined.
 *
 * - Nobody else is blamed for a statement that ran at a lowered CPU priority: its organization
 *   is in quarantine (it ran at the lowest), or it started while another statement of its
 *   organization had run a second or more (`lowered`). Its starving is what the lowered
 *   priority is for, and whoever else used the CPU is no culprit (measured: a quarantined
 *   organization's runaway, starved at nice 19, had another organization's four 0.5 s
 *   statements blamed, killed and quarantined in 7 of 7 runs; that organization's statements,
 *   starved in turn, had a third one blamed). A quarantined organization's statement is blamed
 *   on its own organization; a lowered one, starved, goes on once like any starved statement.
 *
 * - The engine host lowers the threads of a statement that has used a second of CPU time
 *   (`aged`, engine-host/aging.ts), so that statements of less work take the CPU first: an aged
 *   statement starved by ones not aged was starved by design, and their CPU time is not held
 *   against their organizations. Only aged statements count as having starved it.
 *
 * A runaway among others, or on a machine loaded by other work, is starved too: it is the
 * "once" and the quarantine that keep runaways from going on far past their deadlines
 * (measured, with no bound: a runaway answered 408 after 25.6 s with a 7 s limit). The margin
 * keeps a statement that uses two threads, or has run longer, from being taken for the
 * consumer beside one runaway. On two cores, sixteen statements that each keep a core busy
 * make the kill go to an organization whose several statements used far more than the overdue
 * one's, which is a runaway's organization.
 */

/** Below this share of its wall-clock time as CPU time, a statement past its deadline was starved. */
export const STARVED_SHARE = 0.25;

/** Another organization is blamed when its statements used at least this many times the CPU time of the overdue statement's organization… */
export const MARGIN = 2;
/** …and at least this much (ms): less cannot have starved anyone past a deadline. */
export const MIN_CULPRIT_MS = 200;

export interface RunningCpu {
  /** The organization the statement runs for. */
  tenant: string;
  /** CPU time it has used, ms. */
  cpuMs: number;
  /** Its organization is in quarantine (a statement of it ended the engine's work lately). */
  quarantined?: boolean;
  /** The engine host had lowered its threads for running long (engine-host/aging.ts). */
  aged?: boolean;
  /**
   * It runs on time given back for being starved: not counted against its organization when
   * another organization's statement is overdue (a small statement given its time back runs
   * long beside runaways), but counted among the overdue statement's own organization's.
   */
  relieved?: boolean;
}

export interface Overdue {
  tenant: string;
  /** CPU time it has used, ms (0 when the ledger does not list it yet): compared with the others'. */
  cpuMs: number;
  /** Wall-clock time it has run in the engine, ms. */
  ranMs: number;
  /** CPU time it has used in that wall-clock time, ms, when that differs from cpuMs (run again after kills: all its attempts). */
  shareMs?: number;
  /** Its organization is in quarantine. */
  quarantined?: boolean;
  /** It ran at a lowered CPU priority because another statement of its organization had run long. */
  lowered?: boolean;
  /** The engine host had lowered its threads for running long (engine-host/aging.ts). */
  aged?: boolean;
}

export interface Verdict {
  /** The organization the kill is made for; null: nobody (the statement was starved, and no one's work stands out). */
  tenant: string | null;
  /** The overdue statement used less than STARVED_SHARE of its time as CPU. */
  starved: boolean;
  /** CPU time of the running statements by organization, ms (the overdue statement's included). */
  byTenant: Map<string, number>;
}

/**
 * The organization to blame for `overdue` passing its deadline, given the CPU time of every
 * other running statement (`others`).
 */
export function blame(overdue: Overdue, others: readonly RunningCpu[]): Verdict {
  const byTenant = new Map<string, number>([[overdue.tenant, overdue.cpuMs]]);
  // An aged statement yields the CPU to younger ones by design: theirs is no one's fault.
  const counted = (r: RunningCpu): boolean => r.tenant === overdue.tenant || (!r.relieved && (!overdue.aged || r.aged === true));
  for (const r of others) if (counted(r)) byTenant.set(r.tenant, (byTenant.get(r.tenant) ?? 0) + r.cpuMs);
  const starved = (overdue.shareMs ?? overdue.cpuMs) < STARVED_SHARE * overdue.ranMs;
  const own = byTenant.get(overdue.tenant)!;
  const offender = new Set(others.filter((r) => r.quarantined && counted(r)).map((r) => r.tenant));
  let top: string | null = null;
  let topMs = 0;
  const mayBlameOthers = !overdue.quarantined && !overdue.lowered;
  for (const [tenant, ms] of mayBlameOthers ? byTenant : []) {
    if (tenant === overdue.tenant || ms < MIN_CULPRIT_MS || ms < (offender.has(tenant) ? 1 : MARGIN) * own) continue;
    if (ms > topMs) [top, topMs] = [tenant, ms];
  }
  if (top !== null) return { tenant: top, starved, byTenant };
  const siblings = own - overdue.cpuMs;
  if (!starved || siblings > overdue.cpuMs || overdue.quarantined) return { tenant: overdue.tenant, starved, byTenant };
  return { tenant: null, starved, byTenant };
}

/** CPU time (ms) a statement whose answer was ended at its deadline may still use finishing its block. */
export const STOPPED_CPU_MS = 1_500;
/** A statement whose answer was ended, not starved since, still running after this long (ms), or as long again as it had run up to one time limit, has the host killed. */
export const STOPPED_MIN_WALL_MS = 5_000;
/** However starved, a statement whose answer was ended still running after this many time limits (+ STOPPED_MIN_WALL_MS) has the host killed. */
export const STOPPED_MAX_LIMITS = 3;

export interface Stopped {
  /** CPU time it used since its answer was ended, ms. */
  cpuSinceStopMs: number;
  /** Wall-clock time since its answer was ended, ms. */
  wallSinceStopMs: number;
  /** Wall-clock time it had run in the engine (this attempt) when its answer was ended, ms. */
  ranBeforeMs: number;
  /** The time limit of a statement, ms. */
  limitMs: number;
}

/**
 * A statement whose answer was ended at its deadline, still running (the engine stops it at its next
 * block): 'wait' while it only finishes its block, 'kill' (the host is killed for its
 * organization) once
 * - it has used STOPPED_CPU_MS more, about a small statement's whole work (the blame test's
 *   2,000,000-element sort used up to 2 s of CPU time in an attempt on a loaded machine, most
 *   of it before its deadline);
 * - or it has run on as long again as it had run before, up to one time limit (and at least
 *   STOPPED_MIN_WALL_MS), using STARVED_SHARE of that time or more as CPU time (a starved
 *   statement uses little of the CPU, and ends its block once the work starving it ends);
 * - or, starved or not, it is still running STOPPED_MAX_LIMITS time limits (+
 *   STOPPED_MIN_WALL_MS) after its answer was ended: it must not live on without bound past its
 *   answer (it holds its place, and a session of the host).
 */
export function afterStop(s: Stopped): 'wait' | 'kill' {
  if (s.cpuSinceStopMs >= STOPPED_CPU_MS) return 'kill';
  if (s.wallSinceStopMs >= stoppedWallBound(s) && s.cpuSinceStopMs >= STARVED_SHARE * s.wallSinceStopMs) return 'kill';
  if (s.wallSinceStopMs >= stoppedHardBound(s)) return 'kill';
  return 'wait';
}

/** From when (ms after the stop) a statement whose answer was ended that is not starved has the host killed. */
export function stoppedWallBound(s: Pick<Stopped, 'ranBeforeMs' | 'limitMs'>): number {
  return Math.max(STOPPED_MIN_WALL_MS, Math.min(s.ranBeforeMs, s.limitMs));
}

/** From when (ms after the stop) a statement whose answer was ended has the host killed, however starved. */
export function stoppedHardBound(s: Pick<Stopped, 'limitMs'>): number {
  return STOPPED_MAX_LIMITS * s.limitMs + STOPPED_MIN_WALL_MS;
}
