/**
 * The error catalogue: every error the HTTP API can answer with, defined once with its
 * status and short message. Handlers throw `ApiError`s; one function turns any thrown
 * value into the JSON body `{error, code, details}`. The list is mirrored in docs/api.md
 * ("Errors"); test/unit/errors.test.ts keeps the two in step.
 */
export const ERRORS = {
  UNAUTHORIZED: { status: 401, error: 'Unauthorized' },
  NOT_FOUND: { status: 404, error: 'Not Found' },
  METHOD_NOT_ALLOWED: { status: 405, error: 'Method Not Allowed' },
  INVALID_PATH: { status: 400, error: 'Bad Request' },
  INVALID_JSON: { status: 400, error: 'Bad Request' },
  INVALID_BODY: { status: 400, error: 'Bad Request' },
  BATCH_EMPTY: { status: 400, error: 'Bad Request' },
  BATCH_TOO_LARGE: { status: 400, error: 'Bad Request' },
  INVALID_SIGNAL: { status: 400, error: 'Bad Request' },
  INVALID_LIMITS: { status: 400, error: 'Bad Request' },
  INVALID_QUERY: { status: 400, error: 'Bad Request' },
  INVALID_BILLING_CONFIG: { status: 400, error: 'Bad Request' },
  MULTIPLE_STATEMENTS: { status: 400, error: 'Bad Request' },
  NOT_A_SELECT: { status: 400, error: 'Bad Request' },
  CLAUSE_NOT_ALLOWED: { status: 400, error: 'Bad Request' },
  QUERY_FAILED: { status: 400, error: 'Bad Request' },
  INVALID_WEBHOOK: { status: 400, error: 'Bad Request' },
  INVALID_EVENT: { status: 400, error: 'Bad Request' },
  INVALID_CONTENT_ENCODING: { status: 400, error: 'Bad Request' },
  FORBIDDEN: { status: 403, error: 'Forbidden' },
  QUERY_TIMEOUT: { status: 408, error: 'Request Timeout' },
  CONFLICT: { status: 409, error: 'Conflict' },
  BILLING_CONFIG_TOO_LARGE: { status: 409, error: 'Conflict' },
  PAYLOAD_TOO_LARGE: { status: 413, error: 'Payload Too Large' },
  UNSUPPORTED_CONTENT_ENCODING: { status: 415, error: 'Unsupported Media Type' },
  WEBHOOK_NOT_READY: { status: 409, error: 'Conflict' },
  RATE_LIMIT_EXCEEDED: { status: 429, error: 'Too Many Requests' },
  CONCURRENCY_LIMIT_EXCEEDED: { status: 429, error: 'Too Many Requests' },
  INTERNAL: { status: 500, error: 'Internal Server Error' },
  QUEUE_UNAVAILABLE: { status: 503, error: 'Service Unavailable' },
  RATE_LIMITER_UNAVAILABLE: { status: 503, error: 'Service Unavailable' },
  STORE_UNAVAILABLE: { status: 503, error: 'Service Unavailable' },
  ANALYTICS_UNAVAILABLE: { status: 503, error: 'Service Unavailable' },
  WEBHOOKS_UNAVAILABLE: { status: 503, error: 'Service Unavailable' },
  BILLING_UNAVAILABLE: { status: 503, error: 'Service Unavailable' },
  SERVICE_STARTING: { status: 503, error: 'Service Unavailable' },
} as const;

export type ErrorCode = keyof typeof ERRORS;

export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    readonly details: string,
    readonly headers: Record<string, string> = {},
    /** More members of the error body (a refused batch's `errors`). */
    readonly extra: Record<string, unknown> = {},
  ) {
    super(`${code}: ${details}`);
    this.status = ERRORS[code].status;
  }
}

export interface ErrorBody {
  error: string;
  code: ErrorCode;
  details: string;
  /** The signal errors of a batch whose every signal was refused (INVALID_SIGNAL). */
  errors?: unknown[];
}

/** Turns anything thrown into a status and a body; never leaks internals of unexpected errors. */
export function toErrorResponse(err: unknown): { status: number; body: ErrorBody; headers: Record<string, string> } {
  if (err instanceof ApiError) {
    return { status: err.status, body: { error: ERRORS[err.code].error, code: err.code, details: err.details, ...err.extra }, headers: err.headers };
  }
  return {
    status: 500,
    body: { error: ERRORS.INTERNAL.error, code: 'INTERNAL', details: 'An unexpected error occurred; it has been logged.' },
    headers: {},
  };
}

/**
 * Spec 7.2: no Retry-After header; the client retries after one of its in-flight queries
 * completes. `details` keeps the spec's form (2.9) with the shortest useful wait.
 */
export const concurrencyLimited = (): ApiError => new ApiError('CONCURRENCY_LIMIT_EXCEEDED', 'Too many requests. Retry after 1s.');

export const rateLimited = (retryAfterSeconds: number): ApiError =>
  new ApiError('RATE_LIMIT_EXCEEDED', `Too many requests. Retry after ${retryAfterSeconds}s.`, {
    'Retry-After': String(retryAfterSeconds),
  });
