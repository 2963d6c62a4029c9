/**
 * src/billing/evaluator/fault.ts: the test-only fault hook acts once, at its own point only,
 * and only on an evaluation with events (the kill action is exercised for real by
 * test/api/billing-crash.test.ts, which checks the process died by SIGKILL there).
 */
import t from 'tap';
import { FaultHook } from '../../src/billing/evaluator/fault.js';

/** The lines a hook reports while `fn` runs (the service writes them to its log, read by the crash tests). */
function recorder(): { lines: Record<string, unknown>[]; report: (fields: Record<string, unknown>) => void } {
  const lines: Record<string, unknown>[] = [];
  return { lines, report: (fields) => void lines.push(fields) };
}

const ctx = (events: number) => ({ seq: 7, orgId: 'org_x', mode: 'live' as const, events });

t.test('pause: acts once, at its point, on a batch with events', async (t) => {
  const { lines, report } = recorder();
  const hook = new FaultHook('before-state-write', 'pause', 10, report);
  await hook.at('after-events', ctx(3));
  await hook.at('before-state-write', ctx(0));
  const started = Date.now();
  await hook.at('before-state-write', ctx(2));
  t.ok(Date.now() - started >= 9, 'it paused at its point');
  await hook.at('before-state-write', ctx(5));
  t.same(lines.map((l) => [l.point, l.action, l.seq, l.orgId, l.events]), [['before-state-write', 'pause', 7, 'org_x', 2]]);
});

t.test('off: never acts', async (t) => {
  const { lines, report } = recorder();
  const off = new FaultHook(null, 'kill', 0, report);
  for (const p of ['after-pin', 'after-events', 'before-state-write', 'after-state-write'] as const) await off.at(p, ctx(1));
  t.same(lines, []);
});
