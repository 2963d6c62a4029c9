/**
 * What a failure drill is (bench/drills.ts runs a list of them): a name, and a run that
 * injects faults into real engines under load and counts what it saw. Each drill lives in
 * its own module under bench/drills/ and is added to the list in bench/drills.ts; what the
 * drills share (posting, splitting answers by round, counting, keeping logs) is in common.ts.
 */
export interface DrillOptions {
  /** Faults to inject (one per round). */
  rounds: number;
  /** Load per round, in milliseconds (the fault comes in the middle of it). */
  durationMs: number;
  /** Progress lines (stderr). */
  log: (line: string) => void;
}

export interface DrillResult {
  drill: string;
  rounds: number;
  /** Signals the service acknowledged (202). */
  signals: number;
  /** Faults injected (processes killed, primaries failed over, …). */
  faults: number;
  /** Acknowledged signals not stored. */
  lost: number;
  /** Signals stored more than once. */
  duplicated: number;
  /** Drill-specific figures (e.g. outage windows), printed as they are. */
  figures: Record<string, unknown>;
  /** Violations of the drill's contract (an unexpected status, a window outside the fault…); empty when it held. */
  problems: string[];
}

export interface Drill {
  name: string;
  /** One line: what it does. */
  summary: string;
  run(opts: DrillOptions): Promise<DrillResult>;
}
