/**
 * One organization's analytics work never fails another's, through the real HTTP API:
 *
 * - statements the engine cannot stop (one block sorting a 20-million-element array) run
 *   past their deadline and make the service end the engine host's work; another
 *   organization's statements, sent all the while, all answer their results, and the
 *   runaways answer 408;
 * - a result far larger in bytes than the byte cap (within the row and memory limits)
 *   answers within the cap, flagged, while the service's memory and event loop stay bounded.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { createOrg, hostKills, http, logLines, sleep, startService, waitFor } from '../helpers/service.js';

// Room for the other organization's statements on a loaded 2-core machine (the suite runs two
// files at once) while the runaways take the CPU; the runaways last far longer (10-16 s each
// alone on a 2-core VM).
const TIMEOUT_MS = 7_000;

/**
 * Sorts one 20,000,000-element array by hashed keys: the engine's time limit is not checked
 * inside it. (Sorted by the numbers' own text, the nearly sorted keys take 2.5 s alone on a
 * quiet machine, within the deadline: not a runaway.)
 */
const RUNAWAY =
  'SELECT length(arraySort(x -> hex(sipHash64(x)), groupArray(a * 1000000 + b * 1000 + c))) ' +
  'FROM (SELECT arrayJoin(range(1000)) AS a, arrayJoin(range(1, 1001)) AS b, arrayJoin(range(2, 22)) AS c)';

const LEGIT: [string, unknown[][]][] = [
  ['SELECT 42 AS x', [[42]]],
  ['SELECT count() AS n FROM fact_signal', [['0']]],
  ['SELECT sum(n) AS s FROM (SELECT arrayJoin(range(1000)) AS n)', [['499500']]],
  // About 0.2 s of engine work alone: in flight when a kill comes.
  ['SELECT count() AS n FROM (SELECT arrayJoin(range(1000)) AS a, arrayJoin(range(1, 1001)) AS b, arrayJoin(range(2, 4)) AS c) WHERE sipHash64(a, b, c) % 7 = 1', [['285703']]],
];

t.test("a runaway statement of one organization fails no statement of another", async (t) => {
  const { svc } = await startService(t, 'tenancy-runaway', { ANALYTICS_TIMEOUT_MS: String(TIMEOUT_MS) });
  const big = { burst: 1_000_000_000, refillPerSecond: 1_000_000_000 };
  const attacker = await createOrg(svc.url, { ...big, analyticsConcurrency: 4 });
  const victim = await createOrg(svc.url, { ...big, analyticsConcurrency: 4 });
  const query = (key: string, q: string) => http(svc.url, 'POST', '/api/v2/analytics/query', { token: key, body: { query: q } });

  const victimAnswers: { q: string; status: number; body: unknown; ms: number }[] = [];
  let attacking = true;
  // Three loops of the victim's legitimate statements for the whole attack and a little after.
  const victimLoops = [0, 1, 2].map(async (lane) => {
    for (let i = lane; attacking; i++) {
      const [q, rows] = LEGIT[i % LEGIT.length]!;
      const sent = Date.now();
      const r = await query(victim.live, q);
      victimAnswers.push({ q, status: r.status, body: r.status === 200 ? (r.body.rows as unknown) : r.body, ms: Date.now() - sent });
      if (r.status === 200) t.same(r.body.rows, rows, `${q}: its own result`);
      await sleep(100);
    }
  });

  // Two waves of the attacker's four runaways: one second apart, then all at once.
  const attackerAnswers: { status: number; body: unknown; ms: number }[] = [];
  const runaway = async (): Promise<void> => {
    const sent = Date.now();
    const r = await query(attacker.live, RUNAWAY);
    attackerAnswers.push({ status: r.status, body: r.body, ms: Date.now() - sent });
  };
  const first: Promise<void>[] = [];
  for (let i = 0; i < 4; i++) {
    first.push(runaway());
    await sleep(1_000);
  }
  await Promise.all(first);
  await Promise.all([0, 1, 2, 3].map(() => runaway()));
  await sleep(2_000);
  attacking = false;
  await Promise.all(victimLoops);

  // A runaway whose answer was ended has the host killed once it keeps working (starved, up to
  // three time limits + 5 s after its answer).
  await hostKills(svc, attacker.id, 30_000);
  const kills = logLines(svc, 'killing the engine host').length;
  t.ok(kills >= 1, `the engine host's work was ended ${kills} time(s) (the runaways cannot be stopped any other way)`);
  const attackerKills = logLines(svc, 'killing the engine host').filter((l) => JSON.stringify(l).includes(attacker.id)).length;
  t.ok(attackerKills <= 2, `the runaways' organization ended it at most once a wave (${attackerKills}): its statements that waited while one of its own caused a kill do not run to a kill of their own`);
  t.ok(victimAnswers.length >= 10, `${victimAnswers.length} statements of the other organization were sent during the attack`);
  const failed = victimAnswers.filter((a) => a.status !== 200);
  t.same(failed, [], 'every statement of the other organization answered 200');
  const slowest = Math.max(...victimAnswers.map((a) => a.ms));
  // Its deadline, plus what the kills cost it given back (at most one more time limit).
  t.ok(slowest < 2 * TIMEOUT_MS + 1_000, `the other organization's slowest answer took ${slowest} ms`);
  t.equal(attackerAnswers.length, 8);
  // A runaway answers 408 at its deadline; once its organization is in quarantine (after its
  // first kill) its others wait for their turn, one at a time, holding no place: that wait is
  // not charged to their time limit and has its own bound (the limit + 1 s), at which the
  // organization, still holding its one place, is answered 429 CONCURRENCY_LIMIT_EXCEEDED. One
  // that had waited while its organization's running statement caused a kill answers 408 at
  // once, without running (it would end everyone's work again at its own deadline).
  for (const a of attackerAnswers) {
    const code = (a.body as { code?: string }).code;
    t.ok((a.status === 408 && code === 'QUERY_TIMEOUT') || (a.status === 429 && code === 'CONCURRENCY_LIMIT_EXCEEDED'), `a runaway answers 408, or 429 after waiting behind its own: ${JSON.stringify(a.body)}`);
    t.ok(a.ms <= 2 * TIMEOUT_MS + 2_500, `…after ${a.ms} ms (wait bound ${TIMEOUT_MS + 1_000} ms, then deadline ${TIMEOUT_MS} ms)`);
  }
  t.ok(attackerAnswers.filter((a) => a.status === 408).length >= 2, 'runaways of each wave ran to their deadline (or were ended with the work they shared)');
  t.comment(`kills: ${kills}; victim answers: ${victimAnswers.length}, slowest ${slowest} ms; attacker answers after ${attackerAnswers.map((a) => a.ms).join(', ')} ms`);
  // Afterwards both organizations are served: the attacker once its last runaway is gone from
  // the engine (answered 408 without a kill, a statement holds its place to the end of its
  // block, and a quarantined organization runs one at a time: 429 until then).
  for (const key of [attacker.live, victim.live]) {
    const r = await waitFor(() => query(key, 'SELECT 42 AS x'), (x) => x.status !== 429, 40_000);
    t.equal(r.status, 200);
    t.same(r.body.rows, [[42]]);
  }
});

/** Peak and current resident memory of a process, bytes (Linux). */
function memory(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)![1]) * 1024;
  return { rss: kb('VmRSS'), peak: kb('VmHWM') };
}

t.test('a result far larger than the byte cap answers within it, flagged, and the service stays small and responsive', async (t) => {
  const { svc } = await startService(t, 'tenancy-bytes');
  const org = await createOrg(svc.url);
  const pid = svc.proc!.pid!;
  // 10,000 rows (the row limit) of 500 strings of 40 characters: ~215 MB of JSON.
  const HUGE =
    "SELECT a * 100 + b AS n, arrayWithConstant(500, repeat('abcdefghij', 4)) AS s FROM (SELECT arrayJoin(range(100)) AS a, arrayJoin(range(1, 101)) AS b)";
  const warm = await http(svc.url, 'POST', '/api/v2/analytics/query', { token: org.live, body: { query: 'SELECT 1' } });
  t.equal(warm.status, 200);
  const before = memory(pid);

  // A probe of the event loop: the service's own /healthz, every 20 ms, while two huge results are made and sent.
  let probing = true;
  let worstProbe = 0;
  const probe = (async () => {
    while (probing) {
      const sent = performance.now();
      await http(svc.url, 'GET', '/healthz');
      worstProbe = Math.max(worstProbe, performance.now() - sent);
      await sleep(20);
    }
  })();
  const raw = await Promise.all(
    [0, 1].map(async () => {
      const res = await fetch(`${svc.url}/api/v2/analytics/query`, {
        method: 'POST',
        headers: { authorization: `Bearer ${org.live}`, 'content-type': 'application/json' },
        body: JSON.stringify({ query: HUGE }),
      });
      return { status: res.status, buf: Buffer.from(await res.arrayBuffer()) };
    }),
  );
  probing = false;
  await probe;
  const after = memory(pid);
  // Parsed only now: parsing in this process while probing would delay the probe itself.
  const answers = raw.map((a) => ({ status: a.status, bytes: a.buf.length, body: JSON.parse(a.buf.toString('utf8')) as { columns: unknown[]; rows: [string, string[]][]; meta: Record<string, unknown> } }));

  for (const a of answers) {
    t.equal(a.status, 200, a.status === 200 ? 'answered' : JSON.stringify(a.body).slice(0, 400));
    t.ok(a.bytes <= 16 * 1024 * 1024 + 4_096, `the answer is ${a.bytes} bytes (cap 16 MiB of rows)`);
    t.equal(a.body.meta.truncated, true, 'flagged as truncated');
    t.equal(a.body.meta.truncatedBy, 'bytes', 'by the byte cap');
    t.equal(a.body.meta.limit, 16 * 1024 * 1024, 'naming the limit');
    t.ok(a.body.rows.length > 0 && a.body.rows.length < 10_000, `${a.body.rows.length} whole rows`);
    t.equal(a.body.meta.rowCount, a.body.rows.length);
    t.equal(new Set(a.body.rows.map((r) => r[0])).size, a.body.rows.length, 'distinct rows');
    t.ok(
      a.body.rows.every((r) => r[1].length === 500 && r[1].every((x) => x === 'abcdefghij'.repeat(4))),
      'each row whole',
    );
  }
  const grewMb = (after.peak - before.rss) / 1024 / 1024;
  t.comment(`service RSS ${Math.round(before.rss / 1048576)} MB before, peak ${Math.round(after.peak / 1048576)} MB; worst /healthz during the results ${Math.round(worstProbe)} ms`);
  t.ok(grewMb < 300, `the service's peak memory grew by ${Math.round(grewMb)} MB (bound 300 MB; buffered whole, two ~215 MB results grow it by more than a gigabyte)`);
  t.ok(worstProbe < 1_000, `the slowest /healthz during the results took ${Math.round(worstProbe)} ms (bound 1 s)`);
  const r = await http(svc.url, 'POST', '/api/v2/analytics/query', { token: org.live, body: { query: 'SELECT 42 AS x' } });
  t.same(r.body.rows, [[42]], 'and it serves the next query');
  t.same(r.body.meta.truncated, false);
});
