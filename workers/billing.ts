/**
 * piscina worker: evaluates one billable batch (src/billing/evaluator/evaluate.ts). Pure
 * CPU work on exact decimals; the main thread does the I/O (state, period keys, rows, events).
 * Two tasks: the default export evaluates; `capPeriods` lists the cap periods a batch
 * touches, whose totals the main thread reads before evaluating.
 */
import { capPeriods as listCapPeriods, evaluate, type CapPeriodRef, type CapPeriodsInput, type EvaluationInput, type EvaluationOutput } from '../src/billing/evaluator/evaluate.js';

export default function billing(input: EvaluationInput): EvaluationOutput {
  return evaluate(input);
}

export function capPeriods(input: CapPeriodsInput): CapPeriodRef[] {
  return listCapPeriods(input);
}
