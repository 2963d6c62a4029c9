/**
 * Deterministic event ids. An id is a function of the inputs that identify one crossing
 * (organization, event name, the pool / attribute / cap key, the period and the triggering
 * signal, as chosen by events.ts), never of the time it was computed or of a random value:
 * evaluating the same signal again after a redelivery, a retry or a crash yields the same
 * id, so a bus that deduplicates by id (JetStream's Nats-Msg-Id) publishes it once.
 *
 * Format: `evt_` + the first 32 hex digits (128 bits) of SHA-256 over the JSON array
 * `["billing-event-id/v1", ...parts]`. JSON keeps the encoding unambiguous (no separator
 * can be forged inside a part, and null differs from "null"). Changing the version string
 * or the parts of an event changes every id of that event; do it only with a migration.
 */
import { createHash } from 'node:crypto';

export const EVENT_ID_VERSION = 'billing-event-id/v1';

/** The id for one crossing, from the parts that identify it (order matters). */
export function deterministicEventId(parts: readonly (string | null)[]): string {
  for (const p of parts) {
    if (p !== null && typeof p !== 'string') throw new TypeError(`event id parts must be strings or null, got ${typeof p}`);
  }
  const digest = createHash('sha256').update(JSON.stringify([EVENT_ID_VERSION, ...parts]), 'utf8').digest('hex');
  return `evt_${digest.slice(0, 32)}`;
}
