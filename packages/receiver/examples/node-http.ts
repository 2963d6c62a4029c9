/**
 * A webhook receiver on node:http alone. Run: `WEBHOOK_SIGNING_SECRET=whsec_… PORT=8080 node
 * dist/packages/receiver/examples/node-http.js`, then point the webhooks at
 * `https://<your host>/webhooks` (the service delivers only to public HTTPS URLs).
 *
 * The shape every receiver needs: read the RAW body (the signature covers its exact bytes),
 * verify, deduplicate, hand the work to a queue and answer 2xx at once (a slow answer is a
 * failed attempt, retried later). In your project import from '@usage-billing/receiver'.
 */
import http from 'node:http';
import { pathToFileURL } from 'node:url';
import { type WebhookEvent, SIGNATURE_HEADER, WebhookReceiver } from '../src/index.js';

export interface ExampleOptions {
  receiver: WebhookReceiver;
  /** Queue the work (do not do it here); a throw answers 500 so the service retries. */
  onEvent: (event: WebhookEvent) => void | Promise<void>;
  /** Largest body accepted, in bytes (default 1 MiB). */
  maxBodyBytes?: number;
}

const send = (res: http.ServerResponse, status: number, body: unknown): void => {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
};

export function createNodeHttpReceiver(opts: ExampleOptions): http.Server {
  const max = opts.maxBodyBytes ?? 1 << 20;
  return http.createServer((req, res) => {
    if (req.method !== 'POST' || req.url?.split('?')[0] !== '/webhooks') return send(res, 404, { error: 'POST /webhooks' });
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > max) {
        if (!res.headersSent) {
          res.once('finish', () => req.destroy()); // stop reading once the answer is out
          res.writeHead(413, { 'content-type': 'application/json', connection: 'close' }).end(JSON.stringify({ error: 'body too large' }));
        }
      } else chunks.push(c);
    });
    req.on('end', () => {
      if (size > max) return;
      const raw = Buffer.concat(chunks); // the raw bytes: do not parse before verifying
      void handle(opts, raw, req.headers[SIGNATURE_HEADER]).then(
        ([status, body]) => send(res, status, body),
        () => send(res, 500, { error: 'internal error' }),
      );
    });
  });
}

/** The part every framework shares: verify, dedupe, queue; returns the status and a small JSON body. */
export async function handle(opts: ExampleOptions, raw: Buffer, header: string | string[] | undefined): Promise<[number, unknown]> {
  let outcome;
  try {
    outcome = await opts.receiver.receive(raw, header);
  } catch (err) {
    // The dedupe store is unreachable (or a configuration mistake): 5xx, so the service retries.
    console.error('webhook receiver:', err);
    return [500, { error: 'could not check the delivery' }];
  }
  switch (outcome.action) {
    case 'refused':
      return [outcome.status, { error: outcome.reason }];
    case 'invalid':
      return [outcome.status, { error: 'INVALID_ENVELOPE', detail: outcome.detail }];
    case 'process':
      try {
        await opts.onEvent(outcome.event);
      } catch {
        // Not queued: forget the key so the service's retry is processed.
        await Promise.resolve(outcome.release()).catch((err: unknown) => console.error('webhook receiver: could not release', outcome.key, err));
        return [500, { error: 'could not queue the event' }];
      }
      return [200, { action: 'process' }];
    default: // duplicate, test, ignored: nothing to do, and no retry wanted
      return [outcome.status, { action: outcome.action }];
  }
}

/** Running it directly: an in-process queue worked off after the answer (use a durable one). */
export function mainOptions(): ExampleOptions {
  const secret = process.env.WEBHOOK_SIGNING_SECRET;
  if (!secret) throw new Error('set WEBHOOK_SIGNING_SECRET to the whsec_… secret shown by rotate-secret');
  const queue: WebhookEvent[] = [];
  const work = (): void => {
    for (let e = queue.shift(); e; e = queue.shift()) {
      if (e.event === 'billing-credits-depleted') console.log('credits depleted', e.data.credits.customerId, e.data.credits.remainingCreditsDecimal);
      else console.log(e.event);
    }
  };
  return {
    receiver: new WebhookReceiver({ secret }),
    onEvent: (e) => {
      queue.push(e);
      setImmediate(work);
    },
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const port = Number(process.env.PORT ?? 8080);
  createNodeHttpReceiver(mainOptions()).listen(port, () => console.log(`listening on :${port}, POST /webhooks`));
}
