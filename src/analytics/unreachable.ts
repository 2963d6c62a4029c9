/**
 * Whether an engine call failed because the engine could not be reached (the embedded
 * engine's host is restarting or down, a server refused the connection), as opposed to an
 * answer from the engine. The API answers those 503 ANALYTICS_UNAVAILABLE: retry later.
 */
const NET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH']);

export function engineUnreachable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  return err.name === 'HostUnavailable' || (typeof code === 'string' && NET_CODES.has(code)) || /^socket hang up$/.test(err.message);
}
