/**
 * piscina worker: evaluates one billable batch (src/billing/evaluator/evaluate.ts). Pure
 * CPU work on exact decimals; the main thread does the I/O (state, rows, events).
 */
import { evaluate, type EvaluationInput, type EvaluationOutput } from '../src/billing/evaluator/evaluate.js';

export default function billing(input: EvaluationInput): EvaluationOutput {
  return evaluate(input);
}
