/**
 * The embedded engine, run in its own process (the engine host, src/store/engine-host) and
 * reached through the same ClickHouseStore code as a ClickHouse server. One ClickHouseStore
 * per host generation (each launch has its own port and passwords).
 *
 * What a host restart means to each caller:
 * - Analytics reads are read-only. The host holds every organization's statements, and the
 *   only way to stop one the engine does not stop itself is to end the host, so one
 *   organization's runaway would end everyone's work. Each analytics statement carries its
 *   organization (`tenant`), and the generation killed at a deadline remembers whose it was:
 *   - another organization's statement the host died under is run again on the next
 *     generation, as often as it takes, within its own deadline; the time the kill cost it
 *     (its work so far and the wait for the next host) is given back to that deadline
 *     (`lost`; the analytics service gives back at most three time limits in all), and so is the
 *     wait of a statement that arrived while that host restarted;
 *   - the same organization's other statements are not run again: they end with WorkEnded
 *     (the API answers 408), or they would run to their own deadlines and end the next
 *     generation too (measured: four runaways started a second apart killed the host three
 *     times and answered another organization 503); so do its statements that were on their
 *     way to the engine (waiting for the next generation) when the kill came;
 *   - the organization is held to one statement at a time in the engine for QUARANTINE_MS
 *     after each kill it caused (`quarantined`, which the analytics service's queue reads:
 *     its other statements wait there, holding no place and no session), so it can end the
 *     host's work at most once per deadline, and its statements' engine threads run at the
 *     lowest CPU priority meanwhile.
 *   An organization's statements that start while one of its own has run for a second or
 *   more get a lower CPU priority too (nice 10), so one organization's several long
 *   statements do not starve another's short ones on a small machine.
 *   Whose deadline fired is not whom the kill is for: when a deadline passes, the host's CPU
 *   ledger is read (GET /cpu, see engine-host/cpu.ts) and the kill is made for the
 *   organization whose statements used the CPU (blame.ts, `judge`); a statement starved by
 *   them is given its time back (through its `reprieve`) and run again, and one starved with
 *   no organization's work standing out goes on, once. A statement the engine's own time
 *   limit ends between blocks (it is told the time left) answers 408 without a judgement:
 *   judged and run again, long statements of organizations that starve each other ran to
 *   three time limits, each organization's kills made for the other.
 *   A statement whose deadline passed is not run again. After a crash (a death without a
 *   deadline kill) every statement runs again once, as the pipeline's reads do: a statement
 *   that crashes the host must not end host after host.
 * - The pipeline's reads (existing ids, counts) likewise run once more.
 * - Inserts are never repeated here: an insert the host died under may or may not have
 *   landed, so the error goes back to the pipeline, which naks the batches; the redelivery's
 *   existing-id check stores exactly what is missing (src/pipeline/consumer.ts). The error
 *   is a transient outage (not a data error), so nothing is dead-lettered for it.
 * - An insert whose connection broke while its host lives on (a reset socket, the client's
 *   request timeout) may still be running in the host and land later, after the redelivery's
 *   existing-id check found nothing: the rows would be stored twice. So before the error goes
 *   back, that host generation is ended (SIGKILL) and its exit awaited: the insert has then
 *   landed or not, for good, before anything checks. Forced in test/api/lost-insert.test.ts
 *   (ENGINE_HOST_FAULT=lose-insert).
 */
import { createHash } from 'node:crypto';
import path from 'node:path';
import { ClickHouseError } from '@clickhouse/client';
import type { Config } from '../../config.js';
import { WorkEnded, type AnalyticsEngine, type EngineOutput, type QuerySettings, type SelectOptions } from '../engine.js';
import type { SignalCounts, Store } from '../store.js';
import { ClickHouseStore } from '../clickhouse/index.js';
import { EngineHostSupervisor, HostUnavailable, type Generation } from '../engine-host/supervisor.js';
import { EngineError } from '../engine-error.js';
import { afterStop, blame } from './blame.js';
import { analyticsLog as log } from '../../log.js';

/** Sessions of the writer lane: one for a flush of the pipeline, one for the billing rows and reads. */
export const WRITER_SESSIONS = 2;

/** How long a caller waits for the host to come back before the call fails. */
const WAIT_FOR_HOST_MS = 15_000;

/**
 * What a statement of another organization is given back at once for the host's restart
 * after a kill (measured 0.3–0.7 s on a quiet machine, ~2 s at a load of 20 on 2 cores); a
 * longer wait for the next host is given back when it ends.
 */
const RESTART_ALLOWANCE_MS = 1_500;

/** How long an organization whose statement made the host be killed runs one statement at a time. */
export const QUARANTINE_MS = 5 * 60_000;

/**
 * The engine's threads for a quarantined organization's statement run at this nice value
 * (`os_thread_priority`). Measured on one core, two 5.8 s statements at once: the normal one
 * took 5.2 s beside a niced one (10.2 s), so a runaway held there leaves the CPU to others.
 */
const QUARANTINE_NICE = 19;

/** The nice value of an organization's statements that start while one of its own has run LONG_MS or more. */
const CROWD_NICE = 10;
const LONG_MS = 1_000;

/**
 * How long the engine host's CPU ledger (GET /cpu) is waited for when a deadline passes. The
 * request answers 408 after its own bounded wait for the verdict (the analytics service's
 * OVERDUE_WAIT_MS); the end of the statement's work waits for the verdict (`stoppable`).
 */
export const CPU_READ_MS = 2_000;

/** A statement whose output was closed before its end is still running past its deadline + this: the host is killed for its organization. */
const OUTPUT_GRACE_MS = 1_000;
/** How often the host's ledger is read while waiting for a statement to end (`untilGone`). */
const ENDED_POLL_MS = 250;

/** The least time given back to a statement found starved (it goes on running, or runs again). */
const MIN_REPRIEVE_MS = 500;

/** A statement run again after a kill is judged once it has run this long on the new host (before, it is given time). */
const MIN_JUDGED_MS = 1_000;

/** One run of an analytics statement in a host generation. */
interface Attempt {
  /** The statement's name in the engine (its log_comment), which the host's CPU ledger lists. */
  tag: string;
  tenant: string;
  g: Generation;
  /** When it was sent to the engine (ms since the epoch). */
  began: number;
  /** CPU time it has used (ms) at the latest reading of the host's ledger. */
  cpuMs: number;
  /**
   * The statement's earlier attempts (ended by kills): the most CPU time one of them used, and
   * all they used, as last read, and their time in the engine (ms); 0 on its first.
   */
  pastMaxCpuMs: number;
  pastCpuMs: number;
  /** It was given time once for being starved with no one to blame (judge). */
  excused: boolean;
  /**
   * Its deadline was moved for being starved (excused, or spared by a kill made for another
   * organization), on this attempt or an earlier one: it runs on time given back, and its CPU
   * time is not held against its organization when another organization's statement is
   * overdue (blame.ts, RunningCpu.relieved).
   */
  relieved: boolean;
  /** It runs at a lowered CPU priority because another statement of its organization had run long (blame.ts). */
  lowered?: boolean;
  /** The engine host had lowered its threads for running long, at the latest reading of the ledger (engine-host/aging.ts). */
  aged?: boolean;
  pastRanMs: number;
  /** Moves the statement's deadline later (SelectOptions.reprieve); what it gave. */
  reprieve: (ms: number) => number;
  /** Its deadline passed while it was starved, and the host was killed for another organization: the time it lost was given back already. */
  spared: boolean;
  /**
   * Blamed on its own organization (judge), which is not in quarantine: the engine is told to
   * stop it before any kill (`stoppable`); its CPU time (ms) when that was decided.
   */
  stopFirst?: { cpuMs: number };
  /** The judgement under way (judge), which a second deadline passing meanwhile waits for. */
  judging?: Promise<'own' | 'spared'>;
}

/** The call may have lost its host (the connection broke), as opposed to an answer from the engine. */
function lostHost(err: unknown): boolean {
  // ClickHouseStore gives an insert's refusal in ClickHouse's words, with the client's error as the cause.
  const answer = (e: unknown): boolean => e instanceof ClickHouseError || e instanceof EngineError || e instanceof HostUnavailable;
  return !answer(err) && !(err instanceof Error && answer(err.cause));
}

/**
 * The organization as the engine host's CPU ledger knows it, in a statement's tag
 * (`stmt:<n>:<key>`, engine-host/cpu.ts): a key of the tenant, not its id (the engine's
 * process list is the host's to read).
 */
function orgKey(tenant: string): string {
  return createHash('sha256').update(tenant).digest('base64url').slice(0, 16);
}

export class HostedStore implements Store {
  readonly kind = 'chdb' as const;
  readonly analytics: AnalyticsEngine;
  readonly supervisor: EngineHostSupervisor;
  private readonly stores = new Map<number, ClickHouseStore>();
  /** Generation → the organization whose statement's deadline killed it. */
  private readonly killedFor = new Map<number, string>();
  /** Organization → end of its quarantine (ms since the epoch). */
  private readonly quarantined = new Map<string, number>();
  /** Organization → when each of its analytics statements in this store now started. */
  private readonly running = new Map<string, number[]>();
  /** Organization → how many kills its statements caused (a statement started before the latest one does not run). */
  private readonly kills = new Map<string, number>();
  /** The running attempts of analytics statements, by their `stop` signal and by their tag. */
  private readonly attempts = new Map<AbortSignal, Attempt>();
  private readonly byTag = new Map<string, Attempt>();
  /** Statements waiting for the next generation after another organization's kill ended their work: since when, and what overdue gave back meanwhile. */
  private readonly waitingForHost = new Map<AbortSignal, { since: number; given: number; reprieve: (ms: number) => number }>();
  private tags = 0;

  constructor(private readonly cfg: Config) {
    this.supervisor = new EngineHostSupervisor({
      dir: path.join(cfg.dataDir, 'chdb'),
      analyticsDatabase: cfg.analytics.database,
      analyticsSessions: cfg.analytics.engineSessions,
      writerSessions: WRITER_SESSIONS,
      fault: cfg.engineHostFault,
    });
    this.analytics = {
      select: async (sql: string, settings: QuerySettings, stop?: AbortSignal, opts?: SelectOptions) => {
        const tenant = opts?.tenant;
        if (tenant === undefined) return this.tenantRead(undefined, stop, undefined, (s, g) => this.stoppable(g, stop, undefined, (signal) => s.analytics.select(sql, settings, signal, opts)));
        return await this.tenantRead(tenant, stop, opts, (s, g, tag) => this.stoppable(g, stop, tenant, (signal) => this.inEngine(tenant, timeLeft(settings, opts), tag, (run) => s.analytics.select(sql, run, signal, opts))));
      },
      // As `select`, answering once the host's answer has begun (the host holds the first 1 MiB
      // of output, then streams the rest as the engine makes it: engine-host/stream.ts): a host
      // lost while the output is being read is not run again (some of it may have been passed
      // on already); the read fails. So does a statement that fails after its answer began (the
      // host breaks the answer off): the read rejects, and nothing here sees it — the call
      // returned when the answer began, so it is not taken for a lost host (no kill, no run
      // again); the service ends its client's answer without the body's end.
      open: async (sql: string, settings: QuerySettings, stop?: AbortSignal, opts?: SelectOptions) => {
        const tenant = opts?.tenant;
        if (tenant === undefined) return this.tenantRead(undefined, stop, undefined, (s, g) => this.stoppable(g, stop, undefined, (signal) => s.analytics.open!(sql, settings, signal, opts)));
        // The statement may go on in the engine while its output is read (the host streams it):
        // it stays in the CPU judgement of others' deadlines (byTag) until the output is done
        // with, where the host's ledger shows what CPU it uses (none while its reader is slow).
        // Its organization's next statements' priority (inEngine) counts it until its answer
        // began, as before: a result its client reads slowly is no long statement.
        return await this.tenantRead(
          tenant,
          stop,
          opts,
          (s, g, tag) => this.stoppable(g, stop, tenant, (signal) => this.inEngine(tenant, timeLeft(settings, opts), tag, async (run) => followed(await s.analytics.open!(sql, run, signal, opts)))),
          whenRead,
        );
      },
      overdue: (stop: AbortSignal) => this.overdue(stop),
      quarantined: (tenant: string) => this.inQuarantine(tenant),
      kills: (tenant: string) => this.kills.get(tenant) ?? 0,
    };
  }

  /**
   * Runs one attempt of a statement in the engine, registered as running from now until it
   * ends: statements started beside a long one of the same organization, and all of a
   * quarantined organization's, yield the CPU to others. Only time in the engine counts: a
   * statement waiting for a host (the restart after a kill) is not running, or an
   * organization's short statement waiting there would lower the priority of its next one,
   * which then starves beside others' runaways and is taken for a runaway itself.
   */
  private async inEngine<T>(tenant: string, settings: QuerySettings, tag: string | undefined, call: (run: QuerySettings) => Promise<T>): Promise<T> {
    const started = this.running.get(tenant) ?? [];
    const now = Date.now();
    const nice = this.inQuarantine(tenant) ? QUARANTINE_NICE : started.some((t) => now - t >= LONG_MS) ? CROWD_NICE : 0;
    started.push(now);
    this.running.set(tenant, started);
    const attempt = tag === undefined ? undefined : this.byTag.get(tag);
    if (attempt) attempt.lowered = nice === CROWD_NICE;
    try {
      return await call({ ...settings, ...(nice > 0 ? { os_thread_priority: nice } : {}), ...(tag === undefined ? {} : { log_comment: tag }) });
    } finally {
      started.splice(started.indexOf(now), 1);
      if (started.length === 0 && this.running.get(tenant) === started) this.running.delete(tenant);
    }
  }

  private storeFor(g: Generation): ClickHouseStore {
    let s = this.stores.get(g.n);
    if (!s) {
      const made = new ClickHouseStore({
        url: g.url,
        writer: { username: 'writer', password: g.writerPassword },
        reader: { username: 'analytics', password: g.analyticsPassword },
        database: this.cfg.clickhouseDatabase,
        analyticsDatabase: this.cfg.analytics.database,
        // A statement runs past its time limit by what is given back to it (src/analytics/service.ts:
        // up to three limits + 1.5 s each for work other organizations' kills ended, two limits
        // + 2 s each when starved): the client must not give up on it first.
        analyticsTimeoutMs: 7 * this.cfg.analytics.timeoutMs + 10_000,
        embedded: true,
      });
      this.stores.set(g.n, made);
      void g.exited.then(() => {
        this.stores.delete(g.n);
        return made.close();
      });
      s = made;
    }
    return s;
  }

  /**
   * Runs a statement whose deadline, once `stop` aborts, ends the host generation running it,
   * or (blamed on its own organization, not in quarantine) is followed until the engine's own
   * time limit ends it (`followStopped`). `call` gets no abort signal: chdb stops a statement
   * only between blocks, where the engine's time limit (never later than the deadline) already
   * ends it; the call settles with the engine's answer, or the host's death.
   */
  private async stoppable<T>(g: Generation, stop: AbortSignal | undefined, tenant: string | undefined, call: (signal?: AbortSignal) => Promise<T>): Promise<T> {
    if (!stop) return call();
    if (stop.aborted) throw new Error('stopped before it ran');
    // The statement whose answer was ended without a kill, followed until it is gone from the engine.
    let following: Promise<void> | undefined;
    const kill = (): void => {
      // A kill ends every organization's work and quarantines the statement's: its answer is
      // ended without one, and the engine's own time limit (max_execution_time, told when it
      // started: never later than its deadline) stops it at its next block. It is followed;
      // the host is killed for its organization only when it keeps working.
      const a = this.attempts.get(stop);
      const decide = async (verdict?: 'own' | 'spared'): Promise<void> => {
        // Found starved after the service stopped waiting (it goes on, or the kill was made
        // for another organization): no consumer either.
        const from = a?.stopFirst?.cpuMs ?? (verdict === 'spared' ? a?.cpuMs : undefined);
        if (a && from !== undefined && a.g.n === g.n) return this.followStopped(a, from);
        this.killFor(g, tenant, `an analytics statement ran past its deadline${tenant === undefined ? '' : ` (organization ${tenant})`}`);
      };
      // Its judgement still under way (the service waits for it a bounded time): the verdict
      // is waited for (the CPU ledger's read is bounded by CPU_READ_MS), so that a slow read
      // is not a kill for its organization.
      following = a?.judging ? a.judging.then(decide, () => decide()) : decide();
    };
    stop.addEventListener('abort', kill, { once: true });
    try {
      return await call();
    } catch (err) {
      // Settled only once the statement is gone from the engine: its slot and place stay
      // held until then (the analytics service holds them until the engine call settles).
      if (following) await following;
      throw err;
    } finally {
      stop.removeEventListener('abort', kill);
    }
  }

  /** Ends generation `g` for `tenant`'s work: the statements it dies under read whose it was, and `tenant` is quarantined. */
  private killFor(g: Generation, tenant: string | undefined, reason: string): void {
    // Recorded before the kill: the statements the host dies under read it when their calls fail.
    if (tenant !== undefined && this.supervisor.serving?.n === g.n) {
      this.killedFor.set(g.n, tenant);
      this.quarantined.set(tenant, Date.now() + QUARANTINE_MS);
      this.kills.set(tenant, (this.kills.get(tenant) ?? 0) + 1);
      void g.exited.then(() => setTimeout(() => this.killedFor.delete(g.n), 60_000).unref());
    }
    void this.supervisor.kill(g.n, reason);
  }

  /**
   * The statement of `stop` has run past its deadline (AnalyticsEngine.overdue): true when it
   * goes on (its deadline was moved through its `reprieve`), false when its work is to be ended
   * for its own organization, as the caller then does.
   */
  private async overdue(stop: AbortSignal): Promise<boolean> {
    const w = this.waitingForHost.get(stop);
    if (w) {
      // Its work was ended for another organization, and the next host is not serving yet.
      const give = w.reprieve(Math.max(MIN_REPRIEVE_MS, Date.now() - w.since - w.given + MIN_REPRIEVE_MS));
      w.given += give;
      return give > 0;
    }
    const a = this.attempts.get(stop);
    if (!a) return false;
    if (this.supervisor.serving?.n !== a.g.n) {
      // Its host is going: for another organization, it runs again on the next one.
      const by = this.killedFor.get(a.g.n);
      return by !== undefined && by !== a.tenant && a.reprieve(MIN_REPRIEVE_MS) > 0;
    }
    return (await this.judge(a, 'past its deadline')) === 'spared';
  }

  /**
   * Whom attempt `a`, past its deadline, is blamed on, by the CPU time the running statements
   * have used (blame.ts):
   *   'own'     its own organization: its work is ended as usual (408);
   *   'spared'  another organization used the CPU: the host was killed for it here (`a.spared`)
   *             and its deadline moved (through its `reprieve`), so that it runs again; or it
   *             was starved with no one to blame, and it goes on with its deadline moved, once
   *             per statement; or it was just run again after a kill, and is judged after
   *             MIN_JUDGED_MS.
   * 'own' also when the ledger cannot be read within CPU_READ_MS, or no time can be given back.
   */
  private judge(a: Attempt, what: string): Promise<'own' | 'spared'> {
    a.judging ??= this.judgeNow(a, what).finally(() => {
      a.judging = undefined;
    });
    return a.judging;
  }

  private async judgeNow(a: Attempt, what: string): Promise<'own' | 'spared'> {
    let listed: { tag: string; cpuMs: number; ended: boolean; aged: boolean }[];
    try {
      listed = await this.readCpu(a.g);
    } catch (err) {
      // Nothing known of whose work starved it: its answer ended before any kill (stoppable).
      if (!this.inQuarantine(a.tenant)) a.stopFirst = { cpuMs: a.cpuMs };
      log.warn(`engine host CPU ledger not read; the statement ${what} is blamed`, { org: a.tenant, err: err instanceof Error ? err.message : String(err) });
      return 'own';
    }
    if (this.supervisor.serving?.n !== a.g.n) return 'own';
    for (const l of listed) {
      const b = this.byTag.get(l.tag);
      if (b) {
        b.cpuMs = l.cpuMs;
        b.aged = l.aged;
      }
    }
    // Over each statement's life in the engine: a kill makes every statement start again.
    const here = Date.now() - a.began;
    const ranMs = a.pastRanMs + here;
    const cpuMs = a.pastCpuMs + a.cpuMs;
    const fields = { org: a.tenant, cpuMs, ranMs };
    // Just run again after a kill: judged once it has run a while on this host.
    if (a.pastRanMs > 0 && here < MIN_JUDGED_MS) {
      if (a.reprieve(MIN_JUDGED_MS - here + MIN_REPRIEVE_MS) === 0) return 'own';
      log.info(`analytics statement ${what} right after it was run again: it goes on`, fields);
      return 'spared';
    }
    const gone = new Set(listed.filter((l) => l.ended).map((l) => l.tag));
    const others = [...this.byTag.values()].filter((b) => b !== a && b.g.n === a.g.n && !gone.has(b.tag)).map((b) => ({
      tenant: b.tenant,
      cpuMs: Math.max(b.pastMaxCpuMs, b.cpuMs),
      quarantined: this.inQuarantine(b.tenant),
      relieved: b.relieved,
      aged: b.aged === true,
    }));
    const quarantined = this.inQuarantine(a.tenant);
    const v = blame({ tenant: a.tenant, cpuMs: Math.max(a.pastMaxCpuMs, a.cpuMs), ranMs, shareMs: cpuMs, quarantined, lowered: a.lowered === true, aged: a.aged === true }, others);
    const cpuByOrg = Object.fromEntries(v.byTenant);
    // Blamed on its own organization from here: its answer ended before any kill, unless its
    // organization is in quarantine already (stoppable).
    if (!quarantined) a.stopFirst = { cpuMs: a.cpuMs };
    if (v.tenant === a.tenant) {
      log.info(`analytics statement ${what}: blamed on its own organization`, { ...fields, starved: v.starved, cpuByOrg });
      return 'own';
    }
    if (v.tenant === null) {
      // Starved, no one to blame: it goes on, once, with the time it did not get.
      if (a.excused || a.reprieve(Math.max(MIN_REPRIEVE_MS, here - a.cpuMs)) === 0) {
        log.info(`analytics statement ${what}, starved with no organization's work standing out: it cannot go on`, { ...fields, cpuByOrg, excused: a.excused });
        return 'own';
      }
      a.stopFirst = undefined;
      a.excused = true;
      a.relieved = true;
      log.warn(`analytics statement ${what}, starved with no organization's work standing out: it goes on`, { ...fields, cpuByOrg });
      return 'spared';
    }
    if (a.reprieve(here + RESTART_ALLOWANCE_MS) === 0) return 'own';
    a.stopFirst = undefined;
    a.spared = true;
    a.relieved = true;
    log.warn(`analytics statement ${what}: the engine work is ended for the organization that used the CPU`, {
      starvedOrg: a.tenant,
      starvedCpuMs: cpuMs,
      ranMs,
      blamedOrg: v.tenant,
      blamedCpuMs: v.byTenant.get(v.tenant),
    });
    this.killFor(a.g, v.tenant, `analytics statements used the CPU another organization's statement was starved of (organization ${v.tenant})`);
    return 'spared';
  }

  /**
   * Attempt `a`'s output was closed before its end (cut at a limit, its client gone or late,
   * broken off): the host cancels the statement at its next block, which a block the engine
   * cannot stop puts off for as long as it runs (measured: a statement that streamed 3 MB at
   * once, then sorted one 6,000,000-element block, ran 6.4 s against a 2 s limit). Still
   * running at its deadline + OUTPUT_GRACE_MS (or the ledger unreadable until then), the host
   * is killed for its organization, as at any deadline.
   */
  private endedOrKilled(a: Attempt, deadline: () => number): Promise<void> {
    return this.untilGone(a, () =>
      Date.now() >= deadline() + OUTPUT_GRACE_MS ? `an analytics statement ran on in the engine past its deadline after its answer was ended (organization ${a.tenant})` : undefined,
    );
  }

  /**
   * Attempt `a`, blamed on its own organization at its deadline, had its answer ended without a
   * kill: the engine's own time limit (never later than its deadline) stops it at its next
   * block, which a block the engine cannot stop puts off. Until it is gone, the host is killed for its organization when it keeps
   * working after its answer was ended (blame.ts, `afterStop`): a small statement that only
   * finishes its block costs no one a kill, a runaway is ended and its organization
   * quarantined.
   */
  private followStopped(a: Attempt, cpuAtStop: number): Promise<void> {
    const stopped = Date.now();
    const ranBeforeMs = stopped - a.began;
    let cpuMs = cpuAtStop;
    return this.untilGone(a, (now) => {
      if (now !== undefined) cpuMs = Math.max(cpuMs, now);
      const s = { cpuSinceStopMs: cpuMs - cpuAtStop, wallSinceStopMs: Date.now() - stopped, ranBeforeMs, limitMs: this.cfg.analytics.timeoutMs };
      if (afterStop(s) === 'wait') return undefined;
      log.warn('analytics statement whose answer was ended at its deadline kept working in the engine', { org: a.tenant, cpuSinceStopMs: s.cpuSinceStopMs, wallSinceStopMs: s.wallSinceStopMs });
      return `an analytics statement ran past its deadline and kept working after its answer was ended (organization ${a.tenant})`;
    });
  }

  /**
   * Reads the host's ledger every ENDED_POLL_MS until attempt `a` is no longer running there
   * (or its host is gone); kills the host for its organization when `kill`, told the CPU time
   * the ledger shows for it (undefined when unread), names a reason.
   */
  private async untilGone(a: Attempt, kill: (cpuMs: number | undefined) => string | undefined): Promise<void> {
    for (;;) {
      if (this.supervisor.serving?.n !== a.g.n) return;
      const listed = await this.readCpu(a.g).catch(() => undefined);
      const l = listed?.find((x) => x.tag === a.tag);
      if (listed && (!l || l.ended)) return;
      const reason = kill(l?.cpuMs);
      if (reason !== undefined) {
        this.killFor(a.g, a.tenant, reason);
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, ENDED_POLL_MS));
    }
  }

  /** The CPU time each running analytics statement of generation `g` has used (the host's ledger). */
  private async readCpu(g: Generation): Promise<{ tag: string; cpuMs: number; ended: boolean; aged: boolean }[]> {
    const res = await fetch(`${g.url}/cpu`, {
      headers: { authorization: `Basic ${Buffer.from(`analytics:${g.analyticsPassword}`).toString('base64')}` },
      signal: AbortSignal.timeout(CPU_READ_MS),
    });
    if (!res.ok) throw new Error(`GET /cpu answered ${res.status}`);
    const body = (await res.json()) as { statements?: { tag?: unknown; cpuMs?: unknown; ended?: unknown; aged?: unknown }[] };
    return (body.statements ?? []).flatMap((x) => (typeof x.tag === 'string' && typeof x.cpuMs === 'number' ? [{ tag: x.tag, cpuMs: x.cpuMs, ended: x.ended === true, aged: x.aged === true }] : []));
  }

  private inQuarantine(tenant: string): boolean {
    const until = this.quarantined.get(tenant);
    if (until !== undefined && until <= Date.now()) this.quarantined.delete(tenant);
    return this.quarantined.has(tenant);
  }

  /**
   * An analytics read for `tenant` (see the top of this file): run again on the next
   * generation each time the host dies under it, unless the tenant's own statement had it
   * killed, or killed a generation while this statement was on its way to the engine. One at
   * a time while the tenant is in quarantine is the analytics service's queue's to keep (it
   * reads `quarantined`), so that the statements waiting hold no place.
   */
  private async tenantRead<T>(
    tenant: string | undefined,
    stop: AbortSignal | undefined,
    opts: SelectOptions | undefined,
    call: (s: ClickHouseStore, g: Generation, tag?: string) => Promise<T>,
    held?: (v: T) => Promise<boolean> | undefined,
  ): Promise<T> {
    if (tenant === undefined || !stop) return this.read(call, stop);
    return this.runAgainUnlessOwn(tenant, stop, opts?.lost, opts?.reprieve ?? (() => 0), call, held, opts?.deadline);
  }

  private async runAgainUnlessOwn<T>(
    tenant: string,
    stop: AbortSignal,
    lost: ((ms: number) => void) | undefined,
    reprieve: (ms: number) => number,
    call: (s: ClickHouseStore, g: Generation, tag: string) => Promise<T>,
    /**
     * For a value the statement goes on producing (an output being read): settles when it is
     * done with (true: read to its end); the attempt stays listed for the CPU judgement until
     * then, and, when the output was closed before its end, until the engine has ended the
     * statement (`endedOrKilled`, by `deadline`).
     */
    held?: (v: T) => Promise<boolean> | undefined,
    deadline?: () => number,
  ): Promise<T> {
    const killsBefore = this.kills.get(tenant) ?? 0;
    // A host that died without a deadline kill may have died of this very statement (a crash):
    // run again after one such death only, as before, or a crashing statement would end host
    // after host until its deadline.
    let crashes = 0;
    // Of the restart allowance given back when the work was lost, what the wait has not used.
    let prepaid = 0;
    // The earlier attempts' CPU time (as last read: the most one used, and all) and time in the engine.
    let pastMaxCpuMs = 0;
    let pastCpuMs = 0;
    let excused = false;
    let relieved = false;
    let pastRanMs = 0;
    // The previous attempt's work was ended for another organization.
    let foreign = false;
    for (;;) {
      const waitFrom = Date.now();
      const wait = { since: waitFrom, given: 0, reprieve };
      if (foreign) this.waitingForHost.set(stop, wait);
      let g: Generation;
      try {
        g = await this.supervisor.current(WAIT_FOR_HOST_MS);
      } finally {
        this.waitingForHost.delete(stop);
      }
      prepaid += wait.given;
      const waited = Date.now() - waitFrom;
      // Waiting for a host that another organization's runaway ended is not this statement's time either.
      const endedBy = this.killedFor.get(g.n - 1);
      if (waited > prepaid + 20 && endedBy !== undefined && endedBy !== tenant) lost?.(waited - prepaid);
      prepaid = 0;
      if (stop.aborted) throw new Error('stopped before it ran');
      if ((this.kills.get(tenant) ?? 0) !== killsBefore) throw new WorkEnded('another statement of this organization ran past its deadline while this one was on its way to the engine, and the engine work was ended');
      const began = Date.now();
      const a: Attempt = { tag: `stmt:${++this.tags}:${orgKey(tenant)}`, tenant, g, began, cpuMs: 0, pastMaxCpuMs, pastCpuMs, pastRanMs, excused, relieved, reprieve, spared: false };
      this.attempts.set(stop, a);
      this.byTag.set(a.tag, a);
      let until: Promise<boolean> | undefined;
      try {
        const v = await call(this.storeFor(g), g, a.tag);
        until = held?.(v);
        return v;
      } catch (err) {
        if (stop.aborted || !lostHost(err)) throw err;
        const gone = await Promise.race([g.exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 1_000).unref())]);
        if (!gone) throw err;
        const by = this.killedFor.get(g.n);
        if (by === tenant) throw new WorkEnded('another statement of this organization ran past its deadline, and the engine work it shared was ended');
        if (by === undefined && ++crashes > 1) throw err;
        // Another organization's runaway: the time it cost is given back to this statement's
        // deadline (by the caller, within its bounds), with an allowance for the restart; a
        // statement the kill was made for (it was starved, see overdue) had it given back then.
        foreign = by !== undefined;
        if (a.spared) prepaid = RESTART_ALLOWANCE_MS;
        else if (by !== undefined) {
          lost?.(Date.now() - began + RESTART_ALLOWANCE_MS);
          prepaid = RESTART_ALLOWANCE_MS;
        }
        // Run it again (also after a first crash), within its own deadline.
      } finally {
        if (this.attempts.get(stop) === a) this.attempts.delete(stop);
        if (until)
          void until
            .then((complete) => (complete || !deadline ? undefined : this.endedOrKilled(a, deadline)))
            .then(() => this.byTag.get(a.tag) === a && this.byTag.delete(a.tag));
        else this.byTag.delete(a.tag);
        pastMaxCpuMs = Math.max(pastMaxCpuMs, a.cpuMs);
        pastCpuMs += a.cpuMs;
        excused ||= a.excused;
        relieved ||= a.relieved;
        pastRanMs += Date.now() - began;
      }
    }
  }

  /** A read: run on the serving generation; once more on the next one when the host died under it. */
  private async read<T>(call: (s: ClickHouseStore, g: Generation) => Promise<T>, stop?: AbortSignal): Promise<T> {
    const g = await this.supervisor.current(WAIT_FOR_HOST_MS);
    try {
      return await call(this.storeFor(g), g);
    } catch (err) {
      if (stop?.aborted || !lostHost(err)) throw err;
      // Only when the process is really gone: a broken connection to a live host is an error.
      const gone = await Promise.race([g.exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 1_000).unref())]);
      if (!gone) throw err;
      const next = await this.supervisor.current(WAIT_FOR_HOST_MS);
      if (stop?.aborted) throw err;
      return call(this.storeFor(next), next);
    }
  }

  private async write<T>(call: (s: ClickHouseStore) => Promise<T>): Promise<T> {
    return call(this.storeFor(await this.supervisor.current(WAIT_FOR_HOST_MS)));
  }

  /** An insert: when its connection broke, its host is ended before the error goes back (see the top of this file). */
  private async insert(call: (s: ClickHouseStore) => Promise<void>): Promise<void> {
    const g = await this.supervisor.current(WAIT_FOR_HOST_MS);
    try {
      await call(this.storeFor(g));
    } catch (err) {
      if (lostHost(err)) {
        this.supervisor.kill(g.n, 'an insert lost its connection; the host may still be running it');
        await g.exited;
      }
      throw err;
    }
  }

  async init(): Promise<void> {
    await this.supervisor.start();
    await this.write((s) => s.init());
  }

  insertSignals(rows: Buffer): Promise<void> {
    return this.insert((s) => s.insertSignals(rows));
  }

  insertCosts(rows: Buffer, columns?: readonly string[]): Promise<void> {
    return this.insert((s) => s.insertCosts(rows, columns));
  }


  insertUnpriced(rows: Buffer, columns?: readonly string[]): Promise<void> {
    return this.insert((s) => s.insertUnpriced(rows, columns));
  }

  existingSignalIds(orgId: string, ids: string[]): Promise<Set<string>> {
    return this.read((s) => s.existingSignalIds(orgId, ids));
  }

  existingUnpricedIds(orgId: string, ids: string[]): Promise<Set<string>> {
    return this.read((s) => s.existingUnpricedIds(orgId, ids));
  }

  existingCostIds(orgId: string, ids: string[]): Promise<Set<string>> {
    return this.read((s) => s.existingCostIds(orgId, ids));
  }


  countSignals(orgId: string): Promise<SignalCounts> {
    return this.read((s) => s.countSignals(orgId));
  }

  /** The host answers /ping (its sessions are open); a restart in progress is waited for briefly. */
  async ping(): Promise<void> {
    const g = await this.supervisor.current(2_000);
    await this.storeFor(g).ping();
  }

  async close(): Promise<void> {
    await this.supervisor.stop();
    await Promise.all([...this.stores.values()].map((s) => s.close()));
    this.stores.clear();
  }
}

/** Outputs being read → settled once each is done with: true when read to its end, false when broken off or closed before it. */
const reading = new WeakMap<EngineOutput, Promise<boolean>>();

/** `out`, followed: `whenRead` tells when it is done with. */
function followed(out: EngineOutput): EngineOutput {
  let done!: (complete: boolean) => void;
  const over = new Promise<boolean>((resolve) => (done = resolve));
  const f: EngineOutput = {
    read: async () => {
      try {
        const c = await out.read();
        if (c === null) done(true);
        return c;
      } catch (err) {
        done(false);
        throw err;
      }
    },
    close: () => {
      out.close();
      done(false);
    },
  };
  reading.set(f, over);
  return f;
}

function whenRead(out: EngineOutput): Promise<boolean> | undefined {
  return reading.get(out);
}

/** The settings of an attempt, told the time left to the deadline as it stands then (time given back moves it). */
function timeLeft(settings: QuerySettings, opts: SelectOptions | undefined): QuerySettings {
  return opts?.deadline ? { ...settings, max_execution_time: Math.max(0.001, (opts.deadline() - Date.now()) / 1000) } : settings;
}
