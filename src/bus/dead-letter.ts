/**
 * The dead-letter stream's one way in: a message the engine refuses for its content (a
 * pipeline batch, a billing rows message) is published to `<P>_SIGNALS_DLQ` under
 * `<P>.dlq.<org>` (the organization is its subject's last token) with its own headers, the
 * reason, and the stream and sequence it came from; then it is acked, so it cannot hold back
 * what comes after it. Stored once per `msgId` (a dead-lettering repeated after a crash).
 */
import type { JsMsg } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/transport-node';
import type { Nats } from './connection.js';
import { publishDurable } from './publish.js';

/** Returns the reason recorded (`reason`, or the error's message; at most 2,000 characters). */
export async function deadLetter(nats: Nats, m: JsMsg, err: unknown, msgId: string, timeoutMs: number): Promise<string> {
  const reason = (err instanceof Error ? err.message : String(err)).slice(0, 2_000);
  const h = natsHeaders();
  if (m.headers) for (const k of m.headers.keys()) if (!k.startsWith('Nats-')) h.set(k, m.headers.get(k));
  h.set('Billing-Dead-Letter-Reason', reason.replace(/[\r\n]+/g, ' '));
  h.set('Billing-Original-Stream', m.info.stream);
  h.set('Billing-Original-Seq', String(m.seq));
  await publishDurable(nats.nc, nats.topology.deadLetters.subject(m.subject.split('.').pop()!), m.data, h, msgId, timeoutMs);
  m.ack();
  return reason;
}
