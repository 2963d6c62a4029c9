/**
 * Webhook settings of one organization and mode: per event name its URL and switch, and
 * the sealed signing secret (secret-box.ts). One JSON document per organization and mode
 * in the JetStream KV bucket `<NATS_PREFIX>_webhooks` (file storage), key `wh.<org>.<mode>`,
 * changed with compare-and-set (a change lost to a concurrent writer is re-applied).
 */
import type { KV } from '@nats-io/kv';
import { StorageType } from '@nats-io/jetstream';
import type { Nats } from '../bus/connection.js';
import { ensure } from '../bus/topology.js';
import type { Mode } from '../shared/mode.js';
import type { SealedSecret } from './secret-box.js';
import type { EventName } from '../bus/events.js';

export interface WebhookSetting {
  url: string | null;
  enabled: boolean;
  updatedAt: string;
}

export interface WebhookDoc {
  webhooks: Partial<Record<EventName, WebhookSetting>>;
  secret: SealedSecret | null;
}

const empty = (): WebhookDoc => ({ webhooks: {}, secret: null });
export const webhookKey = (orgId: string, mode: Mode): string => `wh.${orgId}.${mode}`;

/** Webhook settings and sealed signing secrets, one document per organization and mode: on disk, the latest revision. */
export function webhookBucket(nats: Nats): Promise<KV> {
  return ensure(nats, { bucket: nats.topology.buckets.webhooks, options: { history: 1, storage: StorageType.File } });
}

export class WebhookStore {
  constructor(private readonly kv: KV) {}

  async get(orgId: string, mode: Mode): Promise<WebhookDoc> {
    const e = await this.kv.get(webhookKey(orgId, mode));
    return e && e.length > 0 ? (e.json() as WebhookDoc) : empty();
  }

  /** Applies `fn` to a copy and writes it with compare-and-set; `fn` may run more than once. */
  async change<T>(orgId: string, mode: Mode, fn: (doc: WebhookDoc) => T): Promise<{ doc: WebhookDoc; result: T }> {
    const key = webhookKey(orgId, mode);
    for (let attempt = 0; ; attempt++) {
      const e = await this.kv.get(key);
      const exists = e !== null && e.length > 0;
      const doc = exists ? (e.json() as WebhookDoc) : empty();
      const result = fn(doc);
      try {
        if (exists) await this.kv.update(key, JSON.stringify(doc), e.revision);
        else await this.kv.create(key, JSON.stringify(doc));
        return { doc, result };
      } catch (err) {
        if (attempt >= 20 || !/wrong last sequence|key exists/i.test((err as Error).message)) throw err;
        await new Promise((r) => setTimeout(r, Math.random() * 20));
      }
    }
  }
}
