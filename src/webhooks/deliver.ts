/**
 * Webhook delivery: the one attempt function behind test deliveries (POST
 * /api/v2/webhooks/:event/test) and the dispatcher's real deliveries.
 *
 * One attempt: the configured URL is checked again now with the public-address guard
 * (ssrf.ts: the host name is resolved ONCE and every address it resolves to must pass, or the
 * attempt is refused), then the envelope bytes are POSTed, signed afresh with the current
 * secret and time (spec 5.2), to the vetted addresses only:
 *
 * - the request keeps the URL's host name (Host header; for HTTPS the TLS SNI name and the
 *   certificate check are against the host name, never an IP address), while the socket's
 *   `lookup` is pinned to the vetted addresses, so the name is never resolved a second time
 *   (DNS rebinding cannot redirect the connection);
 * - when a name has several vetted addresses they are tried in turn when a connection fails
 *   or does not complete within {@link ATTEMPT_CONNECT_MS} (Node's `autoSelectFamily`,
 *   alternating IPv6 and IPv4 starting with the family of the first address); once a
 *   connection is made the request is sent once, never to a second address. At most
 *   {@link MAX_ADDRESSES_TRIED} addresses are tried per attempt (every one is still vetted):
 *   whoever controls a name's DNS answer could otherwise turn one attempt into connections to
 *   hundreds of hosts of their choosing, each reported back in the error;
 * - extra trusted CA certificates (`WEBHOOK_CA_FILE`) are added to Node's default roots, never
 *   replacing them;
 * - redirects are not followed (a 3xx is a failure), any 2xx is success, at most
 *   64 KiB of the answer are read, and the whole attempt (resolution, connection, TLS,
 *   answer) is bounded by the timeout; the check made when a URL is configured gives up on
 *   resolution after the same timeout;
 * - every request has its own agent (`agent: false`): no socket is kept alive or reused, so
 *   a connection made by an earlier delivery (to an address the name no longer has, or under
 *   a policy since tightened) never carries a later request; proxy environment variables are
 *   not consulted.
 */
import http from 'node:http';
import https from 'node:https';
import tls from 'node:tls';
import { isIP, type LookupFunction } from 'node:net';
import type { LookupAddress } from 'node:dns';
import { signatureHeader } from './signature.js';
import { observeDelivery } from '../metrics/index.js';
import { checkWebhookUrl, systemResolver, type HostAddresses, type Resolver, type WebhookUrlCheck, type WebhookUrlPolicy } from './ssrf.js';

export interface DeliveryOutcome {
  ok: boolean;
  statusCode: number | null;
  latencyMs: number;
  /** Why it failed, when it did: a short text safe to show the organization. */
  error: string | null;
}

export interface Target {
  url: URL;
  /** Vetted addresses (ssrf.ts), in the order to try them. */
  addresses: string[];
}

export interface DeliverySettings {
  policy: WebhookUrlPolicy;
  /** Upper bound of one attempt (WEBHOOK_TIMEOUT_MS). */
  timeoutMs: number;
  /** Resolves host names for the check; default: the operating system's resolver. */
  resolver?: Resolver;
  /** PEM certificates trusted in addition to Node's default roots (WEBHOOK_CA_FILE). */
  extraCaPem?: readonly string[];
  /** This machine's own addresses; default: its interfaces, read at every check. */
  hostAddresses?: HostAddresses;
}

const MAX_RESPONSE_BYTES = 64 * 1024;
/** How long one address may take to connect before the next vetted address is tried. */
export const ATTEMPT_CONNECT_MS = 1_000;
/** The most addresses one attempt connects to (with 1 s each, about what a 10 s attempt can try). */
export const MAX_ADDRESSES_TRIED = 8;

/**
 * The vetted addresses one attempt may connect to, in the order Node's `autoSelectFamily`
 * tries them: the families alternate, starting with the family of the first address, each
 * family in resolver order; at most {@link MAX_ADDRESSES_TRIED}.
 */
export function addressesToTry(addresses: readonly string[]): string[] {
  const first = isIP(addresses[0] ?? '');
  const same = addresses.filter((a) => isIP(a) === first);
  const other = addresses.filter((a) => isIP(a) !== first);
  const out: string[] = [];
  for (let i = 0; out.length < MAX_ADDRESSES_TRIED && (i < same.length || i < other.length); i++) {
    if (i < same.length) out.push(same[i]!);
    if (i < other.length && out.length < MAX_ADDRESSES_TRIED) out.push(other[i]!);
  }
  return out;
}

/**
 * A `lookup` for `net`/`tls` that answers only the vetted addresses (never resolving
 * anything). Node calls it with `{all: true}` when it may try several addresses
 * (`autoSelectFamily`) and expects an array of `{address, family}`; otherwise with a single
 * answer `(address, family)`. `family` 4 or 6 restricts the answer to that family; no vetted
 * address of the family is an ENOTFOUND error. Answers asynchronously, like `dns.lookup`.
 */
export function pinnedLookup(addresses: readonly string[]): LookupFunction {
  const entries: LookupAddress[] = addresses.map((address) => ({ address, family: isIP(address) }));
  for (const e of entries) if (e.family !== 4 && e.family !== 6) throw new TypeError(`not an IP address: ${JSON.stringify(e.address)}`);
  return (hostname, options, callback) => {
    const f = (options as { family?: unknown }).family;
    const want = f === 4 || f === 'IPv4' ? 4 : f === 6 || f === 'IPv6' ? 6 : 0;
    const matching = entries.filter((e) => want === 0 || e.family === want);
    const all = (options as { all?: boolean }).all === true;
    process.nextTick(() => {
      if (matching.length === 0) {
        const err = Object.assign(new Error(`no vetted ${want ? `IPv${want} ` : ''}address for ${hostname}`), { code: 'ENOTFOUND', hostname }) as NodeJS.ErrnoException;
        (callback as (err: NodeJS.ErrnoException, address: string, family: number) => void)(err, '', 0);
        return;
      }
      if (all) (callback as (err: null, addresses: LookupAddress[]) => void)(null, matching.map((e) => ({ ...e })));
      else (callback as (err: null, address: string, family: number) => void)(null, matching[0]!.address, matching[0]!.family);
    });
  };
}

const TLS_CODE = /^(ERR_TLS_|ERR_SSL_|ERR_OSSL_|UNABLE_TO_|CERT_|SELF_SIGNED_|DEPTH_ZERO_|HOSTNAME_MISMATCH|INVALID_CA|PATH_LENGTH_EXCEEDED|INVALID_PURPOSE)/;

function where(e: { address?: unknown; port?: unknown }): string {
  if (typeof e.address !== 'string') return '';
  const host = e.address.includes(':') ? `[${e.address}]` : e.address;
  return typeof e.port === 'number' ? ` ${host}:${e.port}` : ` ${host}`;
}

/** A short, truthful text for a failed connection (each address tried, or the TLS reason). */
export function describeConnectionError(err: unknown): string {
  const e = err as NodeJS.ErrnoException & { errors?: unknown[]; address?: unknown; port?: unknown };
  const code = typeof e?.code === 'string' ? e.code : undefined;
  if (code && TLS_CODE.test(code)) return `TLS handshake failed: ${code}: ${e.message}`;
  if (Array.isArray(e?.errors) && e.errors.length > 0) {
    return `connection failed: ${e.errors.map((x) => { const xe = x as NodeJS.ErrnoException & { address?: unknown; port?: unknown }; return `${xe.code ?? xe.message}${where(xe)}`; }).join('; ')}`;
  }
  return `connection failed: ${code ?? e?.message ?? String(err)}${where(e ?? {})}`;
}

/**
 * Delivers webhook envelopes. Built once per process from the configuration; both the
 * webhook API (URL checks, test deliveries) and the dispatcher use the same instance.
 */
export class Deliverer {
  private readonly secureContext: tls.SecureContext | undefined;
  readonly timeoutMs: number;

  constructor(private readonly settings: DeliverySettings) {
    this.timeoutMs = settings.timeoutMs;
    this.secureContext = settings.extraCaPem && settings.extraCaPem.length > 0
      ? tls.createSecureContext({ ca: [...tls.rootCertificates, ...settings.extraCaPem] })
      : undefined;
  }

  /** The public-address guard with this process's policy and resolver. */
  check(url: string): Promise<WebhookUrlCheck> {
    return checkWebhookUrl(url, this.settings.policy, this.settings.resolver ?? systemResolver, {
      resolveTimeoutMs: this.timeoutMs,
      ...(this.settings.hostAddresses ? { hostAddresses: this.settings.hostAddresses } : {}),
    });
  }

  /**
   * One attempt at a configured URL: checked again now (it may resolve elsewhere than when it
   * was set), then delivered to the vetted addresses. `kind` labels the attempt in the metrics:
   * `event` (the dispatcher) or `test` (a test delivery).
   */
  async attempt(url: string, body: Buffer, secret: string, kind: 'event' | 'test' = 'event'): Promise<DeliveryOutcome> {
    const started = performance.now();
    // The check gives up on resolution after the timeout (RESOLUTION_FAILED "within N ms").
    const check = await this.check(url);
    if (!check.ok) {
      const latencyMs = Math.round(performance.now() - started);
      observeDelivery(kind, 'refused', performance.now() - started);
      return { ok: false, statusCode: null, latencyMs, error: `url: ${check.reason}` };
    }
    // The resolution counts against the attempt's time (it stays bounded by the timeout).
    const outcome = await this.deliver(check, body, secret, Math.max(1, Math.round(this.timeoutMs - (performance.now() - started))));
    observeDelivery(kind, outcome.ok ? 'delivered' : 'failed', performance.now() - started);
    return outcome;
  }

  /** POSTs to a target the guard has vetted (use `attempt`, which vets it first). */
  deliver(target: Target, body: Buffer, secret: string, timeoutMs = this.timeoutMs): Promise<DeliveryOutcome> {
    const started = performance.now();
    const now = Date.now();
    const secure = target.url.protocol === 'https:';
    const hostname = target.url.hostname.startsWith('[') ? target.url.hostname.slice(1, -1) : target.url.hostname;
    const tried = addressesToTry(target.addresses);
    const untried = target.addresses.length - tried.length;
    return new Promise((resolve) => {
      let settled = false;
      const done = (o: Omit<DeliveryOutcome, 'latencyMs'>): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve({ ...o, latencyMs: Math.round((performance.now() - started) * 10) / 10 });
      };
      const options: https.RequestOptions & Pick<tls.ConnectionOptions, 'secureContext'> & { autoSelectFamily?: boolean; autoSelectFamilyAttemptTimeout?: number } = {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          'Content-Length': String(body.length),
          'User-Agent': 'usage-billing-webhooks/1',
          'x-webhook-signature': signatureHeader(secret, body, now),
        },
        // Connect to the vetted addresses only, each in turn while connections fail.
        lookup: pinnedLookup(tried),
        autoSelectFamily: true,
        autoSelectFamilyAttemptTimeout: ATTEMPT_CONNECT_MS,
        agent: false,
      };
      if (secure) {
        // SNI and the certificate check against the host name; an IP literal sends no SNI
        // ('' turns it off) and its certificate is checked against the address.
        options.servername = isIP(hostname) === 0 ? hostname : '';
        if (this.secureContext) options.secureContext = this.secureContext;
      }
      const onResponse = (res: http.IncomingMessage): void => {
        let seen = 0;
        res.on('data', (chunk: Buffer) => {
          seen += chunk.length;
          if (seen > MAX_RESPONSE_BYTES) res.destroy();
        });
        res.on('error', () => undefined);
        res.on('close', () => {
          const code = res.statusCode ?? 0;
          done({ ok: code >= 200 && code < 300, statusCode: code, error: code >= 200 && code < 300 ? null : code >= 300 && code < 400 ? `redirect (${code}) not followed` : `receiver answered ${code}` });
        });
        res.resume();
      };
      const req = secure ? https.request(target.url, options, onResponse) : http.request(target.url, options, onResponse);
      const timer = setTimeout(() => {
        // Named with the attempt's whole timeout (what the operator configured), not what was left of it.
        done({ ok: false, statusCode: null, error: `no answer within ${Math.max(timeoutMs, this.timeoutMs)} ms` });
        req.destroy();
      }, timeoutMs);
      req.on('error', (err) => {
        const more = untried > 0 ? ` (${untried} more address${untried === 1 ? '' : 'es'} not tried)` : '';
        done({ ok: false, statusCode: null, error: `${describeConnectionError(err)}${more}` });
      });
      req.end(body);
    });
  }
}
