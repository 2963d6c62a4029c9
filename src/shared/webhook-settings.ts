/**
 * The parsing parts of the webhook settings, on the floor so that configuration
 * (src/config.ts) validates them at start without importing the webhooks feature, and
 * the webhooks modules use the same functions at run time.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net';

/** Delays between delivery attempts (attempt 1 is immediate): 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h — 8 attempts over ~27.6 hours. */
export const DEFAULT_RETRY_SCHEDULE_MS: readonly number[] = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000];

/** WEBHOOK_ENCRYPTION_KEY: 32 bytes as 64 hex characters or base64; null when it is neither. */
export function parseEncryptionKey(raw: string): Buffer | null {
  const hex = /^[0-9a-fA-F]{64}$/.test(raw) ? Buffer.from(raw, 'hex') : null;
  if (hex) return hex;
  const b64 = Buffer.from(raw, 'base64');
  return b64.length === 32 && /^[A-Za-z0-9+/_-]+=*$/.test(raw) ? b64 : null;
}

/** Parses `allowedNetworks` into a BlockList; throws a TypeError naming the first bad entry. */
export function compileAllowedNetworks(cidrs: readonly string[]): BlockList {
  const list = new BlockList();
  for (const entry of cidrs) {
    if (typeof entry !== 'string') throw new TypeError('allowedNetworks entries must be strings');
    const m = /^([^/\s]+)(?:\/([0-9]{1,3}))?$/.exec(entry.trim());
    const net = m?.[1] ?? '';
    const family = isIPv4(net) ? 'ipv4' : isIPv6(net) ? 'ipv6' : undefined;
    const max = family === 'ipv4' ? 32 : 128;
    const bits = m?.[2] === undefined ? max : Number(m[2]);
    if (!family || bits > max) throw new TypeError(`allowedNetworks: ${JSON.stringify(entry)} is not a CIDR like 127.0.0.0/8 or fd00::/8`);
    list.addSubnet(net, bits, family);
  }
  return list;
}
