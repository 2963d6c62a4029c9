/**
 * piscina worker: evaluates a group of billable messages of one partition
 * (src/billing/evaluator/group.ts). Pure CPU work on exact decimals; the main thread does the
 * I/O (state, period keys, rows, events). Two tasks: `evaluateGroup` evaluates; `groupCapPeriods`
 * lists the cap periods a group touches, whose totals the main thread reads before evaluating.
 */
import { configsOf, unitsOf, evaluateGroup as evaluate, groupCapPeriods as listCapPeriods, type GroupCapPeriodsInput, type GroupInput, type GroupOutput, type ScopedCapPeriodRef, type WorkerTask } from '../src/billing/evaluator/group.js';

export function evaluateGroup(input: WorkerTask<GroupInput>): GroupOutput {
  return evaluate({ ...input, configs: configsOf(input), units: unitsOf(input) });
}

export function groupCapPeriods(input: WorkerTask<GroupCapPeriodsInput>): ScopedCapPeriodRef[] {
  return listCapPeriods({ ...input, configs: configsOf(input), units: unitsOf(input) });
}
