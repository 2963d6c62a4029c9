/**
 * src/billing/evaluator/fault.ts: the test-only fault hook acts once, at its own point only,
 * and only on an evaluation with events (the kill action is exercised for real by
 * test/api/billing-crash.test.ts, which checks the process died by SIGKILL there).
 */
import t from 'tap';
import { FaultHook } from '../../src/billing/evaluator/fault.js';

async function logged(fn: () => Promise<void>): Promise<Record<string, unknown>[]> {
  const lines: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string | Uint8Array) => {
    lines.push(String(chunk));
    return true;
  }) as typeof process.stderr.write;
  try {
    await fn();
  } finally {
    process.stderr.write = write;
  }
  return lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((r) => r.msg === 'billing fault point reached');
}

const ctx = (events: number) => ({ seq: 7, orgId: 'org_x', mode: 'live' as const, events });

t.test('pause: acts once, at its point, on a batch with events', async (t) => {
  const hook = new FaultHook('before-state-write', 'pause', 10);
  const lines = await logged(async () => {
    await hook.at('after-events', ctx(3));
    await hook.at('before-state-write', ctx(0));
    await hook.at('before-state-write', ctx(2));
    await hook.at('before-state-write', ctx(5));
  });
  t.same(lines.map((l) => [l.point, l.action, l.seq, l.orgId, l.events]), [['before-state-write', 'pause', 7, 'org_x', 2]]);
});

t.test('off: never acts', async (t) => {
  const lines = await logged(async () => {
    for (const p of ['after-pin', 'after-events', 'before-state-write', 'after-state-write'] as const) await FaultHook.off.at(p, ctx(1));
  });
  t.same(lines, []);
});
