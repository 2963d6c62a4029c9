/**
 * An organization is aged as a whole as well as statement by statement
 * (src/store/engine-host/aging.ts): through the real HTTP API, three organizations each keep
 * four short statements running (a sort of 2,000,000 elements, 0.1–0.3 s each alone): their
 * engine threads are lowered although none of their statements runs long enough to age by
 * itself; and another organization's statement of about two seconds' work, run again and
 * again, answers its result beside them. Aged by its own CPU time only, the long statement was
 * lowered below statements each too short to age (none of the crowd's threads ever was) and
 * answered 408 in most runs with a 5–7 s limit on a quiet machine.
 */
import t from 'tap';
import { createOrg, embeddedOnly, http, sleep, startService } from '../helpers/service.js';
import { AGED_NICE } from '../../src/store/engine-host/aging.js';
import { childNamed, threadsOf } from '../helpers/threads.js';

/** The nice values of the threads of the service's engine host (its child named billing-engine-host). */
function hostNices(servicePid: number): number[] {
  const host = childNamed(servicePid, 'billing-engine');
  return host === null ? [] : threadsOf(host).map((x) => x.nice);
}

/**
 * Room above the long statement's two seconds (about 4 s beside the crowd on a quiet machine)
 * for another test file's work on the machine: the suite runs two at once, and beside the
 * runaways of analytics-blame, in an engine host of their own, it took 7–13 s.
 */
const TIMEOUT_MS = 20_000;

/** One block sorting 60,000,000 hashes: about two seconds of engine work alone on a 2-core VM. */
const LONG =
  'SELECT length(arraySort(groupArray(cityHash64(a * 100000 + b * 100 + c)))) AS n ' +
  'FROM (SELECT arrayJoin(range(1000)) AS a, arrayJoin(range(1, 1001)) AS b, arrayJoin(range(2, 62)) AS c)';
/** One block sorting 2,000,000 hashes: 0.1–0.3 s alone. */
const SHORT =
  'SELECT length(arraySort(groupArray(cityHash64(a * 10000 + b * 10 + c)))) AS n ' +
  'FROM (SELECT arrayJoin(range(1000)) AS a, arrayJoin(range(1, 1001)) AS b, arrayJoin(range(2, 4)) AS c)';

const BIG = { burst: 1_000_000_000, refillPerSecond: 1_000_000_000, analyticsConcurrency: 4 };

t.test("a statement of seconds' work answers beside other organizations' many short statements at once", embeddedOnly('the engine host sets its threads\' priorities'), async (t) => {
  const { svc } = await startService(t, 'crowds', { ANALYTICS_TIMEOUT_MS: String(TIMEOUT_MS) });
  const [one, a, b, c] = [await createOrg(svc.url, BIG), await createOrg(svc.url, BIG), await createOrg(svc.url, BIG), await createOrg(svc.url, BIG)];
  const query = (key: string, q: string) => http(svc.url, 'POST', '/api/v2/analytics/query', { token: key, body: { query: q } });
  const alone = await query(one.live, LONG);
  t.same([alone.status, alone.body.rows], [200, [['60000000']]], 'the long statement alone');

  let crowding = true;
  const crowd: { status: number; code?: string }[] = [];
  const loops = [a, b, c].flatMap((org) =>
    [0, 1, 2, 3].map(async () => {
      while (crowding) {
        const r = await query(org.live, SHORT);
        crowd.push({ status: r.status, code: r.body?.code });
        if (r.status !== 200) await sleep(100);
      }
    }),
  );
  // Only the crowd runs: its threads are lowered as its organizations' CPU time beside each other grows.
  let lowered = false;
  for (const end = Date.now() + 15_000; !lowered && Date.now() < end; await sleep(100)) lowered = hostNices(svc.proc!.pid!).some((n) => n >= AGED_NICE && n < 19);
  t.ok(lowered, `the crowd's engine threads are lowered (nice ${AGED_NICE} or more) though each of its statements is short`);
  const answers: { status: number; ms: number; code?: string }[] = [];
  for (let i = 0; i < 3; i++) {
    const sent = Date.now();
    const r = await query(one.live, LONG);
    answers.push({ status: r.status, ms: Date.now() - sent, code: r.body?.code });
  }
  crowding = false;
  await Promise.all(loops);
  t.comment(`the long statement beside them: ${answers.map((x) => `${x.status} in ${x.ms} ms`).join(', ')}; the short ones: ${crowd.length}, ${crowd.filter((x) => x.status === 200).length} answered 200`);
  t.same(answers.map((x) => x.status), [200, 200, 200], 'every long statement answered its result');
  t.ok(crowd.filter((x) => x.status === 200).length > 20, 'the short statements ran too');
  t.same(crowd.filter((x) => x.status !== 200 && x.code !== 'CONCURRENCY_LIMIT_EXCEEDED'), [], 'and none of them failed (at most waited behind their own)');
});
