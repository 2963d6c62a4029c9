/**
 * Work started in some order, finished in any, applied in the order it was started: `take`
 * runs its task at once and applies the task's result (a function, or null for nothing) once
 * the results of every task taken before it are applied. The promise `take` returns settles
 * then, so a caller bounding the tasks in flight also bounds those finished but not applied.
 */
export class InOrder {
  private tail: Promise<void> = Promise.resolve();

  take(task: () => Promise<(() => void) | null>): Promise<void> {
    const result = task();
    // Its failure is reported by the promise returned below, once the tasks before it are applied.
    result.catch(() => undefined);
    const applied = this.tail.then(async () => {
      const apply = await result;
      apply?.();
    });
    // A failed task applies nothing and does not stop the ones after it.
    this.tail = applied.catch(() => undefined);
    return applied;
  }
}
