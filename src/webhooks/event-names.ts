/** The ten webhook event names of spec section 6, in the spec's order. */
export const WEBHOOK_EVENTS = [
  'billing-invoice-created',
  'billing-invoice-paid',
  'billing-checkout-created',
  'billing-checkout-completed',
  'billing-checkout-expired',
  'billing-payment-succeeded',
  'billing-payment-failed',
  'billing-credits-depleted',
  'billing-overage-incurred',
  'billing-credit-cap-reached',
] as const;

export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];

export const isWebhookEvent = (x: string): x is WebhookEvent => (WEBHOOK_EVENTS as readonly string[]).includes(x);
