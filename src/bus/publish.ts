/**
 * Durable publish to JetStream with the stream's ack, retried on transient failures.
 * A retry is safe: every publish carries `Nats-Msg-Id` (the batch id), and the stream stores
 * a message id once within its duplicate window, so a retried batch is never stored twice.
 */
import type { Msg, MsgHdrs, NatsConnection } from '@nats-io/transport-node';
import { replies } from './replies.js';
import { natsLog as log } from '../log.js';
import { publishDuration, streamKind } from '../metrics/index.js';

/** The server answered and refused the message (as opposed to no answer in time). */
export class PublishError extends Error {
  constructor(
    message: string,
    /** JetStream's `err_code` when the stream named one (WRONG_LAST_SEQUENCE: a compare-and-set lost). */
    readonly errCode?: number,
  ) {
    super(message);
  }
}

/** JetStream's error code for a failed Nats-Expected-Last-Subject-Sequence check. */
export const WRONG_LAST_SEQUENCE = 10071;

export interface PubAck {
  stream: string;
  seq: number;
  duplicate?: boolean;
}

const UTF8 = new TextDecoder();

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function publishDurable(nc: NatsConnection, subject: string, data: Uint8Array, headers: MsgHdrs, msgId: string, timeoutMs: number, attempts = 3): Promise<PubAck> {
  const started = performance.now();
  const observe = (outcome: 'ok' | 'error'): void => publishDuration.observe({ stream: streamKind(subject), outcome }, (performance.now() - started) / 1000);
  headers.set('Nats-Msg-Id', msgId);
  let last: unknown;
  for (let i = 0; i < attempts; i++) {
    if (i > 0) await sleep(25 * 2 ** i);
    try {
      // Through the connection's one reply subscription (replies.ts), not nc.request: that built
      // a timer, a deferred and a RequestError with a captured stack per publish (the ingress
      // publishes once per batch; ~3% of its CPU under bench/ingest.ts).
      const [r] = await replies(nc).requestAll(nc, [{ subject, data, headers }], timeoutMs);
      const ack = ackOf(r ?? new Error('no answer'), subject);
      if (ack instanceof Error) throw ack;
      observe('ok');
      return ack;
    } catch (err) {
      last = err;
      log.warn('publish attempt failed', { attempt: i + 1, subject, err: (err as Error).message });
      // A full stream (discard new) or an oversize message will not succeed on retry.
      if (err instanceof PublishError && /maximum (bytes|messages)|message size exceeds|resource limits/i.test(err.message)) break;
    }
  }
  observe('error');
  throw last;
}

/** One message of publishDurableMany. */
export interface DurableMessage {
  subject: string;
  data: Uint8Array;
  headers: MsgHdrs;
  msgId: string;
}


/**
 * The stream's ack of one publish, or what went wrong (a PublishError when the stream refused
 * it): for every publish answered through replies.ts (durable publishes, KV compare-and-set
 * writes, idempotency claims).
 */
export function ackOf(r: Msg | Error, subject: string): PubAck | Error {
  if (r instanceof Error) return r;
  // No stream listens on the subject (what nc.request reported as NoRespondersError): not a
  // refusal by the stream, so not a PublishError (callers tell the two apart).
  if (r.data.length === 0 && r.headers?.code === 503) return new Error(`no responders for ${subject} (503)`);
  if (r.headers?.hasError) return new PublishError(`status ${r.headers.code} ${r.headers.description}`);
  if (r.data.length === 0) return new PublishError(`empty reply (headers: ${r.headers ? JSON.stringify([...r.headers.keys()].map((k) => [k, r.headers!.get(k)])) : 'none'})`);
  const ack = JSON.parse(UTF8.decode(r.data)) as PubAck & { error?: { code: number; err_code?: number; description: string } };
  if (ack.error) return new PublishError(`JetStream error ${ack.error.code}/${ack.error.err_code}: ${ack.error.description}`, ack.error.err_code);
  if (!ack.stream) return new PublishError('invalid ack (no stream)');
  return ack;
}

/**
 * Durable publishes of many messages at once, each with its Nats-Msg-Id, under the
 * connection's one reply subscription and one timer (replies.ts): no per-message request
 * objects. Not retried here: it rejects with the first failure once every answer is in (or
 * the timeout passed), and the caller retries the whole call (safe: the ids make a message
 * published again a duplicate the stream drops).
 */
export async function publishDurableMany(nc: NatsConnection, msgs: readonly DurableMessage[], timeoutMs: number): Promise<PubAck[]> {
  if (msgs.length === 0) return [];
  const started = performance.now();
  for (const m of msgs) m.headers.set('Nats-Msg-Id', m.msgId);
  const answers = (await replies(nc).requestAll(nc, msgs as DurableMessage[], timeoutMs)).map((a, i) => ackOf(a, msgs[i]!.subject));
  const failed = answers.findIndex((a) => a instanceof Error);
  const seconds = (performance.now() - started) / 1000;
  for (let i = 0; i < msgs.length; i++) publishDuration.observe({ stream: streamKind(msgs[i]!.subject), outcome: answers[i] instanceof Error ? 'error' : 'ok' }, seconds);
  if (failed >= 0) {
    const err = answers[failed] as Error;
    log.warn('publish failed', { subject: msgs[failed]!.subject, failed: answers.filter((a) => a instanceof Error).length, of: msgs.length, err: err.message });
    throw err;
  }
  return answers as PubAck[];
}
