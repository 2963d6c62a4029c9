/**
 * The dispatcher (ROLE=dispatcher, or part of ROLE=all): reads the billing event bus
 * (`<P>_EVENTS`, durable consumer `dispatcher`) and delivers each event to the webhook its
 * organization configured for that event name.
 *
 * - Envelope `{event, timestamp, isTest: false, data}`, built from the event alone (the
 *   timestamp is the event's time), so every attempt sends the same bytes; each attempt is
 *   signed afresh with the organization's current secret (read at delivery time: a rotation
 *   applies from the next attempt on).
 * - The URL is checked again at delivery time and the connection goes to the vetted addresses
 *   only (deliver.ts, the same attempt function as test deliveries); redirects are not followed; any 2xx is success; each attempt is bounded
 *   by WEBHOOK_TIMEOUT_MS.
 * - Ack wait: DISPATCHER_ACK_WAIT_MS (default 2 × WEBHOOK_TIMEOUT_MS + 10 s, always longer than
 *   one attempt), after which an event held by a dispatcher that died is handed out again.
 * - Retries: a failed attempt naks the message with the next delay of WEBHOOK_RETRY_SCHEDULE
 *   (default 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: 8 attempts over ~27.6 hours), each
 *   delay with ±20% random jitter; after
 *   the last one the delivery is logged as failed for good (it can be resent). The schedule
 *   lives in JetStream's redelivery, so a dispatcher crash loses nothing: an unacked event is
 *   redelivered after the ack wait (at least once).
 * - Up to 64 deliveries run at once and each is bounded by the timeout, so one slow receiver
 *   never holds back other organizations.
 * - An event whose webhook is unconfigured or disabled, or an organization without a signing
 *   secret: logged as not delivered and acked (never retried).
 */
import type { ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import { AckPolicy } from '@nats-io/jetstream';
import { PULL_EXPIRES_MS, type Nats } from '../bus/connection.js';
import { ensure } from '../bus/topology.js';
import { H_RESEND_OF, isEventName, type BusEvent } from '../bus/events.js';
import { webhooksLog as log } from '../log.js';
import type { Mode } from '../shared/mode.js';
import type { WebhookStore } from './store.js';
import type { DeliveryLog, DeliveryRecord } from './delivery-log.js';
import { open } from './secret-box.js';
import type { Deliverer } from './deliver.js';
import { secretContext } from './api.js';
import { NS_PER_MS } from '../shared/time.js';

const CONCURRENCY = 64;

export interface DispatcherOptions {
  key: Buffer;
  /** The one attempt function (deliver.ts), shared with test deliveries. */
  deliverer: Deliverer;
  retryScheduleMs: number[];
  /** How long an unacknowledged event waits before JetStream hands it out again (DISPATCHER_ACK_WAIT_MS). */
  ackWaitMs: number;
}

export class Dispatcher {
  private messages: ConsumerMessages | null = null;
  private loopDone: Promise<void> | null = null;
  private readonly inflight = new Set<Promise<void>>();

  constructor(
    private readonly nats: Nats,
    private readonly store: WebhookStore,
    private readonly deliveries: DeliveryLog,
    private readonly opts: DispatcherOptions,
  ) {}

  async start(): Promise<void> {
    const events = this.nats.topology.events;
    const config = {
      durable_name: events.consumer,
      ack_policy: AckPolicy.Explicit,
      // Longer than one attempt (configuration checks it); a dispatcher that died gives its
      // events back after this.
      ack_wait: this.opts.ackWaitMs * NS_PER_MS,
      max_ack_pending: 10_000,
      max_deliver: -1,
    };
    // The consumer outlives the process: a changed DISPATCHER_ACK_WAIT_MS applies on restart.
    await ensure(this.nats, { consumer: config, of: events.stream });
    const consumer = await this.nats.js.consumers.get(events.stream, events.consumer);
    this.messages = await consumer.consume({ max_messages: CONCURRENCY, expires: PULL_EXPIRES_MS });
    this.loopDone = this.loop(this.messages);
  }

  private async loop(messages: ConsumerMessages): Promise<void> {
    for await (const m of messages) {
      const p: Promise<void> = this.handle(m)
        .catch((err: unknown) => {
          log.error('webhook dispatch failed; will be redelivered', { err, seq: m.seq });
          m.nak(5_000);
        })
        .finally(() => this.inflight.delete(p));
      this.inflight.add(p);
      if (this.inflight.size >= CONCURRENCY) await Promise.race(this.inflight);
    }
  }

  private async handle(m: JsMsg): Promise<void> {
    // Other producers publish to the subject too: the name is checked before anything else.
    const e = m.json<BusEvent>();
    const mode: Mode = e.livemode ? 'live' : 'test';
    const attempt = m.info.deliveryCount;
    const resendOf = m.headers?.get(H_RESEND_OF) || null;
    const deliveryId = resendOf ? `${e.id}:resend:${m.seq}` : e.id;
    const base: Omit<DeliveryRecord, 'statusCode' | 'latencyMs' | 'outcome' | 'error' | 'nextAttemptAt'> = {
      deliveryId, attempt, event: e.event, eventId: e.id, eventSeq: m.seq, isTest: false, at: new Date().toISOString(), url: null,
    };
    if (!isEventName(e.event)) {
      m.ack();
      return;
    }
    const doc = await this.store.get(e.organizationId, mode);
    const w = doc.webhooks[e.event];
    const notDelivered = async (error: string): Promise<void> => {
      await this.deliveries.record(e.organizationId, mode, { ...base, url: w?.url ?? null, statusCode: null, latencyMs: null, outcome: 'not-delivered', error, nextAttemptAt: null });
      m.ack();
    };
    if (!w?.url) return notDelivered('no webhook URL is configured for this event');
    if (!w.enabled) return notDelivered('the webhook for this event is disabled');
    if (!doc.secret) return notDelivered('the organization has no signing secret (POST /api/v2/webhooks/rotate-secret)');

    const secret = open(this.opts.key, doc.secret, secretContext(e.organizationId, mode));
    const body = Buffer.from(JSON.stringify({ event: e.event, timestamp: e.occurredAt, isTest: false, data: e.data }));
    const outcome = await this.opts.deliverer.attempt(w.url, body, secret);
    const schedule = this.opts.retryScheduleMs;
    // ±20% jitter, so receivers that failed together are not retried in lockstep.
    const retryIn = outcome.ok || attempt > schedule.length ? null : Math.round(schedule[attempt - 1]! * (0.8 + Math.random() * 0.4));
    await this.deliveries.record(e.organizationId, mode, {
      ...base,
      url: w.url,
      statusCode: outcome.statusCode,
      latencyMs: outcome.latencyMs,
      outcome: outcome.ok ? 'delivered' : 'failed',
      error: outcome.error,
      nextAttemptAt: retryIn === null ? null : new Date(Date.now() + retryIn).toISOString(),
    });
    if (retryIn === null) m.ack();
    else m.nak(retryIn);
  }

  async stop(): Promise<void> {
    this.messages?.stop();
    await this.loopDone;
    await Promise.allSettled([...this.inflight]);
  }
}
