/**
 * The Node options the service runs with, in every way it is started: scripts/run.sh, the
 * Dockerfile, `npm start`, and the test and bench harness (harness/service.ts); a unit test
 * (test/unit/node-flags.test.ts) checks that each of them passes these.
 *
 *   --max-semi-space-size=64   a young generation of 64 MiB semi-spaces instead of 16: the
 *                              service makes much short-lived garbage per batch (bodies, rows,
 *                              bus messages), and with the default the main thread spent 14%
 *                              of its time in the scavenger. Measured (docs/decisions/0008): the
 *                              service's CPU per 500-signal billed batch −15 to −18%, per
 *                              million signals through the pipeline −8 to −10%; 32 and 128
 *                              did less.
 */
export const SEMI_SPACE_MB = 64;
export const NODE_FLAGS: readonly string[] = [`--max-semi-space-size=${SEMI_SPACE_MB}`];

/**
 * The same young generation for the worker threads (piscina's `resourceLimits`): the flag
 * sizes the main thread's only, and a worker's young generation stayed at 48 MiB (three
 * 16 MiB semi-spaces) — where the billing evaluation runs. Measured: the evaluation of a
 * 500-signal group in a worker thread (bench/evaluate.ts run in one) 29.3 / 30.4 → 26.0 / 28.7
 * µs CPU per signal.
 */
export const WORKER_YOUNG_GENERATION_MB = 3 * SEMI_SPACE_MB;

/** The flags of NODE_FLAGS this process was not started with. */
export function missingNodeFlags(execArgv: readonly string[] = process.execArgv): string[] {
  return NODE_FLAGS.filter((f) => !execArgv.includes(f));
}
