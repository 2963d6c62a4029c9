/**
 * Whose work the engine host is killed for when an analytics statement's deadline passes
 * (src/store/hosted/blame.ts), and the engine host's CPU ledger it reads
 * (src/store/engine-host/cpu.ts): which statement each thread's CPU time counts to.
 */
import t from 'tap';
import fc from 'fast-check';
import { MARGIN, MIN_CULPRIT_MS, STOPPED_CPU_MS, STOPPED_MIN_WALL_MS, STARVED_SHARE, afterStop, blame, stoppedHardBound, stoppedWallBound } from '../../src/store/hosted/blame.js';
import { CpuLedger, ENDED_KEPT_MS, orgOfTag, parseProcesses, statTicks } from '../../src/store/engine-host/cpu.js';
import { AGED_AT_CPU_MS, AGED_NICE, ThreadAging, agedNice, isLowered, loweredNice, loweredThreads, type NiceOps } from '../../src/store/engine-host/aging.js';

t.test('a statement that used its time is blamed on its own organization', async (t) => {
  const v = blame({ tenant: 'a', cpuMs: 2_000, ranMs: 3_000 }, [{ tenant: 'b', cpuMs: 2_500 }]);
  t.equal(v.tenant, 'a');
  t.equal(v.starved, false);
  t.same(Object.fromEntries(v.byTenant), { a: 2_000, b: 2_500 });
});

t.test("a starved statement is not blamed: another organization's runaways that used the CPU are", async (t) => {
  // Four organizations' runaways, a small statement starved past its deadline.
  const others = ['a', 'b', 'c', 'd'].flatMap((tenant, i) => [0, 1, 2, 3].map((j) => ({ tenant, cpuMs: 400 + 100 * i + 10 * j })));
  const v = blame({ tenant: 'victim', cpuMs: 150, ranMs: 3_500 }, others);
  t.equal(v.starved, true);
  t.equal(v.tenant, 'd', 'the organization whose statements used the most');
});

t.test('another organization is blamed when it used MARGIN times as much as the overdue statement’s, or as much when in quarantine', async (t) => {
  t.equal(blame({ tenant: 'a', cpuMs: 300, ranMs: 4_000 }, [{ tenant: 'b', cpuMs: MARGIN * 300 }]).tenant, 'b', 'at the margin');
  t.equal(blame({ tenant: 'a', cpuMs: 1_000, ranMs: 2_000 }, [{ tenant: 'b', cpuMs: 1_999 }]).tenant, 'a', 'below it, not starved: its own');
  t.equal(blame({ tenant: 'a', cpuMs: 300, ranMs: 4_000 }, [{ tenant: 'b', cpuMs: 300, quarantined: true }]).tenant, 'b', 'an organization in quarantine: at parity');
  t.equal(blame({ tenant: 'a', cpuMs: 300, ranMs: 4_000 }, [{ tenant: 'b', cpuMs: 299, quarantined: true }]).tenant, null);
  t.equal(blame({ tenant: 'a', cpuMs: 50, ranMs: 4_000 }, [{ tenant: 'b', cpuMs: MIN_CULPRIT_MS - 10 }]).tenant, null, 'less than MIN_CULPRIT_MS starves no one');
  // A small statement beside one starved runaway, both alike: neither blames the other.
  t.equal(blame({ tenant: 'runaway', cpuMs: 300, ranMs: 4_000 }, [{ tenant: 'small', cpuMs: 360 }]).tenant, null);
  t.equal(blame({ tenant: 'small', cpuMs: 360, ranMs: 4_000 }, [{ tenant: 'runaway', cpuMs: 300 }]).tenant, null);
});

t.test('a statement that ran at a lowered priority gets nobody else blamed', async (t) => {
  // A quarantined organization's runaway, starved at the lowest priority, beside another's statements.
  const others = [{ tenant: 'b', cpuMs: 250 }, { tenant: 'b', cpuMs: 300 }, { tenant: 'b', cpuMs: 290 }];
  t.equal(blame({ tenant: 'a', cpuMs: 30, ranMs: 3_500, quarantined: true }, others).tenant, 'a', 'in quarantine: its own organization');
  t.equal(blame({ tenant: 'a', cpuMs: 30, ranMs: 3_500 }, others).tenant, 'b', 'the same, not in quarantine: the CPU decides');
  // Lowered beside its own organization's long statement (which ended), starved.
  t.equal(blame({ tenant: 'a', cpuMs: 320, ranMs: 3_000, lowered: true }, [{ tenant: 'b', cpuMs: 930 }]).tenant, null, 'lowered, starved: nobody');
  t.equal(blame({ tenant: 'a', cpuMs: 1_000, ranMs: 3_000, lowered: true }, [{ tenant: 'b', cpuMs: 2_930 }]).tenant, 'a', 'lowered, not starved: its own');
});

t.test("an aged statement starved by younger ones gets nobody blamed: only statements as old count", async (t) => {
  // A runaway whose threads the host lowered after a second, beside another organization's young statements.
  const young = [{ tenant: 'victim', cpuMs: 900 }, { tenant: 'victim', cpuMs: 700 }];
  t.equal(blame({ tenant: 'runaway', cpuMs: 300, ranMs: 3_000, aged: true }, young).tenant, null, 'aged, starved by younger ones: nobody');
  t.equal(blame({ tenant: 'runaway', cpuMs: 300, ranMs: 3_000 }, young).tenant, 'victim', 'not aged: the CPU decides');
  // An aged victim statement starved by other organizations' aged runaways: they are blamed.
  const v = blame({ tenant: 'victim', cpuMs: 300, ranMs: 3_000, aged: true }, [{ tenant: 'r', cpuMs: 1_400, aged: true }, { tenant: 'young', cpuMs: 5_000 }]);
  t.equal(v.tenant, 'r', 'aged others count; the younger one does not');
  t.equal(v.byTenant.get('young'), undefined);
  // Its own organization's younger statements count for it.
  t.equal(blame({ tenant: 'a', cpuMs: 300, ranMs: 3_000, aged: true }, [{ tenant: 'a', cpuMs: 1_000 }]).tenant, 'a', 'its own younger siblings used the CPU: its own');
});

t.test('a statement running on time given back counts for its own organization only', async (t) => {
  // A victim's small statement, given its time back, ran long: not another organization's culprit.
  t.equal(blame({ tenant: 'runaway', cpuMs: 280, ranMs: 6_000 }, [{ tenant: 'victim', cpuMs: 600, relieved: true }]).tenant, null);
  t.equal(blame({ tenant: 'runaway', cpuMs: 280, ranMs: 6_000 }, [{ tenant: 'victim', cpuMs: 600 }]).tenant, 'victim', 'not relieved: the CPU decides');
  // Two runaways of one organization: a relieved sibling still counts for its organization.
  const v = blame({ tenant: 'a', cpuMs: 690, ranMs: 3_500 }, [{ tenant: 'a', cpuMs: 730, relieved: true }]);
  t.equal(v.tenant, 'a', 'its sibling used more than it: its own organization');
  t.equal(v.byTenant.get('a'), 1_420);
});

t.test("a starved statement's own organization is blamed when its own other statements used the CPU, or when it is in quarantine", async (t) => {
  const v = blame({ tenant: 'a', cpuMs: 200, ranMs: 3_000 }, [
    { tenant: 'a', cpuMs: 900 },
    { tenant: 'a', cpuMs: 900 },
    { tenant: 'b', cpuMs: 100 },
  ]);
  t.equal(v.starved, true);
  t.equal(v.tenant, 'a');
  t.equal(blame({ tenant: 'a', cpuMs: 100, ranMs: 3_000, quarantined: true }, []).tenant, 'a');
});

t.test('starved, and no organization stands out: nobody is blamed', async (t) => {
  t.equal(blame({ tenant: 'a', cpuMs: 100, ranMs: 3_000 }, []).tenant, null, 'alone (the rest of the machine starved it)');
  t.equal(blame({ tenant: 'a', cpuMs: 0, ranMs: 3_000 }, []).tenant, null, 'not listed yet');
  t.equal(blame({ tenant: 'a', cpuMs: 100, ranMs: 3_000 }, [{ tenant: 'b', cpuMs: 150 }]).tenant, null);
  t.equal(blame({ tenant: 'a', cpuMs: STARVED_SHARE * 3_000, ranMs: 3_000 }, []).tenant, 'a', 'at the share: it used its time');
});

t.test('the share is read from all attempts when given (shareMs), the comparison from cpuMs', async (t) => {
  // Run again after kills: its attempts used 900 ms in 3 s (not starved), the most one used 300.
  const v = blame({ tenant: 'a', cpuMs: 300, ranMs: 3_000, shareMs: 900 }, [{ tenant: 'b', cpuMs: 500 }]);
  t.equal(v.starved, false);
  t.equal(v.tenant, 'a');
});

t.test('properties', async (t) => {
  const stmt = fc.record({ tenant: fc.constantFrom('a', 'b', 'c', 'd'), cpuMs: fc.nat({ max: 20_000 }), quarantined: fc.boolean(), relieved: fc.boolean(), aged: fc.boolean() });
  fc.assert(
    fc.property(stmt, fc.nat({ max: 30_000 }), fc.array(stmt, { maxLength: 12 }), fc.boolean(), ({ tenant, cpuMs, quarantined, aged }, ranMs, others, lowered) => {
      const v = blame({ tenant, cpuMs, ranMs, quarantined, lowered, aged }, others);
      // A statement of lowered priority (quarantine included) never gets another organization blamed.
      if ((quarantined || lowered) && v.tenant !== null && v.tenant !== tenant) return false;
      // An aged statement never gets an organization blamed whose statements are all younger.
      if (aged && v.tenant !== null && v.tenant !== tenant && !others.some((o) => o.tenant === v.tenant && o.aged)) return false;
      const counted = others.filter((o) => o.tenant === tenant || (!o.relieved && (!aged || o.aged)));
      const used = (x: string): number => (x === tenant ? cpuMs : 0) + counted.filter((o) => o.tenant === x).reduce((s, o) => s + o.cpuMs, 0);
      const jailed = (x: string): boolean => counted.some((o) => o.tenant === x && o.quarantined);
      if (v.tenant !== null && v.tenant !== tenant) {
        // Another organization: MARGIN times the overdue one's (as much when in quarantine), the most of those that qualify.
        const qualifies = (x: string): boolean => x !== tenant && used(x) >= MIN_CULPRIT_MS && used(x) >= (jailed(x) ? 1 : MARGIN) * used(tenant);
        if (!qualifies(v.tenant)) return false;
        for (const o of counted) if (qualifies(o.tenant) && used(o.tenant) > used(v.tenant)) return false;
      }
      // Nobody is blamed only for a starved statement of an organization not in quarantine.
      if (v.tenant === null && (!v.starved || quarantined || cpuMs >= STARVED_SHARE * ranMs)) return false;
      // With nothing else running, the only verdicts are its own organization or nobody.
      if (others.length === 0 && v.tenant !== tenant && v.tenant !== null) return false;
      return true;
    }),
  );
});

const stat = (tid: number, utime: number, stime: number, name = 'QueryPipelineEx') =>
  `${tid} (${name}) S 1 1 1 0 -1 4194624 100 0 0 0 ${utime} ${stime} 0 0 20 0 40 0 12345 0 0`;

t.test('a /proc stat line: utime + stime in ticks, whatever the thread is called', async (t) => {
  t.equal(statTicks(stat(7, 120, 30)), 150);
  t.equal(statTicks(stat(7, 5, 0, 'a (strange) name')), 5);
  t.equal(statTicks('garbage'), null);
});

t.test('system.processes rows: tags and thread ids (numbers or quoted 64-bit integers)', async (t) => {
  t.same(parseProcesses(JSON.stringify({ data: [['stmt:1', [11, 12]], ['stmt:2', ['13']], [3, [1]], ['stmt:3', 'x']] })), [
    { tag: 'stmt:1', threads: [11, 12] },
    { tag: 'stmt:2', threads: [13] },
  ]);
});

t.test('the ledger: each thread counts to the statement that lists it anew, only what it did since', async (t) => {
  const ticks = new Map<number, number>();
  const of = (tid: number): number | null => ticks.get(tid) ?? null;
  const l = new CpuLedger();
  // Before any statement: pool threads 1 and 2 did 500 ticks of other work (inserts).
  ticks.set(1, 500).set(2, 500).set(3, 0);
  l.baseline([1, 2, 3], of);
  // Statement A takes thread 1, which works 100 ticks.
  ticks.set(1, 600);
  l.record([{ tag: 'A', threads: [1] }], of, [1, 2, 3], 0);
  t.same(l.report(), [{ tag: 'A', cpuMs: 1_000 }], "only what thread 1 did since the baseline (100 ticks: 1 s), not the inserts'");
  // Thread 1 goes back to the pool and on to statement B (A still lists it); thread 2 works for A.
  ticks.set(1, 650).set(2, 520);
  l.record(
    [
      { tag: 'A', threads: [1, 2] },
      { tag: 'B', threads: [1] },
    ],
    of,
    [1, 2, 3],
    1,
  );
  // Thread 1's 50 ticks up to this sample were counted to A (it held it at the last one); from now on they are B's.
  ticks.set(1, 850);
  l.refresh(of);
  t.same(l.report(), [
    { tag: 'A', cpuMs: 1_000 + 500 + 200 },
    { tag: 'B', cpuMs: 2_000 },
  ]);
  // A ends: it is reported as ended for a while, then forgotten.
  l.record([{ tag: 'B', threads: [1] }], of, [1, 2, 3], 2);
  t.same(l.report(), [
    { tag: 'B', cpuMs: 2_000 },
    { tag: 'A', cpuMs: 1_700, ended: true },
  ]);
  l.record([{ tag: 'B', threads: [1] }], of, [1, 2, 3], 3 + ENDED_KEPT_MS);
  t.same(l.report(), [{ tag: 'B', cpuMs: 2_000 }]);
  // A thread that did not exist at the last sample counts all its time; a thread id reused by
  // a new thread (its ticks start again lower) too.
  ticks.set(4, 30).set(1, 10);
  l.record([{ tag: 'B', threads: [1, 4] }], of, [1, 2, 3, 4], 4);
  t.same(l.report(), [{ tag: 'B', cpuMs: 2_000 + 100 + 300 }]);
  l.idle(5);
  t.same(l.report(), [{ tag: 'B', cpuMs: 2_400, ended: true }]);
});

t.test('a statement whose answer was ended at its deadline: the host is killed only when it keeps working', async (t) => {
  const limitMs = 30_000;
  // Finishing its block: no kill.
  t.equal(afterStop({ cpuSinceStopMs: 300, wallSinceStopMs: 2_500, ranBeforeMs: 4_000, limitMs }), 'wait');
  // A runaway's block: more CPU time after its answer was ended than a small statement's whole work.
  t.equal(afterStop({ cpuSinceStopMs: STOPPED_CPU_MS, wallSinceStopMs: 1_600, ranBeforeMs: 4_000, limitMs }), 'kill');
  // Working on (a quarter of its time or more as CPU time): as long again as it had run (at
  // least STOPPED_MIN_WALL_MS, at most the time limit).
  t.equal(afterStop({ cpuSinceStopMs: 1_300, wallSinceStopMs: STOPPED_MIN_WALL_MS - 1, ranBeforeMs: 1_000, limitMs }), 'wait');
  t.equal(afterStop({ cpuSinceStopMs: 1_300, wallSinceStopMs: STOPPED_MIN_WALL_MS, ranBeforeMs: 1_000, limitMs }), 'kill');
  t.equal(afterStop({ cpuSinceStopMs: 1_400, wallSinceStopMs: 7_000, ranBeforeMs: 8_000, limitMs }), 'wait');
  t.equal(afterStop({ cpuSinceStopMs: 1_400, wallSinceStopMs: 5_600, ranBeforeMs: 5_600, limitMs }), 'kill');
  // Starved (less than a quarter as CPU time): waited for, up to the hard bound.
  t.equal(afterStop({ cpuSinceStopMs: 100, wallSinceStopMs: 12_000, ranBeforeMs: 8_000, limitMs: 3_000 }), 'wait');
  t.equal(afterStop({ cpuSinceStopMs: 100, wallSinceStopMs: stoppedHardBound({ limitMs: 3_000 }), ranBeforeMs: 8_000, limitMs: 3_000 }), 'kill');
});

t.test('property: a statement whose answer was ended is never followed past the hard bound, and never killed below the bounds', async () => {
  fc.assert(
    fc.property(fc.nat(10_000), fc.nat(200_000), fc.nat(120_000), fc.integer({ min: 100, max: 30_000 }), (cpu, wall, ran, limitMs) => {
      const v = afterStop({ cpuSinceStopMs: cpu, wallSinceStopMs: wall, ranBeforeMs: ran, limitMs });
      const bound = stoppedWallBound({ ranBeforeMs: ran, limitMs });
      const hard = stoppedHardBound({ limitMs });
      if (bound > Math.max(STOPPED_MIN_WALL_MS, limitMs) || bound < STOPPED_MIN_WALL_MS || hard < bound) return false;
      if (wall >= hard || cpu >= STOPPED_CPU_MS) return v === 'kill';
      if (wall < bound) return v === 'wait';
      return v === (cpu >= STARVED_SHARE * wall ? 'kill' : 'wait');
    }),
  );
});

t.test('the ledger: which statements have used a second of CPU time, and the threads working for them now', async (t) => {
  // 100 ticks a second (AGED_AT_CPU_MS of CPU time is 100 ticks).
  const ticks = new Map<number, number>([[1, 0], [2, 0], [3, 0]]);
  const of = (tid: number): number | null => ticks.get(tid) ?? null;
  const l = new CpuLedger();
  const lowered = (now: number): number[] => [...loweredThreads(l.threadUse(now))].filter(([, n]) => n !== null).map(([tid]) => tid).sort();
  l.baseline([1, 2, 3], of);
  l.record([{ tag: 'A', threads: [1, 2] }], of, [1, 2, 3], 0);
  ticks.set(1, 60).set(2, 39);
  l.record([{ tag: 'A', threads: [1, 2] }, { tag: 'B', threads: [3] }], of, [1, 2, 3], 10_000);
  t.same(lowered(10_000), [], '990 ms of CPU time, however long it ran: not yet');
  t.same(l.report(isLowered, 10_000), [{ tag: 'A', cpuMs: 990 }, { tag: 'B', cpuMs: 0 }]);
  ticks.set(2, 40);
  l.refresh(of, 10_100);
  t.same(lowered(10_100), [1, 2], "A's threads at a second of CPU time; B is young");
  t.same(l.report(isLowered, 10_100), [{ tag: 'A', cpuMs: 1_000, aged: true }, { tag: 'B', cpuMs: 0 }]);
  t.same(l.report(undefined, 10_100), [{ tag: 'A', cpuMs: 1_000 }, { tag: 'B', cpuMs: 0 }], 'not marked when the host does not lower threads');
  // Thread 2 goes on to B (A still lists it): it works for the young one now.
  l.record([{ tag: 'A', threads: [1, 2] }, { tag: 'B', threads: [3, 2] }], of, [1, 2, 3], 10_200);
  t.same(lowered(10_200), [1]);
  // A ends: none of its threads is aged any more; B ages in its turn (thread 3 did 100 ticks).
  ticks.set(3, 100);
  l.record([{ tag: 'B', threads: [3, 2] }], of, [1, 2, 3], 10_400);
  t.same(lowered(10_400), [2, 3]);
  l.idle(10_600);
  t.same(lowered(10_600), []);
});

t.test("the ledger: an organization is aged by its recent CPU time beside others', which halves every five seconds", async (t) => {
  t.equal(orgOfTag('stmt:12:Kx9_a'), 'Kx9_a');
  t.equal(orgOfTag('A'), 'A', 'a tag without an organization is one of its own');
  const ticks = new Map<number, number>([[1, 0], [2, 0], [3, 0], [4, 0]]);
  const of = (tid: number): number | null => ticks.get(tid) ?? null;
  const l = new CpuLedger();
  l.baseline([1, 2, 3, 4], of);
  // X runs short statements, two at a time, one after another; Y one statement of some seconds.
  let n = 0;
  let at = 0;
  const round = (): void => {
    const a = `stmt:${++n}:X`;
    const b = `stmt:${++n}:X`;
    l.record([{ tag: a, threads: [1] }, { tag: b, threads: [2] }, { tag: 'stmt:0:Y', threads: [3] }], of, [1, 2, 3, 4], (at += 100));
    ticks.set(1, ticks.get(1)! + 10).set(2, ticks.get(2)! + 10).set(3, ticks.get(3)! + 3);
    l.record([{ tag: a, threads: [1] }, { tag: b, threads: [2] }, { tag: 'stmt:0:Y', threads: [3] }], of, [1, 2, 3, 4], (at += 100));
  };
  for (let i = 0; i < 6; i++) round();
  // Each of X's statements used 100 ms; X as a whole about 1.2 s; Y's one statement 180 ms.
  const use = l.threadUse(at);
  t.ok(use.get(1)!.stmtMs <= 100 && use.get(1)!.orgMs >= 1_000, `X's statement ${use.get(1)!.stmtMs} ms, X ${use.get(1)!.orgMs.toFixed(0)} ms`);
  t.same(Object.fromEntries(loweredThreads(use)), { 1: AGED_NICE, 2: AGED_NICE, 3: null }, "X's threads are lowered as X, though none of its statements is aged; Y's is not");
  t.same(l.report(isLowered, at).filter((r) => r.aged).map((r) => r.tag), [`stmt:${n - 1}:X`, `stmt:${n}:X`], 'and reported as lowered');
  // Ten seconds later (two half-lives) X's time is a quarter: its statements are young again.
  t.ok(l.orgMs('X', at + 10_000) < 0.26 * l.orgMs('X', at) && l.orgMs('X', at + 10_000) > 0.24 * l.orgMs('X', at));
  t.same([...loweredThreads(l.threadUse(at + 10_000)).values()].filter((x) => x !== null), []);
  // Alone, an organization's time does not count: it kept nobody waiting.
  const z = new CpuLedger();
  z.baseline([1, 2, 3, 4], of);
  z.record([{ tag: 'stmt:1:Z', threads: [4] }], of, [1, 2, 3, 4], 0);
  ticks.set(4, ticks.get(4)! + 150);
  z.record([{ tag: 'stmt:1:Z', threads: [4] }], of, [1, 2, 3, 4], 100);
  t.same(z.threadUse(100).get(4), { stmtMs: 1_500, orgMs: 0 });
});

/** Threads with nice values, of which `own` are the host's and `locked` cannot be raised back (no CAP_SYS_NICE). */
function fakeThreads(nice: Record<number, number>, own: number[] = [], locked = false): NiceOps & { nice: Map<number, number> } {
  const m = new Map(Object.entries(nice).map(([k, v]) => [Number(k), v]));
  return {
    nice: m,
    get: (tid) => m.get(tid) ?? null,
    set: (tid, v) => {
      const now = m.get(tid);
      if (now === undefined || (locked && v < now)) return false;
      m.set(tid, v);
      return true;
    },
    own: (tid) => own.includes(tid),
  };
}

/** The nice value of each thread working for a statement that has used as much CPU time as given (ms), by itself. */
const levelsOf = (used: Map<number, number>): Map<number, number> => new Map([...used].map(([tid, ms]) => [tid, loweredNice({ stmtMs: ms, orgMs: 0 })!]));
/** Each thread of `tids` working for a statement that has used `ms` of CPU time. */
const usedBy = (tids: number[], ms = AGED_AT_CPU_MS): Map<number, number> => levelsOf(new Map(tids.map((tid) => [tid, ms])));

t.test('aging: threads working for aged statements are lowered, and put back once they are not', async (t) => {
  const ops = fakeThreads({ 1: 0, 2: 0, 3: 19, 4: 0, 5: 5, 6: 10 }, [4]);
  const a = new ThreadAging(ops);
  a.update(usedBy([1, 2, 3, 4, 5, 6]));
  t.same(Object.fromEntries(ops.nice), { 1: AGED_NICE, 2: AGED_NICE, 3: 19, 4: 0, 5: AGED_NICE, 6: AGED_NICE }, 'lowered; one already lower left alone; the host\'s own never');
  t.equal(a.size, 4);
  // Threads 2, 5 and 6 work for statements that are not aged now: put back; 3 and 4 are idle.
  a.update(new Map([...usedBy([1]), [2, null], [5, null], [6, null]]));
  t.same(Object.fromEntries(ops.nice), { 1: AGED_NICE, 2: 0, 3: 19, 4: 0, 5: 5, 6: 10 }, "put back to what each had (6: the engine's 10 for a crowded organization's statement)");
  // Thread 1's statement ended: it stays as it is until a statement that takes it is seen.
  a.update(new Map());
  t.equal(ops.nice.get(1), AGED_NICE, 'a thread whose statement ended is left lowered');
  t.equal(a.size, 1);
  // The engine set thread 1 elsewhere meanwhile (it took up a crowded organization's statement, at 10): left as it is.
  ops.nice.set(1, 10);
  a.update(new Map([[1, null]]));
  t.equal(ops.nice.get(1), 10);
  t.equal(a.size, 0);
  // A thread gone before it is put back is forgotten.
  a.update(usedBy([2]));
  ops.nice.delete(2);
  a.clear();
  t.equal(a.size, 0);
});

t.test('aging: the more CPU time a statement has used, the lower its threads', async (t) => {
  t.equal(agedNice(AGED_AT_CPU_MS - 1), null, 'not aged below a second');
  const levels = [1_000, 1_999, 2_000, 3_999, 4_000, 7_999, 8_000, 60_000].map((ms) => agedNice(ms));
  t.same(levels, [11, 11, 14, 14, 17, 17, 18, 18]);
  t.ok(levels.every((n) => n !== null && n > 10 && n < 19), "never the engine's own values (10, 19)");
  const ops = fakeThreads({ 1: 0, 2: 0, 3: 10 });
  const a = new ThreadAging(ops);
  a.update(levelsOf(new Map([[1, 1_200], [2, 4_500], [3, 2_100]])));
  t.same(Object.fromEntries(ops.nice), { 1: 11, 2: 17, 3: 14 }, 'each at its statement\'s level');
  // Thread 1's statement goes on; thread 2 now works for a younger (aged) statement.
  a.update(levelsOf(new Map([[1, 2_500], [2, 1_100], [3, 2_200]])));
  t.same(Object.fromEntries(ops.nice), { 1: 14, 2: 11, 3: 14 }, 'moved to the level of what each works for now');
  // The engine set thread 3 to 10 meanwhile (a crowded organization's statement): what it had is 10 now, not 0.
  ops.nice.set(3, 10);
  a.update(levelsOf(new Map([[1, 8_100], [2, 1_100], [3, 4_100]])));
  t.same(Object.fromEntries(ops.nice), { 1: 18, 2: 11, 3: 17 });
  a.clear();
  t.same(Object.fromEntries(ops.nice), { 1: 0, 2: 0, 3: 10 }, 'put back to what each had');
  t.equal(a.size, 0);
});

t.test('property: aging never raises a thread above the priority it had, sets each working thread to its level, leaves idle ones, and puts back every thread it lowered', async () => {
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: -5, max: 19 }), { minLength: 1, maxLength: 8 }),
      fc.array(fc.array(fc.tuple(fc.nat(7), fc.integer({ min: 0, max: 12_000 })), { maxLength: 8 }), { maxLength: 10 }),
      (nices, rounds) => {
        const start = Object.fromEntries(nices.map((n, i) => [i, n]));
        const ops = fakeThreads(start, [0]);
        const a = new ThreadAging(ops);
        for (const r of rounds) {
          // The threads working for a running statement, with its CPU time; the others are idle.
          const working = new Map(r.filter(([tid]) => tid < nices.length));
          const before = new Map(ops.nice);
          a.update(new Map([...working].map(([tid, ms]) => [tid, loweredNice({ stmtMs: ms, orgMs: 0 })])));
          for (const [tid, n] of ops.nice) {
            if (n < start[tid]!) return false;
            if (!working.has(tid)) {
              if (n !== before.get(tid)) return false;
              continue;
            }
            const level = agedNice(working.get(tid)!);
            if (level !== null && tid !== 0 && start[tid]! < AGED_NICE && n !== level) return false;
            if (level === null && n !== start[tid]) return false;
          }
        }
        a.clear();
        return [...ops.nice].every(([tid, n]) => n === start[tid]);
      },
    ),
  );
});
