/**
 * The public-address guard for webhook URLs (spec 2.3: "HTTPS receiver URL,
 * publicly reachable"). A webhook URL is accepted only when it is an absolute http(s) URL
 * whose host is, or resolves only to, publicly routable unicast addresses. The function
 * returns the vetted addresses: deliveries connect to THOSE only (deliver.ts pins them in the
 * socket's lookup, keeping the URL's host name for TLS SNI, certificate checks and the Host
 * header) and never resolve the name again, or a DNS answer that changes between check and connect (DNS rebinding) would
 * defeat the check. Deliveries must also not follow redirects, or the first hop
 * could send them anywhere.
 *
 * The URL (the raw string, before and after WHATWG parsing):
 *
 * - at most 2048 characters; no ASCII control characters, spaces or backslashes anywhere
 *   (WHATWG `new URL()` silently drops tabs and newlines and reads `\` as `/`, so the text an
 *   operator sees could differ from the URL used: refused rather than repaired);
 * - absolute, written `scheme://authority…` (`https:example.com` and `https:///example.com`,
 *   which WHATWG parsing quietly repairs, are refused);
 * - scheme `https`, or `http` only when the policy says `allowHttp` (tests, on-premise);
 * - no userinfo: any `@` in the authority is refused, even an empty `https://@host/`, which
 *   WHATWG parsing would drop without trace;
 * - a non-empty host; port: any from 1 to 65535 (WHATWG refuses larger ones), port 0 is
 *   refused. Ports are not restricted because the address check is what keeps deliveries
 *   out of private networks; a public address on an unusual port is still the receiver
 *   owner's own machine. Fragments and query strings are allowed (the fragment is never sent).
 *
 * The host. WHATWG parsing already turns every IPv4 spelling into a dotted quad
 * (`2130706433`, `0x7f000001`, `0177.0.0.1`, `127.1`, `%31%32%37.0.0.1`, full-width digits
 * all become `127.0.0.1`) and canonicalizes IPv6 literals (`[::ffff:127.0.0.1]` becomes
 * `[::ffff:7f00:1]`); the guard relies on that AND classifies the result. An IP literal is
 * classified as is; a name is resolved (default resolver: `dns.promises.lookup(host,
 * {all: true, verbatim: true})`, i.e. what the operating system would connect to; with
 * WEBHOOK_DNS_SERVERS, `dnsServersResolver`: AAAA and A records from those servers) and EVERY
 * address it resolves to must pass: one non-public answer among public ones refuses the URL.
 * A resolution error or an empty answer refuses it too, and so does a resolution that takes
 * longer than `resolveTimeoutMs` (the Deliverer passes WEBHOOK_TIMEOUT_MS, so the check made
 * when a URL is configured is bounded like a delivery attempt). `localhost` is not
 * special-cased: it resolves to loopback addresses and is refused like them.
 *
 * This machine's own addresses. An address assigned to one of this machine's interfaces (read
 * with `os.networkInterfaces()` at every check, since addresses come and go) is a connection
 * that never leaves the machine: the kernel routes it over the loopback interface, to every
 * service listening on all addresses, whatever the address's registry class. A public address
 * of the machine is therefore classified `loopback` ("an address of this machine, on eth0")
 * and refused unless an allowed network contains it (allowing `127.0.0.0/8` does not allow
 * it). Caveat for operators: an allowed network that contains the machine's own address (say
 * `10.0.0.0/8` on a host with 10.0.0.5) admits that address too; allow the receivers'
 * addresses, not the whole subnet.
 *
 * Non-public addresses (IANA special-purpose registries), by class:
 *
 * | class                      | IPv4                                          | IPv6                          |
 * |----------------------------|-----------------------------------------------|-------------------------------|
 * | `unspecified`              | 0.0.0.0/8 ("this network")                    | ::/128                        |
 * | `loopback`                 | 127.0.0.0/8                                   | ::1/128                       |
 * | `private`                  | 10/8, 172.16/12, 192.168/16                   | fc00::/7 (ULA), fec0::/10 (old site-local), 64:ff9b:1::/48 (local-use NAT64) |
 * | `link-local`               | 169.254.0.0/16                                | fe80::/10                     |
 * | `cgnat`                    | 100.64.0.0/10                                 |                               |
 * | `multicast`                | 224.0.0.0/4                                   | ff00::/8                      |
 * | `broadcast`                | 255.255.255.255/32                            |                               |
 * | `reserved`                 | 240.0.0.0/4, 192.88.99.0/24 (old 6to4 relay)  | 100::/64 (discard), and everything outside 2000::/3 (global unicast) not listed here |
 * | `benchmarking`             | 198.18.0.0/15                                 | (inside 2001::/23)            |
 * | `documentation`            | 192.0.2/24, 198.51.100/24, 203.0.113/24       | 2001:db8::/32, 3fff::/20      |
 * | `ietf-protocol-assignment` | 192.0.0.0/24                                  | 2001::/23 (includes Teredo)   |
 *
 * IPv6 forms that embed an IPv4 address are classified by the embedded address:
 * IPv4-mapped `::ffff:a.b.c.d` (a socket to it IS a socket to a.b.c.d, so it passes exactly
 * when a.b.c.d does, and the vetted address handed back is the plain IPv4 one),
 * IPv4-compatible `::a.b.c.d` (deprecated: refused with the embedded class when that one is
 * non-public, `reserved` otherwise), NAT64 `64:ff9b::/96` (passes with a public embedded
 * address: DNS64 resolvers synthesize these for public hosts), 6to4 `2002:AABB:CCDD::/48`
 * (classified by AA.BB.CC.DD), Teredo `2001:0::/32` (always refused; its class names the
 * embedded server or de-obfuscated client address when one of those is non-public).
 *
 * `allowedNetworks` (operator configuration, e.g. `127.0.0.0/8` for tests or an on-premise
 * receiver's subnet): an address inside one of them passes whatever its class. A bare
 * address counts as a single-host network. Matching uses `node:net` `BlockList`; an
 * IPv4-mapped address is matched by its embedded IPv4 address. Note that `localhost` usually
 * resolves to both 127.0.0.1 and ::1, so allowing `127.0.0.0/8` alone does not admit it.
 * Invalid CIDRs throw (`compileAllowedNetworks` lets configuration validate them at start).
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net';
import { promises as dns } from 'node:dns';
import { networkInterfaces } from 'node:os';
import { compileAllowedNetworks } from '../shared/webhook-settings.js';

export type AddressClass =
  | 'public'
  | 'unspecified'
  | 'loopback'
  | 'private'
  | 'link-local'
  | 'cgnat'
  | 'multicast'
  | 'broadcast'
  | 'reserved'
  | 'benchmarking'
  | 'documentation'
  | 'ietf-protocol-assignment';

export type Embedding = 'ipv4-mapped' | 'ipv4-compatible' | 'nat64' | '6to4' | 'teredo';

export interface AddressClassification {
  /** The address in canonical text (dotted quad; RFC 5952 IPv6). */
  address: string;
  family: 4 | 6;
  class: AddressClass;
  /** The special-purpose range that decided the class (absent for `public`). */
  range?: string;
  /** For IPv6 forms that embed an IPv4 address: which form, and the embedded address. */
  embedded?: { via: Embedding; ipv4: string; class: AddressClass; range?: string };
  /** What a socket should connect to: the address itself, or for IPv4-mapped the IPv4 one. */
  connect: string;
}

export interface WebhookUrlPolicy {
  /** Accept `http:` URLs as well as `https:` (tests, on-premise receivers). */
  allowHttp: boolean;
  /** CIDRs (or bare addresses) whose addresses pass whatever their class, e.g. `127.0.0.0/8`. */
  allowedNetworks: readonly string[];
}

export type Resolver = (host: string) => Promise<readonly string[]>;

/** This machine's own addresses by interface name, shaped like `os.networkInterfaces()`. */
export type HostAddresses = () => Readonly<Record<string, readonly string[]>>;

export interface CheckOptions {
  /** This machine's addresses (default {@link systemHostAddresses}, read at every check). */
  hostAddresses?: HostAddresses;
  /** Give up on resolving a host name after this long (RESOLUTION_FAILED); default: no limit. */
  resolveTimeoutMs?: number;
}

export type UrlRefusalCode =
  | 'INVALID_URL'
  | 'URL_TOO_LONG'
  | 'SCHEME_NOT_ALLOWED'
  | 'USERINFO_NOT_ALLOWED'
  | 'EMPTY_HOST'
  | 'INVALID_PORT'
  | 'RESOLUTION_FAILED'
  | 'NON_PUBLIC_ADDRESS';

export type WebhookUrlCheck =
  | {
      ok: true;
      url: URL;
      /** The vetted addresses, deduplicated, in resolver order: connect to these only. */
      addresses: string[];
    }
  | {
      ok: false;
      code: UrlRefusalCode;
      /** One sentence naming the problem (safe to show to the API caller). */
      reason: string;
      /** For NON_PUBLIC_ADDRESS: the first offending address and its class. */
      address?: string;
      addressClass?: AddressClass;
    };

export const MAX_WEBHOOK_URL_LENGTH = 2048;

// ---------------------------------------------------------------------------------------
// Address parsing and formatting

function parseIPv4(s: string): number | undefined {
  if (!isIPv4(s)) return undefined;
  const p = s.split('.').map(Number);
  return ((p[0]! << 24) | (p[1]! << 16) | (p[2]! << 8) | p[3]!) >>> 0;
}

function formatIPv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/** Eight 16-bit groups of an IPv6 address (zone id, if any, removed by the caller). */
function parseIPv6(s: string): number[] | undefined {
  if (!isIPv6(s)) return undefined;
  let text = s.toLowerCase();
  const lastColon = text.lastIndexOf(':');
  const tail = text.slice(lastColon + 1);
  if (tail.includes('.')) {
    const v4 = parseIPv4(tail);
    if (v4 === undefined) return undefined;
    text = `${text.slice(0, lastColon + 1)}${(v4 >>> 16).toString(16)}:${(v4 & 0xffff).toString(16)}`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const groups = (h: string | undefined): number[] => (h ? h.split(':').map((g) => parseInt(g, 16)) : []);
  const head = groups(halves[0]);
  const rest = halves.length === 2 ? groups(halves[1]) : [];
  const fill = 8 - head.length - rest.length;
  if (halves.length === 1 ? head.length !== 8 : fill < 1) return undefined;
  const out = [...head, ...new Array<number>(halves.length === 2 ? fill : 0).fill(0), ...rest];
  return out.length === 8 && out.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? out : undefined;
}

/** RFC 5952 text: lower case, no leading zeros, the longest run (≥ 2) of zero groups as `::`. */
function formatIPv6(g: readonly number[]): string {
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = g.map((x) => x.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}

// ---------------------------------------------------------------------------------------
// Special-purpose ranges

interface Range {
  cidr: string;
  cls: AddressClass;
  list: BlockList;
}

function range(cidr: string, cls: AddressClass): Range {
  const [net, bits] = cidr.split('/') as [string, string];
  const family = isIPv4(net) ? 'ipv4' : 'ipv6';
  const list = new BlockList();
  list.addSubnet(net, Number(bits), family);
  return { cidr, cls, list };
}

/** First match wins (broadcast before 240/4). */
const V4_RANGES: readonly Range[] = [
  range('0.0.0.0/8', 'unspecified'),
  range('10.0.0.0/8', 'private'),
  range('100.64.0.0/10', 'cgnat'),
  range('127.0.0.0/8', 'loopback'),
  range('169.254.0.0/16', 'link-local'),
  range('172.16.0.0/12', 'private'),
  range('192.0.0.0/24', 'ietf-protocol-assignment'),
  range('192.0.2.0/24', 'documentation'),
  range('192.88.99.0/24', 'reserved'),
  range('192.168.0.0/16', 'private'),
  range('198.18.0.0/15', 'benchmarking'),
  range('198.51.100.0/24', 'documentation'),
  range('203.0.113.0/24', 'documentation'),
  range('224.0.0.0/4', 'multicast'),
  range('255.255.255.255/32', 'broadcast'),
  range('240.0.0.0/4', 'reserved'),
];

/**
 * IPv6 ranges checked after the embedded-IPv4 forms. Only IPv6 addresses that are not
 * IPv4-mapped are checked against these (BlockList treats a mapped address and its IPv4
 * address as the same, which must not leak into these tables).
 */
const V6_RANGES: readonly Range[] = [
  range('::/128', 'unspecified'),
  range('::1/128', 'loopback'),
  range('64:ff9b:1::/48', 'private'),
  range('100::/64', 'reserved'),
  range('2001:db8::/32', 'documentation'),
  range('2001::/23', 'ietf-protocol-assignment'),
  range('3fff::/20', 'documentation'),
  range('fc00::/7', 'private'),
  range('fe80::/10', 'link-local'),
  range('fec0::/10', 'private'),
  range('ff00::/8', 'multicast'),
];
const GLOBAL_UNICAST = range('2000::/3', 'public');

function classifyV4(n: number): { cls: AddressClass; range?: string } {
  const text = formatIPv4(n);
  for (const r of V4_RANGES) if (r.list.check(text, 'ipv4')) return { cls: r.cls, range: r.cidr };
  return { cls: 'public' };
}

/**
 * The class of one IP address (IPv4 dotted quad or IPv6, an IPv6 zone id is ignored).
 * Throws a TypeError for anything that is not an IP address.
 */
export function classifyAddress(ip: string): AddressClassification {
  const v4 = parseIPv4(ip);
  if (v4 !== undefined) {
    const c = classifyV4(v4);
    const address = formatIPv4(v4);
    return { address, family: 4, class: c.cls, ...(c.range ? { range: c.range } : {}), connect: address };
  }
  const g = parseIPv6(ip.split('%')[0]!);
  if (g === undefined) throw new TypeError(`not an IP address: ${JSON.stringify(ip)}`);
  const address = formatIPv6(g);
  const result = (cls: AddressClass, rangeCidr?: string, extra: Partial<AddressClassification> = {}): AddressClassification => ({
    address,
    family: 6,
    class: cls,
    ...(rangeCidr ? { range: rangeCidr } : {}),
    connect: address,
    ...extra,
  });
  const embed = (via: Embedding, n: number) => {
    const c = classifyV4(n);
    return { via, ipv4: formatIPv4(n), class: c.cls, ...(c.range ? { range: c.range } : {}) };
  };
  const low32 = ((g[6]! << 16) | g[7]!) >>> 0;
  const zeros = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);

  if (zeros(0, 5) && g[5] === 0xffff) {
    const e = embed('ipv4-mapped', low32);
    return result(e.class, e.range, { embedded: e, connect: e.ipv4 });
  }
  if (zeros(0, 6) && low32 > 1) {
    const e = embed('ipv4-compatible', low32);
    return e.class === 'public' ? result('reserved', '::/96', { embedded: e }) : result(e.class, e.range, { embedded: e });
  }
  if (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6)) {
    const e = embed('nat64', low32);
    return result(e.class, e.range, { embedded: e });
  }
  if (g[0] === 0x2002) {
    const e = embed('6to4', ((g[1]! << 16) | g[2]!) >>> 0);
    return result(e.class, e.range, { embedded: e });
  }
  if (g[0] === 0x2001 && g[1] === 0) {
    const server = embed('teredo', ((g[2]! << 16) | g[3]!) >>> 0);
    const client = embed('teredo', ~low32 >>> 0);
    const bad = [server, client].find((e) => e.class !== 'public');
    return bad ? result(bad.class, bad.range, { embedded: bad }) : result('ietf-protocol-assignment', '2001::/32', { embedded: client });
  }
  for (const r of V6_RANGES) if (r.list.check(address, 'ipv6')) return result(r.cls, r.cidr);
  if (!GLOBAL_UNICAST.list.check(address, 'ipv6')) return result('reserved', 'outside 2000::/3');
  return result('public');
}

// ---------------------------------------------------------------------------------------
// The URL check

/** The addresses of this machine's network interfaces, now. */
export const systemHostAddresses: HostAddresses = () =>
  Object.fromEntries(Object.entries(networkInterfaces()).map(([name, list]) => [name, (list ?? []).map((a) => a.address)]));

/** Canonical connect address → interface name; entries that are not IP addresses are skipped. */
function hostAddressIndex(hostAddresses: HostAddresses): Map<string, string> {
  const index = new Map<string, string>();
  for (const [name, list] of Object.entries(hostAddresses())) {
    for (const address of list) {
      try {
        const c = classifyAddress(address);
        if (!index.has(c.connect)) index.set(c.connect, name);
      } catch {
        // not an address: nothing to compare against
      }
    }
  }
  return index;
}

/** Resolves `host`, or rejects with code ETIMEOUT after `ms` milliseconds (no limit when undefined). */
async function resolveWithin(resolve: Resolver, host: string, ms: number | undefined): Promise<readonly string[]> {
  if (ms === undefined) return resolve(host);
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error(`${host}: no answer within ${ms} ms`), { code: 'ETIMEOUT', withinMs: ms })), ms);
  });
  try {
    return await Promise.race([resolve(host), expired]);
  } finally {
    clearTimeout(timer);
  }
}

/** `dns.promises.lookup(host, {all: true, verbatim: true})`: what the OS would connect to. */
export const systemResolver: Resolver = async (host) => (await dns.lookup(host, { all: true, verbatim: true })).map((a) => a.address);

/**
 * A resolver that asks the given DNS servers (`WEBHOOK_DNS_SERVERS`, e.g. `10.0.0.2` or
 * `127.0.0.1:5353`, via `node:dns` `Resolver.setServers`) for the name's AAAA and A records,
 * in parallel, and answers the IPv6 addresses first, then the IPv4 ones (the default
 * preference of RFC 6724), each in the order the server gave. The name is not looked up in
 * /etc/hosts. One family without records (ENODATA) is fine; when neither family has an
 * address the resolution fails with the first error (NXDOMAIN is ENOTFOUND).
 * `setServers` throws a TypeError for a malformed server (configuration checks with it).
 */
export function dnsServersResolver(servers: readonly string[], opts: { timeout: number; tries: number } = { timeout: 2_000, tries: 2 }): Resolver {
  const resolver = new dns.Resolver(opts);
  resolver.setServers([...servers]);
  return async (host) => {
    const [v6, v4] = await Promise.allSettled([resolver.resolve6(host), resolver.resolve4(host)]);
    const addresses = [...(v6.status === 'fulfilled' ? v6.value : []), ...(v4.status === 'fulfilled' ? v4.value : [])];
    if (addresses.length > 0) return addresses;
    const failures = [v6, v4].filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => r.reason as NodeJS.ErrnoException);
    throw failures.find((e) => e.code !== 'ENODATA') ?? failures[0] ?? Object.assign(new Error(`${host} has no address`), { code: 'ENODATA' });
  };
}

const a = (word: string): string => `${/^[aeiou]/.test(word) ? 'an' : 'a'} ${word}`;

const describe = (c: AddressClassification): string => {
  const where = c.range ? ` (${c.range})` : '';
  if (c.embedded && c.embedded.class !== 'public') {
    return `${a(c.embedded.via)} IPv6 address embedding ${c.embedded.ipv4}, ${a(c.embedded.class)} address${where}`;
  }
  return `${a(c.class)} address${where}`;
};

function refuse(code: UrlRefusalCode, reason: string, extra: { address?: string; addressClass?: AddressClass } = {}): WebhookUrlCheck {
  return { ok: false, code, reason, ...extra };
}

/**
 * Checks a webhook URL against the rules in the header comment. Never throws for a bad
 * URL (only for a bad policy); `resolve` is used for host names only, never for IP literals.
 */
export async function checkWebhookUrl(url: string, policy: WebhookUrlPolicy, resolve: Resolver = systemResolver, options: CheckOptions = {}): Promise<WebhookUrlCheck> {
  const allowed = compileAllowedNetworks(policy.allowedNetworks);
  if (typeof url !== 'string' || url.length === 0) return refuse('INVALID_URL', 'the URL must be a non-empty string');
  if (url.length > MAX_WEBHOOK_URL_LENGTH) return refuse('URL_TOO_LONG', `the URL is longer than ${MAX_WEBHOOK_URL_LENGTH} characters`);
  if (/[\u0000-\u0020\u007f-\u00a0\\\u2028\u2029\ufeff]/.test(url)) {
    return refuse('INVALID_URL', 'the URL contains whitespace, control characters or a backslash');
  }
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(url)?.[1]?.toLowerCase();
  if (scheme === undefined) return refuse('INVALID_URL', 'the URL is not absolute (it must start with https://)');
  if (scheme !== 'https' && !(scheme === 'http' && policy.allowHttp)) {
    return refuse('SCHEME_NOT_ALLOWED', `the scheme ${scheme}: is not allowed; use ${policy.allowHttp ? 'https: or http:' : 'https:'}`);
  }
  if (url.slice(scheme.length + 1, scheme.length + 3) !== '//') {
    return refuse('INVALID_URL', `the URL must be written ${scheme}://host/…`);
  }
  const authority = /^[^/?#]*/.exec(url.slice(scheme.length + 3))![0];
  if (authority.includes('@')) return refuse('USERINFO_NOT_ALLOWED', 'the URL must not contain a user name or password (user:pass@)');
  if (authority === '' || authority.startsWith(':')) return refuse('EMPTY_HOST', 'the URL has no host');

  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return refuse('INVALID_URL', 'the URL cannot be parsed');
  }
  if (parsed.username !== '' || parsed.password !== '') {
    return refuse('USERINFO_NOT_ALLOWED', 'the URL must not contain a user name or password (user:pass@)');
  }
  if (parsed.hostname === '') return refuse('EMPTY_HOST', 'the URL has no host');
  if (parsed.port === '0') return refuse('INVALID_PORT', 'port 0 is not a valid destination port');

  const host = parsed.hostname.startsWith('[') ? parsed.hostname.slice(1, -1) : parsed.hostname;
  const literal = isIPv4(host) || isIPv6(host);
  let candidates: readonly string[];
  if (literal) candidates = [host];
  else {
    try {
      candidates = await resolveWithin(resolve, host, options.resolveTimeoutMs);
    } catch (err) {
      const e = err as { code?: unknown; withinMs?: unknown } | null;
      if (typeof e?.withinMs === 'number') return refuse('RESOLUTION_FAILED', `the host ${host} could not be resolved within ${e.withinMs} ms`);
      return refuse('RESOLUTION_FAILED', `the host ${host} could not be resolved${typeof e?.code === 'string' ? ` (${e.code})` : ''}`);
    }
    if (!Array.isArray(candidates) || candidates.length === 0) return refuse('RESOLUTION_FAILED', `the host ${host} resolves to no address`);
  }

  const own = hostAddressIndex(options.hostAddresses ?? systemHostAddresses);
  const addresses: string[] = [];
  for (const candidate of candidates) {
    let c: AddressClassification;
    try {
      c = classifyAddress(String(candidate));
    } catch {
      return refuse('RESOLUTION_FAILED', `the host ${host} resolved to something that is not an IP address`);
    }
    const iface = c.class === 'public' ? own.get(c.connect) : undefined;
    if (iface !== undefined) c = { ...c, class: 'loopback', range: `an address of this machine, on ${iface}` };
    const isAllowed = allowed.check(c.connect, isIPv4(c.connect) ? 'ipv4' : 'ipv6');
    if (c.class !== 'public' && !isAllowed) {
      const subject = literal ? `the host ${c.address} is ${describe(c)}` : `the host ${host} resolves to ${c.address}, ${describe(c)}`;
      return refuse('NON_PUBLIC_ADDRESS', `${subject}; webhook URLs must be publicly reachable`, { address: c.address, addressClass: c.class });
    }
    if (!addresses.includes(c.connect)) addresses.push(c.connect);
  }
  return { ok: true, url: parsed, addresses };
}
