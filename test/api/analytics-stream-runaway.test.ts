/**
 * A statement whose answer has begun (its output streamed from the engine host) can still run
 * past its deadline in the engine: a block the engine cannot stop (one sort of a huge array)
 * after the first megabytes. When its answer is ended at the deadline, the host cancels the
 * statement only at its next block; the service waits for the host's CPU ledger to show it
 * ended, and kills the host for its organization when it still runs past its deadline + 1 s.
 * Without that, such a statement went on in the host with its slot given back, as long as the
 * block took.
 */
import t from 'tap';
import { createOrg, embeddedOnly, http, logLines, sleep, startService } from '../helpers/service.js';

/** 1.2 MB at once (the answer begins; fewer rows than the 10,000 the result is cut at), then one block sorting a 20,000,000-element array. */
const RUNAWAY =
  "SELECT x FROM (SELECT concat(repeat('a', 100), repeat('b', 100)) AS x FROM numbers(6000)) UNION ALL " +
  'SELECT toString(length(arraySort(y -> hex(sipHash64(y)), groupArray(a * 1000000 + b * 1000 + c)))) AS x ' +
  'FROM (SELECT arrayJoin(range(1000)) AS a, arrayJoin(range(1, 1001)) AS b, arrayJoin(range(2, 22)) AS c)';

t.test('a statement running on in the engine after its answer was ended is killed at its deadline', embeddedOnly('the engine host is killed at a deadline'), async (t) => {
  // Long enough for the answer to begin before the deadline on a machine running another test
  // file (otherwise the deadline finds the statement before its answer, the case of the other tests).
  const { svc } = await startService(t, 'stream-runaway', { ANALYTICS_TIMEOUT_MS: '3000' });
  const attacker = await createOrg(svc.url);
  const other = await createOrg(svc.url);
  const sent = Date.now();
  const res = await fetch(`${svc.url}/api/v2/analytics/query`, {
    method: 'POST',
    headers: { authorization: `Bearer ${attacker.live}`, 'content-type': 'application/json' },
    body: JSON.stringify({ query: RUNAWAY }),
  });
  const outcome = await res.text().then(
    (text) => `${res.status} with ${text.length} characters`,
    (err: unknown) => `${res.status}, the body broken off (${err instanceof Error ? err.message : String(err)})`,
  );
  t.comment(`the runaway: ${outcome} after ${Date.now() - sent} ms`);
  t.equal(res.status, 200, 'its answer began before its deadline (what this test is about)');
  t.notOk(res.status === 200 && !outcome.includes('broken off'), 'no complete result');
  // The kill comes by the deadline + 1 s (+ a ledger read); a run of the block alone takes 10 s or more.
  let kills: Record<string, unknown>[] = [];
  for (let i = 0; i < 40 && kills.length === 0; i++) {
    await sleep(250);
    kills = logLines(svc, 'killing the engine host').filter((l) => String(l.reason).includes(`after its answer was ended (organization ${attacker.id})`));
  }
  t.comment(`kills: ${JSON.stringify(logLines(svc, 'killing the engine host').map((l) => l.reason))}`);
  t.equal(kills.length, 1, `the host was killed for the organization ${Date.now() - sent} ms after the statement was sent`);
  const after = await http(svc.url, 'POST', '/api/v2/analytics/query', { token: other.live, body: { query: 'SELECT 42 AS x' } });
  t.same([after.status, after.body.rows], [200, [[42]]], 'another organization is served');
});
