/**
 * One fetch loop of a billing partition (consumer.ts runs two per partition): one fetch after
 * another, each for what the lane has room for, every message handed to `receive`.
 *
 * A fetch ends when it has its messages or at its expiry, when the server sends its end
 * status (408). nats-server before 2.9.16 does not always send it: a request that has just
 * expired when a message becomes ready is dropped without it (nats-io/nats-server#3942, "Fix
 * Pull Consumer not sending request timeout"; the Debian server of these machines is 2.9.10),
 * and the client learns of the end only when the request's heartbeats have been missed, ~2 s
 * later (the billing bench, 500-signal batches: 0 to 14 fetches a run; busy partitions hit the
 * race often, each expiry meeting a message on its way). Meanwhile the
 * server holds no request of this loop: with the other loop's fetch in the same state (the
 * two fall in step whenever the lane is full), the partition's new messages waited in the
 * stream for those 2 s (a trace of one partition: its fetches started 240.03 s, ended by
 * "heartbeats missed" at 244.22; messages stored from 242.43 evaluated at 244.2).
 *
 * So a fetch not ended `graceMs` after its expiry is taken as over on the server's side and
 * the loop pulls again at once. The old fetch is not cut short: a message the server sent to
 * a subscription that is gone would stay pending with nobody until its ack wait ran out, and
 * hold up the partition for whoever takes it next. It keeps handing what reaches it to
 * `receive` until it ends, and the loop waits for it before it returns.
 */
import type { JsMsg } from '@nats-io/jetstream';
import { billingLog as log } from '../../log.js';

export interface PullLoop {
  /** One fetch (JetStream's `consumer.fetch`). */
  fetch(opts: { max_messages: number; expires: number }): Promise<AsyncIterable<JsMsg>>;
  /** Takes a message into the lane. */
  receive(m: JsMsg): void;
  /** How many more messages the lane takes now. */
  room(): number;
  /** Resolves when the lane may have room again, or after `ms`. */
  roomMade(ms: number): Promise<unknown>;
  /** Whether to go on pulling. */
  running(): boolean;
  /** A fetch not ended this long after its expiry (a lost end status) was over: counted. */
  overdue?(): void;
  expiresMs: number;
  graceMs: number;
  /** How long to wait for room when the lane is full. */
  waitMs: number;
  /** For the log. */
  partition: number;
}

export async function pullLoop(o: PullLoop): Promise<void> {
  /** Fetches past their expiry that have not ended, still taking what reaches them. */
  const overdue = new Set<Promise<void>>();
  while (o.running()) {
    const room = o.room();
    if (room <= 0) {
      await o.roomMade(o.waitMs);
      continue;
    }
    try {
      const batch = await o.fetch({ max_messages: room, expires: o.expiresMs });
      const taking = (async () => {
        for await (const m of batch) o.receive(m);
      })();
      if (!(await settlesWithin(taking, o.expiresMs + o.graceMs))) {
        o.overdue?.();
        const lingering: Promise<void> = taking.then(
          () => undefined,
          (err: unknown) => {
            if (o.running() && !heartbeatsMissed(err)) log.warn('billing partition fetch failed after its expiry', { err, partition: o.partition });
          },
        );
        overdue.add(lingering);
        void lingering.finally(() => overdue.delete(lingering));
      }
    } catch (err) {
      if (!o.running()) break;
      // Heartbeats missed: this thread was too busy to see them (a loaded process); the
      // fetch is over, fetch again at once. Anything else: after a pause.
      if (heartbeatsMissed(err)) continue;
      log.warn('billing partition fetch failed; fetching again', { err, partition: o.partition });
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  // Stopped: what the fetches still open bring is in the lane once they end (the evaluator's
  // stop waits for this loop, then gives back whatever the lane holds).
  await Promise.all(overdue);
}

/** Whether a fetch ended because its heartbeats were missed (the client's own end of a fetch whose end status it did not see). */
const heartbeatsMissed = (err: unknown): boolean => /heartbeats missed/i.test((err as Error | undefined)?.message ?? '');

/** True once `p` is fulfilled within `ms`, false if it has not settled by then; its rejection within `ms` is thrown. */
export async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p.then(() => true), new Promise<boolean>((resolve) => (timer = setTimeout(resolve, ms, false)))]);
  } finally {
    clearTimeout(timer);
  }
}
