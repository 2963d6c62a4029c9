/**
 * One delivery attempt: POST the envelope bytes to the receiver, signed afresh with the
 * current secret and time (spec 5.2), to an address the public-address guard vetted.
 * The connection goes to that address only (a custom lookup: the name is never resolved
 * again, so DNS rebinding cannot redirect it), with the URL's host kept for TLS SNI, the
 * certificate check and the Host header. Redirects are not followed (a 3xx is a failure),
 * any 2xx is success, and the whole attempt is bounded by a timeout.
 */
import http from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
import { signatureHeader } from './signature.js';
import { checkWebhookUrl, type Resolver, type WebhookUrlPolicy } from './ssrf.js';

export interface DeliveryOutcome {
  ok: boolean;
  statusCode: number | null;
  latencyMs: number;
  /** Why it failed, when it did: a short text safe to show the organization. */
  error: string | null;
}

export interface Target {
  url: URL;
  /** Vetted addresses (ssrf.ts); the first one is used. */
  addresses: string[];
}

const MAX_RESPONSE_BYTES = 64 * 1024;

export function deliver(target: Target, body: Buffer, secret: string, timeoutMs: number, now = Date.now()): Promise<DeliveryOutcome> {
  const started = performance.now();
  const address = target.addresses[0]!;
  const family = isIP(address);
  const lib = target.url.protocol === 'https:' ? https : http;
  return new Promise((resolve) => {
    let settled = false;
    const done = (o: Omit<DeliveryOutcome, 'latencyMs'>): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ ...o, latencyMs: Math.round((performance.now() - started) * 10) / 10 });
    };
    const req = lib.request(
      target.url,
      {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          'Content-Length': String(body.length),
          'User-Agent': 'usage-billing-webhooks/1',
          'x-webhook-signature': signatureHeader(secret, body, now),
        },
        // Connect to the vetted address only.
        lookup: (_host, _opts, cb) => (cb as (err: Error | null, address: string, family: number) => void)(null, address, family),
        agent: false,
      },
      (res) => {
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
      },
    );
    const timer = setTimeout(() => {
      done({ ok: false, statusCode: null, error: `no answer within ${timeoutMs} ms` });
      req.destroy();
    }, timeoutMs);
    req.on('error', (err) => done({ ok: false, statusCode: null, error: `connection failed: ${(err as NodeJS.ErrnoException).code ?? err.message}` }));
    req.end(body);
  });
}

/** One attempt at a configured URL: checked again now (it may resolve elsewhere than when it was set), then delivered to the vetted address. */
export async function attempt(url: string, policy: WebhookUrlPolicy, body: Buffer, secret: string, timeoutMs: number, resolver?: Resolver): Promise<DeliveryOutcome> {
  const check = await checkWebhookUrl(url, policy, resolver);
  if (!check.ok) return { ok: false, statusCode: null, latencyMs: 0, error: `url: ${check.reason}` };
  return deliver(check, body, secret, timeoutMs);
}
