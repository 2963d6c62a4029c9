/**
 * Drill: Redis Sentinel failover under load. A local primary, a replica and 3 sentinels
 * (bench/lib/redis-topology.ts), the service (ROLE=all) configured through REDIS_SENTINELS,
 * producers posting batches without pause; each round kills the primary with SIGKILL in
 * the middle of the load (odd rounds; even rounds ask the sentinels for a planned switch,
 * SENTINEL FAILOVER) and waits until the sentinels have promoted the replica (seen in
 * SENTINEL GET-MASTER-ADDR-BY-NAME and in the new primary's INFO replication); a killed
 * primary restarts as a replica for the next round.
 *
 * The contract checked: every answer is 202, or 503 RATE_LIMITER_UNAVAILABLE between the
 * kill and the promotion (+ a reconnection allowance); never a 500 or another code; 202s
 * come back by themselves after each switch; every acknowledged signal is stored once.
 */
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { OPERATOR_TOKEN, createUnlimitedOrg } from '../lib/api.js';
import { NATS_URL, cleanup, isolation, startBenchService as startService } from '../../harness/service.js';
import { startSentinelSet } from '../lib/redis-topology.js';
import { sleep } from '../lib/report.js';
import { NO_LOGS, answerKinds, countStored, keepLogs, postSignals, roundAnswers, type FaultRound, type PostAnswer } from './common.js';
import type { Drill, DrillOptions, DrillResult } from './drill.js';

/** After the promotion, the service may need this long to find the new primary. */
export const RECONNECT_ALLOWANCE_MS = 10_000;
/** A switch the sentinels made on their own began at most this long before they announced it. */
const UNPLANNED_LEAD_MS = 10_000;
const PRODUCERS = 4;
const SIGNALS_PER_REQUEST = 100;

export interface Answer extends PostAnswer {
  signals: number;
}

export interface RoundReport extends FaultRound {
  /** `kill`: SIGKILL of the primary; `sentinel`: SENTINEL FAILOVER. */
  how: 'kill' | 'sentinel';
  /** When the sentinels had named the replica and it answered role:master. */
  switchedAt: number;
  promotionMs: number;
  fromPort: number;
  toPort: number;
  /** 202s to requests sent after the last non-202 of the round. */
  acceptedAfter: number;
}

export interface RedisFailoverDetails extends DrillResult {
  answers: Answer[];
  /** Switches the sentinels made without being asked (times seen). */
  unplannedSwitches: number[];
  roundReports: RoundReport[];
}

function body(round: number, seq: number, producer: number): string {
  const now = Date.now();
  const signals = [];
  for (let i = 0; i < SIGNALS_PER_REQUEST; i++) {
    signals.push({ eventName: 'api.request', customer: { externalCustomerId: `cus_${i % 13}` }, idempotencyKey: `r${round}-p${producer}-s${seq}-${i}`, timestamp: new Date(now - i).toISOString(), data: { n: i } });
  }
  return JSON.stringify({ signals });
}

async function pipelineDrained(natsPrefix: string, timeoutMs: number): Promise<void> {
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    const end = Date.now() + timeoutMs;
    for (;;) {
      const ci = await jsm.consumers.info(`${natsPrefix}_SIGNALS`, 'pipeline');
      if (ci.num_pending === 0 && ci.num_ack_pending === 0) return;
      if (Date.now() > end) throw new Error(`pipeline not drained after ${timeoutMs} ms: ${ci.num_pending} pending, ${ci.num_ack_pending} unacked`);
      await sleep(200);
    }
  } finally {
    await nc.close();
  }
}

export async function runRedisFailover(opts: DrillOptions): Promise<RedisFailoverDetails> {
  const set = await startSentinelSet();
  const iso = isolation('redisfailover', 'bench');
  const problems: string[] = [];
  const answers: Answer[] = [];
  const roundReports: RoundReport[] = [];
  let stopLoad = false;
  let svc: Awaited<ReturnType<typeof startService>> | null = null;
  try {
    svc = await startService({
      role: 'all',
      operatorToken: OPERATOR_TOKEN,
      iso,
      env: { REDIS_SENTINELS: set.sentinelAddrs.map((a) => `${a.host}:${a.port}`).join(','), REDIS_SENTINEL_NAME: set.name, PIPELINE_FLUSH_MS: '50' },
    });
    const url = svc.url;
    const org = await createUnlimitedOrg(url, OPERATOR_TOKEN);
    opts.log(`redis-failover: service ${url}, primary ${await set.primaryPort()}, sentinels ${set.sentinels.map((s) => s.port).join(',')}`);

    let round = 0;
    const producer = async (p: number): Promise<void> => {
      for (let seq = 0; !stopLoad; seq++) {
        const a = await postSignals(url, org.liveKey, body(round, seq, p));
        answers.push({ ...a, signals: SIGNALS_PER_REQUEST });
        if (a.status !== 202) await sleep(20);
      }
    };
    const producers = Array.from({ length: PRODUCERS }, (_, p) => producer(p));

    for (round = 1; round <= opts.rounds; round++) {
      await sleep(opts.durationMs / 2);
      const killedAt = Date.now();
      // Odd rounds a crash, even rounds a planned switch.
      const how = round % 2 === 1 ? 'kill' : 'sentinel';
      const fo = await set.failover(how);
      const switchedAt = killedAt + fo.switchedAfterMs;
      opts.log(`redis-failover: round ${round}: primary ${fo.from} ${how === 'kill' ? 'killed (SIGKILL)' : 'demoted (SENTINEL FAILOVER)'}; sentinels promoted ${fo.to} after ${fo.switchedAfterMs} ms`);
      const rest = Math.max(opts.durationMs / 2 - (Date.now() - killedAt), 0);
      await sleep(rest);
      // Recovery: a 202 to a request sent after the switch, within the allowance.
      const end = switchedAt + RECONNECT_ALLOWANCE_MS + 5_000;
      while (!answers.some((a) => a.start > switchedAt && a.status === 202) && Date.now() < end) await sleep(100);
      roundReports.push({ round, how, killedAt, switchedAt, promotionMs: fo.switchedAfterMs, fromPort: fo.from, toPort: fo.to, unavailable: 0, unavailableWindowMs: 0, acceptedAfter: 0 });
    }
    await sleep(500);
    stopLoad = true;
    await Promise.all(producers);

    // Each answer belongs to the round whose kill came last before it was answered (a
    // request sent just before a kill may be answered 503 after it).
    for (const [i, r] of roundReports.entries()) {
      // (non-202s long after this switch belong to a switch the sentinels made on their own: below)
      const { mine, bad, lastBadEnd, unavailableWindowMs } = roundAnswers(answers, roundReports, i, r.switchedAt + RECONNECT_ALLOWANCE_MS);
      r.unavailable = bad.length;
      r.unavailableWindowMs = unavailableWindowMs;
      r.acceptedAfter = mine.filter((a) => a.status === 202 && a.start > lastBadEnd).length;
      if (r.acceptedAfter === 0) problems.push(`round ${r.round}: no 202 after the switch: the ingress did not recover`);
    }
    // Switches the sentinels made on their own (none asked for by this drill): a primary that
    // stalled past down-after-milliseconds. The service must treat them like the others.
    const observed = set.switches();
    const unplanned = observed.filter((sw) => !roundReports.some((r) => sw.at >= r.killedAt && sw.at <= r.switchedAt + 5_000));
    for (const u of unplanned) opts.log(`redis-failover: the sentinels switched on their own at ${new Date(u.at).toISOString()} (${u.message})`);
    const duringSwitch = (a: Answer): boolean =>
      roundReports.some((r) => a.end >= r.killedAt && a.start <= r.switchedAt + RECONNECT_ALLOWANCE_MS) ||
      unplanned.some((u) => a.end >= u.at - UNPLANNED_LEAD_MS && a.start <= u.at + RECONNECT_ALLOWANCE_MS);
    const outside = answers.filter((a) => a.status !== 202 && !duringSwitch(a));
    if (outside.length > 0) problems.push(`${outside.length} non-202 answer(s) outside any switch (first at ${new Date(outside[0]!.start).toISOString()})`);
    const wrong = answers.filter((a) => a.status !== 202 && !(a.status === 503 && a.code === 'RATE_LIMITER_UNAVAILABLE'));
    if (wrong.length > 0) problems.push(`${wrong.length} answer(s) neither 202 nor 503 RATE_LIMITER_UNAVAILABLE: ${answerKinds(wrong)}`);

    const acked = answers.filter((a) => a.status === 202).reduce((s, a) => s + a.signals, 0);
    await pipelineDrained(iso.natsPrefix, 120_000);
    const { lost, duplicated } = await countStored(url, org.id, OPERATOR_TOKEN, acked, problems);
    let logs = NO_LOGS;
    if (problems.length > 0) {
      const timeline = answers.map((a) => `${new Date(a.start).toISOString()} ${a.end - a.start}ms ${a.status} ${a.code ?? ''}`);
      const kills = roundReports.map((r) => `round ${r.round}: kill ${new Date(r.killedAt).toISOString()}, promoted ${new Date(r.switchedAt).toISOString()} (${r.fromPort} -> ${r.toPort})`);
      logs = keepLogs('redis-failover', svc.child.output(), [...kills, ...timeline], {
        ext: 'redis',
        text: [...set.servers, ...set.sentinels].map((n) => `==== ${n.port}\n${n.output}`).join('\n'),
        what: 'Redis and sentinel output',
      });
    }
    const windows = roundReports.map((r) => r.unavailableWindowMs);
    return {
      drill: 'redis-failover',
      rounds: roundReports.length,
      signals: acked,
      faults: roundReports.length,
      lost,
      duplicated,
      figures: {
        requests: answers.length,
        answered503: answers.filter((a) => a.status === 503).length,
        faults: roundReports.map((r) => r.how),
        unplannedSwitches: unplanned.length,
        promotionMs: roundReports.map((r) => r.promotionMs),
        unavailableWindowMs: windows,
        recoveryAfterPromotionMs: roundReports.map((r) => Math.max(0, r.unavailableWindowMs - r.promotionMs)),
        maxUnavailableWindowMs: Math.max(0, ...windows),
        logs,
      },
      problems,
      answers,
      unplannedSwitches: unplanned.map((u) => u.at),
      roundReports,
    };
  } finally {
    stopLoad = true;
    await svc?.child.stop(10_000);
    await set.stop();
    await cleanup(iso).catch(() => undefined);
  }
}

export const redisFailover: Drill = {
  name: 'redis-failover',
  summary: 'Redis Sentinel: fail the primary over under load each round (kill -9, then SENTINEL FAILOVER, alternately); 503 RATE_LIMITER_UNAVAILABLE only during the switch, recovery by itself, every 202 stored once',
  run: runRedisFailover,
};
