/**
 * Webhooks reach receivers named by host names, through the real service.
 *
 * A real DNS responder on loopback UDP (test/helpers/dns.ts, WEBHOOK_DNS_SERVERS) serves test
 * names that resolve to several addresses: `multi.test` → 127.0.0.2 (nothing listens there)
 * and 127.0.0.1; `dual.test` → ::1 and 127.0.0.1 (the receiver listens on 127.0.0.1 only);
 * `secure.test` → ::1 and 127.0.0.1 for an HTTPS receiver whose certificate (for secure.test
 * and localhost) is issued by a throwaway CA made here with the openssl CLI and trusted
 * through WEBHOOK_CA_FILE. Test deliveries and a real dispatcher delivery (one attempt
 * function) arrive, and each verifies with the receiver's own HMAC (spec 5.2). A name with
 * one disallowed address is refused; a name that moves to a disallowed address after it was
 * configured is refused at delivery time; a name whose DNS server never answers is refused
 * when configured after WEBHOOK_TIMEOUT_MS. A second service without those settings reaches
 * `http://localhost` (the system resolver) and fails `https://localhost` with a clear TLS error.
 */
import t from 'tap';
import http from 'node:http';
import https from 'node:https';
import type { TLSSocket } from 'node:tls';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createHmac } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { OPERATOR_TOKEN, ServiceProcess, cleanup, createOrg, http as call, isolation, waitFor } from '../helpers/service.js';
import { DnsResponder } from '../helpers/dns.js';

interface Hit {
  host: string;
  servername: string | null;
  envelope: { event: string; isTest: boolean; data: any };
  verified: boolean;
}

/** A receiver that verifies each delivery per spec 5.2 with its own HMAC code. */
class Receiver {
  readonly hits: Hit[] = [];
  secret = '';
  port = 0;
  private readonly server: http.Server;

  constructor(tlsOptions?: { key: Buffer; cert: Buffer }) {
    const handler: http.RequestListener = (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const raw = Buffer.concat(chunks);
        const m = /^t=(\d+),s=(.+)$/.exec(String(req.headers['x-webhook-signature'] ?? ''));
        const verified = m !== null && createHmac('sha256', this.secret).update(`${m[1]}.`).update(raw).digest('base64') === m[2];
        const servername = tlsOptions ? ((req.socket as TLSSocket).servername || null) : null;
        this.hits.push({ host: String(req.headers.host), servername, envelope: JSON.parse(raw.toString()), verified });
        res.writeHead(200).end();
      });
    };
    this.server = tlsOptions ? https.createServer(tlsOptions, handler) : http.createServer(handler);
  }

  async start(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }
}

/** A throwaway CA and a server certificate for secure.test and localhost, made with the openssl CLI. */
function makeCertificates(dir: string): { caFile: string; key: Buffer; cert: Buffer } {
  const run = (...args: string[]): void => void execFileSync('/usr/bin/openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=Webhook Test CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  run('req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=secure.test');
  writeFileSync(path.join(dir, 'server.ext'), 'subjectAltName=DNS:secure.test,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n');
  run('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '2', '-extfile', 'server.ext');
  return { caFile: path.join(dir, 'ca.pem'), key: readFileSync(path.join(dir, 'server.key')), cert: readFileSync(path.join(dir, 'server.pem')) };
}

const EVENT = 'billing-payment-succeeded';
const payment = (id: string) => ({ payment: { id, invoiceId: null, invoiceNumber: null, customerId: 'c', customerName: null, amount: 5, currency: 'EUR', status: 'posted', paymentDate: '2026-11-01T00:00:00Z', paymentType: 'sepa', externalPaymentId: null } });

t.test('host-name receivers: several addresses, IPv4 and IPv6, HTTPS with a trusted test CA', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'webhook-tls-'));
  const certs = makeCertificates(dir);
  const dns = await new DnsResponder().start();
  const plain = await new Receiver().start();
  const secure = await new Receiver({ key: certs.key, cert: certs.cert }).start();
  dns.set('multi.test', { a: ['127.0.0.2', '127.0.0.1'] });
  dns.set('dual.test', { a: ['127.0.0.1'], aaaa: ['::1'] });
  dns.set('secure.test', { a: ['127.0.0.1'], aaaa: ['::1'] });
  dns.set('mixed.test', { a: ['127.0.0.1', '10.9.8.7'] });
  dns.set('rebind.test', { a: ['127.0.0.1'] });

  const iso = isolation('whnames');
  const env = {
    WEBHOOK_DNS_SERVERS: dns.server,
    WEBHOOK_CA_FILE: certs.caFile,
    WEBHOOK_ALLOWED_NETWORKS: '127.0.0.0/8,::1',
    WEBHOOK_TIMEOUT_MS: '3000',
    WEBHOOK_RETRY_SCHEDULE_MS: '200,200',
  };
  const api = new ServiceProcess(iso, { ...env, ROLE: 'ingress' });
  const dispatcher = new ServiceProcess(iso, { ...env, ROLE: 'dispatcher' });
  t.teardown(async () => {
    await api.stop();
    await dispatcher.stop();
    await cleanup(iso);
    await plain.close();
    await secure.close();
    await dns.close();
    rmSync(dir, { recursive: true, force: true });
  });
  await api.start();
  await dispatcher.start();
  const org = await createOrg(api.url);
  const secret = (await call(api.url, 'POST', '/api/v2/webhooks/rotate-secret', { token: org.live })).body.signingSecret as string;
  plain.secret = secret;
  secure.secret = secret;

  const configure = (url: string) => call(api.url, 'PATCH', `/api/v2/webhooks/${EVENT}`, { token: org.live, body: { url, enabled: true } });
  const testDelivery = () => call(api.url, 'POST', `/api/v2/webhooks/${EVENT}/test`, { token: org.live, body: {} });

  await t.test('a name with an unreachable first address: delivered to the next one', async (t) => {
    t.equal((await configure(`http://multi.test:${plain.port}/hook`)).status, 200);
    const r = await testDelivery();
    t.equal(r.status, 200);
    t.equal(r.body.delivered, true, `delivered (${r.body.error})`);
    const hit = plain.hits.at(-1)!;
    t.equal(hit.host, `multi.test:${plain.port}`, 'Host header is the name');
    t.ok(hit.verified, 'signature verifies with the secret');
    t.equal(hit.envelope.isTest, true);
  });

  await t.test('a name with IPv6 and IPv4 addresses: ::1 refused, 127.0.0.1 delivered', async (t) => {
    t.equal((await configure(`http://dual.test:${plain.port}/hook`)).status, 200);
    const before = plain.hits.length;
    const r = await testDelivery();
    t.equal(r.body.delivered, true, `delivered (${r.body.error})`);
    t.equal(plain.hits.length, before + 1, 'exactly one delivery');
    t.ok(plain.hits.at(-1)!.verified);
  });

  await t.test('HTTPS to a name: SNI and certificate for the name, CA from WEBHOOK_CA_FILE', async (t) => {
    t.equal((await configure(`https://secure.test:${secure.port}/hook`)).status, 200);
    const r = await testDelivery();
    t.equal(r.body.delivered, true, `delivered (${r.body.error})`);
    const hit = secure.hits.at(-1)!;
    t.equal(hit.servername, 'secure.test', 'SNI is the host name, not an address');
    t.equal(hit.host, `secure.test:${secure.port}`);
    t.ok(hit.verified, 'signature verifies with the receiver’s own HMAC');
  });

  await t.test('the dispatcher delivers a real event over the same path', async (t) => {
    const before = secure.hits.length;
    const e = await call(api.url, 'POST', `/admin/v1/organizations/${org.id}/events`, { token: OPERATOR_TOKEN, body: { mode: 'live', event: EVENT, data: payment('pay_names_1') } });
    t.equal(e.status, 202, JSON.stringify(e.body));
    await waitFor(async () => secure.hits.length, (n) => n > before, 20_000);
    const hit = secure.hits.at(-1);
    t.equal(hit?.envelope.isTest, false);
    t.equal(hit?.envelope.data.payment.id, 'pay_names_1');
    t.equal(hit?.servername, 'secure.test');
    t.ok(hit?.verified, 'verifies');
    const log = await waitFor(
      async () => (await call(api.url, 'GET', '/api/v2/webhook-deliveries', { token: org.live })).body.deliveries as { eventId: string; outcome: string; url: string }[],
      (l) => l.some((d) => !d.eventId.startsWith('whd_test_') && d.outcome === 'delivered'),
      10_000,
    );
    t.ok(log.some((d) => !d.eventId.startsWith('whd_test_') && d.outcome === 'delivered' && d.url === `https://secure.test:${secure.port}/hook`), 'logged as delivered');
  });

  await t.test('a name with one disallowed address is refused', async (t) => {
    const r = await configure(`http://mixed.test:${plain.port}/hook`);
    t.equal(r.status, 400);
    t.equal(r.body.code, 'INVALID_WEBHOOK');
    t.match(r.body.details, /mixed\.test resolves to 10\.9\.8\.7, a private address/);
  });

  await t.test('a name whose DNS server never answers: PATCH answers within WEBHOOK_TIMEOUT_MS and changes nothing', async (t) => {
    dns.silence('silent.test');
    const before = (await call(api.url, 'GET', '/api/v2/webhooks', { token: org.live })).body;
    const started = performance.now();
    const r = await configure(`http://silent.test:${plain.port}/hook`);
    const ms = performance.now() - started;
    t.equal(r.status, 400);
    t.equal(r.body.code, 'INVALID_WEBHOOK');
    // Whichever gives up first: the check's WEBHOOK_TIMEOUT_MS or the resolver's own timeout.
    t.match(r.body.details, /^url: the host silent\.test could not be resolved (within 3000 ms|\(ETIMEOUT\))$/);
    t.ok(ms < 3_000 + 1_500, `answered within the timeout (${Math.round(ms)} ms)`);
    t.ok(dns.count('silent.test') >= 1, 'the DNS server was asked');
    t.same((await call(api.url, 'GET', '/api/v2/webhooks', { token: org.live })).body, before, 'nothing changed');
  });

  await t.test('a name that moves to a disallowed address is refused at delivery time', async (t) => {
    t.equal((await configure(`http://rebind.test:${plain.port}/hook`)).status, 200);
    dns.set('rebind.test', { a: ['127.0.0.1', '10.9.8.7'] });
    const before = plain.hits.length;
    const r = await testDelivery();
    t.equal(r.body.delivered, false);
    t.match(r.body.error, /^url: the host rebind\.test resolves to 10\.9\.8\.7/);
    t.equal(plain.hits.length, before, 'nothing sent');
  });
});

t.test('without WEBHOOK_DNS_SERVERS and WEBHOOK_CA_FILE: localhost works, an untrusted certificate is a clear TLS error', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'webhook-tls-'));
  const certs = makeCertificates(dir);
  const plain = await new Receiver().start();
  const secure = await new Receiver({ key: certs.key, cert: certs.cert }).start();
  const iso = isolation('whlocal');
  const api = new ServiceProcess(iso, { ROLE: 'ingress', WEBHOOK_ALLOWED_NETWORKS: '127.0.0.0/8,::1', WEBHOOK_TIMEOUT_MS: '3000' });
  t.teardown(async () => {
    await api.stop();
    await cleanup(iso);
    await plain.close();
    await secure.close();
    rmSync(dir, { recursive: true, force: true });
  });
  await api.start();
  const org = await createOrg(api.url);
  const secret = (await call(api.url, 'POST', '/api/v2/webhooks/rotate-secret', { token: org.live })).body.signingSecret as string;
  plain.secret = secret;
  secure.secret = secret;

  // A host name through the system resolver: a lookup answering one address string for {all: true} failed here with ERR_INVALID_IP_ADDRESS.
  t.equal((await call(api.url, 'PATCH', `/api/v2/webhooks/${EVENT}`, { token: org.live, body: { url: `http://localhost:${plain.port}/x`, enabled: true } })).status, 200);
  const ok = await call(api.url, 'POST', `/api/v2/webhooks/${EVENT}/test`, { token: org.live, body: {} });
  t.equal(ok.body.delivered, true, `delivered to localhost (${ok.body.error})`);
  t.equal(plain.hits.length, 1);
  t.ok(plain.hits[0]!.verified);
  t.equal(plain.hits[0]!.host, `localhost:${plain.port}`);

  t.equal((await call(api.url, 'PATCH', `/api/v2/webhooks/${EVENT}`, { token: org.live, body: { url: `https://localhost:${secure.port}/x` } })).status, 200);
  const bad = await call(api.url, 'POST', `/api/v2/webhooks/${EVENT}/test`, { token: org.live, body: {} });
  t.equal(bad.body.delivered, false);
  t.match(bad.body.error, /^TLS handshake failed: (UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT_LOCALLY|SELF_SIGNED_CERT_IN_CHAIN): /, `clear TLS error: ${bad.body.error}`);
  t.equal(secure.hits.length, 0, 'nothing delivered over an untrusted connection');
  const log = (await call(api.url, 'GET', '/api/v2/webhook-deliveries', { token: org.live })).body.deliveries as { deliveryId: string; outcome: string; error: string }[];
  const entry = log.find((d) => d.deliveryId === bad.body.deliveryId);
  t.equal(entry?.outcome, 'failed');
  t.equal(entry?.error, bad.body.error, 'the delivery log shows the TLS error');
});
