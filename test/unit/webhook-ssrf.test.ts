/**
 * The public-address guard for webhook URLs (src/webhooks/ssrf.ts): the whole corpus in
 * test/data/ssrf-corpus.json, the operator's allowHttp / allowedNetworks switches, this
 * machine's own addresses, and the address classifier checked against an independent table.
 * Never touches real DNS: names go to a fake resolver, and IP literals must not reach a
 * resolver at all.
 */
import t from 'tap';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import {
  checkWebhookUrl,
  classifyAddress,
  systemHostAddresses,
  type AddressClass,
  type UrlRefusalCode,
  type WebhookUrlPolicy,
} from '../../src/webhooks/ssrf.js';
import { compileAllowedNetworks } from '../../src/shared/webhook-settings.js';

interface Case {
  url: string;
  expect: 'allowed' | 'refused';
  code?: UrlRefusalCode;
  class?: AddressClass;
  addresses?: string[];
  policy?: Partial<WebhookUrlPolicy>;
  note?: string;
}
interface Corpus {
  defaultPolicy: WebhookUrlPolicy;
  hostAddresses: Record<string, string[]>;
  resolver: Record<string, string[]>;
  cases: Case[];
}

const CORPUS = JSON.parse(readFileSync(new URL('../data/ssrf-corpus.json', import.meta.url), 'utf8')) as Corpus;

/** The corpus's fake DNS; records every name it was asked about. */
function fakeResolver(asked: string[] = []) {
  return async (host: string): Promise<string[]> => {
    asked.push(host);
    const answer = Object.hasOwn(CORPUS.resolver, host) ? CORPUS.resolver[host] : undefined;
    if (answer === undefined) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    return answer;
  };
}

const policyOf = (c: Case): WebhookUrlPolicy => ({ ...CORPUS.defaultPolicy, ...c.policy });
/** The corpus's stand-in for this machine's interface addresses. */
const corpusHost = { hostAddresses: () => CORPUS.hostAddresses };
const label = (c: Case) => `${JSON.stringify(c.url)}${c.policy ? ` with ${JSON.stringify(c.policy)}` : ''}`;

t.test('the corpus is big and varied enough', async (t) => {
  t.ok(CORPUS.cases.length >= 80, `${CORPUS.cases.length} cases`);
  t.ok(CORPUS.cases.filter((c) => c.expect === 'allowed').length >= 20);
  const classes = new Set(CORPUS.cases.map((c) => c.class).filter(Boolean));
  for (const cls of ['loopback', 'private', 'link-local', 'cgnat', 'multicast', 'broadcast', 'unspecified', 'reserved', 'benchmarking', 'documentation', 'ietf-protocol-assignment']) {
    t.ok(classes.has(cls as AddressClass), `corpus covers ${cls}`);
  }
  const codes = new Set(CORPUS.cases.map((c) => c.code).filter(Boolean));
  for (const code of ['INVALID_URL', 'SCHEME_NOT_ALLOWED', 'USERINFO_NOT_ALLOWED', 'EMPTY_HOST', 'INVALID_PORT', 'RESOLUTION_FAILED', 'NON_PUBLIC_ADDRESS']) {
    t.ok(codes.has(code as UrlRefusalCode), `corpus covers ${code}`);
  }
});

t.test('every corpus case has the expected outcome', async (t) => {
  for (const c of CORPUS.cases) {
    const asked: string[] = [];
    const r = await checkWebhookUrl(c.url, policyOf(c), fakeResolver(asked), corpusHost);
    if (c.expect === 'allowed') {
      if (!r.ok) {
        t.fail(`${label(c)} should be allowed, refused: ${r.code} ${r.reason}`);
        continue;
      }
      t.same(r.addresses, c.addresses, `${label(c)} → ${r.addresses.join(', ')}`);
      t.ok(r.url instanceof URL);
    } else {
      if (r.ok) {
        t.fail(`${label(c)} should be refused (${c.code} ${c.class ?? ''}), allowed with ${r.addresses.join(', ')}`);
        continue;
      }
      t.equal(r.code, c.code, `${label(c)}: ${r.reason}`);
      if (c.class) t.equal(r.addressClass, c.class, `${label(c)} is ${c.class}`);
      t.ok(r.reason.length > 10, 'the reason is a sentence');
    }
    for (const host of asked) t.ok(!/^[0-9.]+$|:/.test(host), `${label(c)}: only names reach the resolver (got ${host})`);
  }
});

t.test('the reason names the problem', async (t) => {
  const r = await checkWebhookUrl('https://rebind.test/x', CORPUS.defaultPolicy, fakeResolver());
  t.match(r, { ok: false, code: 'NON_PUBLIC_ADDRESS', address: '10.0.0.1', addressClass: 'private' });
  t.match(!r.ok && r.reason, /rebind\.test.*10\.0\.0\.1.*private.*10\.0\.0\.0\/8/);
  const m = await checkWebhookUrl('http://[::ffff:7f00:1]/', CORPUS.defaultPolicy, fakeResolver());
  t.match(!m.ok && m.reason, /ipv4-mapped.*127\.0\.0\.1.*loopback/);
  const s = await checkWebhookUrl('http://public.test/', { allowHttp: false, allowedNetworks: [] }, fakeResolver());
  t.match(!s.ok && s.reason, /http:.*https:/);
});

t.test('allowHttp off: every http corpus URL is refused for its scheme, https ones are unaffected', async (t) => {
  let n = 0;
  for (const c of CORPUS.cases) {
    if (!/^http:\/\//i.test(c.url)) continue;
    n++;
    const r = await checkWebhookUrl(c.url, { ...policyOf(c), allowHttp: false }, fakeResolver());
    t.match(r, { ok: false, code: 'SCHEME_NOT_ALLOWED' }, c.url);
  }
  t.ok(n > 50, `${n} http URLs`);
  for (const c of CORPUS.cases.filter((c) => /^https:\/\//.test(c.url) && !c.policy)) {
    const on = await checkWebhookUrl(c.url, { ...CORPUS.defaultPolicy, allowHttp: true }, fakeResolver());
    const off = await checkWebhookUrl(c.url, { ...CORPUS.defaultPolicy, allowHttp: false }, fakeResolver());
    t.same(off, on, `${c.url}: same outcome with allowHttp on and off`);
  }
});

t.test('allowedNetworks lets exactly the configured addresses through', async (t) => {
  const loop: WebhookUrlPolicy = { allowHttp: true, allowedNetworks: ['127.0.0.0/8'] };
  const ok = await checkWebhookUrl('http://127.0.0.1:45678/hook', loop);
  t.match(ok, { ok: true, addresses: ['127.0.0.1'] }, 'IP literal: the default resolver is never called either');
  t.match(await checkWebhookUrl('http://127.0.0.1:45678/hook', { allowHttp: true, allowedNetworks: [] }), { ok: false, addressClass: 'loopback' });
  t.match(await checkWebhookUrl('http://127.9.9.9/', { allowHttp: true, allowedNetworks: ['127.0.0.1/32'] }), { ok: false, addressClass: 'loopback' });
  t.match(await checkWebhookUrl('http://127.0.0.1/', { allowHttp: true, allowedNetworks: ['127.0.0.1'] }), { ok: true }, 'a bare address is a /32');
  t.match(await checkWebhookUrl('http://2130706433/', loop), { ok: true, addresses: ['127.0.0.1'] }, 'normalized forms too');
  t.match(await checkWebhookUrl('http://[::1]/', loop), { ok: false, addressClass: 'loopback' }, 'IPv4 network does not admit ::1');
  t.match(await checkWebhookUrl('http://[::1]/', { allowHttp: true, allowedNetworks: ['::1/128'] }), { ok: true, addresses: ['::1'] });
  t.match(await checkWebhookUrl('http://10.0.0.1/', loop), { ok: false, addressClass: 'private' }, 'other classes stay refused');
  t.match(await checkWebhookUrl('https://public.test/', loop, fakeResolver()), { ok: true }, 'public addresses still pass');
});

t.test('resolver results: duplicates collapse, non-addresses and failures refuse', async (t) => {
  const dup = async () => ['93.184.216.34', '93.184.216.34', '::ffff:93.184.216.34'];
  t.match(await checkWebhookUrl('https://x.test/', CORPUS.defaultPolicy, dup), { ok: true, addresses: ['93.184.216.34'] });
  t.match(await checkWebhookUrl('https://x.test/', CORPUS.defaultPolicy, async () => ['not-an-ip']), { ok: false, code: 'RESOLUTION_FAILED' });
  t.match(await checkWebhookUrl('https://x.test/', CORPUS.defaultPolicy, async () => { throw new Error('boom'); }), { ok: false, code: 'RESOLUTION_FAILED' });
  const r = await checkWebhookUrl('https://x.test/', CORPUS.defaultPolicy, async () => { throw Object.assign(new Error('t'), { code: 'EAI_AGAIN' }); });
  t.match(!r.ok && r.reason, /EAI_AGAIN/);
  // Any one non-public answer refuses, wherever it is in the list.
  await fc.assert(
    fc.asyncProperty(fc.array(fc.constantFrom('93.184.216.34', '1.1.1.1', '2606:4700::1111'), { maxLength: 5 }), fc.nat(5), fc.constantFrom('10.0.0.1', '::1', '169.254.169.254', 'fd00::2', '::ffff:192.168.0.1'), async (pub, at, bad) => {
      const answer: string[] = [...pub];
      answer.splice(Math.min(at, answer.length), 0, bad);
      const res = await checkWebhookUrl('https://many.test/', CORPUS.defaultPolicy, async () => answer);
      return !res.ok && res.code === 'NON_PUBLIC_ADDRESS';
    }),
    { numRuns: 100 },
  );
});

t.test("this machine's own addresses count as loopback", async (t) => {
  // By default the guard reads the interfaces at every check (addresses come and go: DHCP, failover).
  const own = Object.values(systemHostAddresses()).flat();
  for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) t.ok(own.includes(a.address), `${a.address} is one of the machine's addresses`);
  t.ok(own.includes('127.0.0.1'));

  const r = await checkWebhookUrl('https://self.test/hook', CORPUS.defaultPolicy, fakeResolver(), corpusHost);
  t.match(r, { ok: false, code: 'NON_PUBLIC_ADDRESS', address: '93.184.216.99', addressClass: 'loopback' });
  t.match(!r.ok && r.reason, /self\.test resolves to 93\.184\.216\.99, a loopback address \(an address of this machine, on eth0\)/, 'the reason says why');

  let moved = false;
  const changing = { hostAddresses: (): Record<string, string[]> => (moved ? { eth0: ['93.184.216.34'] } : {}) };
  t.match(await checkWebhookUrl('https://public.test/', CORPUS.defaultPolicy, fakeResolver(), changing), { ok: true });
  moved = true;
  t.match(await checkWebhookUrl('https://public.test/', CORPUS.defaultPolicy, fakeResolver(), changing), { ok: false, addressClass: 'loopback' }, 'read again at each check');
  t.match(await checkWebhookUrl('https://[::ffff:93.184.216.34]/', CORPUS.defaultPolicy, fakeResolver(), changing), { ok: false, addressClass: 'loopback' }, 'mapped form too');
  const odd = { hostAddresses: () => ({ eth0: ['not an address', 'fe80::1%eth0', '2606:2800:220:1:0::99'] }) };
  t.match(await checkWebhookUrl('https://[2606:2800:220:1::99]/', CORPUS.defaultPolicy, fakeResolver(), odd), { ok: false, addressClass: 'loopback' }, 'interface addresses compared in canonical form; junk ignored');
});

t.test('resolveTimeoutMs: a resolver that does not answer in time refuses the URL', async (t) => {
  const never = () => new Promise<string[]>(() => undefined);
  const r = await checkWebhookUrl('https://slow.test/', CORPUS.defaultPolicy, never, { resolveTimeoutMs: 50 });
  t.same(r, { ok: false, code: 'RESOLUTION_FAILED', reason: 'the host slow.test could not be resolved within 50 ms' });
  const late = () => new Promise<string[]>((resolve) => setTimeout(() => resolve(['93.184.216.34']), 20));
  t.match(await checkWebhookUrl('https://slow.test/', CORPUS.defaultPolicy, late, { resolveTimeoutMs: 1_000 }), { ok: true, addresses: ['93.184.216.34'] }, 'an answer in time is used');
  t.match(await checkWebhookUrl('https://slow.test/', CORPUS.defaultPolicy, late), { ok: true }, 'no limit unless asked');
  const failing = async () => { throw Object.assign(new Error('x'), { code: 'ESERVFAIL' }); };
  t.match(await checkWebhookUrl('https://slow.test/', CORPUS.defaultPolicy, failing, { resolveTimeoutMs: 1_000 }), { ok: false, reason: 'the host slow.test could not be resolved (ESERVFAIL)' }, 'a resolver error keeps its code');
});

t.test('a bad policy is a programming error and throws', async (t) => {
  for (const bad of ['127.0.0.0/33', 'fd00::/129', 'nonsense', '10.0.0.0/8/8', '', '10.0.0/8']) {
    t.throws(() => compileAllowedNetworks([bad]), TypeError, JSON.stringify(bad));
    await t.rejects(checkWebhookUrl('https://public.test/', { allowHttp: false, allowedNetworks: [bad] }, fakeResolver()), TypeError);
  }
  t.doesNotThrow(() => compileAllowedNetworks(['127.0.0.0/8', '::1', 'fd00::/8', '0.0.0.0/0', ' 10.0.0.0/8 ']));
});

// ---------------------------------------------------------------------------------------
// The classifier against an independent table (plain integer ranges, no BlockList)

const V4_TABLE: [string, number, AddressClass][] = [
  ['0.0.0.0', 8, 'unspecified'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'cgnat'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'ietf-protocol-assignment'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.88.99.0', 24, 'reserved'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['255.255.255.255', 32, 'broadcast'],
  ['240.0.0.0', 4, 'reserved'],
];
const toInt = (ip: string) => ip.split('.').reduce((n, o) => n * 256 + Number(o), 0);
const toText = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
function expectedV4(n: number): AddressClass {
  for (const [net, bits, cls] of V4_TABLE) {
    const size = 2 ** (32 - bits);
    const start = toInt(net);
    if (n >= start && n < start + size) return cls;
  }
  return 'public';
}
/** Addresses near every range boundary, plus anything. */
const ipv4 = fc.oneof(
  fc.integer({ min: 0, max: 0xffffffff }),
  fc.tuple(fc.constantFrom(...V4_TABLE), fc.integer({ min: -2, max: 2 }), fc.boolean()).map(([[net, bits], d, end]) => {
    const n = toInt(net) + (end ? 2 ** (32 - bits) - 1 : 0) + d;
    return Math.min(0xffffffff, Math.max(0, n));
  }),
);

t.test('IPv4 classification matches the table, and every embedding of it agrees', async (t) => {
  await fc.assert(
    fc.property(ipv4, (n) => {
      const text = toText(n);
      const cls = expectedV4(n);
      const hi = (n >>> 16).toString(16);
      const lo = (n & 0xffff).toString(16);
      const plain = classifyAddress(text);
      const mapped = classifyAddress(`::ffff:${text}`);
      const mappedHex = classifyAddress(`::ffff:${hi}:${lo}`);
      const nat64 = classifyAddress(`64:ff9b::${hi}:${lo}`);
      const sixToFour = classifyAddress(`2002:${hi}:${lo}::1`);
      return (
        plain.class === cls &&
        plain.address === text &&
        mapped.class === cls &&
        mapped.connect === text &&
        mappedHex.class === cls &&
        nat64.class === cls &&
        sixToFour.class === cls
      );
    }),
    { numRuns: 1000 },
  );
});

t.test('IPv6 classification', async (t) => {
  const cases: [string, AddressClass][] = [
    ['::', 'unspecified'],
    ['::1', 'loopback'],
    ['::2', 'unspecified'], // IPv4-compatible 0.0.0.2, in 0/8
    ['::7f00:1', 'loopback'],
    ['::808:808', 'reserved'], // IPv4-compatible 8.8.8.8
    ['fc00::', 'private'],
    ['fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'private'],
    ['fe80::abcd', 'link-local'],
    ['febf:ffff::1', 'link-local'],
    ['fec0::1', 'private'],
    ['ff00::', 'multicast'],
    ['ff02::fb', 'multicast'],
    ['100::1', 'reserved'],
    ['100:0:0:1::', 'reserved'], // outside 100::/64 but still outside 2000::/3
    ['2001:db8:ffff::1', 'documentation'],
    ['2001:db9::1', 'public'],
    ['2001:1ff::1', 'ietf-protocol-assignment'],
    ['2001:200::1', 'public'], // just past 2001::/23
    ['1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'reserved'],
    ['2000::', 'public'],
    ['3ffe::1', 'public'],
    ['3fff:0fff::1', 'documentation'],
    ['3fff:1000::1', 'public'],
    ['4000::', 'reserved'],
    ['64:ff9b::808:808', 'public'],
    ['64:ff9b:1::808:808', 'private'],
    ['2002:808:808::', 'public'],
    ['2002:a9fe:a9fe::', 'link-local'],
  ];
  for (const [ip, cls] of cases) t.equal(classifyAddress(ip).class, cls, `${ip} is ${cls}`);
  t.equal(classifyAddress('0:0:0:0:0:0:0:1').address, '::1');
  t.equal(classifyAddress('2001:0DB8:0000:0000:0001:0000:0000:0001').address, '2001:db8::1:0:0:1', 'RFC 5952: first longest run');
  t.equal(classifyAddress('fe80::1%eth0').class, 'link-local', 'zone id ignored');
  t.same(classifyAddress('::ffff:10.1.2.3').embedded, { via: 'ipv4-mapped', ipv4: '10.1.2.3', class: 'private', range: '10.0.0.0/8' });
  for (const bad of ['', 'localhost', '1.2.3', '1.2.3.256', '01.2.3.4', '::g', '1::2::3', '[::1]']) {
    t.throws(() => classifyAddress(bad), TypeError, JSON.stringify(bad));
  }
});

t.test('random global-unicast IPv6 outside the special ranges is public', async (t) => {
  const group = fc.integer({ min: 0, max: 0xffff });
  await fc.assert(
    fc.property(fc.integer({ min: 0x2400, max: 0x3ffe }), fc.array(group, { minLength: 7, maxLength: 7 }), (first, rest) => {
      const ip = [first, ...rest].map((g) => g.toString(16)).join(':');
      return classifyAddress(ip).class === 'public';
    }),
    { numRuns: 300 },
  );
  await fc.assert(
    fc.property(fc.integer({ min: 0xfc00, max: 0xfdff }), fc.array(group, { minLength: 7, maxLength: 7 }), (first, rest) => {
      return classifyAddress([first, ...rest].map((g) => g.toString(16)).join(':')).class === 'private';
    }),
    { numRuns: 200 },
  );
});
