/**
 * Messages of a stream by sequence and subject (`$JS.API.STREAM.MSG.GET.<stream>` with
 * `next_by_subj` or `last_by_subj`, nats-server ≥ 2.9), through the connection's shared reply
 * subscription (replies.ts) rather than `nc.request`: the billing evaluator asks for the
 * oldest message of a partition once per group (consumer.ts `nextSeq`), the claim log reads
 * its subjects (pipeline/dedupe.ts).
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { replies } from './replies.js';

const enc = new TextEncoder();
const dec = new TextDecoder();
/** JetStream's error code for "no message found". */
const NO_MESSAGE = 10037;

export class StreamGetError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StreamGetError';
  }
}

/** A stored message as a message get gives it: its sequence, data and time in the stream. */
export interface StreamMessage {
  seq: number;
  data: Buffer;
  /** RFC 3339 with up to nanoseconds, as the server writes it. */
  time: string;
}

/**
 * One message of a stream (`$JS.API.STREAM.MSG.GET.<stream>`, answered by the stream's leader):
 * the first at or after `seq` on a subject filter, or the last on a subject; null when there is
 * none. Anything else (no answer, no responders, a missing stream) throws a StreamGetError.
 */
export async function streamMessage(
  nc: NatsConnection,
  apiPrefix: string,
  stream: string,
  req: { seq: number; next_by_subj: string } | { last_by_subj: string },
  timeoutMs: number,
): Promise<StreamMessage | null> {
  const [a] = await replies(nc).requestAll(nc, [{ subject: `${apiPrefix}.STREAM.MSG.GET.${stream}`, data: enc.encode(JSON.stringify(req)) }], timeoutMs);
  if (a instanceof Error) throw new StreamGetError(`stream ${stream} message get: ${a.message}`);
  if (a!.headers?.hasError) throw new StreamGetError(`stream ${stream} message get: status ${a!.headers.code} ${a!.headers.description}`);
  const r = JSON.parse(dec.decode(a!.data)) as { message?: { seq?: number; data?: string; time?: string }; error?: { code?: number; err_code?: number; description?: string } };
  if (r.error) {
    if (r.error.err_code === NO_MESSAGE) return null; // (a missing stream is a 404 too: 10059, an error)
    throw new StreamGetError(`stream ${stream} message get: ${r.error.description ?? JSON.stringify(r.error)}`);
  }
  if (typeof r.message?.seq !== 'number') throw new StreamGetError(`stream ${stream} message get: an answer without a sequence`);
  return { seq: r.message.seq, data: Buffer.from(r.message.data ?? '', 'base64'), time: r.message.time ?? '' };
}

/** The first message's sequence, or 0 when the stream has none at or after `seq` on `filter`. */
export async function nextSeq(nc: NatsConnection, apiPrefix: string, stream: string, filter: string, seq: number, timeoutMs: number): Promise<number> {
  return (await streamMessage(nc, apiPrefix, stream, { seq, next_by_subj: filter }, timeoutMs))?.seq ?? 0;
}
