/**
 * The delivery log: one record per attempt (and per event not delivered because its webhook
 * is off), in the JetStream stream `<NATS_PREFIX>_DELIVERIES`, subject
 * `<NATS_PREFIX>.deliveries.<org>.<mode>` (src/bus/topology.ts), the latest 1,000 records per organization and mode
 * kept on disk. Listed newest first through the API and the settings page.
 */
import { DeliverPolicy, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import type { Nats } from '../bus/connection.js';
import { ensure } from '../bus/topology.js';
import type { Mode } from '../shared/mode.js';

export type Outcome = 'delivered' | 'failed' | 'not-delivered';

export interface DeliveryRecord {
  /** Id of the delivery (one event to one webhook); attempts of it share it. */
  deliveryId: string;
  attempt: number;
  event: string;
  /** The event's id on the bus (for resends), or the test delivery's id. */
  eventId: string;
  /** Sequence of the event in the events stream (resend reads it back); null for tests. */
  eventSeq: number | null;
  isTest: boolean;
  at: string;
  url: string | null;
  statusCode: number | null;
  latencyMs: number | null;
  outcome: Outcome;
  error: string | null;
  /** When the next attempt is due, for a failed attempt that will be retried. */
  nextAttemptAt: string | null;
}

export const PER_ORG_RECORDS = 1_000;

export class DeliveryLog {
  constructor(private readonly nats: Nats) {}

  get stream(): string {
    return this.nats.topology.deliveries.stream;
  }

  async ensure(): Promise<void> {
    // Created once and left alone, except that its replicas are raised to NATS_REPLICAS.
    await ensure(this.nats, {
      existing: 'keep',
      stream: {
        name: this.stream,
        subjects: [this.nats.topology.deliveries.subjects],
        retention: RetentionPolicy.Limits,
        storage: StorageType.File,
        max_msgs_per_subject: PER_ORG_RECORDS,
      },
    });
  }

  async record(orgId: string, mode: Mode, r: DeliveryRecord): Promise<void> {
    await this.nats.js.publish(this.nats.topology.deliveries.subject(orgId, mode), JSON.stringify(r));
  }

  /** The latest `limit` records, newest first. */
  async list(orgId: string, mode: Mode, limit = 100): Promise<DeliveryRecord[]> {
    const subject = this.nats.topology.deliveries.subject(orgId, mode);
    const out: DeliveryRecord[] = [];
    let total = 0;
    try {
      const info = await this.nats.jsm.streams.info(this.stream, { subjects_filter: subject });
      total = info.state.subjects?.[subject] ?? 0;
    } catch {
      return out;
    }
    if (total === 0) return out;
    // One subject as a string: NATS 2.9 knows only the singular filter_subject.
    const c = await this.nats.js.consumers.get(this.stream, { filter_subjects: subject, deliver_policy: DeliverPolicy.All });
    const msgs = await c.fetch({ max_messages: total, expires: 2_000 });
    for await (const m of msgs) {
      out.push(m.json<DeliveryRecord>());
      if (m.info.pending === 0) break;
    }
    return out.reverse().slice(0, limit);
  }
}
