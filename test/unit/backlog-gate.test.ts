/**
 * The ingress's back-pressure gate (src/shared/backlog-gate.ts): an answer passes at once while
 * the pipeline keeps up, and is held while it is more than `limit` batches behind — until a
 * report says it is back under the limit, or at most the hold time; never with a limit or hold
 * time of 0, nor on a report too old; and nothing is kept of an answer once it passed. The same
 * for the billing evaluator's lag against its own limit.
 */
import t from 'tap';
import { BacklogGate } from '../../src/shared/backlog-gate.js';

const tick = (ms = 0): Promise<void> => new Promise((r) => setTimeout(r, ms));

t.test('keeping up: no hold', async (t) => {
  const g = new BacklogGate(10, 60_000);
  t.equal(await g.pass(), false, 'nothing reported yet');
  g.report(10);
  t.equal(await g.pass(), false, 'at the limit');
  t.equal(g.holding, 0);
});

t.test('behind: held until a report under the limit', async (t) => {
  const g = new BacklogGate(10, 60_000);
  g.report(11);
  t.ok(g.behind());
  let passed: boolean | null = null;
  const p = g.pass().then((held) => (passed = held));
  await tick(20);
  t.equal(passed, null, 'still held 20 ms later');
  t.equal(g.holding, 1, 'one answer held');
  g.report(12);
  await tick(5);
  t.equal(passed, null, 'a report still over the limit releases nothing');
  g.report(10);
  await p;
  t.equal(passed, true, 'released by the report, and says it was held');
  t.equal(g.holding, 0);
});

t.test('behind for longer than the hold time: released after it, and forgotten', async (t) => {
  const g = new BacklogGate(1, 60);
  g.report(5);
  const start = performance.now();
  const held = await Promise.all([g.pass(), g.pass(), g.pass()]);
  const waited = performance.now() - start;
  t.same(held, [true, true, true]);
  t.ok(waited >= 55, `held about the hold time (${Math.round(waited)} ms)`);
  t.equal(g.holding, 0, 'answers that timed out are not kept');
});

t.test('a limit or a hold time of 0: never held', async (t) => {
  for (const [limit, ms] of [[0, 1000], [5, 0]] as const) {
    const g = new BacklogGate(limit, ms);
    g.report(1_000_000);
    t.equal(g.behind(), false, `limit ${limit}, hold ${ms} ms`);
    t.equal(await g.pass(), false);
  }
});

t.test('releaseAll: every held answer goes (the process stops)', async (t) => {
  const g = new BacklogGate(1, 60_000);
  g.report(2);
  const all = Promise.all([g.pass(), g.pass()]);
  await tick(5);
  t.equal(g.holding, 2);
  g.releaseAll();
  t.same(await all, [true, true]);
  t.equal(g.holding, 0);
});

t.test('a report that is not renewed stops holding answers (a pipeline that stopped reporting is not taken as behind)', async (t) => {
  const g = new BacklogGate(1, 60_000, { freshMs: 50 });
  g.report(5);
  t.equal(g.behind(), true, 'just reported');
  await tick(80);
  t.equal(g.behind(), false, 'the report is 80 ms old, older than 50');
  t.equal(await g.pass(), false, 'not held');
});

t.test('billing lag: held while the oldest uncommitted billable message is older than the limit, whatever the pipeline says', async (t) => {
  const g = new BacklogGate(10, 60_000, { freshMs: 2_000, billingLagMs: 500 });
  g.report(0);
  g.reportBillingLag(500);
  t.equal(g.behind(), false, 'at the limit');
  g.reportBillingLag(501);
  t.equal(g.behind(), true, 'past it, the pipeline keeping up');
  let passed: boolean | null = null;
  const p = g.pass().then((held) => (passed = held));
  await tick(20);
  t.equal(passed, null, 'held');
  g.report(0);
  await tick(5);
  t.equal(passed, null, 'a pipeline report under its limit does not release while billing lags');
  g.reportBillingLag(120);
  await p;
  t.equal(passed, true, 'released once billing is back under the limit');
  g.report(11);
  g.reportBillingLag(0);
  t.equal(g.behind(), true, 'a pipeline behind still holds with billing idle');
});

t.test('billing lag: never held with a billing limit of 0 or on a report that is not renewed', async (t) => {
  const off = new BacklogGate(10, 60_000, { freshMs: 2_000, billingLagMs: 0 });
  off.reportBillingLag(3_600_000);
  t.equal(off.behind(), false, 'limit 0: billing never holds');
  const g = new BacklogGate(10, 60_000, { freshMs: 50, billingLagMs: 100 });
  g.reportBillingLag(5_000);
  t.equal(g.behind(), true, 'just reported');
  await tick(80);
  t.equal(g.behind(), false, 'a billing report 80 ms old, older than 50, holds nothing (an evaluator that stopped)');
});
