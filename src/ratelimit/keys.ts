/**
 * Every Redis key the service uses, in one place. Each key carries its organization as a
 * Redis Cluster hash tag (`{<org>}`): all of an organization's keys live in one hash slot,
 * so every script (each touches one key) and every command runs unchanged on a cluster,
 * and test/cluster/redis-cluster.test.ts checks the slot of every key below for random ids.
 *
 * The prefix (REDIS_PREFIX: letters, digits, ":", "_", "-") holds no brace, so the first
 * "{" of a key is always the one opening the tag. An organization id holding a "}" would
 * end the tag early: the tag is then a part of the id, still the same for all of that
 * organization's keys, so they still share a slot.
 */
import type { Mode } from '../shared/mode.js';

/** The token bucket of one organization and mode (a hash: tokens, ts). */
export function bucketKey(prefix: string, orgId: string, mode: Mode): string {
  return `${prefix}bucket:{${orgId}}:${mode}`;
}

/** The analytics concurrency slots of one organization and mode (a sorted set of leases). */
export function slotsKey(prefix: string, orgId: string, mode: Mode): string {
  return `${prefix}analytics-slots:{${orgId}}:${mode}`;
}

/** All keys of one organization: what a cluster must keep in one slot. */
export function orgKeys(prefix: string, orgId: string): string[] {
  return (['live', 'test'] as const).flatMap((mode) => [bucketKey(prefix, orgId, mode), slotsKey(prefix, orgId, mode)]);
}
