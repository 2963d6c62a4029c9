/**
 * The pin key of a partition (consumer.ts: `pin.<k>`, the group in flight or the last one
 * committed) and what a reader outside the evaluator needs of it: which group, if any, is
 * pending — without parsing a pending pin's documents (up to max_payload of them).
 */
import type { KvEntry } from '@nats-io/kv';

export const pinKey = (k: number): string => `pin.${k}`;

const HEAD = /^\{"seq":(\d+),"last":\d+,"seqs":\[/;
/** How a committed pin's text ends (consumer.ts donePin, stringified: `done` is its last key). */
const DONE_TAIL = ',"done":true}';
const decoder = new TextDecoder();

/**
 * The first stream sequence of the group pin.<k> holds pending (evaluated or being evaluated,
 * not committed), or null when the pin is committed or absent: every message of the partition
 * before that sequence is committed. Told by the pin's first bytes and its last (every form is
 * written by JSON.stringify in a fixed key order, consumer.ts), without parsing it.
 */
export function pendingFrom(e: KvEntry | null | undefined): number | null {
  if (!e || e.operation !== 'PUT' || e.length === 0) return null;
  const bytes = e.value;
  if (decoder.decode(bytes.subarray(Math.max(0, bytes.length - DONE_TAIL.length))) === DONE_TAIL) return null;
  const head = HEAD.exec(decoder.decode(bytes.subarray(0, 64)));
  if (head) return Number(head[1]);
  throw new Error(`billing pin of ${bytes.length} bytes in no form this version writes: ${decoder.decode(bytes.subarray(0, 64))}`);
}
