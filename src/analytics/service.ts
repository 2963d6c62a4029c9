/**
 * The analytics operations (spec 4.1, 4.2):
 *   POST /api/v2/analytics/query            one compiled SELECT, scoped to the caller
 *   GET  /api/v2/analytics/schema           the views and their columns
 *   GET  /api/v2/analytics/signals/metadata JSON paths seen in the caller's fact_signal.data
 *
 * Order of a query, and why: validate the body (free) → one token, only when the rate
 * framework is on for analytics (spec 8.3, off by default) → the compiler (compiler/: the
 * project's own parser, name resolution and printer, which writes the caller's organization
 * and mode into every view read; in process, no slot needed), a text not compiled before
 * through the compile gate (compile-gate.ts: one compilation per turn of the event loop, the
 * organization with the most compile-time budget left first, within a budget per
 * organization) → a concurrency slot (429
 * CONCURRENCY_LIMIT_EXCEEDED without Retry-After) → a place in the engine (fair-queue.ts:
 * a process-wide limit that no small set of organizations can fill, waited for at most one
 * time limit, holding nothing meanwhile) → the engine, with readonly=1, the time left and the
 * row limits as settings → the exact 10,000-row cut.
 *
 * The time limit is on the wall clock from the moment the statement has its place: it bounds
 * the statement's execution, and what other statements made it wait is not charged to it
 * (the wait has its own bound: the time limit + 1 s, PLACE_WAIT_EXTRA_MS). The engine is told the
 * time left; if it has not answered 0.5 s after the deadline, the request answers 408 (at most
 * 0.3 s later) and the statement's work is ended (the engine's `select` is aborted: a server
 * cancels the query, the embedded engine's host process is killed and restarted). A last
 * watchdog answers 408 at the deadline + 0.9 s whatever stage the request is in. The slot and
 * the place are held until the engine is done with the statement. The engine is told whose
 * statement it runs, so that ending the embedded engine's work for one organization's
 * runaway costs the others only a second run (src/store/hosted/index.ts), and the time that
 * cost them is given back to their deadlines (at most MAX_LOST_LIMITS time limits, and a
 * restart each, per request in all).
 *
 * A result's rows take at most MAX_RESULT_BYTES of JSON: cut at the last whole row, flagged
 * `meta.truncated` with `truncatedBy: "bytes"` (result.ts). The engine's output is read as the
 * client takes the answer, and no further than the cut (result-body.ts): the slot and the place
 * are held until then, and a result not taken by the deadline + STOP_GRACE_MS is ended.
 */
import { ApiError, concurrencyLimited, rateLimited } from '../errors.js';
import { analyticsLog as log } from '../log.js';
import type { Principal } from '../orgs/registry.js';
import type { TokenBuckets } from '../ratelimit/bucket.js';
import type { ConcurrencySlots } from '../ratelimit/slots.js';
import type { Reply, Request } from '../http/route.js';
import { parseJson } from '../http/json.js';
import { WorkEnded, type AnalyticsEngine, type QuerySettings, type SelectOptions } from '../store/engine.js';
import { apiErrorFor } from './engine-error.js';
import { toEngineError } from '../store/engine-error.js';
import { CompileError, QueryCompiler, compile, printScoped, type Compiled } from './compiler/index.js';
import { MAX_OUTPUT_BYTES, MAX_RESULT_BYTES, MAX_ROWS, shapeResult } from './result.js';
import { resultReply, wholeOutput } from './result-body.js';
import { FairQueue } from './fair-queue.js';
import { CompileGate } from './compile-gate.js';
import { engineUnreachable } from './unreachable.js';
import { NO_PUSHDOWN_SETTINGS, VIEW_NAMES, VIEW_SCHEMAS, schemaDocument } from '../store/views.js';

export const MAX_QUERY_CHARS = 20_480;

export interface AnalyticsOptions {
  timeoutMs: number;
  maxMemoryBytes: number;
  /** Statements this process runs in the engine at once (ANALYTICS_ENGINE_SESSIONS). */
  engineSessions: number;
  rateLimited: boolean;
  /** Database names that must never appear in an error message. */
  internalNames: string[];
  /** The database of the (parameterized) views, ANALYTICS_DATABASE. */
  analyticsDatabase: string;
}

/** Grace after the deadline before the watchdog answers 408 and ends the statement's work. */
export const STOP_GRACE_MS = 500;
/** How long the watchdog waits, after ending the work, for the engine call to settle before it answers. */
const STOP_SETTLE_MS = 300;
/**
 * A place is waited for at most the time limit and this much more: the longest one statement
 * holds a place (its deadline + 0.9 s, when the last watchdog answers, and the moment its
 * engine call settles), unless a kill gave it time back. So a statement whose turn comes
 * after one statement ahead of it never gives up just before that one ends.
 */
export const PLACE_WAIT_EXTRA_MS = 1_000;
/**
 * How long the watchdog waits for the engine's verdict on a statement past its deadline
 * (AnalyticsEngine.overdue: the embedded engine reads its CPU ledger) before it ends the
 * statement's work as usual.
 */
const OVERDUE_WAIT_MS = 1_200;
/**
 * How much time a request's statement may be given back in all for being starved past its
 * deadline (others' statements used the CPU: src/store/hosted/blame.ts), on top of the one
 * time limit given back for work another organization's kill ended: two time limits, and
 * REPRIEVE_RESTART_MS more for each (the engine host's restart when the kill is made for the
 * organization that starved it).
 */
export const MAX_REPRIEVE_LIMITS = 2;
const REPRIEVE_RESTART_MS = 2_000;

/**
 * How much work other organizations' kills may cost a request's statement and have given
 * back: three time limits, and LOST_RESTART_MS more for each (the engine host's restart).
 * Every organization whose runaway passes its deadline ends the engine's work once (then it
 * is quarantined); each such kill restarts the others' statements. Measured: four
 * organizations' runaways a second apart cost another organization's 0.6 s statement its
 * work three times (a kill made for the first, then each of two others' own), past the one
 * time limit given back before.
 */
export const MAX_LOST_LIMITS = 3;
const LOST_RESTART_MS = 1_500;

/**
 * Hands each engine call of a request to withSlot (which keeps its slot until the call
 * settled); knows the deadline, which `giveBack` moves later (up to MAX_LOST_LIMITS time
 * limits in all) when another organization's runaway cost this request its engine work.
 */
type Tracker = ((engine: Promise<unknown>) => void) & {
  readonly deadline: number;
  giveBack(ms: number): number;
  /** Moves the deadline `ms` later for a statement found starved (up to MAX_REPRIEVE_LIMITS time limits in all); returns what it gave. */
  reprieve(ms: number): number;
  /** Waits for `p` (the engine's verdict) at most OVERDUE_WAIT_MS; the request's last watchdog waits for it meanwhile. */
  hold(p: Promise<unknown>): Promise<void>;
};

const JSON_HEADERS = { 'Content-Type': 'application/json' };

/** How `execute` runs a statement in the engine (by default `select`: the output read whole). */
type EngineCall<T> = (sql: string, settings: QuerySettings, signal: AbortSignal, opts: SelectOptions) => Promise<T>;

/** The metadata operation's own query: compiled (and scoped) like a caller's. */
export const METADATA_SQL =
  'SELECT path, type, count() AS signals, max(created_at) AS last_seen_at FROM fact_signal ' +
  'ARRAY JOIN mapKeys(JSONAllPathsWithTypes(data)) AS path, mapValues(JSONAllPathsWithTypes(data)) AS type ' +
  'GROUP BY path, type ORDER BY path, type';

export class AnalyticsService {
  private readonly compiler: QueryCompiler;
  private readonly metadata: Compiled;
  private readonly schemaBody: string;
  private readonly lanes: FairQueue;
  private readonly gate = new CompileGate();

  constructor(
    private readonly engine: AnalyticsEngine,
    private readonly slots: ConcurrencySlots,
    private readonly buckets: TokenBuckets,
    private readonly opts: AnalyticsOptions,
  ) {
    this.compiler = new QueryCompiler(VIEW_SCHEMAS, opts.analyticsDatabase);
    this.metadata = compile(METADATA_SQL, VIEW_SCHEMAS);
    this.schemaBody = JSON.stringify(schemaDocument());
    // An organization the engine holds in quarantine runs one statement at a time; its others wait here, holding no place.
    this.lanes = new FairQueue(opts.engineSessions, (org) => (engine.quarantined?.(org) ? 1 : Infinity));
  }

  schema(): Reply {
    return { status: 200, body: this.schemaBody, headers: JSON_HEADERS };
  }

  async query(req: Request, p: Principal): Promise<Reply> {
    const text = queryText(req.body);
    await this.takeToken(p);
    // In process, metered per organization by the compile gate: a refused query never takes a slot.
    const sql = await this.compileFor(text, p);
    return this.withSlot(p, async (track) => {
      const started = performance.now();
      // The output is read as the client takes the answer (result-body.ts); the slot and the
      // place are held until it is done with.
      return this.execute(sql, p, track, async (q, settings, signal, opts) => {
        const out = this.engine.open ? await this.engine.open(q, settings, signal, opts) : wholeOutput(await this.engine.select(q, settings, signal, opts));
        const wallMs = Math.round((performance.now() - started) * 1e3) / 1e3;
        const result = resultReply(out, { wallMs, deadline: track.deadline + STOP_GRACE_MS });
        track(result.done);
        return result.reply;
      });
    });
  }

  async signalsMetadata(_req: Request, p: Principal): Promise<Reply> {
    await this.takeToken(p);
    return this.withSlot(p, async (track) => {
      const out = await this.execute(printScoped(this.metadata, { orgId: p.org.id, mode: p.mode }, this.opts.analyticsDatabase), p, track);
      const parsed = JSON.parse(shapeResult(out, MAX_ROWS, MAX_RESULT_BYTES).body.toString('utf8')) as { rows: [string, string, string | number, string][] };
      const paths = parsed.rows.map(([path, type, n, last]) => ({ path, type, signals: Number(n), lastSeenAt: `${last.replace(' ', 'T')}Z` }));
      return { status: 200, body: { paths } };
    });
  }

  /**
   * The SQL to run for the caller's text: compiled (a text compiled or refused before comes
   * from the cache; a new one waits for its organization's turn at the compile gate), then
   * printed with the caller's scope.
   */
  private async compileFor(text: string, p: Principal): Promise<string> {
    const c = this.compiler.cached(text) ?? (await this.gate.run(p.org.id, () => this.compiler.cached(text) ?? this.compiler.compileNew(text)));
    try {
      return this.compiler.print(c, { orgId: p.org.id, mode: p.mode });
    } catch (err) {
      if (err instanceof CompileError) throw err.toApiError();
      throw err;
    }
  }

  private settings(): QuerySettings {
    return engineSettings(this.opts);
  }

  /**
   * Runs a statement for the caller with the time it has left; engine errors become API
   * errors. At the deadline + STOP_GRACE_MS the watchdog answers 408 and aborts the engine
   * call, which ends the statement's work.
   */
  private async execute<T = Buffer>(sql: string, p: Principal, track: Tracker, call: EngineCall<T> = (q, settings, signal, opts) => this.engine.select(q, settings, signal, opts) as Promise<T>): Promise<T> {
    const left = track.deadline - Date.now();
    if (left <= 0) throw new ApiError('QUERY_TIMEOUT', 'the query ran past the execution time limit');
    const stop = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    let arm = (): void => undefined;
    const run = call(sql, { ...this.settings(), max_execution_time: Math.max(0.001, left / 1000) }, stop.signal, {
      tenant: p.org.id,
      maxBytes: MAX_OUTPUT_BYTES,
      // The work another organization's runaway ended is not this request's time.
      lost: (ms) => {
        if (track.giveBack(ms) > 0) arm();
      },
      deadline: () => track.deadline,
      // Starved by others' work past its deadline (the engine judges, see overdue below).
      reprieve: (ms) => {
        const given = track.reprieve(ms);
        if (given > 0) arm();
        return given;
      },
    });
    track(run);
    let done = false;
    const watchdog = new Promise<never>((_, reject) => {
      const end = (): void => {
        // End the work, and give the engine call a moment to settle so that the slot is free
        // by the time the caller reads the 408.
        stop.abort();
        const answer = (): void => reject(new ApiError('QUERY_TIMEOUT', 'the query ran past the execution time limit and was stopped'));
        const settle = setTimeout(answer, STOP_SETTLE_MS);
        run.then(answer, answer).finally(() => clearTimeout(settle));
      };
      // Past the deadline: the engine may find the statement was starved of the CPU by other
      // organizations' statements and end their work instead (it then runs again with its
      // time given back); otherwise its own work is ended.
      const overdue = async (): Promise<void> => {
        const judged = this.engine.overdue ? this.engine.overdue(stop.signal).catch(() => false) : Promise.resolve(false);
        await track.hold(judged);
        if (done) return;
        // Time given back meanwhile: a reprieve, or another organization's kill ended this statement's work.
        if (Date.now() < track.deadline + STOP_GRACE_MS) return arm();
        end();
      };
      arm = () => {
        clearTimeout(timer);
        timer = setTimeout(() => void overdue(), Math.max(0, track.deadline - Date.now()) + STOP_GRACE_MS);
      };
      arm();
    });
    try {
      return await Promise.race([run, watchdog]);
    } catch (err) {
      if (err instanceof ApiError) throw err;
      if (err instanceof WorkEnded) throw new ApiError('QUERY_TIMEOUT', `the query was stopped: ${err.message}`);
      // Ended by the watchdog: whatever the engine call says now (a broken connection), it is the timeout.
      if (stop.signal.aborted) throw new ApiError('QUERY_TIMEOUT', 'the query ran past the execution time limit and was stopped');
      if (engineUnreachable(err)) {
        log.warn('analytics engine unreachable', { err: err instanceof Error ? err.message : String(err) });
        throw new ApiError('ANALYTICS_UNAVAILABLE', 'the analytics engine is not reachable right now; retry later');
      }
      const e = toEngineError(err);
      const api = apiErrorFor(e, this.opts.internalNames, VIEW_NAMES);
      if (api.code === 'INTERNAL') log.error('analytics engine error', { code: e.codeName, reason: e.reason, org: p.org.id });
      throw api;
    } finally {
      done = true;
      clearTimeout(timer);
    }
  }

  private async takeToken(p: Principal): Promise<void> {
    if (!this.opts.rateLimited) return;
    let take;
    try {
      take = await this.buckets.take(p.org.id, p.mode, 1, p.org.limits);
    } catch (err) {
      log.error('rate limiter unavailable', { err });
      throw new ApiError('RATE_LIMITER_UNAVAILABLE', 'the rate limiter is unreachable, retry later');
    }
    if (!take.allowed) throw rateLimited(take.retryAfterSeconds);
  }

  /**
   * Runs `body` holding a slot and a place in the engine; both are given back once every
   * engine call `body` tracked has settled. The deadline starts when the place is had.
   */
  private async withSlot(p: Principal, body: (track: Tracker) => Promise<Reply>): Promise<Reply> {
    let givenBack = 0;
    let slot;
    try {
      slot = await this.slots.acquire(p.org.id, p.mode, p.org.limits.analyticsConcurrency);
    } catch (err) {
      log.error('rate limiter unavailable', { err });
      throw new ApiError('RATE_LIMITER_UNAVAILABLE', 'the concurrency limiter is unreachable, retry later');
    }
    if (!slot) throw concurrencyLimited();
    let place: () => void;
    const killsBefore = this.engine.kills?.(p.org.id) ?? 0;
    try {
      // Waited for on a clock of its own: the time limit bounds the statement's execution.
      place = await this.lanes.acquire(`${p.org.id}:${p.mode}`, p.org.id, this.opts.timeoutMs + PLACE_WAIT_EXTRA_MS);
    } catch (err) {
      void slot.release();
      throw err;
    }
    if ((this.engine.kills?.(p.org.id) ?? 0) !== killsBefore) {
      place();
      void slot.release();
      throw new ApiError('QUERY_TIMEOUT', "another statement of this organization ran past its deadline while this one waited for its place, and the engine's work was ended; this one was not run");
    }
    let deadline = Date.now() + this.opts.timeoutMs;
    let reprieved = 0;
    let holding = 0;
    const engineCalls: Promise<unknown>[] = [];
    let outstanding = 0;
    const settled = (): void => void outstanding--;
    // Whatever stage the request is in (compiling, waiting for the engine host to come back,
    // running), it answers by the deadline + 1 s: the engine calls' own watchdog answers at
    // + 0.8 s at the latest, and this one covers everything else.
    let overall: NodeJS.Timeout | undefined;
    let rearm = (): void => undefined;
    const latest = new Promise<never>((_, reject) => {
      rearm = () => {
        clearTimeout(overall);
        overall = setTimeout(
          () => reject(new ApiError('QUERY_TIMEOUT', 'the query ran past the execution time limit and was stopped')),
          Math.max(0, deadline + STOP_GRACE_MS + STOP_SETTLE_MS + 100 + (holding > 0 ? OVERDUE_WAIT_MS : 0) - Date.now()),
        );
      };
      rearm();
    });
    const methods = {
      giveBack: (ms: number): number => {
        const give = Math.max(0, Math.min(ms, MAX_LOST_LIMITS * (this.opts.timeoutMs + LOST_RESTART_MS) - givenBack));
        givenBack += give;
        deadline += give;
        if (give > 0) rearm();
        return give;
      },
      reprieve: (ms: number): number => {
        const give = Math.max(0, Math.min(ms, MAX_REPRIEVE_LIMITS * (this.opts.timeoutMs + REPRIEVE_RESTART_MS) - reprieved));
        reprieved += give;
        deadline += give;
        if (give > 0) rearm();
        return give;
      },
      hold: async (p: Promise<unknown>): Promise<void> => {
        holding++;
        rearm();
        let timer: NodeJS.Timeout | undefined;
        try {
          await Promise.race([p, new Promise<void>((r) => (timer = setTimeout(r, OVERDUE_WAIT_MS)))]);
        } finally {
          clearTimeout(timer);
          holding--;
          rearm();
        }
      },
    };
    // The deadline and what is left are read when used (Object.assign would copy a getter's value once).
    const track = Object.defineProperties(
      Object.assign((e: Promise<unknown>) => {
        outstanding++;
        e.then(settled, settled);
        engineCalls.push(e);
      }, methods),
      {
        deadline: { get: () => deadline },
      },
    ) as Tracker;
    try {
      return await Promise.race([body(track), latest]);
    } finally {
      clearTimeout(overall);
      // Normally the engine is done: give the slot back now. The release is not awaited, but
      // it is sent before the answer, and a caller's next query from this process goes to
      // Redis after it on the same connection, so it finds the slot free. After a watchdog
      // 408 the engine call is still being ended: the slot and place are kept until it is.
      if (outstanding === 0) {
        place();
        void slot.release();
      } else
        void Promise.allSettled(engineCalls).then(() => {
          place();
          return slot.release();
        });
    }
  }
}

/**
 * The settings of every analytics statement: the limits, lossless JSON, read-only. They carry
 * no scope (the printed statement does) and the query text cannot change them (the language
 * has no SETTINGS).
 */
export function engineSettings(opts: { timeoutMs: number; maxMemoryBytes: number }): QuerySettings {
  return {
    ...NO_PUSHDOWN_SETTINGS,
    max_execution_time: opts.timeoutMs / 1000,
    timeout_overflow_mode: 'throw',
    max_memory_usage: opts.maxMemoryBytes,
    // The outer LIMIT (per branch of a UNION) and the result-row cap keep the engine from
    // producing far more than 10,000 rows; the exact cut is made in result.ts.
    limit: MAX_ROWS + 1,
    max_result_rows: MAX_ROWS + 1,
    result_overflow_mode: 'break',
    output_format_json_quote_64bit_integers: 1,
    output_format_json_quote_64bit_floats: 0,
    output_format_json_quote_decimals: 1,
    output_format_json_quote_denormals: 0,
    readonly: 1,
  };
}

/** The `query` of a request body `{"query": "..."}`: a string of 1 to 20,480 characters, no other fields. */
export function queryText(body: Buffer): string {
  const v = parseJson(body);
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new ApiError('INVALID_BODY', 'the body must be a JSON object {"query": "<SELECT …>"}');
  const extra = Object.keys(v).filter((k) => k !== 'query');
  if (extra.length > 0) throw new ApiError('INVALID_BODY', `unknown field "${extra[0]}"; the body is {"query": "<SELECT …>"}`);
  const q = (v as { query?: unknown }).query;
  if (q === undefined) throw new ApiError('INVALID_BODY', 'query: required');
  if (typeof q !== 'string') throw new ApiError('INVALID_BODY', 'query: must be a string');
  let chars = 0;
  for (const _ of q) chars++;
  if (chars === 0 || q.trim() === '') throw new ApiError('INVALID_QUERY', 'query: must not be empty');
  if (chars > MAX_QUERY_CHARS) throw new ApiError('INVALID_QUERY', `query: ${chars} characters; at most ${MAX_QUERY_CHARS}`);
  return q;
}
