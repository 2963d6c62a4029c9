/**
 * No small set of organizations can take every place in the analytics engine, and waiting for
 * a place is not charged to a statement's time limit, through the real HTTP API:
 *
 * - two, then three organizations each sending four long statements (their whole concurrency)
 *   leave a place for another organization's `SELECT 1`, which answers at once;
 * - an organization in quarantine (its statement made the engine host be killed) runs one
 *   statement at a time, its others waiting without holding a place;
 * - a statement that waited for a place almost a whole time limit still has its whole time
 *   limit to run.
 */
import t from 'tap';
import type { Test } from 'tap';
import { createOrg, hostKills, http, logLines, sleep, startService, type ServiceProcess } from '../helpers/service.js';

/**
 * Long, and stopped by the engine's own time limit (it checks it between blocks of the
 * numbers it generates): 10⁹ rows hashed as text, far past the time limits below.
 */
const LONG = 'SELECT count() AS n FROM numbers(1000000000) WHERE sipHash64(toString(number)) % 7 = 1';

/** One block sorting a 20,000,000-element array: the engine cannot stop it, so its deadline ends the host's work. */
const RUNAWAY =
  'SELECT length(arraySort(x -> hex(sipHash64(x)), groupArray(a * 1000000 + b * 1000 + c))) ' +
  'FROM (SELECT arrayJoin(range(1000)) AS a, arrayJoin(range(1, 1001)) AS b, arrayJoin(range(2, 22)) AS c)';

/** Far below the time limits used here; without the reserve, such a query waits for a long statement to end. */
const PROMPT_MS = 2_500;

const BIG = { burst: 1_000_000_000, refillPerSecond: 1_000_000_000, analyticsConcurrency: 4 };

type Answer = { status: number; code?: string; ms: number };

function query(svc: ServiceProcess, key: string, q: string): Promise<Answer & { body: any }> {
  const sent = Date.now();
  return http(svc.url, 'POST', '/api/v2/analytics/query', { token: key, body: { query: q } }).then((r) => ({ status: r.status, code: r.body?.code, body: r.body, ms: Date.now() - sent }));
}

/** Three `SELECT 1` one after another: each answers 200 within PROMPT_MS. */
async function victimAnswersPromptly(t: Test, svc: ServiceProcess, key: string, what: string): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < 3; i++) {
    const r = await query(svc, key, `SELECT ${i + 1} AS x`);
    t.equal(r.status, 200, `${what}: another organization's SELECT ${i + 1} answers 200 (${JSON.stringify(r.body).slice(0, 200)})`);
    t.same(r.body.rows, [[i + 1]]);
    times.push(r.ms);
    await sleep(300);
  }
  t.ok(Math.max(...times) < PROMPT_MS, `${what}: answered in ${times.join(', ')} ms (bound ${PROMPT_MS} ms)`);
  return times;
}

t.test('two or three organizations running long statements leave a place for another organization', async (t) => {
  const TIMEOUT_MS = 8_000;
  const { svc } = await startService(t, 'fair-share', { ANALYTICS_TIMEOUT_MS: String(TIMEOUT_MS) });
  const attackers = [await createOrg(svc.url, BIG), await createOrg(svc.url, BIG), await createOrg(svc.url, BIG)];
  const victim = await createOrg(svc.url, BIG);
  t.equal((await query(svc, victim.live, 'SELECT 0 AS x')).status, 200, 'warm');

  for (const n of [2, 3]) {
    const sent = attackers.slice(0, n).flatMap((a) => [0, 1, 2, 3].map(() => query(svc, a.live, LONG)));
    // Long enough for every long statement to have its place (or its turn) in the engine.
    await sleep(1_000);
    await victimAnswersPromptly(t, svc, victim.live, `${n} organizations × 4 long statements`);
    const answers = await Promise.all(sent);
    // Each long statement either ran to its time limit (408) or waited its whole bound (the
    // time limit + 1 s) for a place while its organization held others (429
    // CONCURRENCY_LIMIT_EXCEEDED).
    for (const a of answers) t.ok((a.status === 408 && a.code === 'QUERY_TIMEOUT') || (a.status === 429 && a.code === 'CONCURRENCY_LIMIT_EXCEEDED'), `a long statement answered ${a.status} ${a.code} after ${a.ms} ms`);
    t.ok(answers.some((a) => a.status === 408), 'long statements ran to their time limit');
    t.ok(Math.max(...answers.map((a) => a.ms)) <= 2 * TIMEOUT_MS + 2_000, `each answered by its wait bound plus its time limit (+ 1 s): slowest ${Math.max(...answers.map((a) => a.ms))} ms`);
    t.comment(`${n} organizations: long statements answered ${answers.map((a) => `${a.status}@${a.ms}`).join(' ')}`);
  }
  // The engine stops them itself between blocks; on a machine loaded far past its cores a
  // block can take past the grace after the deadline, and the host is killed instead.
  t.comment(`engine host kills: ${logLines(svc, 'killing the engine host').length}`);
});

t.test("a quarantined organization's waiting statements hold no place", async (t) => {
  const TIMEOUT_MS = 5_000;
  const { svc } = await startService(t, 'fair-quarantine', { ANALYTICS_TIMEOUT_MS: String(TIMEOUT_MS) });
  const offender = await createOrg(svc.url, BIG);
  const other = await createOrg(svc.url, BIG);
  const victim = await createOrg(svc.url, BIG);

  const runaway = await query(svc, offender.live, RUNAWAY);
  t.equal(runaway.status, 408, `the runaway answers 408 (${JSON.stringify(runaway.body)})`);
  t.ok((await hostKills(svc, offender.id)).length >= 1, 'it kept working after its answer was ended: the host’s work was ended, and its organization is in quarantine');
  // The next host generation's first statement pays for its start; not what is measured here.
  t.equal((await query(svc, victim.live, 'SELECT 0 AS x')).status, 200, 'warm');

  // The offender's four statements (one runs, three wait) and another organization's four.
  const sent = [offender, other].flatMap((o) => [0, 1, 2, 3].map(() => query(svc, o.live, LONG).then((a) => ({ ...a, org: o === offender ? 'offender' : 'other' }))));
  await sleep(1_000);
  await victimAnswersPromptly(t, svc, victim.live, 'a quarantined organization and another, 4 long statements each');
  const answers = await Promise.all(sent);
  const offenders = answers.filter((a) => a.org === 'offender');
  for (const a of answers) t.ok([408, 429].includes(a.status), `${a.org}: ${a.status} ${a.code} after ${a.ms} ms`);
  // One at a time: the first runs to its limit while the others wait; the second starts when
  // the first has ended, and the last two have waited their whole bound by then (429). Run
  // side by side, all four would answer 408 together.
  const ran = offenders.filter((a) => a.status === 408).map((a) => a.ms).sort((x, y) => x - y);
  t.ok(ran.length >= 1 && ran.length <= 2, `the quarantined organization ran ${ran.length} of its four statements (${offenders.map((a) => `${a.status}@${a.ms}`).join(' ')})`);
  if (ran.length === 2) t.ok(ran[1]! - ran[0]! >= TIMEOUT_MS - 500, `one after the other: 408 after ${ran[0]} ms, then after ${ran[1]} ms`);
  t.comment(`answers: ${answers.map((a) => `${a.org} ${a.status}@${a.ms}`).join(', ')}`);
});

t.test("waiting for a place is not charged to the statement's time limit", async (t) => {
  const TIMEOUT_MS = 8_000;
  // Two places: one organization's statement and another's fill them.
  const { svc } = await startService(t, 'fair-wait', { ANALYTICS_TIMEOUT_MS: String(TIMEOUT_MS), ANALYTICS_ENGINE_SESSIONS: '2' });
  const [a, b, victim] = [await createOrg(svc.url, BIG), await createOrg(svc.url, BIG), await createOrg(svc.url, BIG)];
  // About half a second of engine work alone on a quiet machine (1–1.5 s at a load of 8 on
  // two cores): more than the time a wait charged to the limit would leave it.
  const MEDIUM = 'SELECT count() AS n FROM numbers(20000000) WHERE sipHash64(toString(number)) % 7 = 1';
  t.equal((await query(svc, victim.live, 'SELECT 0 AS x')).status, 200, 'warm');
  const alone = await query(svc, victim.live, MEDIUM);
  t.equal(alone.status, 200, `alone: ${alone.ms} ms`);
  const expected = alone.body.rows;

  const long = [query(svc, a.live, LONG), query(svc, b.live, LONG)];
  await sleep(500);
  const waited = await query(svc, victim.live, MEDIUM);
  t.equal(waited.status, 200, `after waiting for a place it still ran to its result (${waited.ms} ms; ${JSON.stringify(waited.body).slice(0, 300)})`);
  t.same(waited.body.rows, expected);
  t.ok(waited.ms >= TIMEOUT_MS - 1_500, `it did wait for a place: answered after ${waited.ms} ms`);
  t.ok(waited.ms <= 2 * TIMEOUT_MS + 1_000, 'within its wait bound plus its time limit (+ 1 s)');
  for (const r of await Promise.all(long)) t.equal(r.status, 408, `a long statement answers 408 after ${r.ms} ms`);
  t.comment(`medium alone ${alone.ms} ms; after the wait ${waited.ms} ms in all, ${waited.body.meta?.elapsedMs} ms in the engine`);
});
