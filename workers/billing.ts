/**
 * piscina worker: evaluates a group of billable messages of one partition
 * (src/billing/evaluator/group.ts). Pure CPU work on exact decimals; the main thread does the
 * I/O (state, period keys, rows, events). One task per group: it lists the cap periods the
 * group touches, posts them on the task's port, and evaluates once the main thread answered
 * with the customers' states and those periods' totals (or gave up), so the pin and the
 * messages are copied here and parsed once.
 */
import { configsOf, unitsOf, evaluateGroup, groupCapPeriods, type AskingTask, type GroupLookups, type GroupOutput, type WorkerAnswer } from '../src/billing/evaluator/group.js';

export async function evaluateAsking(input: AskingTask): Promise<GroupOutput> {
  const { port } = input;
  try {
    const configs = configsOf(input);
    const units = unitsOf(input);
    const answer = new Promise<WorkerAnswer>((resolve) => port.once('message', resolve));
    const lookups: GroupLookups = new Map();
    port.postMessage(groupCapPeriods({ configs, units }, lookups));
    const got = await answer;
    if ('error' in got) throw new Error(`billing evaluation abandoned: ${got.error}`);
    return evaluateGroup({ configs, units, states: got.states, periods: got.periods }, lookups);
  } finally {
    port.close();
  }
}
