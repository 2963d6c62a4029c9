/**
 * Offset paging, as the official client pages customers and products:
 * `?limit=` (1–MAX_LIMIT, default DEFAULT_LIMIT) and `?offset=` (≥ 0, default 0), answered
 * with `pagination: {limit, offset, total, hasMore}`. Offsets address positions of the creation
 * order (store.ts `ord.…`), so a page costs O(limit) reads whatever the offset; `total` is the
 * number of positions, and a page may hold fewer than `limit` items where positions are empty
 * (a deleted customer, a creation interrupted by a crash). Page with `offset += limit` while
 * `hasMore`.
 */
import { bad } from './validate.js';

export const DEFAULT_LIMIT = 100;
export const MAX_LIMIT = 1000;

export interface OffsetPage {
  limit: number;
  offset: number;
}

/** `?limit=` of a list request (offset or cursor paged), checked: 1 to MAX_LIMIT, default DEFAULT_LIMIT. */
export function limitOf(q: URLSearchParams): number {
  const l = q.get('limit');
  if (l === null) return DEFAULT_LIMIT;
  if (!/^[0-9]{1,4}$/.test(l) || Number(l) < 1 || Number(l) > MAX_LIMIT) throw bad('limit', `must be an integer from 1 to ${MAX_LIMIT}, got ${JSON.stringify(l)}`);
  return Number(l);
}

export function offsetPage(query: string): OffsetPage {
  const q = new URLSearchParams(query);
  const limit = limitOf(q);
  let offset = 0;
  const o = q.get('offset');
  if (o !== null) {
    if (!/^[0-9]{1,15}$/.test(o)) throw bad('offset', `must be an integer of at least 0, got ${JSON.stringify(o)}`);
    offset = Number(o);
  }
  return { limit, offset };
}

export const pagination = (page: OffsetPage, total: number) => ({ limit: page.limit, offset: page.offset, total, hasMore: page.offset + page.limit < total });
