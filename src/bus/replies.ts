/**
 * Request/reply without the client's per-request machinery, shared by every caller of one
 * connection (the pipeline's idempotency claims, pipeline/dedupe.ts; batched KV reads,
 * kv-read.ts). `nc.request` builds a timer, a promise and an Error (`RequestError("cancelled")`,
 * stack captured) for every call;
 * with one call per keyed signal that was the pipeline's largest CPU cost (bench: the
 * pipeline's main thread spent 16% of its time constructing those errors). Here every
 * publish carries a reply subject `<inbox>.<n>` under one wildcard subscription per
 * connection, and the publishes of one call share a single timer.
 */
import { createInbox, type Msg, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';

export class Replies {
  private readonly prefix = `${createInbox()}.`;
  private next = 0;
  private readonly waiting = new Map<string, (m: Msg | Error) => void>();

  constructor(nc: NatsConnection) {
    nc.subscribe(`${this.prefix}*`, {
      callback: (err, m) => {
        if (err) {
          for (const settle of this.waiting.values()) settle(err);
          this.waiting.clear();
          return;
        }
        const settle = this.waiting.get(m.subject);
        if (!settle) return; // timed out already
        this.waiting.delete(m.subject);
        settle(m);
      },
    });
  }

  /** Publishes every message with its own reply subject; one answer (or an Error) per message, in order. */
  requestAll(nc: NatsConnection, msgs: { subject: string; data: Uint8Array; headers?: MsgHdrs }[], timeoutMs: number): Promise<(Msg | Error)[]> {
    if (msgs.length === 0) return Promise.resolve([]);
    return new Promise((resolve) => {
      const out = new Array<Msg | Error>(msgs.length);
      const inboxes: string[] = [];
      let left = msgs.length;
      const timer = setTimeout(() => {
        for (let i = 0; i < inboxes.length; i++) {
          if (this.waiting.delete(inboxes[i]!)) out[i] = new Error(`no answer from JetStream within ${timeoutMs} ms (${msgs[i]!.subject})`);
        }
        resolve(out);
      }, timeoutMs);
      const done = (i: number) => (m: Msg | Error): void => {
        out[i] = m;
        if (--left === 0) {
          clearTimeout(timer);
          resolve(out);
        }
      };
      for (let i = 0; i < msgs.length; i++) {
        const inbox = this.prefix + (this.next++).toString(36);
        inboxes.push(inbox);
        this.waiting.set(inbox, done(i));
        try {
          const { headers } = msgs[i]!;
          nc.publish(msgs[i]!.subject, msgs[i]!.data, headers ? { reply: inbox, headers } : { reply: inbox });
        } catch (err) {
          this.waiting.delete(inbox);
          done(i)(err instanceof Error ? err : new Error(String(err)));
        }
      }
    });
  }
}

const repliesOf = new WeakMap<NatsConnection, Replies>();
export function replies(nc: NatsConnection): Replies {
  let r = repliesOf.get(nc);
  if (!r) repliesOf.set(nc, (r = new Replies(nc)));
  return r;
}
