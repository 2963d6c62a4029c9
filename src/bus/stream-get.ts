/**
 * The sequence of the first message of a stream at or after a sequence on a subject filter
 * (`$JS.API.STREAM.MSG.GET.<stream>` with `next_by_subj`, nats-server ≥ 2.9), through the
 * connection's shared reply subscription (replies.ts) rather than `nc.request`: the billing
 * evaluator asks it once per group (consumer.ts). Only the sequence is used; the server sends
 * the message too.
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

/** The first message's sequence, or 0 when the stream has none at or after `seq` on `filter`. */
export async function nextSeq(nc: NatsConnection, apiPrefix: string, stream: string, filter: string, seq: number, timeoutMs: number): Promise<number> {
  const [a] = await replies(nc).requestAll(nc, [{ subject: `${apiPrefix}.STREAM.MSG.GET.${stream}`, data: enc.encode(JSON.stringify({ seq, next_by_subj: filter })) }], timeoutMs);
  if (a instanceof Error) throw new StreamGetError(`stream ${stream} message get: ${a.message}`);
  if (a!.headers?.hasError) throw new StreamGetError(`stream ${stream} message get: status ${a!.headers.code} ${a!.headers.description}`);
  const r = JSON.parse(dec.decode(a!.data)) as { message?: { seq?: number }; error?: { code?: number; err_code?: number; description?: string } };
  if (r.error) {
    if (r.error.err_code === NO_MESSAGE) return 0; // (a missing stream is a 404 too: 10059, an error)
    throw new StreamGetError(`stream ${stream} message get: ${r.error.description ?? JSON.stringify(r.error)}`);
  }
  if (typeof r.message?.seq !== 'number') throw new StreamGetError(`stream ${stream} message get: an answer without a sequence`);
  return r.message.seq;
}
