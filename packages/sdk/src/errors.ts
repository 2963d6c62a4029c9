/**
 * The SDK's errors. Every refusal by the API keeps the API's own `{error, code, details}`
 * and the HTTP status, so a caller can branch on `code` exactly as the API documents it.
 */

/** The body of every error answer of the API. */
export interface ApiErrorBody {
  error: string;
  code: string;
  details: string;
}

/** The API refused a request (a status the SDK does not retry, or the last of the retries). */
export class SignalApiError extends Error {
  override readonly name = 'SignalApiError';
  readonly error: string;
  readonly code: string;
  readonly details: string;
  constructor(
    readonly status: number,
    body: ApiErrorBody,
    /** `Retry-After` in seconds when the answer carried one (only a 429 RATE_LIMIT_EXCEEDED does). */
    readonly retryAfterSeconds?: number,
  ) {
    super(`${status} ${body.code}: ${body.details}`);
    this.error = body.error;
    this.code = body.code;
    this.details = body.details;
  }
}

/** The request never got an answer (connection refused or reset, DNS, timeout). */
export class NetworkError extends Error {
  override readonly name = 'NetworkError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * A batch was retried until `maxAttempts` or `maxRetryTimeMs` ran out. `cause` is the last
 * answer (a SignalApiError or a NetworkError). The signals may or may not have been stored
 * (a 503 or a lost answer leaves it open); resending them with the same idempotency keys is
 * always safe.
 */
export class RetriesExhaustedError extends Error {
  override readonly name = 'RetriesExhaustedError';
  constructor(
    message: string,
    readonly attempts: number,
    readonly lastError: SignalApiError | NetworkError,
  ) {
    super(message, { cause: lastError });
  }
}

/** `send()` after `close()` (or a `send()` that was waiting for room when `close()` came). */
export class ClientClosedError extends Error {
  override readonly name = 'ClientClosedError';
  constructor() {
    super('the SignalClient is closed; it accepts no new signals');
  }
}

/** The signal alone does not fit in one request body of `maxBodyBytes` (or is not a JSON object). */
export class InvalidSignalError extends Error {
  override readonly name = 'InvalidSignalError';
}

/** One signal that was not delivered, and why. */
export interface SignalFailure<S = unknown> {
  /** The signal as given to `send()`. */
  signal: S;
  /** The key it was sent with (its own or the one the SDK gave it); resend with this key. */
  idempotencyKey: string | undefined;
  error: Error;
}

/** `flush()` / `close()`: signals settled since the previous flush were not all delivered. */
export class DeliveryError<S = unknown> extends Error {
  override readonly name = 'DeliveryError';
  constructor(
    /** The first 1,000 failures, each with its signal and error. */
    readonly failures: SignalFailure<S>[],
    /** Signals delivered in the same time. */
    readonly delivered: number,
    /** Signals not delivered (all of them, also beyond `failures`). */
    readonly failed: number = failures.length,
  ) {
    super(`${failed} signal(s) not delivered (${delivered} delivered); first: ${failures[0]?.error.message ?? ''}`);
  }
}
