/**
 * The worker pool of a process (piscina), made once by main.ts and handed to every stage
 * that runs work on it (the pipeline's row building, the billing evaluator's evaluations).
 * A stage sees only `WorkerPool` and runs typed tasks of its own worker file (`workerTask`),
 * so no stage owns the pool or needs to know another stage's task types.
 */
import type { MessagePort } from 'node:worker_threads';
import { Piscina } from 'piscina';
import { WORKER_YOUNG_GENERATION_MB } from './node-flags.js';

export interface TaskOptions {
  /** The worker file (file URL) whose export runs the task. */
  filename: string;
  /** The named export to run; default: the default export. */
  name?: string;
  /** Buffers moved to the worker rather than copied. */
  transferList?: (ArrayBuffer | MessagePort)[];
}

export interface WorkerPool {
  run(task: unknown, options: TaskOptions): Promise<unknown>;
  /** Its number of threads. */
  readonly maxThreads: number;
  /** Tasks it runs at once, `TASKS_PER_WORKER` a thread (a stage may bound its own tasks to it). */
  readonly capacity: number;
}

/**
 * Tasks a worker thread takes at once. A billing evaluation (workers/billing.ts) waits midway
 * for the main thread to read the states and period totals it asked for; with one task a
 * thread, its thread sat idle meanwhile while other partitions' evaluations queued for it (a
 * 500-signal billing step spent 0.55 of its 0.9 s waiting for a thread whose worker was half
 * idle). A second task runs in that wait. The pipeline's row tasks never wait midway: one
 * that lands on a thread already running a task waits at most for that task's current run.
 */
export const TASKS_PER_WORKER = 2;

/** A pool of `threads` workers, queueing at most `maxQueue` tasks. Stopped with `destroy`. */
export function createWorkerPool(threads: number, maxQueue: number): WorkerPool & { destroy(): Promise<void> } {
  const pool = new Piscina({ minThreads: threads, maxThreads: threads, maxQueue, concurrentTasksPerWorker: TASKS_PER_WORKER, resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB } });
  return {
    run: (task, options) => pool.run(task, options),
    maxThreads: threads,
    capacity: threads * TASKS_PER_WORKER,
    destroy: () => pool.destroy(),
  };
}

/**
 * One task of a worker file, typed: `In` is what the export takes, `Out` what it returns
 * (the worker file's own signature; workers/*.ts).
 */
export function workerTask<In, Out>(filename: string, name?: string): (pool: WorkerPool, input: In, transferList?: (ArrayBuffer | MessagePort)[]) => Promise<Out> {
  return async (pool, input, transferList) =>
    (await pool.run(input, { filename, ...(name === undefined ? {} : { name }), ...(transferList ? { transferList } : {}) })) as Out;
}
