/**
 * A statement blamed on its own organization at its deadline has its answer ended first without a
 * kill (the engine's own time limit stops it at its next block), and the host is killed for its organization only when it
 * keeps working (src/store/hosted/index.ts,
 * `followStopped`; blame.ts, `afterStop`), through the real HTTP API:
 *
 * - one block sorting a 3,000,000-element array, past a 300 ms limit, ends when its block does:
 *   it answers 408, and no kill is made (its organization is not quarantined, and the other
 *   organization's statements running meanwhile are not ended);
 * - a runaway (one block sorting 20,000,000 elements) whose answer was ended keeps working: the host is
 *   killed for its organization.
 */
import t from 'tap';
import { createOrg, embeddedOnly, hostKills, http, logLines, sleep, startService, type TestOrg } from '../helpers/service.js';

const TIMEOUT_MS = 300;
const RUNAWAY_TIMEOUT_MS = 3_000;
const BIG = { burst: 1_000_000_000, refillPerSecond: 1_000_000_000, analyticsConcurrency: 4 };

/**
 * One block sorting 3,000,000 elements made in the statement itself: the engine works it out while
 * it analyses the statement (constant folding), one block of work its own time limit does not
 * stop, about 1.2 s of CPU time alone on a 2-core VM. The deadline's judgement comes at the
 * 300 ms limit + the watchdog's 500 ms: the work is still under way then, with less left of it
 * than the 1.5 s of CPU time a statement whose answer was ended may still use, however the CPU
 * is shared. (Sorting 1,400,000 elements gathered from rows took 0.3 s alone here: on a quiet
 * machine it ended before the judgement, and under another test file's load the engine's own
 * limit ended it while it gathered its rows; either way nothing was judged.)
 */
const SHORT_BLOCK = `SELECT length(arraySort(x -> hex(sipHash64(x)), arrayEnumerate(arrayConcat(${Array(3).fill('arrayFlatten(arrayWithConstant(1000, range(1000)))').join(', ')})))) AS n`;
/** One block sorting 20,000,000 elements: 10-16 s of engine work alone. */
const RUNAWAY =
  'SELECT length(arraySort(x -> hex(sipHash64(x)), groupArray(a * 1000000 + b * 1000 + c))) AS n ' +
  'FROM (SELECT arrayJoin(range(1000)) AS a, arrayJoin(range(1, 1001)) AS b, arrayJoin(range(2, 22)) AS c)';
/** The other organization's statements: many blocks, well within the limit (of each subtest). */
const OTHER = 'SELECT sum(cityHash64(number)) AS n FROM numbers(50000000)';
const OTHER_SMALL = 'SELECT sum(cityHash64(number)) AS n FROM numbers(1000000)';

/** What the service logs when a statement past its deadline is blamed on its own organization (starved: at its second deadline). */
const BLAMED_OWN = ['analytics statement past its deadline: blamed on its own organization', "analytics statement past its deadline, starved with no organization's work standing out: it cannot go on"];

function about(lines: Record<string, unknown>[], org: TestOrg): Record<string, unknown>[] {
  return lines.filter((l) => JSON.stringify(l).includes(org.id));
}

/** Runs `other`'s statements two at a time until `until` settles; their answers. */
async function meanwhile(svc: { url: string }, other: TestOrg, until: Promise<unknown>, q = OTHER): Promise<number[]> {
  let on = true;
  void until.finally(() => (on = false));
  const statuses: number[] = [];
  await Promise.all(
    [0, 1].map(async () => {
      while (on) {
        const r = await http(svc.url, 'POST', '/api/v2/analytics/query', { token: other.live, body: { query: q } });
        statuses.push(r.status);
      }
    }),
  );
  return statuses;
}

t.test('a statement past its deadline that ends at its next block costs no kill while another organization works', embeddedOnly('the engine host is killed at a deadline'), async (t) => {
  const { svc } = await startService(t, 'stop-first', { ANALYTICS_TIMEOUT_MS: String(TIMEOUT_MS) });
  const org = await createOrg(svc.url, BIG);
  const other = await createOrg(svc.url, BIG);
  const query = (o: TestOrg, q: string) => http(svc.url, 'POST', '/api/v2/analytics/query', { token: o.live, body: { query: q } });
  t.equal((await query(other, OTHER_SMALL)).status, 200, 'warm');

  const answers: { status: number; code?: string }[] = [];
  // A few statements one after another: each is judged at its deadline while the other
  // organization's statements run.
  const done = (async () => {
    await sleep(300);
    for (let i = 0; i < 4; i++) {
      const r = await query(org, SHORT_BLOCK);
      answers.push({ status: r.status, code: r.body?.code });
    }
  })();
  const otherStatuses = await meanwhile(svc, other, done, OTHER_SMALL);
  await done;
  const lines = logLines(svc);
  const judged = about(lines, org).filter((l) => BLAMED_OWN.includes(String(l.msg)));
  const kills = lines.filter((l) => l.msg === 'killing the engine host');
  t.comment(`answers ${answers.map((a) => a.status).join(' ')}; judged ${judged.length}; kills ${kills.length}; other ${otherStatuses.join(' ')}`);
  for (const a of answers) t.ok(a.status === 408 && a.code === 'QUERY_TIMEOUT', `past its limit: 408 (${a.status} ${a.code})`);
  // What this test is about happened: a statement was blamed on its own organization at its deadline.
  t.ok(judged.length >= 1, `${judged.length} statement(s) blamed on their own organization at the deadline`);
  t.same(kills.map((l) => l.reason), [], 'no kill of the engine host: each statement ended at the end of its block');
  // Its statements were never ended by a kill (none was made); at a 300 ms limit on a busy
  // machine, one may pass its own deadline.
  t.ok(otherStatuses.length >= 2 && otherStatuses.every((s) => s === 200 || s === 408), `the other organization's statements answered 200, or 408 at their own deadline (${otherStatuses.join(' ')})`);
  t.ok(otherStatuses.filter((s) => s === 200).length >= otherStatuses.length / 2, 'most of them 200');
  // No kill, so its organization is not in quarantine (only a kill puts it there).
});

t.test('a runaway whose answer was ended keeps working: the host is killed for its organization', embeddedOnly('the engine host is killed at a deadline'), async (t) => {
  // Long enough for its 20,000,000 rows to be gathered (many blocks, which the engine's own time
  // limit would stop) before its deadline: the deadline finds it in its one sorting block.
  const { svc } = await startService(t, 'stop-first-runaway', { ANALYTICS_TIMEOUT_MS: String(RUNAWAY_TIMEOUT_MS) });
  const org = await createOrg(svc.url, BIG);
  const other = await createOrg(svc.url, BIG);
  const query = (o: TestOrg, q: string) => http(svc.url, 'POST', '/api/v2/analytics/query', { token: o.live, body: { query: q } });
  t.equal((await query(other, OTHER)).status, 200, 'warm');

  const sent = Date.now();
  const run = (async () => {
    await sleep(300);
    return query(org, RUNAWAY);
  })();
  const otherStatuses = await meanwhile(svc, other, run);
  const r = await run;
  t.same([r.status, r.body?.code], [408, 'QUERY_TIMEOUT'], 'the runaway answers 408');
  t.ok(Date.now() - sent < 30_000, 'at its deadline');
  // The kill comes once it has used more CPU time after its answer was ended than a small
  // statement's whole work; on a machine busy enough to starve it, by the bound for starved
  // statements at the latest (three time limits + 5 s after its answer was ended).
  const lines = await hostKills(svc, org.id, 30_000);
  t.equal(lines.length, 1, 'the host was killed for its organization');
  t.match(String(lines[0]?.reason), /kept working after its answer was ended/, 'after its answer was ended and kept working');
  t.ok(about(logLines(svc), org).some((l) => BLAMED_OWN.includes(String(l.msg))), 'blamed on its own organization at its deadline (or, starved, at the next one)');
  t.ok(otherStatuses.every((s) => s === 200), `the other organization's statements answered 200 (${otherStatuses.join(' ')})`);
});
