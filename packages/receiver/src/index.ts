/**
 * @usage-billing/receiver: receive the usage-billing service's webhooks.
 *
 * - `verifyWebhook(rawBody, header, secret)`: the signature rules of spec 5.2.
 * - `WebhookEvent`: the ten events as a discriminated union on `event` (spec 2.4–2.8, 6).
 * - `creditsDecimals`, `capDecimals`, `numberToDecimal`, `toDecimal`: exact decimals as strings.
 * - `dedupeKey`, `DedupeStore`, `MemoryDedupeStore`, `RedisDedupeStore`: deduplication by business ids.
 * - `WebhookReceiver`: all of the above in one call per request.
 */
export * from './signature.js';
export * from './verify.js';
export * from './events.js';
export * from './envelope.js';
export * from './decimal.js';
export * from './dedupe.js';
export * from './receiver.js';
