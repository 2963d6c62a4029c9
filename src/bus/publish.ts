/**
 * Durable publish to JetStream with the stream's ack, retried on transient failures.
 * A retry is safe: every publish carries `Nats-Msg-Id` (the batch id), and the stream stores
 * a message id once within its duplicate window, so a retried batch is never stored twice.
 */
import type { MsgHdrs, NatsConnection } from '@nats-io/transport-node';
import { natsLog as log } from '../log.js';
import { publishDuration, streamKind } from '../metrics/index.js';

/** The server answered and refused the message (as opposed to no answer in time). */
export class PublishError extends Error {}

export interface PubAck {
  stream: string;
  seq: number;
  duplicate?: boolean;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function publishDurable(nc: NatsConnection, subject: string, data: Uint8Array, headers: MsgHdrs, msgId: string, timeoutMs: number, attempts = 3): Promise<PubAck> {
  const started = performance.now();
  const observe = (outcome: 'ok' | 'error'): void => publishDuration.observe({ stream: streamKind(subject), outcome }, (performance.now() - started) / 1000);
  headers.set('Nats-Msg-Id', msgId);
  let last: unknown;
  for (let i = 0; i < attempts; i++) {
    if (i > 0) await sleep(25 * 2 ** i);
    try {
      const r = await nc.request(subject, data, { headers, timeout: timeoutMs });
      if (r.headers?.hasError) throw new PublishError(`status ${r.headers.code} ${r.headers.description}`);
      if (r.data.length === 0) throw new PublishError(`empty reply (headers: ${r.headers ? JSON.stringify([...r.headers.keys()].map((k) => [k, r.headers!.get(k)])) : 'none'})`);
      const ack = JSON.parse(new TextDecoder().decode(r.data)) as PubAck & { error?: { code: number; err_code?: number; description: string } };
      if (ack.error) throw new PublishError(`JetStream error ${ack.error.code}/${ack.error.err_code}: ${ack.error.description}`);
      if (!ack.stream) throw new PublishError('invalid ack (no stream)');
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
