/**
 * The compile gate (src/analytics/compile-gate.ts): one compilation per turn of the event
 * loop, the organization with the most budget first, a compile-time budget per
 * organization, and a bound on the texts one organization may have waiting.
 */
import t from 'tap';
import { ApiError } from '../../src/errors.js';
import { CompileGate } from '../../src/analytics/compile-gate.js';

/** Work that takes `ms` of the event loop, as a compilation does. */
const busy = (ms: number, label: string, log: string[]) => (): string => {
  const end = performance.now() + ms;
  while (performance.now() < end);
  log.push(label);
  return label;
};

t.test('a lone text is compiled at once; a second organization goes before a flooding one\'s queue', async (t) => {
  const gate = new CompileGate(10_000, 1_000, 64);
  const log: string[] = [];
  const first = gate.run('A', busy(5, 'A0', log));
  t.same(log, ['A0'], 'compiled at once, in the same turn');
  const floods = Array.from({ length: 10 }, (_, i) => gate.run('A', busy(5, `A${i + 1}`, log)));
  const b = gate.run('B', busy(1, 'B', log));
  await Promise.all([first, b, ...floods]);
  t.ok(log.indexOf('B') <= 2, `B waited for at most one of A's compilations (order: ${log.join(' ')})`);
});

t.test('one compilation per turn: other work of the loop runs between them', async (t) => {
  const gate = new CompileGate(10_000, 1_000, 64);
  const log: string[] = [];
  const jobs = Array.from({ length: 5 }, (_, i) => gate.run('A', busy(2, `A${i}`, log)));
  const ticks: number[] = [];
  const timer = setInterval(() => ticks.push(log.length), 0);
  await Promise.all(jobs);
  clearInterval(timer);
  t.ok(new Set(ticks).size >= 3, `timers ran between compilations (compilations done at each tick: ${ticks.join(',')})`);
});

t.test('past its budget an organization waits for the refill while another goes on', async (t) => {
  // 30 ms of budget, 100 ms earned per second.
  const gate = new CompileGate(30, 100, 64);
  const log: string[] = [];
  const a = Array.from({ length: 4 }, (_, i) => gate.run('A', busy(20, `A${i}`, log)));
  await new Promise((resolve) => setTimeout(resolve, 20));
  const bStart = performance.now();
  await gate.run('B', busy(1, 'B', log));
  t.ok(performance.now() - bStart < 100, 'B is not held by A\'s deficit');
  const start = performance.now();
  await Promise.all(a);
  t.ok(performance.now() - start > 150, `A's last texts waited for its budget (${(performance.now() - start).toFixed(0)} ms)`);
  t.same(log.filter((x) => x.startsWith('A')), ['A0', 'A1', 'A2', 'A3'], 'in order');
});

t.test('too many texts of one organization waiting: refused at once with 429', async (t) => {
  const gate = new CompileGate(10_000, 1_000, 3);
  const log: string[] = [];
  const jobs = [gate.run('A', busy(1, 'A0', log))];
  for (let i = 1; i <= 3; i++) jobs.push(gate.run('A', busy(1, `A${i}`, log)));
  const refused = await gate.run('A', busy(1, 'A4', log)).then(() => null, (err: unknown) => err);
  t.ok(refused instanceof ApiError && refused.code === 'CONCURRENCY_LIMIT_EXCEEDED' && refused.status === 429, 'a 429 CONCURRENCY_LIMIT_EXCEEDED');
  t.resolves(gate.run('B', busy(1, 'B', log)), 'another organization is not affected');
  await Promise.all(jobs);
  t.notOk(log.includes('A4'), 'the refused text was never compiled');
});

t.test('an error of the work is the caller\'s, and the gate goes on', async (t) => {
  const gate = new CompileGate();
  const log: string[] = [];
  const boom = gate.run('A', () => {
    throw new Error('refused');
  });
  await t.rejects(boom, /refused/);
  const queued = [gate.run('A', busy(1, 'x', log)), gate.run('A', () => { throw new Error('second'); }), gate.run('A', busy(1, 'y', log))];
  t.same((await Promise.allSettled(queued)).map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled']);
});
