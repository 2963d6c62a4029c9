/**
 * @usage-billing/sdk — the producer SDK of the usage-billing service.
 */
export { SignalClient, API_MAX_SIGNALS } from './client.js';
export type { Signal, CustomerRef, ProductRef, SignalClientOptions, Compression, Delivered, Receipt, FlushResult } from './client.js';
export { ClientClosedError, DeliveryError, InvalidSignalError, NetworkError, RetriesExhaustedError, SignalApiError, SignalRejectedError } from './errors.js';
export type { ApiErrorBody, SignalErrorItem, SignalFailure } from './errors.js';
export { convertResult } from './analytics.js';
export type { AnalyticsColumn, AnalyticsMeta, AnalyticsQueryOptions, AnalyticsResult } from './analytics.js';
export { parseType, convertValue } from './types.js';
export type { DecimalFactory, TypeNode } from './types.js';
export { backoffMs, rateLimitWaitMs, parseRetryAfter } from './backoff.js';
