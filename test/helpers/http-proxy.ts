/**
 * An HTTP proxy in front of the service for client tests: it forwards every request as it
 * came (body bytes and headers untouched), records what went through and when, and lets a
 * test answer a request itself, hold it, or forward it and then withhold the answer (the
 * "ingested but the 202 was lost" case).
 */
import http from 'node:http';
import type { Test } from 'tap';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';

export interface Seen {
  /** 0-based order of arrival. */
  n: number;
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  /** The body as it arrived (compressed if it was). */
  raw: Buffer;
  /** The body decoded (gunzipped when `content-encoding: gzip`), parsed as JSON when it is. */
  json: any;
  /** When the request's body had arrived (ms since epoch). */
  receivedAt: number;
  /** When the answer was written, its status and Retry-After. */
  answeredAt?: number;
  status?: number;
  retryAfter?: string | undefined;
  /** The answer's body text. */
  answer?: string;
  /** What was done with it. */
  action?: Action['kind'];
}

export type Action =
  | { kind: 'forward' }
  /** Answer here; the service never sees the request. */
  | { kind: 'answer'; status: number; body?: unknown; headers?: Record<string, string> }
  /** Forward, let the service answer, then answer the client with this instead (the real answer is lost). */
  | { kind: 'forward-then'; status: number; body?: unknown }
  /** Forward, let the service answer, then cut the connection without an answer. */
  | { kind: 'forward-then-drop' }
  /** Wait for the promise, then forward. */
  | { kind: 'hold'; until: Promise<void> };

export type Decide = (req: Seen) => Action;

export class HttpProxy {
  port = 0;
  readonly seen: Seen[] = [];
  decide: Decide = () => ({ kind: 'forward' });
  private server: http.Server | null = null;

  /** `target`: the service's base URL, or a function giving it (read at each request). */
  constructor(private readonly target: string | (() => string)) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Requests to one path, in order of arrival. */
  requests(pathPrefix: string): Seen[] {
    return this.seen.filter((s) => s.path.startsWith(pathPrefix));
  }

  async start(): Promise<this> {
    const server = http.createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', () => resolve()));
    this.server = server;
    this.port = (server.address() as AddressInfo).port;
    return this;
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = null;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks);
    let json: unknown;
    try {
      const decoded = req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw;
      json = JSON.parse(decoded.toString('utf8'));
    } catch {
      json = undefined;
    }
    const seen: Seen = { n: this.seen.length, method: req.method ?? '', path: req.url ?? '', headers: req.headers, raw, json, receivedAt: Date.now() };
    this.seen.push(seen);
    const action = this.decide(seen);
    seen.action = action.kind;
    const answer = (status: number, body: unknown, headers: Record<string, string> = {}): void => {
      const text = body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body);
      seen.status = status;
      seen.answer = text;
      seen.retryAfter = headers['retry-after'] ?? headers['Retry-After'];
      seen.answeredAt = Date.now();
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(text);
    };
    if (action.kind === 'answer') return answer(action.status, action.body, action.headers);
    if (action.kind === 'hold') await action.until;
    let upstream: Response;
    try {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && !['host', 'connection', 'content-length'].includes(k)) headers[k] = v;
      upstream = await fetch((typeof this.target === 'string' ? this.target : this.target()) + (req.url ?? '/'), { method: req.method, headers, body: raw.length > 0 ? raw : undefined });
    } catch (err) {
      return answer(502, { error: 'Bad Gateway', code: 'PROXY', details: String(err) });
    }
    const text = await upstream.text();
    if (action.kind === 'forward-then') return answer(action.status, action.body);
    if (action.kind === 'forward-then-drop') {
      seen.status = 0;
      seen.answeredAt = Date.now();
      res.socket?.destroy();
      return;
    }
    const out: Record<string, string> = {};
    upstream.headers.forEach((v, k) => {
      if (!['content-length', 'transfer-encoding', 'connection', 'keep-alive'].includes(k)) out[k] = v;
    });
    answer(upstream.status, text, out);
  }
}

/**
 * A proxy in front of the service for a whole test file: started before its tests, stopped at
 * its teardown, and back to forwarding everything after each test. `target` is read at each
 * request, so it may name a service that starts in the same file's `t.before`.
 */
export function useHttpProxy(t: Test, target: () => string): HttpProxy {
  const proxy = new HttpProxy(target);
  t.before(async () => {
    await proxy.start();
  });
  t.teardown(() => proxy.stop());
  t.afterEach(() => {
    proxy.decide = () => ({ kind: 'forward' });
  });
  return proxy;
}
