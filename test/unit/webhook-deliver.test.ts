/**
 * Delivery to host names (src/webhooks/deliver.ts): the pinned lookup
 * answers what Node asks for (an array with `{all: true}`, one address without, only the
 * asked family), the DNS-server resolver (WEBHOOK_DNS_SERVERS) answers AAAA then A records of
 * a real DNS responder on loopback, and the Deliverer reaches receivers named by host names
 * with several vetted addresses, trying the next address when a connection is refused,
 * resolving each name once per attempt, and refusing a name when ANY address is disallowed.
 */
import t, { type Test } from 'tap';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import type { TLSSocket } from 'node:tls';
import net, { type AddressInfo } from 'node:net';
import type { LookupAddress } from 'node:dns';
import { Deliverer, MAX_ADDRESSES_TRIED, addressesToTry, describeConnectionError, pinnedLookup } from '../../src/webhooks/deliver.js';
import { dnsServersResolver } from '../../src/webhooks/ssrf.js';
import { DnsResponder } from '../helpers/dns.js';

type Answer = { err: NodeJS.ErrnoException | null; address?: string | LookupAddress[]; family?: number; sync: boolean };

function ask(lookup: ReturnType<typeof pinnedLookup>, options: Record<string, unknown>): Promise<Answer> {
  return new Promise((resolve) => {
    let returned = false;
    lookup('receiver.example', options as never, ((err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) =>
      resolve({ err, address, family, sync: !returned })) as never);
    returned = true;
  });
}

t.test('pinnedLookup: arrays for {all: true}, one address otherwise, the asked family only', async (t) => {
  const lookup = pinnedLookup(['2001:db8::1', '192.0.2.1', '192.0.2.2']);
  const all = await ask(lookup, { all: true });
  t.same(all.address, [{ address: '2001:db8::1', family: 6 }, { address: '192.0.2.1', family: 4 }, { address: '192.0.2.2', family: 4 }], 'every vetted address, in order');
  t.equal(all.err, null);
  t.equal(all.sync, false, 'answers asynchronously, like dns.lookup');
  t.same((await ask(lookup, { all: true, family: 4 })).address, [{ address: '192.0.2.1', family: 4 }, { address: '192.0.2.2', family: 4 }]);
  t.same((await ask(lookup, { all: true, family: 6 })).address, [{ address: '2001:db8::1', family: 6 }]);
  t.same((await ask(lookup, { all: true, family: 'IPv4' })).address, [{ address: '192.0.2.1', family: 4 }, { address: '192.0.2.2', family: 4 }]);
  const one = await ask(lookup, {});
  t.equal(one.address, '2001:db8::1');
  t.equal(one.family, 6);
  const one4 = await ask(lookup, { family: 4 });
  t.equal(one4.address, '192.0.2.1');
  t.equal(one4.family, 4);
  const none = await ask(pinnedLookup(['192.0.2.1']), { all: true, family: 6 });
  t.equal(none.err?.code, 'ENOTFOUND', 'no vetted address of the family');
  t.throws(() => pinnedLookup(['receiver.example']), TypeError, 'only IP addresses can be pinned');
});

t.test('dnsServersResolver: AAAA then A, from the given servers; NXDOMAIN and no-data fail', async (t) => {
  const dns = await new DnsResponder().start();
  t.teardown(() => dns.close());
  dns.set('dual.test', { a: ['127.0.0.1', '127.0.0.3'], aaaa: ['::1'] });
  dns.set('v4.test', { a: ['127.0.0.2', '127.0.0.1'] });
  dns.set('empty.test', {});
  const resolve = dnsServersResolver([dns.server]);
  t.same(await resolve('dual.test'), ['::1', '127.0.0.1', '127.0.0.3']);
  t.same(await resolve('V4.Test'), ['127.0.0.2', '127.0.0.1'], 'case-insensitive, server order kept');
  await t.rejects(resolve('nowhere.test'), { code: 'ENOTFOUND' });
  await t.rejects(resolve('empty.test'), { code: 'ENODATA' });
  t.throws(() => dnsServersResolver(['not a server']), 'a malformed server is refused');
});

interface Hit {
  host: string;
  body: string;
}

async function receiver(t: Test, host: string): Promise<{ port: number; hits: Hit[] }> {
  const hits: Hit[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      hits.push({ host: String(req.headers.host), body: Buffer.concat(chunks).toString() });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, host, r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  return { port: (server.address() as AddressInfo).port, hits };
}

t.test('Deliverer: host names with several addresses, each connection failure tries the next', async (t) => {
  const dns = await new DnsResponder().start();
  t.teardown(() => dns.close());
  const v4 = await receiver(t, '127.0.0.1');
  const v6 = await receiver(t, '::1');
  dns.set('multi.test', { a: ['127.0.0.2', '127.0.0.1'] }); // 127.0.0.2: nothing listens on that port
  dns.set('dual.test', { a: ['127.0.0.1'], aaaa: ['::1'] });
  dns.set('bad.test', { a: ['127.0.0.1', '10.1.2.3'] });
  dns.set('dead.test', { a: ['127.0.0.2', '127.0.0.3'] });
  const d = new Deliverer({ policy: { allowHttp: true, allowedNetworks: ['127.0.0.0/8', '::1'] }, timeoutMs: 3_000, resolver: dnsServersResolver([dns.server]) });
  const body = Buffer.from('{"event":"x"}');

  const multi = await d.attempt(`http://multi.test:${v4.port}/hook`, body, 'whsec_x');
  t.same({ ok: multi.ok, statusCode: multi.statusCode, error: multi.error }, { ok: true, statusCode: 204, error: null }, 'refused on 127.0.0.2, delivered on 127.0.0.1');
  t.same(v4.hits.at(-1), { host: `multi.test:${v4.port}`, body: body.toString() }, 'Host header keeps the name');
  t.equal(dns.count('multi.test', 'A'), 1, 'resolved once (the check), never again for the connection');
  t.equal(dns.count('multi.test', 'AAAA'), 1);

  // ::1 is tried first (AAAA first); the IPv4-only receiver refuses it, 127.0.0.1 answers.
  const dual4 = await d.attempt(`http://dual.test:${v4.port}/`, body, 'whsec_x');
  t.equal(dual4.ok, true, `IPv6 refused, IPv4 delivered (${dual4.error})`);
  const dual6 = await d.attempt(`http://dual.test:${v6.port}/`, body, 'whsec_x');
  t.equal(dual6.ok, true, `IPv6 receiver reached (${dual6.error})`);
  t.equal(v6.hits.length, 1);

  const dead = await d.attempt(`http://dead.test:${v4.port}/`, body, 'whsec_x');
  t.equal(dead.ok, false);
  t.equal(dead.error, `connection failed: ECONNREFUSED 127.0.0.2:${v4.port}; ECONNREFUSED 127.0.0.3:${v4.port}`, 'every address tried, each named');

  const hitsBefore = v4.hits.length;
  const bad = await d.attempt(`http://bad.test:${v4.port}/`, body, 'whsec_x');
  t.equal(bad.ok, false);
  t.match(bad.error, /^url: the host bad\.test resolves to 10\.1\.2\.3, a private address/, 'one disallowed address refuses the whole name');
  t.equal((await d.check(`http://bad.test:${v4.port}/`)).ok, false);
  t.equal(v4.hits.length, hitsBefore, 'nothing was sent to the allowed address of a refused name');

  const unknown = await d.attempt(`http://nowhere.test:${v4.port}/`, body, 'whsec_x');
  t.match(unknown.error, /^url: the host nowhere\.test could not be resolved \(ENOTFOUND\)/);
});

t.test('DNS rebinding: answers that change per query (TTL 0), and A and AAAA that disagree', async (t) => {
  const dns = await new DnsResponder().start();
  t.teardown(() => dns.close());
  // Only 127.0.0.1 is allowed; 127.0.0.2 stands in for an internal address (a receiver listens there too).
  const good = await receiver(t, '127.0.0.1');
  const inside: string[] = [];
  const internal = http.createServer((req, res) => {
    inside.push(String(req.url));
    req.resume();
    res.writeHead(200).end();
  });
  await new Promise<void>((r) => internal.listen(good.port, '127.0.0.2', r));
  t.teardown(() => new Promise<void>((r) => internal.close(() => r())));
  const d = new Deliverer({ policy: { allowHttp: true, allowedNetworks: ['127.0.0.1/32'] }, timeoutMs: 3_000, resolver: dnsServersResolver([dns.server]) });
  const body = Buffer.from('{}');

  dns.rebind('flip.test', { a: ['127.0.0.1'] }, { a: ['127.0.0.2'] });
  const o = await d.attempt(`http://flip.test:${good.port}/flip`, body, 'whsec_x');
  t.equal(o.ok, true, `delivered to the vetted answer (${o.error})`);
  t.equal(good.hits.length, 1);
  t.equal(dns.count('flip.test', 'A'), 1, 'the connection did not ask again');
  const again = await d.attempt(`http://flip.test:${good.port}/flip`, body, 'whsec_x');
  t.match(again.error, /^url: the host flip\.test resolves to 127\.0\.0\.2, a loopback address/, 'the next attempt sees the new answer and refuses it');
  t.same(inside, [], 'nothing reached the internal address');

  dns.set('split.test', { a: ['127.0.0.1'], aaaa: ['::ffff:7f00:2'] });
  const split = await d.attempt(`http://split.test:${good.port}/split`, body, 'whsec_x');
  t.match(split.error, /^url: the host split\.test resolves to ::ffff:7f00:2, an ipv4-mapped IPv6 address embedding 127\.0\.0\.2/, 'an AAAA record refuses the name even when the A record is fine');
  t.same(inside, []);
  t.equal(good.hits.length, 1);
});

t.test('hostile receivers: redirects are not followed, every stall ends at the timeout, answers are read up to 64 KiB', async (t) => {
  const elsewhere = await receiver(t, '127.0.0.2');
  const sockets = new Set<net.Socket>();
  type Behaviour = (socket: net.Socket) => void;
  const after = (f: (s: net.Socket) => void): Behaviour => (s) => s.once('data', () => f(s));
  const every = (ms: number, f: (s: net.Socket) => void): Behaviour => after((s) => {
    const i = setInterval(() => s.writable && f(s), ms);
    s.on('close', () => clearInterval(i));
  });
  const start = async (behaviour: Behaviour): Promise<number> => {
    const server = net.createServer((s) => {
      sockets.add(s);
      s.on('error', () => undefined);
      behaviour(s);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    t.teardown(() => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((r) => server.close(() => r()));
    });
    return (server.address() as AddressInfo).port;
  };
  const d = new Deliverer({ policy: { allowHttp: true, allowedNetworks: ['127.0.0.1/32'] }, timeoutMs: 500 });
  const body = Buffer.from('{}');
  const run = async (scheme: string, port: number) => {
    const started = performance.now();
    const o = await d.attempt(`${scheme}://127.0.0.1:${port}/`, body, 'whsec_x');
    return { ...o, ms: performance.now() - started };
  };

  const redirect = await run('http', await start(after((s) => s.end(`HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.2:${elsewhere.port}/internal\r\nContent-Length: 0\r\n\r\n`))));
  t.match(redirect, { ok: false, statusCode: 307, error: 'redirect (307) not followed' });
  t.equal(elsewhere.hits.length, 0, 'the Location was not visited');

  const stalls: [string, string, Behaviour][] = [
    ['accepts and never answers', 'http', () => undefined],
    ['TLS: never completes the handshake', 'https', () => undefined],
    ['status line, then one header line every 50 ms', 'http', (s) => {
      s.once('data', () => s.write('HTTP/1.1 200 OK\r\n'));
      every(50, (x) => x.write('X-Slow: 1\r\n'))(s);
    }],
    ['200 and a long body, one byte every 50 ms', 'http', after((s) => {
      s.write('HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n');
      const i = setInterval(() => s.writable && s.write('a'), 50);
      s.on('close', () => clearInterval(i));
    })],
    ['102 Processing every 20 ms, forever', 'http', every(20, (s) => s.write('HTTP/1.1 102 Processing\r\n\r\n'))],
    ['101 Switching Protocols nobody asked for', 'http', after((s) => s.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n'))],
  ];
  for (const [name, scheme, behaviour] of stalls) {
    const o = await run(scheme, await start(behaviour));
    t.match(o, { ok: false, statusCode: null, error: 'no answer within 500 ms' }, name);
    t.ok(o.ms < 5_000, `${name}: ended at the timeout (${Math.round(o.ms)} ms; unbounded it would hang on)`);
  }

  // An endless answer: 64 KiB are read, then the connection is dropped (the status decides).
  let written = 0;
  const endless = await run('http', await start(after((s) => {
    s.write('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n');
    const chunk = Buffer.from(`4000\r\n${'a'.repeat(0x4000)}\r\n`);
    const pump = (): void => {
      while (s.writable && written < 512 * 1024 * 1024 && s.write(chunk)) written += 0x4000;
    };
    s.on('drain', pump);
    pump();
  })));
  t.match(endless, { ok: true, statusCode: 200, error: null }, 'delivered: the 2xx arrived');
  t.ok(endless.ms < 500, `without waiting for the end of the answer (${Math.round(endless.ms)} ms, ${written} bytes written by the receiver)`);
});

t.test('Deliverer: localhost through the system resolver', async (t) => {
  const v4 = await receiver(t, '127.0.0.1');
  const d = new Deliverer({ policy: { allowHttp: true, allowedNetworks: ['127.0.0.0/8', '::1'] }, timeoutMs: 3_000 });
  const r = await d.attempt(`http://localhost:${v4.port}/x`, Buffer.from('{}'), 'whsec_x');
  t.equal(r.ok, true, `delivered (${r.error})`);
  t.equal(v4.hits[0]?.host, `localhost:${v4.port}`);
});

t.test('an unresponsive DNS server: the URL check and the attempt both end within the timeout', async (t) => {
  const dns = await new DnsResponder().start();
  t.teardown(() => dns.close());
  dns.silence('silent.test');
  // The resolver's own timeout here is 10 s (the service's: 2 s, 2 tries): the check and the attempt must not wait for it.
  const d = new Deliverer({ policy: { allowHttp: true, allowedNetworks: ['127.0.0.0/8'] }, timeoutMs: 400, resolver: dnsServersResolver([dns.server], { timeout: 10_000, tries: 1 }) });
  let started = performance.now();
  const check = await d.check('http://silent.test/hook');
  const checkMs = performance.now() - started;
  t.match(check, { ok: false, code: 'RESOLUTION_FAILED', reason: 'the host silent.test could not be resolved within 400 ms' }, 'the check made when a URL is configured is bounded too');
  t.ok(checkMs < 5_000, `answered long before the resolver's own 10 s timeout (${Math.round(checkMs)} ms)`);
  t.ok(dns.count('silent.test') >= 1, 'the server was asked');
  started = performance.now();
  const o = await d.attempt('http://silent.test/hook', Buffer.from('{}'), 'whsec_x');
  t.same({ ok: o.ok, statusCode: o.statusCode, error: o.error }, { ok: false, statusCode: null, error: 'url: the host silent.test could not be resolved within 400 ms' });
  t.ok(performance.now() - started < 5_000);
});

t.test('addressesToTry: families alternate from the first address, at most MAX_ADDRESSES_TRIED', async (t) => {
  t.equal(MAX_ADDRESSES_TRIED, 8);
  t.same(addressesToTry(['2001:db8::1', '2001:db8::2', '192.0.2.1', '192.0.2.2', '192.0.2.3']), ['2001:db8::1', '192.0.2.1', '2001:db8::2', '192.0.2.2', '192.0.2.3']);
  t.same(addressesToTry(['192.0.2.1', '2001:db8::1']), ['192.0.2.1', '2001:db8::1']);
  const v4 = Array.from({ length: 20 }, (_, i) => `192.0.2.${i + 1}`);
  const v6 = Array.from({ length: 20 }, (_, i) => `2001:db8::${i + 1}`);
  t.same(addressesToTry(v4), v4.slice(0, 8));
  t.same(addressesToTry([...v6, ...v4]), ['2001:db8::1', '192.0.2.1', '2001:db8::2', '192.0.2.2', '2001:db8::3', '192.0.2.3', '2001:db8::4', '192.0.2.4'], 'both families get their turn');
});

t.test('a name with very many addresses: one attempt connects to at most MAX_ADDRESSES_TRIED of them', async (t) => {
  // One attempt must not become a scan of every address an attacker puts in one DNS answer.
  const dns = await new DnsResponder().start();
  t.teardown(() => dns.close());
  const v4 = await receiver(t, '127.0.0.1');
  const dead = Array.from({ length: 30 }, (_, i) => `127.0.1.${i + 1}`); // nothing listens there
  dns.set('many.test', { a: [...dead, '127.0.0.1'] });
  const d = new Deliverer({ policy: { allowHttp: true, allowedNetworks: ['127.0.0.0/8'] }, timeoutMs: 3_000, resolver: dnsServersResolver([dns.server]) });
  const check = await d.check(`http://many.test:${v4.port}/`);
  t.equal(check.ok && check.addresses.length, 31, 'every address is still vetted');
  const o = await d.attempt(`http://many.test:${v4.port}/`, Buffer.from('{}'), 'whsec_x');
  t.equal(o.ok, false);
  t.equal(v4.hits.length, 0, 'the 31st address was not tried');
  const tried = dead.slice(0, 8).map((a) => `ECONNREFUSED ${a}:${v4.port}`).join('; ');
  t.equal(o.error, `connection failed: ${tried} (23 more addresses not tried)`, 'the error names the 8 tried and counts the rest');
  dns.set('few.test', { a: [...dead.slice(0, 7), '127.0.0.1'] });
  const few = await d.attempt(`http://few.test:${v4.port}/`, Buffer.from('{}'), 'whsec_x');
  t.equal(few.ok, true, `the 8th address is tried (${few.error})`);
});

t.test('describeConnectionError', async (t) => {
  t.equal(describeConnectionError(Object.assign(new Error('x'), { code: 'ECONNREFUSED', address: '::1', port: 80 })), 'connection failed: ECONNREFUSED [::1]:80');
  t.equal(describeConnectionError(Object.assign(new Error('self-signed certificate in certificate chain'), { code: 'SELF_SIGNED_CERT_IN_CHAIN' })), 'TLS handshake failed: SELF_SIGNED_CERT_IN_CHAIN: self-signed certificate in certificate chain');
});

t.test('Deliverer: HTTPS to an IP literal checks the certificate against the address (no SNI)', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'deliver-ip-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // A self-signed certificate for IP:127.0.0.1, trusted through extraCaPem.
  execFileSync('/usr/bin/openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'k.pem', '-out', 'c.pem', '-days', '2',
    '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-addext', 'basicConstraints=critical,CA:TRUE'], { cwd: dir, stdio: 'pipe' });
  const cert = readFileSync(path.join(dir, 'c.pem'));
  const snis: (string | false | null)[] = [];
  const server = https.createServer({ key: readFileSync(path.join(dir, 'k.pem')), cert }, (req, res) => {
    snis.push((req.socket as TLSSocket).servername);
    req.resume();
    req.on('end', () => res.writeHead(200).end());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  const port = (server.address() as AddressInfo).port;
  const d = new Deliverer({ policy: { allowHttp: false, allowedNetworks: ['127.0.0.0/8'] }, timeoutMs: 3_000, extraCaPem: [cert.toString()] });
  const r = await d.attempt(`https://127.0.0.1:${port}/`, Buffer.from('{}'), 'whsec_x');
  t.equal(r.ok, true, `delivered (${r.error})`);
  t.same(snis, [false], 'no SNI for an address');
  const untrusted = new Deliverer({ policy: { allowHttp: false, allowedNetworks: ['127.0.0.0/8'] }, timeoutMs: 3_000 });
  const u = await untrusted.attempt(`https://127.0.0.1:${port}/`, Buffer.from('{}'), 'whsec_x');
  t.match(u.error, /^TLS handshake failed: (DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN): /, `without the CA: ${u.error}`);
});
