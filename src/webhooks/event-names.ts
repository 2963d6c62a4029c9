/**
 * The ten webhook event names of spec section 6, in the spec's order: the receiver package's
 * list (packages/receiver/src/events.ts), so the service and its receivers name the same events.
 */
import { WEBHOOK_EVENTS, type WebhookEventName } from '../../packages/receiver/src/events.js';

export { WEBHOOK_EVENTS };

export type WebhookEvent = WebhookEventName;

export const isWebhookEvent = (x: string): x is WebhookEvent => (WEBHOOK_EVENTS as readonly string[]).includes(x);
