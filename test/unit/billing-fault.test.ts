/**
 * src/billing/evaluator/fault.ts: the test-only fault hook acts once, at its own point only,
 * and only on an evaluation with events (the kill action is exercised for real by
 * test/api/billing-crash.test.ts, which checks the process died by SIGKILL there).
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { FaultHook } from '../../src/billing/evaluator/fault.js';

/** The lines a hook reports while `fn` runs (the service writes them to its log, read by the crash tests). */
function recorder(): { lines: Record<string, unknown>[]; report: (fields: Record<string, unknown>) => void } {
  const lines: Record<string, unknown>[] = [];
  return { lines, report: (fields) => void lines.push(fields) };
}

const ctx = (events: number) => ({ seq: 7, orgId: 'org_x', mode: 'live' as const, events });

t.test('pause: acts once, at its point, on a batch with events', async (t) => {
  const { lines, report } = recorder();
  const hook = new FaultHook('before-state-write', 'pause', 10, null, report);
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
  const off = new FaultHook(null, 'kill', 0, null, report);
  for (const p of ['after-pin', 'after-events', 'after-states', 'before-state-write', 'after-state-write'] as const) await off.at(p, ctx(1));
  t.same(lines, []);
});

t.test('stall: blocks the thread (no timer runs meanwhile) until its length, or until the release file exists', async (t) => {
  const { lines, report } = recorder();
  const hook = new FaultHook('before-states', 'stall', 300, null, report);
  t.ok(hook.armed('before-states'), 'armed at its point');
  t.notOk(hook.armed('after-pin'), 'not at another');
  let ticked = 0;
  const timer = setInterval(() => ticked++, 10);
  const started = Date.now();
  // At before-states the events are not known yet: it acts all the same.
  await hook.at('before-states', { seq: 7, orgId: 'org_x', mode: 'live' });
  const stalledTicks = ticked;
  clearInterval(timer);
  t.ok(Date.now() - started >= 290, 'it lasted its length');
  t.equal(stalledTicks, 0, 'no timer ran while it stalled: the thread was blocked');
  t.notOk(hook.armed('before-states'), 'once per process');
  t.same(lines.map((l) => [l.point, l.action, l.events]), [['before-states', 'stall', undefined]]);

  const dir = mkdtempSync(join(tmpdir(), 'fault-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'release');
  const released = new FaultHook('before-states', 'stall', 60_000, file, () => undefined);
  // Another thread makes the file while this one is blocked.
  const w = new Worker(`setTimeout(() => require('node:fs').writeFileSync(${JSON.stringify(file)}, ''), 200)`, { eval: true });
  const t0 = Date.now();
  await released.at('before-states', { seq: 1, orgId: 'org_x', mode: 'live' });
  const took = Date.now() - t0;
  await w.terminate();
  t.ok(took >= 150 && took < 10_000, `ended by the release file (${took} ms), not after its 60 s`);
});
