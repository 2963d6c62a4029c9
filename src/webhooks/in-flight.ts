/**
 * A bound on webhook work in flight in this process per organization and mode: URL checks
 * (PATCH with a url: the host name is resolved on the organization's behalf) and test
 * deliveries (an outbound connection held for up to WEBHOOK_TIMEOUT_MS). Without it, one
 * organization whose receiver never answers, or whose DNS server never does, holds as many
 * sockets and resolver lookups as it sends requests. The dispatcher has its own bound (64
 * deliveries at once for all organizations).
 */
export class InFlight {
  private readonly counts = new Map<string, number>();

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new TypeError('limit: a whole number ≥ 1');
  }

  /** A function that gives the place back (idempotent), or null when `key` already has `limit` in flight. */
  tryEnter(key: string): (() => void) | null {
    const n = this.counts.get(key) ?? 0;
    if (n >= this.limit) return null;
    this.counts.set(key, n + 1);
    let left = false;
    return () => {
      if (left) return;
      left = true;
      const now = (this.counts.get(key) ?? 1) - 1;
      if (now <= 0) this.counts.delete(key);
      else this.counts.set(key, now);
    };
  }

  /** How many are in flight for `key`. */
  count(key: string): number {
    return this.counts.get(key) ?? 0;
  }
}
