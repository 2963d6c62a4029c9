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
  override readonly name: string = 'SignalApiError';
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

/** One entry of an answer's `errors`: a signal the API refused alone (docs/api.md "Signals"). */
export interface SignalErrorItem {
  /** The signal's index in the request. */
  index: number;
  code: string;
  /** Dotted path of the field within the signal (`customer.externalCustomerId`), `''` for the signal itself. */
  field: string;
  message: string;
}

/**
 * One signal the API refused alone (an entry of the answer's `errors`): nothing of it was
 * stored. `status` is 202 when other signals of the request were ingested (`batchId` is
 * theirs), 400 when every signal of the request was refused (`batchId` null). `details` reads
 * as the API's own, `signals[<index>].<field>: <message>`. Not retried: sending it again
 * unchanged is refused again.
 */
export class SignalRejectedError extends SignalApiError {
  override readonly name: string = 'SignalRejectedError';
  /** The signal's index in the request it was refused from. */
  readonly index: number;
  readonly field: string;
  /** The API's message about the field (without the `signals[i].field: ` prefix of `details`). */
  readonly reason: string;
  constructor(
    status: number,
    item: SignalErrorItem,
    readonly batchId: string | null,
  ) {
    super(status, { error: 'Bad Request', code: item.code, details: `signals[${item.index}]${item.field ? `.${item.field}` : ''}: ${item.message}` });
    this.index = item.index;
    this.field = item.field;
    this.reason = item.message;
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
    /** Of the delivered ones, those the API answered were duplicates of a key it already had. */
    readonly duplicates: number = 0,
  ) {
    super(`${failed} signal(s) not delivered (${delivered} delivered); first: ${failures[0]?.error.message ?? ''}`);
  }
}
