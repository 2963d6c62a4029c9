/**
 * What the analytics operations need from the store: a way to run one compiled SELECT with
 * per-query settings, answered as JSONCompact.
 */
export type QuerySettings = Record<string, string | number>;

/** Who runs a statement, and how much of its output to take. */
export interface SelectOptions {
  /**
   * The organization the statement runs for: the embedded engine's host tells apart whose
   * deadline ended the host's work (src/store/hosted/index.ts).
   */
  tenant?: string;
  /**
   * Take at most about this many bytes of output (at least this many when there are): past
   * it the output is cut where it stands (the JSON document is then incomplete) and the
   * engine is told to stop. Unset: all of it.
   */
  maxBytes?: number;
  /**
   * Called when another organization's statement ended the engine work this statement had
   * done (the embedded engine's host was killed at that statement's deadline) and it is run
   * again: the milliseconds that work took, plus the host's restart allowance.
   */
  lost?: (ms: number) => void;
  /**
   * Moves the statement's deadline `ms` later because it was starved of the CPU by others'
   * work (the embedded engine's judgement when its deadline passes, src/store/hosted/blame.ts);
   * returns what was given (0: the request has no more to give, and its work is ended as usual).
   */
  reprieve?: (ms: number) => number;
  /**
   * The statement's deadline now (ms since the epoch; it moves when time is given back): an
   * engine that runs the statement again tells the engine the time left then
   * (`max_execution_time`), not the time left at the first attempt.
   */
  deadline?: () => number;
}

/**
 * The statement's work was ended because another statement of the same organization ran
 * past its deadline and its work could only be stopped with the engine host's (the embedded
 * engine: src/store/hosted/index.ts). Other organizations' statements are run again instead.
 */
export class WorkEnded extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WorkEnded';
  }
}

/**
 * An engine's answer while it is being read: its bytes as they come, one piece per `read`, so
 * that the reader sets the pace (what is not asked for is left in the connection, and TCP holds
 * the engine back).
 */
export interface EngineOutput {
  /** The next piece, or null after the last one. Rejects when the answer broke off before its end (the engine failed, the connection was lost). */
  read(): Promise<Buffer | null>;
  /** Stops reading: the rest is never read (the connection is closed, which stops a server's read-only query). Idempotent. */
  close(): void;
}

export interface AnalyticsEngine {
  /**
   * Runs a statement printed by the query compiler (compiler/printer.ts), which carries the
   * organization scope in its view reads, with these settings (limits, read-only, output
   * format). Returns the JSONCompact output as bytes; throws engine errors as EngineError or
   * as the engine's own error (see engine-error.ts).
   *
   * `stop` aborts when the caller's deadline has passed: the engine must then stop the
   * statement's work (a server cancels the query; the embedded engine's host is killed) and
   * the call rejects.
   */
  select(sql: string, settings: QuerySettings, stop?: AbortSignal, opts?: SelectOptions): Promise<Buffer>;
  /**
   * The same as `select`, answering as soon as the engine's answer has begun (its status
   * checked: a refusal rejects as in `select`): the output is then read piece by piece, as the
   * caller asks for it (`maxBytes` does not apply: the caller stops when it has enough). The
   * caller must read it to its end or close it. Absent: the output is read whole (`select`).
   */
  open?(sql: string, settings: QuerySettings, stop?: AbortSignal, opts?: SelectOptions): Promise<EngineOutput>;
  /**
   * Whether the engine holds `tenant` to one statement at a time now (the embedded engine,
   * after a statement of it ran past its deadline and the host's work had to be ended). The
   * analytics service's queue (src/analytics/fair-queue.ts) keeps its other statements
   * waiting, holding no place. Absent: never.
   */
  quarantined?(tenant: string): boolean;
  /**
   * How many times a statement of `tenant` ran past its deadline and the engine's work was
   * ended for it (the embedded engine). A statement of the tenant that waited for its place
   * while the count rose does not run: it would only run to its deadline beside the one that
   * did, and end everyone's work again. Absent: never.
   */
  kills?(tenant: string): number;
  /**
   * The statement whose `stop` this is has run past its deadline, and its caller is about to
   * abort `stop`. Resolves false when its work is to be ended for it (abort `stop`), true when
   * it did not use the CPU it was given time for and goes on: its deadline was moved through
   * its `reprieve`, and when other organizations' statements used the CPU, the engine ended
   * their work instead and it runs again (the embedded engine, src/store/hosted/blame.ts).
   * Absent: always false.
   */
  overdue?(stop: AbortSignal): Promise<boolean>;
}

/** A SETTINGS clause for engines that take settings in the text (chdb). Values are quoted. */
export function settingsClause(settings: QuerySettings): string {
  const parts = Object.entries(settings).map(([k, v]) => {
    if (!/^[a-z_][a-z0-9_]*$/.test(k)) throw new Error(`bad setting name ${k}`);
    return `${k} = ${typeof v === 'number' ? String(v) : `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`}`;
  });
  return parts.length === 0 ? '' : ` SETTINGS ${parts.join(', ')}`;
}
