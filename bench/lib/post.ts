/**
 * The benches' load generator's HTTP client: POSTs over keep-alive connections with
 * node:http, one connection per request in flight.
 *
 * The producers share the machine's cores with the service they measure (everything
 * on the same 2 cores), so whatever the producer spends is taken from the service. With
 * `fetch` (undici: WHATWG streams, an AbortSignal per request) a producer spent 1,389–2,236 µs
 * of CPU per 500-signal POST, rendering the body included, against 633–1,421 µs with this
 * client; the service's own CPU per request was the same with both
 * (`node dist/bench/producer-client.js`, docs/decisions/0014): at the pipeline bench's ~90 batches/s, about
 * a tenth of a core more for the service.
 */
import http from 'node:http';

export interface Posted {
  status: number;
  text: string;
}

export class Poster {
  private readonly agent: http.Agent;
  private readonly host: string;
  private readonly port: number;

  /** `baseUrl`: http://host:port of the service; `connections`: at most this many requests in flight. */
  constructor(baseUrl: string, connections: number) {
    const u = new URL(baseUrl);
    if (u.protocol !== 'http:') throw new Error(`Poster: http:// only, got ${baseUrl}`);
    this.host = u.hostname;
    this.port = Number(u.port || 80);
    this.agent = new http.Agent({ keepAlive: true, maxSockets: connections });
  }

  /** POSTs `body` to `path`; rejects on a network error or after `timeoutMs` without an answer. */
  post(path: string, headers: Record<string, string>, body: string, timeoutMs = 30_000): Promise<Posted> {
    return new Promise((resolve, reject) => {
      const req = http.request(
        { host: this.host, port: this.port, path, method: 'POST', agent: this.agent, headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
          res.on('error', reject);
        },
      );
      req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      req.on('error', reject);
      req.end(body);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}
