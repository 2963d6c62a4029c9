/**
 * SignalClient: buffers signals, sends them in batches to `POST /api/v2/signals/bulk`, and
 * retries as spec 7.2 says.
 *
 * Life of a signal: `send()` gives it an idempotency key (unless it has one or
 * `autoIdempotencyKeys` is false), serializes it once and waits for room in the bounded
 * buffer (back-pressure) → it joins the open batch, which is cut when it holds
 * `maxBatchSignals` signals, when the next signal would push the body past `maxBodyBytes`
 * (measured on the serialized text), or `flushIntervalMs` after its first signal → at most
 * `maxConcurrentRequests` batches are in flight → a batch is resent, byte for byte the same
 * signals with the same keys, after a 429 RATE_LIMIT_EXCEEDED (Retry-After seconds plus a
 * jittered exponential term that grows with each repeat), a 5xx, a 408 or a network error,
 * until `maxAttempts` or `maxRetryTimeMs` run out → each signal's `delivered` promise
 * settles (a signal the API refused alone, listed in the answer's `errors` by its index,
 * rejects with its own SignalRejectedError; the others of its batch resolve), and its slot
 * in the buffer is given back.
 */
import { randomUUID } from 'node:crypto';
import { backoffMs, rateLimitWaitMs, type BackoffOptions } from './backoff.js';
import {
  ClientClosedError,
  DeliveryError,
  InvalidSignalError,
  NetworkError,
  RetriesExhaustedError,
  SignalApiError,
  SignalRejectedError,
  type SignalErrorItem,
  type SignalFailure,
} from './errors.js';
import { apiError, postJson, type Answer } from './transport.js';
import { convertResult, isAnalyticsBody, type AnalyticsQueryOptions, type AnalyticsResult } from './analytics.js';

/** The customer a signal is for: the service's id (`cus_…`) or the producer's own (`externalId` of the customer). */
export type CustomerRef = { customerId: string; externalCustomerId?: never } | { externalCustomerId: string; customerId?: never };

/** The product a signal is attributed to: the service's id (`prod_…`) or the product's `externalId`. */
export type ProductRef = { productId: string; externalProductId?: never } | { externalProductId: string; productId?: never };

/**
 * One signal, as `POST /api/v2/signals/bulk` takes it (docs/api.md "Signals"): the official
 * client's `Paid.Signal` (`@paid-ai/paid-node`) is one, plus the `unitId` extension.
 */
export interface Signal {
  eventName: string;
  customer: CustomerRef;
  attribution?: ProductRef | null;
  /** The customer unit the signal is for (where a credit cap is set). */
  unitId?: string | null;
  /** RFC 3339 with `Z` or an offset (a Date is sent as its ISO string); default: when the API receives it. */
  timestamp?: string | Date;
  idempotencyKey?: string | null;
  data?: Record<string, unknown> | null;
}

export type Compression = 'auto' | 'gzip' | 'none';

export interface SignalClientOptions {
  /** The service's base URL, e.g. `https://billing.example.com` (no trailing path). */
  baseUrl: string;
  /** `sk_live_…` or `sk_test_…`. */
  apiKey: string;
  /** Signals per request, 1 … 500 (the API's limit). Default 500. */
  maxBatchSignals?: number;
  /** Upper bound of a request body in bytes, measured on the uncompressed JSON. Default 1,000,000 (the API's `MAX_BODY_BYTES` default). */
  maxBodyBytes?: number;
  /** A batch is sent at the latest this long after its first signal. Default 250 ms. */
  flushIntervalMs?: number;
  /** Signals held at once (buffered and in flight); `send()` waits for room beyond. Default 10,000. */
  maxBufferedSignals?: number;
  /** Batches in flight at once. Default 4. */
  maxConcurrentRequests?: number;
  /** Give every signal without an `idempotencyKey` a random UUID. Default true. */
  autoIdempotencyKeys?: boolean;
  /**
   * Give every signal without a `timestamp` the time of `send()` (ISO 8601, UTC). Default false:
   * the API then stamps the time it received the attempt that was accepted, which after
   * retries can be seconds (or a billing period boundary) later than the usage.
   */
  stampTimestamps?: boolean;
  /** Request body compression. Default `'auto'`: gzip, falling back to none for good when the server refuses it. */
  compression?: Compression;
  /** In `'auto'` mode, bodies smaller than this are sent uncompressed. Default 1024 bytes. */
  compressMinBytes?: number;
  /** Requests per batch, the first included. Default 10. */
  maxAttempts?: number;
  /** A batch is given up when the next wait would end later than this after its first attempt. Default 120,000 ms. */
  maxRetryTimeMs?: number;
  /** First term of the exponential backoff. Default 250 ms. */
  initialBackoffMs?: number;
  /** Ceiling of the exponential backoff. Default 30,000 ms. */
  maxBackoffMs?: number;
  /** One request's time limit; past it the request counts as a network error and is retried. Default 30,000 ms. */
  requestTimeoutMs?: number;
  /** Called once for every group of signals that was not delivered (besides their `delivered` promises). */
  onError?: (error: Error, signals: Signal[]) => void;
}

/** Where a delivered signal went. */
export interface Delivered {
  batchId: string;
  /** `sig_<batchId without "bat_">_<index in the request>`. */
  signalId: string;
  idempotencyKey: string | undefined;
}

/** What `send()` gives back once the signal is in the buffer. */
export interface Receipt {
  /** The key the signal is sent with (its own, or the one the SDK gave it). */
  idempotencyKey: string | undefined;
  /** Settles when the API accepted the signal (202) or the SDK gave up on it. */
  delivered: Promise<Delivered>;
}

export interface FlushResult {
  /** Signals delivered since the previous flush()/close() returned (duplicates included). */
  delivered: number;
  /** Of those, how many the API answered were repeats of an idempotency key it already had (not ingested again). */
  duplicates: number;
}

interface Item {
  signal: Signal;
  json: string;
  bytes: number;
  key: string | undefined;
  delivered: Promise<Delivered>;
  resolve: (d: Delivered) => void;
  reject: (e: Error) => void;
}

/** `{"signals":[` (12 bytes) + `]}` (2 bytes). */
const ENVELOPE_BYTES = 14;
export const API_MAX_SIGNALS = 500;
/** Failures a DeliveryError lists (all are counted). */
const MAX_KEPT_FAILURES = 1000;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function positiveInt(name: string, v: number | undefined, dflt: number, max = Number.MAX_SAFE_INTEGER): number {
  if (v === undefined) return dflt;
  if (!Number.isInteger(v) || v < 1 || v > max) throw new RangeError(`${name} must be a whole number from 1 to ${max}, got ${v}`);
  return v;
}

function nonNegative(name: string, v: number | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  if (!Number.isFinite(v) || v < 0) throw new RangeError(`${name} must be a number ≥ 0, got ${v}`);
  return v;
}

export class SignalClient {
  readonly baseUrl: string;
  private readonly apiKey: string;
  private readonly maxBatchSignals: number;
  private readonly maxBodyBytes: number;
  private readonly flushIntervalMs: number;
  private readonly maxBuffered: number;
  private readonly maxConcurrent: number;
  private readonly autoKeys: boolean;
  private readonly stampTimestamps: boolean;
  private readonly compression: Compression;
  private readonly compressMinBytes: number;
  private readonly maxAttempts: number;
  private readonly maxRetryTimeMs: number;
  private readonly backoff: BackoffOptions;
  private readonly requestTimeoutMs: number;
  private readonly onError?: (error: Error, signals: Signal[]) => void;

  /** The open batch. */
  private buffer: Item[] = [];
  private bufferBytes = ENVELOPE_BYTES;
  private timer: NodeJS.Timeout | null = null;
  /** Cut batches waiting for a request slot. */
  private readonly ready: Item[][] = [];
  private inFlight = 0;
  /** Signals held (buffered, waiting or in flight) plus slots handed to woken senders. */
  private held = 0;
  private readonly waiters: { resolve: () => void; reject: (e: Error) => void }[] = [];
  /** Every signal not yet settled. */
  private readonly open = new Set<Item>();
  /** No request leaves before this time (set by a 429 RATE_LIMIT_EXCEEDED: the bucket is the organization's). */
  private pausedUntil = 0;
  private gzipRefused = false;
  private readonly nonce = randomUUID();
  private readonly bigintMarker = new RegExp(`"\\\\u0000${this.nonce}:(-?\\d+)"`, 'g');
  private closed = false;
  /** Outcomes since the last flush()/close() returned. */
  private tally: { delivered: number; duplicates: number; failed: number; failures: SignalFailure<Signal>[] } = { delivered: 0, duplicates: 0, failed: 0, failures: [] };
  private readonly analyticsInFlight = new Set<Promise<unknown>>();

  constructor(options: SignalClientOptions) {
    if (!options || typeof options.baseUrl !== 'string' || !/^https?:\/\//.test(options.baseUrl)) {
      throw new TypeError('baseUrl must be an http:// or https:// URL');
    }
    if (typeof options.apiKey !== 'string' || options.apiKey === '') throw new TypeError('apiKey is required');
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.apiKey = options.apiKey;
    this.maxBatchSignals = positiveInt('maxBatchSignals', options.maxBatchSignals, API_MAX_SIGNALS, API_MAX_SIGNALS);
    this.maxBodyBytes = positiveInt('maxBodyBytes', options.maxBodyBytes, 1_000_000);
    this.flushIntervalMs = nonNegative('flushIntervalMs', options.flushIntervalMs, 250);
    this.maxBuffered = positiveInt('maxBufferedSignals', options.maxBufferedSignals, 10_000);
    this.maxConcurrent = positiveInt('maxConcurrentRequests', options.maxConcurrentRequests, 4);
    this.autoKeys = options.autoIdempotencyKeys ?? true;
    this.stampTimestamps = options.stampTimestamps ?? false;
    const compression = options.compression ?? 'auto';
    if (!['auto', 'gzip', 'none'].includes(compression)) throw new RangeError(`compression must be 'auto', 'gzip' or 'none', got ${String(compression)}`);
    this.compression = compression;
    this.compressMinBytes = nonNegative('compressMinBytes', options.compressMinBytes, 1024);
    this.maxAttempts = positiveInt('maxAttempts', options.maxAttempts, 10);
    this.maxRetryTimeMs = nonNegative('maxRetryTimeMs', options.maxRetryTimeMs, 120_000);
    this.backoff = {
      initialBackoffMs: nonNegative('initialBackoffMs', options.initialBackoffMs, 250),
      maxBackoffMs: nonNegative('maxBackoffMs', options.maxBackoffMs, 30_000),
    };
    this.requestTimeoutMs = positiveInt('requestTimeoutMs', options.requestTimeoutMs, 30_000);
    this.onError = options.onError;
  }

  /** The encoding the next large body goes out with: `'gzip'`, or `'none'` (configured, or after the server refused gzip in `'auto'` mode). */
  get compressionInUse(): 'gzip' | 'none' {
    return this.compression === 'none' || (this.compression === 'auto' && this.gzipRefused) ? 'none' : 'gzip';
  }

  /** Signals held: in the open batch, waiting for a request slot, or in flight. */
  get bufferedSignals(): number {
    return this.open.size;
  }

  /**
   * Queues one signal. Resolves once the signal is in the buffer; while the buffer holds
   * `maxBufferedSignals`, the promise waits until delivered (or failed) signals make room
   * (first come, first served). Rejects at once with InvalidSignalError when the signal
   * alone cannot fit in a request body, and with ClientClosedError after `close()`.
   */
  async send(signal: Signal): Promise<Receipt> {
    if (this.closed) throw new ClientClosedError();
    const item = this.prepare(signal);
    await this.reserve();
    if (this.closed) {
      this.release(1);
      throw new ClientClosedError();
    }
    this.open.add(item);
    if (this.buffer.length > 0 && this.bufferBytes + 1 + item.bytes > this.maxBodyBytes) this.cut();
    this.bufferBytes += (this.buffer.length > 0 ? 1 : 0) + item.bytes;
    this.buffer.push(item);
    if (this.buffer.length >= this.maxBatchSignals) this.cut();
    else if (!this.timer) this.timer = setTimeout(() => this.cut(), this.flushIntervalMs);
    return { idempotencyKey: item.key, delivered: item.delivered };
  }

  /** Alias of `send()`. */
  add(signal: Signal): Promise<Receipt> {
    return this.send(signal);
  }

  /**
   * Sends the open batch now and waits until every signal queued before the call is
   * delivered or given up. Resolves with the number of signals delivered since the previous
   * flush()/close() returned, and how many of them the API counted as duplicates; rejects
   * with a DeliveryError when any signal settled in that time was not delivered (its
   * `failures` list the first 1,000 of them, with their errors).
   */
  async flush(): Promise<FlushResult> {
    this.cut();
    await Promise.allSettled([...this.open].map((i) => i.delivered));
    const { delivered, duplicates, failed, failures } = this.tally;
    this.tally = { delivered: 0, duplicates: 0, failed: 0, failures: [] };
    if (failed > 0) throw new DeliveryError(failures, delivered, failed, duplicates);
    return { delivered, duplicates };
  }

  /**
   * Refuses new signals (ClientClosedError, also for `send()`s still waiting for room), then
   * flushes: resolves or rejects as `flush()`. Calling it again flushes again.
   */
  async close(): Promise<FlushResult> {
    if (!this.closed) {
      this.closed = true;
      for (const w of this.waiters.splice(0)) w.reject(new ClientClosedError());
    }
    return this.flush();
  }

  /**
   * Runs one analytics query (`POST /api/v2/analytics/query`). 64-bit and wider integers come
   * back as BigInt, decimals as exact strings (or `options.decimal(text)`). Retries a 429
   * RATE_LIMIT_EXCEEDED after Retry-After, a 429 CONCURRENCY_LIMIT_EXCEEDED after one of
   * this client's own queries ends (or a jittered backoff when it has none running), 502, 503,
   * 504 and network errors with backoff; other answers (400, 403, 408, 500, …) reject with
   * SignalApiError at once.
   */
  async analyticsQuery<D = string>(sql: string, options: AnalyticsQueryOptions<D> = {}): Promise<AnalyticsResult> {
    const json = JSON.stringify({ query: sql });
    const started = Date.now();
    let attempts = 0;
    let failures = 0;
    let limited = 0;
    for (;;) {
      await this.gate();
      attempts++;
      let answer: Answer | undefined;
      let failure: SignalApiError | NetworkError;
      const req = this.post('/api/v2/analytics/query', json, false);
      this.analyticsInFlight.add(req);
      try {
        answer = await req;
      } catch (err) {
        if (!(err instanceof NetworkError)) throw err;
        failure = err;
      } finally {
        this.analyticsInFlight.delete(req);
      }
      let wait: number;
      let until: Promise<unknown> | null = null;
      let rateLimited = false;
      if (answer) {
        if (answer.status === 200 && isAnalyticsBody(answer.body)) return convertResult(answer.body, options.decimal);
        const e = apiError(answer);
        failure = e;
        rateLimited = answer.status === 429 && e.code === 'RATE_LIMIT_EXCEEDED';
        if (rateLimited) wait = rateLimitWaitMs(e.retryAfterSeconds, ++limited, this.backoff);
        else if (answer.status === 429 && e.code === 'CONCURRENCY_LIMIT_EXCEEDED') {
          // Spec 7.2: retry after one in-flight query completes. Ours are the ones we can see;
          // others' (another process) are waited out with the jittered backoff.
          wait = backoffMs(++failures, this.backoff);
          if (this.analyticsInFlight.size > 0) until = Promise.race([...this.analyticsInFlight].map((p) => p.catch(() => undefined)));
        } else if (answer.status === 502 || answer.status === 503 || answer.status === 504) wait = backoffMs(++failures, this.backoff);
        // A 500 is the engine failing on this query: asking again fails again.
        else throw e;
      } else wait = backoffMs(++failures, this.backoff);
      if (attempts >= this.maxAttempts || Date.now() - started + wait > this.maxRetryTimeMs) {
        throw new RetriesExhaustedError(`analytics query given up after ${attempts} attempt(s): ${failure!.message}`, attempts, failure!);
      }
      if (rateLimited) this.pauseFor(wait);
      else await (until ? Promise.race([until, sleep(wait)]) : sleep(wait));
    }
  }

  // ---- buffering ----

  private prepare(signal: Signal): Item {
    if (signal === null || typeof signal !== 'object' || Array.isArray(signal)) {
      throw new InvalidSignalError(`a signal must be an object, got ${signal === null ? 'null' : Array.isArray(signal) ? 'an array' : typeof signal}`);
    }
    let key = signal.idempotencyKey ?? undefined;
    let toSend: Signal = signal;
    if (key === undefined && this.autoKeys) {
      key = randomUUID();
      toSend = { ...toSend, idempotencyKey: key };
    }
    if (this.stampTimestamps && (signal.timestamp === undefined || signal.timestamp === null)) {
      toSend = { ...toSend, timestamp: new Date().toISOString() };
    }
    const json = this.serialize(toSend);
    const bytes = Buffer.byteLength(json, 'utf8');
    if (ENVELOPE_BYTES + bytes > this.maxBodyBytes) {
      throw new InvalidSignalError(`the signal is ${bytes} bytes as JSON; a request body holds at most ${this.maxBodyBytes} bytes (maxBodyBytes)`);
    }
    let resolve!: (d: Delivered) => void;
    let reject!: (e: Error) => void;
    const delivered = new Promise<Delivered>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    // Handled here so that an unobserved failure is not an unhandled rejection; callers still
    // see it through `delivered`, flush(), close() and onError.
    delivered.catch(() => undefined);
    return { signal, json, bytes, key, delivered, resolve, reject };
  }

  /**
   * JSON text of a signal. BigInt values (in `data`) become JSON integers with all their
   * digits (the API keeps a number's digits as written); JSON.stringify cannot write them, so
   * they go through a marker string carrying this client's random nonce, then unquoted.
   */
  private serialize(s: Signal): string {
    try {
      return JSON.stringify(s);
    } catch (err) {
      if (!(err instanceof TypeError) || !/BigInt/i.test(err.message)) throw new InvalidSignalError(`the signal cannot be serialized as JSON: ${(err as Error).message}`);
    }
    try {
      // In the text, the marker's NUL character is the six characters \u0000: no string of the caller's can carry the nonce.
      const text = JSON.stringify(s, (_k, v: unknown) => (typeof v === 'bigint' ? `\u0000${this.nonce}:${v}` : v));
      return text.replace(this.bigintMarker, '$1');
    } catch (err) {
      throw new InvalidSignalError(`the signal cannot be serialized as JSON: ${(err as Error).message}`);
    }
  }

  private async reserve(): Promise<void> {
    if (this.waiters.length === 0 && this.held < this.maxBuffered) {
      this.held++;
      return;
    }
    // The slot is taken for us by release() before it wakes us.
    await new Promise<void>((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  private release(n: number): void {
    this.held -= n;
    while (this.waiters.length > 0 && this.held < this.maxBuffered) {
      this.held++;
      this.waiters.shift()!.resolve();
    }
  }

  /** Closes the open batch and hands it to the senders. */
  private cut(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    if (this.buffer.length === 0) return;
    this.ready.push(this.buffer);
    this.buffer = [];
    this.bufferBytes = ENVELOPE_BYTES;
    this.pump();
  }

  private pump(): void {
    while (this.inFlight < this.maxConcurrent && this.ready.length > 0) {
      const batch = this.ready.shift()!;
      this.inFlight++;
      void this.deliver(batch)
        .catch((err: unknown) => this.fail(batch, err instanceof Error ? err : new Error(String(err))))
        .finally(() => {
          this.inFlight--;
          this.pump();
        });
    }
  }

  private settle(item: Item, outcome: { ok: Delivered } | { error: Error }): void {
    if (!this.open.delete(item)) return;
    if ('ok' in outcome) {
      this.tally.delivered++;
      item.resolve(outcome.ok);
    } else {
      this.tally.failed++;
      if (this.tally.failures.length < MAX_KEPT_FAILURES) this.tally.failures.push({ signal: item.signal, idempotencyKey: item.key, error: outcome.error });
      item.reject(outcome.error);
    }
    this.release(1);
  }

  private fail(items: Item[], error: Error): void {
    const mine = items.filter((i) => this.open.has(i));
    for (const i of mine) this.settle(i, { error });
    if (mine.length > 0 && this.onError) {
      try {
        this.onError(error, mine.map((i) => i.signal));
      } catch {
        /* the caller's hook must not break delivery */
      }
    }
  }

  /**
   * An answer that lists refused signals (`errors`, by their index in the request): each
   * fails alone with its own SignalRejectedError; the others of the request are delivered
   * when it was a 202 (`batchId` set) and failed with `whole` when the request was refused.
   */
  private settleAnswer(items: Item[], errors: SignalErrorItem[], status: number, batchId: string | null, duplicates: number, whole: Error | null): void {
    const refused = new Map<number, SignalErrorItem>();
    for (const e of errors) if (Number.isInteger(e.index) && e.index >= 0 && e.index < items.length && !refused.has(e.index)) refused.set(e.index, e);
    const stem = batchId?.replace(/^bat_/, '') ?? '';
    items.forEach((item, i) => {
      const e = refused.get(i);
      if (e) this.fail([item], new SignalRejectedError(status, e, batchId));
      else if (batchId !== null) this.settle(item, { ok: { batchId, signalId: `sig_${stem}_${i}`, idempotencyKey: item.key } });
      else this.fail([item], whole!);
    });
    if (batchId !== null) this.tally.duplicates += duplicates;
  }

  // ---- delivery ----

  private async gate(): Promise<void> {
    for (let now = Date.now(); now < this.pausedUntil; now = Date.now()) await sleep(this.pausedUntil - now);
  }

  private pauseFor(ms: number): void {
    this.pausedUntil = Math.max(this.pausedUntil, Date.now() + ms);
  }

  private post(path: string, json: string, gzip: boolean): Promise<Answer> {
    return postJson({ baseUrl: this.baseUrl, apiKey: this.apiKey, path, json, gzip, timeoutMs: this.requestTimeoutMs });
  }

  private useGzip(bytes: number): boolean {
    if (this.compression === 'gzip') return true;
    return this.compression === 'auto' && !this.gzipRefused && bytes >= this.compressMinBytes;
  }

  /** The server did not decode the gzip body: 415, or a 400 that could only come from undecoded bytes (our JSON is always valid). */
  private static refusesEncoding(a: Answer, e: SignalApiError): boolean {
    return a.status === 415 || (a.status === 400 && (e.code === 'INVALID_JSON' || /ENCODING/.test(e.code)));
  }

  /**
   * Sends one batch until it is accepted, refused or given up. The same signals go out with
   * the same keys on every attempt; they are only ever split in two (a 413 from a server
   * with a lower body limit than `maxBodyBytes`). A 202 settles every signal: the ones its
   * `errors` list fail alone, the rest are delivered (nothing is resent).
   */
  private async deliver(batch: Item[]): Promise<void> {
    const started = Date.now();
    const items = batch;
    let attempts = 0;
    let failures = 0;
    let limited = 0;
    for (;;) {
      await this.gate();
      const json = `{"signals":[${items.map((i) => i.json).join(',')}]}`;
      const gzip = this.useGzip(json.length);
      attempts++;
      let answer: Answer | undefined;
      let failure: SignalApiError | NetworkError;
      try {
        answer = await this.post('/api/v2/signals/bulk', json, gzip);
      } catch (err) {
        if (!(err instanceof NetworkError)) throw err;
        failure = err;
      }
      let wait: number;
      let rateLimited = false;
      if (answer) {
        if (answer.status === 202) {
          const body = (answer.body ?? {}) as { batchId?: unknown; duplicates?: unknown; errors?: unknown };
          const duplicates = typeof body.duplicates === 'number' ? body.duplicates : 0;
          this.settleAnswer(items, errorItems(body.errors), 202, String(body.batchId ?? ''), duplicates, null);
          return;
        }
        const e = apiError(answer);
        failure = e;
        if (gzip && this.compression === 'auto' && SignalClient.refusesEncoding(answer, e)) {
          // Not an attempt at delivery: the server never read the signals. Remembered for the client's life.
          this.gzipRefused = true;
          attempts--;
          continue;
        }
        rateLimited = answer.status === 429 && e.code === 'RATE_LIMIT_EXCEEDED';
        if (rateLimited) wait = rateLimitWaitMs(e.retryAfterSeconds, ++limited, this.backoff);
        else if (answer.status === 429 || answer.status === 408 || answer.status >= 500) wait = backoffMs(++failures, this.backoff);
        else if (answer.status === 413 && items.length > 1) {
          const half = Math.ceil(items.length / 2);
          await Promise.all([this.deliver(items.slice(0, half)), this.deliver(items.slice(half))]);
          return;
        } else {
          // 400 INVALID_SIGNAL: every signal of the request was refused (one valid signal
          // makes it a 202 that lists the refused ones); each fails with its own error.
          const listed = answer.status === 400 && e.code === 'INVALID_SIGNAL' ? errorItems((answer.body as { errors?: unknown } | null)?.errors) : [];
          if (listed.length > 0) this.settleAnswer(items, listed, answer.status, null, 0, e);
          else this.fail(items, e);
          return;
        }
      } else wait = backoffMs(++failures, this.backoff);
      if (attempts >= this.maxAttempts || Date.now() - started + wait > this.maxRetryTimeMs) {
        const why = attempts >= this.maxAttempts ? `${attempts} attempts (maxAttempts)` : `${attempts} attempt(s): the next wait of ${Math.round(wait)} ms would pass maxRetryTimeMs`;
        this.fail(items, new RetriesExhaustedError(`batch of ${items.length} signal(s) given up after ${why}; last: ${failure!.message}`, attempts, failure!));
        return;
      }
      if (rateLimited) {
        // The bucket is the organization's: every batch of this client waits, not only this one.
        this.pauseFor(wait);
      } else await sleep(wait);
    }
  }
}

/** The well-formed entries of an answer's `errors` list (anything else in it is ignored). */
function errorItems(v: unknown): SignalErrorItem[] {
  if (!Array.isArray(v)) return [];
  return v.filter(
    (e): e is SignalErrorItem =>
      e !== null && typeof e === 'object' && Number.isInteger((e as SignalErrorItem).index) && typeof (e as SignalErrorItem).code === 'string',
  ).map((e) => ({ index: e.index, code: e.code, field: typeof e.field === 'string' ? e.field : '', message: typeof e.message === 'string' ? e.message : '' }));
}
