/**
 * Webhook management (spec 4.4), with an organization API key, per organization and mode, in
 * the shapes of the official client (`@paid-ai/paid-node`: `Webhook`, `WebhookListResponse`,
 * `WebhookTestResponse`), the service's own fields beside them:
 *   GET   /api/v2/webhooks                              {data: Webhook[], signingSecret}: the ten events
 *   PATCH /api/v2/webhooks/:event {url?, enabled?}      configure one (url checked: public HTTPS); answers its Webhook
 *   POST  /api/v2/webhooks/:event/test {}               a synthetic delivery now; answers {success, …its outcome}
 *   POST  /api/v2/webhooks/rotate-secret                a new signing secret, shown this once
 *   GET   /api/v2/webhook-deliveries                    the delivery log, newest first
 *   POST  /api/v2/webhook-deliveries/:deliveryId/resend deliver that event again
 *
 * A Webhook is `{id, name, description, enabled, url, lastSentAt, lastStatus}` plus
 * `updatedAt` and `lastDelivery`: `id` is `wh_` and an HMAC (keyed with a key derived from
 * WEBHOOK_ENCRYPTION_KEY) of organization, mode and event, stable and revealing nothing;
 * `lastSentAt`/`lastStatus` come from the newest attempt of the event in the delivery log,
 * test deliveries included (a test is a real delivery to the URL); events logged as not
 * delivered (webhook off, no secret) are no attempt and do not count.
 *
 * A webhook is enabled only with a URL: a change that would leave it enabled without one
 * (`{enabled: true}` with no URL set, `{url: null}` while enabled) answers 409
 * WEBHOOK_NOT_READY and changes nothing; `{url: null, enabled: false}` clears it.
 *
 * A test delivery the receiver refused or never answered is still a 200 with
 * `success: false` (the test was sent; its outcome is the answer); 409 WEBHOOK_NOT_READY
 * means nothing was sent.
 *
 * At most {@link OUTBOUND_IN_FLIGHT} URL checks and test deliveries of one organization and
 * mode run at once in a process (in-flight.ts); one more answers 429 CONCURRENCY_LIMIT_EXCEEDED
 * and changes nothing.
 *
 * The first signing secret: an organization has none until it calls rotate-secret (or
 * presses "Rotate" on the settings page); until then deliveries are logged as not
 * delivered ("no signing secret") and test deliveries answer 409. Secrets are sealed with
 * WEBHOOK_ENCRYPTION_KEY (secret-box.ts) and never returned again.
 */
import { createHmac, hkdfSync, randomBytes } from 'node:crypto';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { ApiError } from '../errors.js';
import type { Method, Reply, Request, Route } from '../http/route.js';
import { parseJson } from '../http/json.js';
import type { Principal } from '../orgs/registry.js';
import type { Nats } from '../bus/connection.js';
import { publishDurable } from '../bus/publish.js';
import { H_MODE, H_ORG } from '../bus/batch.js';
import { EVENT_NAMES, H_RESEND_OF, eventDescription, isEventName, samplePayload, type EventName } from '../bus/events.js';
import type { Mode } from '../shared/mode.js';
import { open, seal } from './secret-box.js';
import { newSigningSecret } from './signature.js';
import type { WebhookDoc, WebhookStore } from './store.js';
import { PER_ORG_RECORDS, type DeliveryLog, type DeliveryRecord } from './delivery-log.js';
import type { Deliverer } from './deliver.js';
import { InFlight } from './in-flight.js';

/** URL checks and test deliveries of one organization and mode at once, per process. */
export const OUTBOUND_IN_FLIGHT = 2;

export interface WebhookOptions {
  /** WEBHOOK_ENCRYPTION_KEY; null: the webhook routes answer 503. */
  key: Buffer | null;
  /** URL checks and test deliveries (the same attempt function as the dispatcher's). */
  deliverer: Deliverer;
  publishTimeoutMs: number;
}

/** Bodies of the webhook API are small JSON documents. */
const BODY_LIMIT = 64 * 1024;

export const secretContext = (orgId: string, mode: string): string => `webhook-secret:${orgId}:${mode}`;

/** The newest attempt of a delivery, as the webhook list shows it beside `lastStatus`. */
export interface LastDelivery {
  deliveryId: string;
  attempt: number;
  isTest: boolean;
  statusCode: number | null;
}

/** A webhook as answered: the official client's `Webhook`, then the service's own fields. */
export interface WebhookView {
  id: string;
  name: EventName;
  description: string;
  enabled: boolean;
  url: string | null;
  lastSentAt: string | null;
  lastStatus: 'success' | 'failed' | null;
  updatedAt: string | null;
  lastDelivery: LastDelivery | null;
}

/** The key of webhook ids: derived from the webhook key (HKDF-SHA256), so the sealing key itself signs nothing. */
export const webhookIdKey = (key: Buffer): Buffer => Buffer.from(hkdfSync('sha256', key, Buffer.alloc(0), 'webhook-id', 32));

/**
 * The stable id of a webhook: `wh_` and 128 bits of an HMAC-SHA256, keyed with
 * {@link webhookIdKey}, over organization, mode and event. The same for the same three while
 * WEBHOOK_ENCRYPTION_KEY stays; without the key it tells nothing about them.
 */
export function webhookId(idKey: Buffer, orgId: string, mode: Mode, event: EventName): string {
  return `wh_${createHmac('sha256', idKey).update(`${orgId}\0${mode}\0${event}`).digest().subarray(0, 16).toString('base64url')}`;
}

/** Per event, its newest attempt (delivered or failed) among `records` (newest first). */
export function lastAttempts(records: readonly DeliveryRecord[]): Map<string, DeliveryRecord> {
  const out = new Map<string, DeliveryRecord>();
  for (const r of records) if (r.outcome !== 'not-delivered' && !out.has(r.event)) out.set(r.event, r);
  return out;
}

export class WebhookApi {
  private readonly outbound = new InFlight(OUTBOUND_IN_FLIGHT);
  private readonly idKey: Buffer | null;

  constructor(
    private readonly store: WebhookStore,
    private readonly log: DeliveryLog,
    private readonly nats: Nats,
    private readonly opts: WebhookOptions,
  ) {
    this.idKey = opts.key ? webhookIdKey(opts.key) : null;
  }

  /** The routes, relative to `/api/v2` (src/routes.ts), authenticated with the API key. */
  routes(): Route<Principal>[] {
    const r = (method: Method, path: string, fn: (req: Request<Principal>, who: Principal) => Promise<Reply>): Route<Principal> => ({
      method,
      path,
      auth: 'api-key',
      ...(method === 'get' ? {} : { bodyLimit: BODY_LIMIT }),
      handler: (req) => {
        if (!this.opts.key) throw new ApiError('WEBHOOKS_UNAVAILABLE', 'webhooks are not configured on this service (WEBHOOK_ENCRYPTION_KEY is not set)');
        return fn(req, req.principal!);
      },
    });
    return [
      r('get', '/webhooks', (_req, who) => this.list(who)),
      r('post', '/webhooks/rotate-secret', (_req, who) => this.rotate(who)),
      r('patch', '/webhooks/:event', (req, who) => this.configure(req, who)),
      r('post', '/webhooks/:event/test', (req, who) => this.test(req, who)),
      r('get', '/webhook-deliveries', (req, who) => this.deliveries(req, who)),
      r('post', '/webhook-deliveries/:deliveryId/resend', (req, who) => this.resend(req, who)),
    ];
  }

  private async list(who: Principal): Promise<Reply> {
    const [doc, last] = await Promise.all([this.store.get(who.org.id, who.mode), this.lastAttempts(who)]);
    return {
      status: 200,
      body: {
        data: EVENT_NAMES.map((event) => this.view(who, event, doc, last.get(event))),
        signingSecret: { exists: doc.secret !== null, createdAt: doc.secret?.createdAt ?? null },
      },
    };
  }

  /** The newest attempt per event in the organization's delivery log (the latest {@link PER_ORG_RECORDS} records). */
  private async lastAttempts(who: Principal): Promise<Map<string, DeliveryRecord>> {
    return lastAttempts(await this.log.list(who.org.id, who.mode, PER_ORG_RECORDS));
  }

  private view(who: Principal, event: EventName, doc: WebhookDoc, last: DeliveryRecord | undefined): WebhookView {
    const w = doc.webhooks[event];
    return {
      id: webhookId(this.idKey!, who.org.id, who.mode, event),
      name: event,
      description: eventDescription(event),
      enabled: w?.enabled ?? false,
      url: w?.url ?? null,
      lastSentAt: last?.at ?? null,
      lastStatus: last ? (last.outcome === 'delivered' ? 'success' : 'failed') : null,
      updatedAt: w?.updatedAt ?? null,
      lastDelivery: last ? { deliveryId: last.deliveryId, attempt: last.attempt, isTest: last.isTest, statusCode: last.statusCode } : null,
    };
  }

  /** Runs `fn` holding one of the organization's outbound places, or refuses with 429. */
  private async outboundWork<T>(who: Principal, what: string, fn: () => Promise<T>): Promise<T> {
    const leave = this.outbound.tryEnter(`${who.org.id}:${who.mode}`);
    if (!leave) {
      throw new ApiError('CONCURRENCY_LIMIT_EXCEEDED', `${what}: at most ${OUTBOUND_IN_FLIGHT} URL checks and test deliveries of an organization run at once; retry when one has answered`);
    }
    try {
      return await fn();
    } finally {
      leave();
    }
  }

  private eventParam(req: Request): EventName {
    const event = req.params[0] ?? '';
    if (!isEventName(event)) throw new ApiError('NOT_FOUND', `no webhook event "${event}"; the events are ${EVENT_NAMES.join(', ')}`);
    return event;
  }

  private async configure(req: Request, who: Principal): Promise<Reply> {
    const event = this.eventParam(req);
    const body = parseJson(req.body);
    if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new ApiError('INVALID_BODY', 'the body must be a JSON object {"url": "https://…", "enabled": true}');
    const b = body as Record<string, unknown>;
    const unknown = Object.keys(b).filter((k) => k !== 'url' && k !== 'enabled');
    if (unknown.length > 0) throw new ApiError('INVALID_BODY', `unknown field "${unknown[0]}"; the fields are url and enabled`);
    if (!('url' in b) && !('enabled' in b)) throw new ApiError('INVALID_BODY', 'url or enabled: at least one is required');
    if ('enabled' in b && typeof b.enabled !== 'boolean') throw new ApiError('INVALID_WEBHOOK', 'enabled: must be true or false');
    let url: string | null | undefined;
    if ('url' in b) {
      if (b.url === null) url = null;
      else if (typeof b.url !== 'string') throw new ApiError('INVALID_WEBHOOK', 'url: must be a string (an absolute HTTPS URL) or null');
      else {
        const target = b.url;
        const check = await this.outboundWork(who, 'url', () => this.opts.deliverer.check(target));
        if (!check.ok) throw new ApiError('INVALID_WEBHOOK', `url: ${check.reason}`);
        url = check.url.href;
      }
    }
    const now = new Date().toISOString();
    const { doc } = await this.store.change(who.org.id, who.mode, (d) => {
      const cur = d.webhooks[event] ?? { url: null, enabled: false, updatedAt: now };
      const next = { url: url === undefined ? cur.url : url, enabled: typeof b.enabled === 'boolean' ? b.enabled : cur.enabled, updatedAt: now };
      if (next.enabled && next.url === null) {
        throw new ApiError('WEBHOOK_NOT_READY', b.enabled === true
          ? `enabled: ${event} ${url === null ? 'cannot be enabled without a URL' : 'has no URL'}; send {"url": "https://…", "enabled": true} to set both`
          : `url: ${event} is enabled; a URL can be cleared only while it is disabled (send {"url": null, "enabled": false})`);
      }
      d.webhooks[event] = next;
    });
    return { status: 200, body: this.view(who, event, doc, (await this.lastAttempts(who)).get(event)) };
  }

  private async rotate(who: Principal): Promise<Reply> {
    const secret = newSigningSecret();
    const sealed = seal(this.opts.key!, secret, secretContext(who.org.id, who.mode));
    await this.store.change(who.org.id, who.mode, (d) => {
      d.secret = sealed;
    });
    return { status: 201, body: { signingSecret: secret, createdAt: sealed.createdAt } };
  }

  private async test(req: Request, who: Principal): Promise<Reply> {
    const event = this.eventParam(req);
    const body = parseJson(req.body.length === 0 ? Buffer.from('{}') : req.body);
    if (typeof body !== 'object' || body === null || Array.isArray(body) || Object.keys(body).length > 0) throw new ApiError('INVALID_BODY', 'the body of a test delivery is an empty JSON object {}');
    const doc = await this.store.get(who.org.id, who.mode);
    const w = doc.webhooks[event];
    if (!w?.url) throw new ApiError('WEBHOOK_NOT_READY', `${event} has no URL; set one with PATCH /api/v2/webhooks/${event}`);
    if (!w.enabled) throw new ApiError('WEBHOOK_NOT_READY', `${event} is disabled; enable it first`);
    if (!doc.secret) throw new ApiError('WEBHOOK_NOT_READY', 'the organization has no signing secret yet; create one with POST /api/v2/webhooks/rotate-secret');
    const secret = open(this.opts.key!, doc.secret, secretContext(who.org.id, who.mode));
    const now = new Date();
    const payload = Buffer.from(JSON.stringify({ event, timestamp: now.toISOString(), isTest: true, data: samplePayload(event, now) }));
    const deliveryId = `whd_test_${randomBytes(12).toString('base64url')}`;
    const url = w.url;
    const outcome = await this.outboundWork(who, 'test delivery', () => this.opts.deliverer.attempt(url, payload, secret, 'test'));
    await this.log.record(who.org.id, who.mode, {
      deliveryId, attempt: 1, event, eventId: deliveryId, eventSeq: null, isTest: true, at: now.toISOString(), url: w.url,
      statusCode: outcome.statusCode, latencyMs: outcome.latencyMs, outcome: outcome.ok ? 'delivered' : 'failed', error: outcome.error, nextAttemptAt: null,
    });
    // A 200 whatever the receiver answered: the test was sent, and `success` is its outcome.
    return { status: 200, body: { success: outcome.ok, deliveryId, event, delivered: outcome.ok, statusCode: outcome.statusCode, latencyMs: outcome.latencyMs, error: outcome.error } };
  }

  private async deliveries(req: Request, who: Principal): Promise<Reply> {
    const raw = new URLSearchParams(req.query).get('limit');
    const limit = raw === null ? 100 : Number(raw);
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new ApiError('INVALID_WEBHOOK', 'limit: a whole number from 1 to 1000');
    return { status: 200, body: { deliveries: await this.log.list(who.org.id, who.mode, limit) } };
  }

  private async resend(req: Request, who: Principal): Promise<Reply> {
    const deliveryId = req.params[0] ?? '';
    const rec = (await this.log.list(who.org.id, who.mode, 1000)).find((r) => r.deliveryId === deliveryId);
    if (!rec) throw new ApiError('NOT_FOUND', `deliveryId: no delivery "${deliveryId}" in the log`);
    if (rec.eventSeq === null) throw new ApiError('INVALID_WEBHOOK', 'deliveryId: a test delivery cannot be resent; send a new test');
    let msg;
    try {
      msg = await this.nats.jsm.streams.getMessage(this.nats.topology.events.stream, { seq: rec.eventSeq });
    } catch {
      throw new ApiError('NOT_FOUND', 'deliveryId: the event is no longer kept (events are kept 30 days)');
    }
    if (!msg) throw new ApiError('NOT_FOUND', 'deliveryId: the event is no longer kept (events are kept 30 days)');
    const h = natsHeaders();
    h.set(H_ORG, who.org.id);
    h.set(H_MODE, who.mode);
    h.set(H_RESEND_OF, deliveryId);
    await publishDurable(this.nats.nc, msg.subject, msg.data, h, `resend-${randomBytes(12).toString('base64url')}`, this.opts.publishTimeoutMs);
    return { status: 202, body: { resent: deliveryId, event: rec.event } };
  }
}
