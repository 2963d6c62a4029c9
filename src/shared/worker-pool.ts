/**
 * The worker pool of a process (piscina), made once by main.ts and handed to every stage
 * that runs work on it (the pipeline's row building, the billing evaluator's evaluations).
 * A stage sees only `WorkerPool` and runs typed tasks of its own worker file (`workerTask`),
 * so no stage owns the pool or needs to know another stage's task types.
 */
import type { MessagePort } from 'node:worker_threads';
import { Piscina } from 'piscina';

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
  /** Its number of threads (a stage may bound its own tasks to it). */
  readonly maxThreads: number;
}

/** A pool of `threads` workers, queueing at most `maxQueue` tasks. Stopped with `destroy`. */
export function createWorkerPool(threads: number, maxQueue: number): WorkerPool & { destroy(): Promise<void> } {
  return new Piscina({ minThreads: threads, maxThreads: threads, maxQueue });
}

/**
 * One task of a worker file, typed: `In` is what the export takes, `Out` what it returns
 * (the worker file's own signature; workers/*.ts).
 */
export function workerTask<In, Out>(filename: string, name?: string): (pool: WorkerPool, input: In, transferList?: (ArrayBuffer | MessagePort)[]) => Promise<Out> {
  return async (pool, input, transferList) =>
    (await pool.run(input, { filename, ...(name === undefined ? {} : { name }), ...(transferList ? { transferList } : {}) })) as Out;
}
