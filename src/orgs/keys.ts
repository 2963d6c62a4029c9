/** Identifiers and API keys. Keys carry ~190 bits of randomness, so a plain SHA-256 is a safe lookup hash. */
import { createHash } from 'node:crypto';
import type { Mode } from '../shared/mode.js';

export { randomToken } from '../shared/random.js';
import { randomToken } from '../shared/random.js';

export const newOrgId = (): string => `org_${randomToken(20)}`;
export const newApiKey = (mode: Mode): string => `sk_${mode}_${randomToken(32)}`;
export const hashApiKey = (key: string): string => createHash('sha256').update(key).digest('hex');

/** Cheap shape check before any lookup: `sk_live_` or `sk_test_` and 32 base62 characters. */
export const API_KEY_PATTERN = /^sk_(live|test)_[0-9A-Za-z]{32}$/;
export const ORG_ID_PATTERN = /^org_[0-9A-Za-z]{20}$/;
