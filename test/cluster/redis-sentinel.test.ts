/**
 * Redis Sentinel failover under load (the rate limiter's failover contract): a local primary, a replica
 * (`--replicaof`) and 3 sentinels (`redis-server --sentinel`), on loopback ports, never
 * the machine's own Redis; the service (ROLE=all) configured with REDIS_SENTINELS and
 * REDIS_SENTINEL_NAME; producers posting without pause; the primary killed with SIGKILL.
 * The drill bench/drills/redis-failover.ts does the work (the same code runs by hand at a
 * larger scale: node dist/bench/drills.js); here one round, and the assertions:
 *
 * - the failover happened: the sentinels name another primary, which says role:master;
 * - the ingress answered 503 RATE_LIMITER_UNAVAILABLE during the switch, nothing but 202
 *   before it, never a 500 or another code, and 202 again by itself after it;
 * - every 202-acknowledged signal is stored, once.
 */
import t from 'tap';
import { RECONNECT_ALLOWANCE_MS, runRedisFailover } from '../../bench/drills/redis-failover.js';

t.test('kill -9 of the primary under load', async (t) => {
  const lines: string[] = [];
  const r = await runRedisFailover({ rounds: 1, durationMs: 6_000, log: (l) => lines.push(l) });
  t.comment(lines.join('\n'));
  const [round] = r.roundReports;
  t.ok(round, 'one round ran');
  if (!round) return;
  t.not(round.toPort, round.fromPort, `the sentinels promoted ${round.toPort} after ${round.fromPort} was killed (${round.promotionMs} ms)`);

  const nearUnplanned = (a: { start: number; end: number }): boolean => r.unplannedSwitches.some((u) => a.end >= u - 10_000 && a.start <= u + RECONNECT_ALLOWANCE_MS);
  const before = r.answers.filter((a) => a.end < round.killedAt && !nearUnplanned(a));
  const during = r.answers.filter((a) => a.start >= round.killedAt && a.start <= round.switchedAt);
  t.ok(before.length > 0 && before.every((a) => a.status === 202), `answered before the kill: ${before.length}, all 202`);
  const unavailable = r.answers.filter((a) => a.status !== 202);
  t.ok(unavailable.length > 0, `the switch was seen by the ingress: ${unavailable.length} answers 503 (${during.length} requests during the promotion)`);
  t.same([...new Set(unavailable.map((a) => `${a.status} ${a.code}`))], ['503 RATE_LIMITER_UNAVAILABLE'], 'every non-202 is 503 RATE_LIMITER_UNAVAILABLE (never a 500)');
  // A switch the sentinels made on their own (a primary stalled past down-after-milliseconds
  // on a loaded machine) is a switch too: its 503s are allowed around it (nearUnplanned), and
  // it is reported.
  if (r.unplannedSwitches.length > 0) t.comment(`the sentinels also switched on their own ${r.unplannedSwitches.length} time(s)`);
  t.ok(
    unavailable.every((a) => (a.end >= round.killedAt && a.start <= round.switchedAt + RECONNECT_ALLOWANCE_MS) || nearUnplanned(a)),
    'only answered after the kill, to requests sent before the promotion (+ reconnection allowance)',
  );
  t.ok(round.acceptedAfter > 0, `recovered by itself: ${round.acceptedAfter} answers 202 after the last 503`);
  t.comment(`promotion ${round.promotionMs} ms after the kill; ingress unavailable for ${round.unavailableWindowMs} ms from the kill (${unavailable.length} answers 503)`);

  t.ok(r.signals > 0, `${r.signals} signals acknowledged`);
  t.equal(r.lost, 0, 'no acknowledged signal lost');
  t.equal(r.duplicated, 0, 'none stored twice');
  t.same(r.problems, [], 'the drill found no problem');
});
