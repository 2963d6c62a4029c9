/**
 * One HTTP request to the API: JSON body (gzip-compressed on request), bearer key, a timeout.
 * Answers come back as status, headers and parsed body; only the absence of an answer (refused,
 * reset, DNS, timeout) is thrown, as a NetworkError.
 */
import { gzip as gzipCb } from 'node:zlib';
import { promisify } from 'node:util';
import { NetworkError, SignalApiError, type ApiErrorBody } from './errors.js';
import { parseRetryAfter } from './backoff.js';

const gzip = promisify(gzipCb);

export const SDK_VERSION = '0.1.0';

export interface Answer {
  status: number;
  headers: Headers;
  /** Parsed JSON, or the text when the body is not JSON. */
  body: unknown;
}

export interface PostOptions {
  baseUrl: string;
  apiKey: string;
  path: string;
  /** The JSON text to send. */
  json: string;
  gzip: boolean;
  timeoutMs: number;
  userAgent?: string;
}

export async function gzipText(text: string): Promise<Buffer> {
  return gzip(Buffer.from(text, 'utf8'));
}

export async function postJson(o: PostOptions): Promise<Answer> {
  const headers: Record<string, string> = {
    authorization: `Bearer ${o.apiKey}`,
    'content-type': 'application/json',
    'user-agent': o.userAgent ?? `usage-billing-sdk/${SDK_VERSION} node/${process.versions.node}`,
  };
  let body: string | Buffer = o.json;
  if (o.gzip) {
    body = await gzipText(o.json);
    headers['content-encoding'] = 'gzip';
  }
  return request(`${o.baseUrl}${o.path}`, { method: 'POST', headers, body }, o.timeoutMs);
}

async function request(url: string, init: RequestInit, timeoutMs: number): Promise<Answer> {
  let res: Response;
  let text: string;
  try {
    res = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
    text = await res.text();
  } catch (err) {
    const e = err as Error & { cause?: { code?: string; message?: string } };
    const why = e.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : (e.cause?.code ?? e.cause?.message ?? e.message);
    throw new NetworkError(`${init.method} ${url}: ${why}`, { cause: err });
  }
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON (a proxy's page): kept as text */
  }
  return { status: res.status, headers: res.headers, body };
}

/** The API's `{error, code, details}`, or a stand-in naming the status when a proxy answered. */
export function errorBody(a: Answer): ApiErrorBody {
  const b = a.body as Partial<ApiErrorBody> | null;
  if (b && typeof b === 'object' && typeof b.code === 'string') {
    return { error: String(b.error ?? ''), code: b.code, details: String(b.details ?? '') };
  }
  const text = typeof a.body === 'string' ? a.body.slice(0, 200) : JSON.stringify(a.body)?.slice(0, 200) ?? '';
  return { error: `HTTP ${a.status}`, code: `HTTP_${a.status}`, details: text };
}

export function apiError(a: Answer): SignalApiError {
  return new SignalApiError(a.status, errorBody(a), parseRetryAfter(a.headers.get('retry-after')));
}
