/**
 * Drill: a NATS JetStream cluster losing a node under load. Three Debian `nats-server`
 * processes on loopback ports (bench/lib/nats-cluster.ts, shared with
 * test/cluster/nats-cluster.test.ts), the service (ROLE=all) with NATS_URL listing all three
 * and NATS_REPLICAS=3, producers posting 500-signal batches with idempotency keys (a batch
 * answered 503 is resent with the same keys, as a client should). Each round, in the middle of
 * its load, one node is killed with -9 — odd rounds a follower of the signals stream, even
 * rounds its leader (stream info `cluster.leader`) — the drill checks the pid is gone (and, for
 * the leader, that another node was elected), waits for ingestion to come back, restarts the
 * node on its ports and store directory and waits until it has caught up.
 *
 * The contract checked: every answer is 202, or 503 between the kill and the restarted node's
 * catch-up (+ an allowance); never a 500 or another status; 202s come back by themselves after
 * each kill; every acknowledged signal is stored once (the admin stats after the drain).
 */
import { NatsCluster, isAlive } from '../lib/nats-cluster.js';
import { OPERATOR_TOKEN, createUnlimitedOrg } from '../lib/api.js';
import { cleanup, isolation, onInterrupt, startBenchService as startService } from '../../harness/service.js';
import { BatchTemplate, SIGNALS_PER_BATCH } from '../lib/signals.js';
import { sleep } from '../lib/report.js';
import { NO_LOGS, answerKinds, countStored, keepLogs, postSignals, roundAnswers, type FaultRound, type PostAnswer } from './common.js';
import type { Drill, DrillOptions, DrillResult } from './drill.js';

/** 503s up to this long after the restarted node caught up still belong to the round's fault. */
export const SETTLE_ALLOWANCE_MS = 10_000;
/** How long ingestion, an election or a catch-up may take before the drill calls it a problem. */
const RECOVERY_LIMIT_MS = 30_000;
/** A killed node stays down at least this long before it is restarted. */
const DOWN_MS = 1_500;
const PRODUCERS = 2;
/** The backlog after the load must shrink at least once in this long. */
const DRAIN_STALL_MS = 60_000;

export interface Answer extends PostAnswer {
  batch: string;
}

export interface NatsRoundReport extends FaultRound {
  /** Which node was killed: a follower of the signals stream or its leader. */
  role: 'follower' | 'leader';
  node: string;
  pid: number;
  /** The signals stream's leader before the kill, and the one seen after it. */
  leaderBefore: string;
  leaderAfter: string | null;
  /** Leader kills: from the kill until stream info named another leader. */
  electionMs: number | null;
  /** From the kill until the answer to the first batch accepted after the round's last 503 (or after the kill). */
  recoveryMs: number | null;
  /** From the restart until the signals stream listed both followers as current. */
  catchUpMs: number | null;
  caughtUpAt: number;
}

export interface NatsClusterDetails extends DrillResult {
  answers: Answer[];
  roundReports: NatsRoundReport[];
}

export async function runNatsCluster(opts: DrillOptions): Promise<NatsClusterDetails> {
  const cluster = await NatsCluster.start(3, `billing-drill-${process.pid}`);
  onInterrupt(() => cluster.stop());
  const iso = isolation('natscluster', 'bench');
  const stream = `${iso.natsPrefix}_SIGNALS`;
  const problems: string[] = [];
  const answers: Answer[] = [];
  const roundReports: NatsRoundReport[] = [];
  let stopLoad = false;
  let svc: Awaited<ReturnType<typeof startService>> | null = null;
  let nc: Awaited<ReturnType<NatsCluster['manager']>>['nc'] | null = null;
  try {
    const m = await cluster.manager();
    nc = m.nc;
    const jsm = m.jsm;
    svc = await startService({
      role: 'all',
      operatorToken: OPERATOR_TOKEN,
      iso,
      env: { NATS_URL: cluster.url, NATS_REPLICAS: '3', PUBLISH_TIMEOUT_MS: '2000', PIPELINE_ACK_WAIT_MS: '5000', PIPELINE_FLUSH_MS: '50' },
    });
    const url = svc.url;
    const org = await createUnlimitedOrg(url, OPERATOR_TOKEN);
    const replicas: string[] = [];
    for await (const s of jsm.streams.list()) if (s.config.name.includes(iso.natsPrefix)) replicas.push(`${s.config.name}:${s.config.num_replicas}`);
    const single = replicas.filter((x) => !x.endsWith(':3'));
    if (single.length > 0) problems.push(`streams or buckets without 3 replicas: ${single.join(' ')}`);
    opts.log(`nats-cluster: service ${url}, nodes ${cluster.nodes.map((n) => `${n.name}:${n.port}`).join(' ')}; ${replicas.length} streams and buckets, 3 replicas each`);

    // Producers: each batch is resent (same keys) while it is answered 503; a batch under way
    // when the load stops is still finished, so every batch sent is either accepted or reported.
    const template = new BatchTemplate({ keyed: () => true, baseTimeMs: Date.now() });
    let acceptedBatches = 0;
    let stoppedAt = Infinity;
    const unfinished: string[] = [];
    const producer = async (p: number): Promise<void> => {
      for (let seq = 0; !stopLoad; seq++) {
        const batch = `p${p}-b${seq}`;
        const body = template.render((i) => `${batch}-${i}`);
        const giveUp = () => stopLoad && Date.now() > stoppedAt + RECOVERY_LIMIT_MS * 2;
        for (;;) {
          const a = await postSignals(url, org.liveKey, body);
          answers.push({ ...a, batch });
          if (a.status === 202) {
            acceptedBatches++;
            break;
          }
          if (giveUp()) {
            unfinished.push(batch);
            break;
          }
          await sleep(100);
        }
      }
    };
    const producers = Array.from({ length: PRODUCERS }, (_, p) => producer(p));

    const leaderOf = async (): Promise<string | null> => (await jsm.streams.info(stream).catch(() => null))?.cluster?.leader ?? null;
    const waitUntil = async <T>(probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs: number): Promise<{ value: T; at: number } | null> => {
      const end = Date.now() + timeoutMs;
      for (;;) {
        const value = await probe();
        if (ok(value)) return { value, at: Date.now() };
        if (Date.now() > end) return null;
        await sleep(100);
      }
    };

    for (let round = 1; round <= opts.rounds; round++) {
      const roundStart = Date.now();
      await sleep(opts.durationMs / 2);
      const role: 'follower' | 'leader' = round % 2 === 1 ? 'follower' : 'leader';
      const leaderBefore = (await waitUntil(leaderOf, (l) => l !== null, RECOVERY_LIMIT_MS))?.value;
      if (!leaderBefore) throw new Error(`round ${round}: the signals stream has no leader before the kill`);
      const victim = role === 'leader' ? cluster.indexOf(leaderBefore) : cluster.nodes.findIndex((n) => n.name !== leaderBefore);
      const node = cluster.nodes[victim]!.name;
      const pid = await cluster.kill9(victim);
      const killedAt = Date.now();
      if (isAlive(pid)) problems.push(`round ${round}: ${node} (pid ${pid}) still alive after kill -9`);

      // Observe through a surviving node: for the leader, another node elected; for a follower, the leader stays.
      const watch = await cluster.managerOn(cluster.nodes.findIndex((_, j) => j !== victim));
      const leaderSeen = async (): Promise<string | null> => (await watch.jsm.streams.info(stream).catch(() => null))?.cluster?.leader ?? null;
      let leaderAfter: string | null = null;
      let electionMs: number | null = null;
      try {
        const seen = await waitUntil(leaderSeen, (l) => l !== null && (role === 'follower' || l !== leaderBefore), RECOVERY_LIMIT_MS);
        if (seen) {
          leaderAfter = seen.value;
          if (role === 'leader') electionMs = seen.at - killedAt;
          else if (leaderAfter !== leaderBefore) problems.push(`round ${round}: killing the follower ${node} moved the leader ${leaderBefore} -> ${leaderAfter}`);
        } else problems.push(`round ${round}: no ${role === 'leader' ? 'new ' : ''}leader of ${stream} seen within ${RECOVERY_LIMIT_MS} ms after killing ${node}`);
      } finally {
        await watch.nc.close().catch(() => undefined);
      }
      // Ingestion back: a batch sent after the kill accepted.
      const back = await waitUntil(async () => answers.some((a) => a.start > killedAt && a.status === 202), (x) => x, RECOVERY_LIMIT_MS);
      if (!back) problems.push(`round ${round}: no batch accepted within ${RECOVERY_LIMIT_MS} ms after killing the ${role} ${node}`);
      opts.log(`nats-cluster: round ${round}: ${role} ${node} (pid ${pid}) killed -9, pid gone: ${!isAlive(pid)}; leader ${leaderBefore} -> ${leaderAfter ?? '?'}${electionMs === null ? '' : ` after ${electionMs} ms`}`);

      await sleep(Math.max(0, killedAt + DOWN_MS - Date.now()));
      const restartAt = Date.now();
      await cluster.restart(victim);
      const caught = await waitUntil(
        async () => {
          const info = await jsm.streams.info(stream).catch(() => null);
          return (info?.cluster?.replicas ?? []).filter((r) => r.current).length;
        },
        (n) => n >= 2,
        RECOVERY_LIMIT_MS,
      );
      if (!caught) problems.push(`round ${round}: ${node} restarted but the signals stream did not list 2 current followers within ${RECOVERY_LIMIT_MS} ms`);
      const caughtUpAt = caught?.at ?? Date.now();
      opts.log(`nats-cluster: round ${round}: ${node} restarted, caught up ${caught ? `after ${caught.at - restartAt} ms` : 'NOT within the limit'}`);
      roundReports.push({ round, role, node, pid, killedAt, leaderBefore, leaderAfter, electionMs, recoveryMs: null, unavailableWindowMs: 0, unavailable: 0, catchUpMs: caught ? caught.at - restartAt : null, caughtUpAt });
      await sleep(Math.max(0, roundStart + opts.durationMs - Date.now()));
    }
    await sleep(500);
    stopLoad = true;
    stoppedAt = Date.now();
    await Promise.all(producers);

    // Each answer belongs to the round whose kill came last before it was answered.
    for (const [i, r] of roundReports.entries()) {
      const { mine, bad, lastBadEnd, unavailableWindowMs } = roundAnswers(answers, roundReports, i, r.caughtUpAt + SETTLE_ALLOWANCE_MS);
      r.unavailable = bad.length;
      r.unavailableWindowMs = unavailableWindowMs;
      const firstOk = mine.find((a) => a.status === 202 && a.start > Math.max(lastBadEnd, r.killedAt));
      r.recoveryMs = firstOk ? firstOk.end - r.killedAt : null;
      if (!firstOk) problems.push(`round ${r.round}: no 202 after the last 503: the ingress did not recover`);
    }
    const duringFault = (a: Answer): boolean => roundReports.some((r) => a.end >= r.killedAt && a.start <= r.caughtUpAt + SETTLE_ALLOWANCE_MS);
    const outside = answers.filter((a) => a.status !== 202 && !duringFault(a));
    if (outside.length > 0) problems.push(`${outside.length} non-202 answer(s) outside any fault (first at ${new Date(outside[0]!.start).toISOString()}: ${outside[0]!.status} ${outside[0]!.code})`);
    const wrong = answers.filter((a) => a.status !== 202 && a.status !== 503);
    if (wrong.length > 0) problems.push(`${wrong.length} answer(s) neither 202 nor 503: ${answerKinds(wrong)}`);
    if (unfinished.length > 0) problems.push(`${unfinished.length} batch(es) still answered 503 ${RECOVERY_LIMIT_MS * 2} ms after the load stopped: ${unfinished.join(', ')}`);

    const acked = acceptedBatches * SIGNALS_PER_BATCH;
    const firstAnswerAt = answers[0]?.start ?? stoppedAt;
    // Drained: the pipeline consumer has nothing pending; then the exact count.
    // The producers outrun the pipeline on a small machine: the backlog may take minutes. The
    // drill waits as long as it shrinks, and calls it a problem when it stalls for DRAIN_STALL_MS.
    const drainStart = Date.now();
    let backlog = Infinity;
    let movedAt = Date.now();
    for (;;) {
      const ci = await jsm.consumers.info(stream, 'pipeline').catch(() => null);
      const n = ci ? ci.num_pending + ci.num_ack_pending : Infinity;
      if (n === 0) break;
      if (n < backlog) {
        backlog = n;
        movedAt = Date.now();
      }
      if (Date.now() - movedAt > DRAIN_STALL_MS) {
        problems.push(`the pipeline consumer's backlog (${backlog} messages pending or unacknowledged) did not shrink for ${DRAIN_STALL_MS} ms`);
        break;
      }
      await sleep(250);
    }
    const drainedMs = Date.now() - drainStart;
    const { lost, duplicated } = await countStored(url, org.id, OPERATOR_TOKEN, acked, problems);
    const drainMs = Date.now() - drainStart;

    let logs = NO_LOGS;
    if (problems.length > 0) {
      const kills = roundReports.map((r) => `round ${r.round}: kill ${r.role} ${r.node} ${new Date(r.killedAt).toISOString()}, leader ${r.leaderBefore} -> ${r.leaderAfter}, caught up ${new Date(r.caughtUpAt).toISOString()}`);
      const timeline = answers.map((a) => `${new Date(a.start).toISOString()} ${a.end - a.start}ms ${a.batch} ${a.status} ${a.code ?? ''}`);
      logs = keepLogs('nats-cluster', svc.child.output(), [...kills, ...timeline], {
        ext: 'nats',
        text: cluster.nodes.map((n) => `==== ${n.name} ${n.port}\n${n.output}`).join('\n'),
        what: 'nats-server output, last 20 KB per node',
      });
    }
    const windows = roundReports.map((r) => r.unavailableWindowMs);
    const codes: Record<string, number> = {};
    for (const a of answers) if (a.status !== 202) codes[`${a.status} ${a.code}`] = (codes[`${a.status} ${a.code}`] ?? 0) + 1;
    return {
      drill: 'nats-cluster',
      rounds: roundReports.length,
      signals: acked,
      faults: roundReports.length,
      lost,
      duplicated,
      figures: {
        batches: acceptedBatches,
        requests: answers.length,
        notAccepted: codes,
        faults: roundReports.map((r) => `${r.role} ${r.node}`),
        electionMs: roundReports.filter((r) => r.role === 'leader').map((r) => r.electionMs),
        unavailableWindowMs: windows,
        minUnavailableWindowMs: windows.length === 0 ? 0 : Math.min(...windows),
        maxUnavailableWindowMs: Math.max(0, ...windows),
        recoveryMs: roundReports.map((r) => r.recoveryMs),
        catchUpMs: roundReports.map((r) => r.catchUpMs),
        acceptedPerSecond: Math.round(acked / Math.max(1, (stoppedAt - firstAnswerAt) / 1000)),
        drainedAfterLoadMs: drainedMs,
        countedAfterLoadMs: drainMs,
        logs,
      },
      problems,
      answers,
      roundReports,
    };
  } finally {
    stopLoad = true;
    await svc?.child.stop(10_000);
    await nc?.close().catch(() => undefined);
    await cluster.stop();
    await cleanup(iso).catch(() => undefined);
  }
}

export const natsCluster: Drill = {
  name: 'nats-cluster',
  summary: 'NATS JetStream, 3 nodes, NATS_REPLICAS=3: kill -9 a node under load each round (a follower of the signals stream, then its leader, alternately) and restart it; 503 only around the fault, recovery by itself, every 202 stored once',
  run: runNatsCluster,
};
