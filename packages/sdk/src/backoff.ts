/**
 * Retry timing (spec 7.2): a 429 RATE_LIMIT_EXCEEDED waits at least `Retry-After` seconds;
 * repeated 429s, 503s and network errors back off exponentially with jitter, never in a
 * tight loop.
 *
 * "Equal jitter": the n-th wait (n = 1, 2, …) is drawn uniformly from [c/2, c] with
 * c = min(maxBackoffMs, initialBackoffMs · 2^(n−1)); it grows exponentially (its lower bound
 * doubles) while clients that failed together spread out.
 */
export interface BackoffOptions {
  initialBackoffMs: number;
  maxBackoffMs: number;
}

export type Random = () => number;

/** The jittered exponential wait before retry number `n` (1-based). */
export function backoffMs(n: number, o: BackoffOptions, random: Random = Math.random): number {
  const ceiling = Math.min(o.maxBackoffMs, o.initialBackoffMs * 2 ** Math.max(0, n - 1));
  return ceiling / 2 + random() * (ceiling / 2);
}

/**
 * The wait after the n-th consecutive 429 RATE_LIMIT_EXCEEDED of a batch: `Retry-After`
 * seconds (rule 1: at least that) plus the jittered exponential term (rule 5: repeated 429s
 * back off, and clients told the same second do not all come back at that instant). A 429
 * without a usable `Retry-After` (never sent by this API) waits at least one second.
 */
export function rateLimitWaitMs(retryAfterSeconds: number | undefined, n: number, o: BackoffOptions, random: Random = Math.random): number {
  const base = retryAfterSeconds === undefined ? 1000 : retryAfterSeconds * 1000;
  return base + backoffMs(n, o, random);
}

/**
 * `Retry-After` as the API sends it: delay-seconds (RFC 9110 10.2.3). An HTTP-date is also
 * understood. Anything else is `undefined`.
 */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (value === null) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v);
  // IMF-fixdate, e.g. `Thu, 01 Jan 2026 00:00:05 GMT` (Date.parse alone takes `-1` for a year).
  const at = /^[A-Za-z]{3}, \d{2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/.test(v) ? Date.parse(v) : NaN;
  if (Number.isFinite(at)) return Math.max(0, Math.ceil((at - now) / 1000));
  return undefined;
}
