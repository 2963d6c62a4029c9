/**
 * The one module that touches uWebSockets.js request/response objects.
 *
 * uWS rules this module exists for: a handler must answer or register onAborted before it
 * returns (otherwise uWS terminates the process, uWebSockets.js #1296); `req` is valid only
 * synchronously inside the handler; body chunks are valid only inside onData; every write
 * made after an await must be corked. Route handlers receive a plain `Request`, return a
 * `Reply` or throw an ApiError, and never see `res`. The types are in src/http/route.ts.
 */
// First: the header-size limit uWS reads from the environment when it loads.
import './uws-limits.js';
import uWS from 'uWebSockets.js';
import { ApiError, toErrorResponse } from '../errors.js';
import { randomUUID } from 'node:crypto';
import { httpLog as log, withRequest } from '../log.js';
import { decodeBody, parseContentEncoding } from './content-encoding.js';
import { bodyPool } from './body-pool.js';
import { paramNames, type BodySource, type Handler, type Reply, type Request } from './route.js';
import { observeRequest } from '../metrics/index.js';

export interface RouteOptions<P = unknown> {
  /** Read the body (POST/PATCH). */
  body?: boolean;
  /**
   * Upper bound of the body in bytes; larger bodies answer 413 without being read. A
   * compressed body (Content-Encoding, src/http/content-encoding.ts) is held to it twice:
   * as received, and once decompressed.
   */
  maxBodyBytes?: number;
  /**
   * Runs before the handler, while the body is being read; may answer early (401) without
   * waiting for the rest of the body.
   */
  before?: (req: Request<P>) => Reply | Promise<Reply | undefined> | undefined;
  /** The route label of the request metrics when the handler is not for `pattern` (a 405 answer). */
  route?: string;
}

const STATUS_TEXT: Record<number, string> = {
  200: '200 OK', 201: '201 Created', 202: '202 Accepted', 204: '204 No Content',
  400: '400 Bad Request', 401: '401 Unauthorized', 403: '403 Forbidden', 404: '404 Not Found',
  405: '405 Method Not Allowed', 408: '408 Request Timeout', 409: '409 Conflict', 413: '413 Payload Too Large',
  415: '415 Unsupported Media Type',
  429: '429 Too Many Requests', 500: '500 Internal Server Error', 503: '503 Service Unavailable',
};

const EMPTY = Buffer.alloc(0);

/** An incoming X-Request-Id is kept when it is 1–128 characters of [A-Za-z0-9._:-]; otherwise one is generated. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
export const requestId = (incoming: string): string => (REQUEST_ID.test(incoming) ? incoming : randomUUID());

/**
 * `observe` records the answer in the metrics (src/metrics): once, when it is sent (a streamed
 * body: when its end is written). `aborted`: the client went away (uWS onAborted), after which
 * `res` must not be used; `onAbort` is told.
 */
type SendState = { done: boolean; aborted?: boolean; onAbort?: () => void; reqId?: string; observe?: (status: number, body: unknown) => void };

function send(res: uWS.HttpResponse, state: SendState, reply: Reply): void {
  if (reply.stream) return sendStream(res, state, reply, reply.stream);
  if (state.done) return;
  state.done = true;
  state.observe?.(reply.status, reply.body);
  const payload = reply.body === undefined ? '' : typeof reply.body === 'string' || Buffer.isBuffer(reply.body) ? reply.body : JSON.stringify(reply.body);
  res.cork(() => {
    res.writeStatus(STATUS_TEXT[reply.status] ?? String(reply.status));
    if (reply.body !== undefined && typeof reply.body !== 'string' && !Buffer.isBuffer(reply.body)) {
      res.writeHeader('Content-Type', 'application/json');
    }
    for (const [k, v] of Object.entries(reply.headers ?? {})) res.writeHeader(k, v);
    if (state.reqId) res.writeHeader('X-Request-Id', state.reqId);
    res.end(payload as string | Buffer, reply.close === true);
  });
}

/**
 * The most of a streamed body written in one corked write: with its chunk's framing (at most
 * 12 bytes) it fits in uWS's 16 KiB cork buffer, which a cork starts empty. A corked write that
 * does not fit is sent at once after what the cork buffer holds; when that could not all be
 * sent (the socket was full), uWS keeps the cork buffer's bytes but not the write's
 * (AsyncSocket::uncork), so a chunk's data would go missing behind its framing. A write that
 * fits is only ever copied into the cork buffer, and what the socket does not take of it is
 * kept. uWebSockets.js #1249 reports chunked bodies broken by one cork per write of 16 KiB.
 */
export const WRITE_SLICE = 16 * 1024 - 64;

/** The reason logged when a streamed answer's connection ended from the client's side. */
export const CLIENT_GONE = 'the client went away or took nothing for 10 s';

/**
 * A streamed body: the status line and headers, then each piece of the source as chunks of at
 * most WRITE_SLICE bytes, each write corked on its own. The next slice is written only once uWS
 * took the previous one whole (write returned true) or, when it had to keep some
 * (back-pressure), once the socket drained (onWritable): the service holds at most one piece
 * per answer beyond what the source holds.
 * A client that stops reading is closed by uWS after 10 s without progress (onAborted). A
 * source that fails after the status line ends the connection without the body's end (a
 * client sees a broken chunked body, never a short whole one), and is logged.
 */
function sendStream(res: uWS.HttpResponse, state: SendState, reply: Reply, source: BodySource): void {
  if (state.done) {
    source.cancel();
    return;
  }
  state.done = true;
  let drained: (() => void) | null = null;
  const wake = (): void => {
    const d = drained;
    drained = null;
    d?.();
  };
  let ended = false;
  /** Ended here (source.abort), which uWS then reports as an abort too. */
  let closed = false;
  state.onAbort = () => {
    // The client went away, or uWS closed it for taking nothing for 10 s (which can come before
    // a result's own deadline: uWS counts from the request, the deadline from the engine place).
    if (!ended && !closed) log.warn('answer ended before its body was complete', { reason: CLIENT_GONE, status: reply.status });
    source.cancel();
    wake();
  };
  source.abort = (reason) => {
    if (state.aborted || ended) return;
    log.warn('answer ended before its body was complete', { reason, status: reply.status });
    state.aborted = true;
    closed = true;
    source.cancel();
    res.close();
    wake();
  };
  res.cork(() => {
    res.writeStatus(STATUS_TEXT[reply.status] ?? String(reply.status));
    for (const [k, v] of Object.entries(reply.headers ?? {})) res.writeHeader(k, v);
    if (state.reqId) res.writeHeader('X-Request-Id', state.reqId);
  });
  res.onWritable(() => {
    wake();
    return true;
  });
  void (async () => {
    try {
      for (;;) {
        const piece = await source.next();
        if (state.aborted) return;
        if (piece === null) {
          ended = true;
          res.cork(() => res.end());
          state.observe?.(reply.status, undefined);
          return;
        }
        for (let at = 0; at < piece.length; at += WRITE_SLICE) {
          const slice = piece.subarray(at, at + WRITE_SLICE);
          let whole = true;
          res.cork(() => {
            whole = res.write(slice);
          });
          if (!whole) await new Promise<void>((resolve) => (drained = resolve));
          if (state.aborted) return;
        }
      }
    } catch (err) {
      source.abort?.(err instanceof Error ? err.message : String(err));
    }
  })();
}

function errorReply(err: unknown, req: Request): Reply {
  const r = toErrorResponse(err);
  if (!(err instanceof ApiError)) log.error('unhandled error', { err, method: req.method, url: req.url });
  return { status: r.status, body: r.body, headers: r.headers, ...(err instanceof ApiError && FRAMING.has(err) ? { close: true } : {}) };
}

/** Refusals of a request whose framing cannot be trusted: answered, then the connection is closed. */
const FRAMING = new WeakSet<ApiError>();

/**
 * The request's Content-Length values when they disagree (RFC 9112 section 6.3: several
 * Content-Length fields, or a list, with different values make the body's length unknown,
 * and a proxy in front may have framed the request by another of them), else null.
 * uWebSockets.js's getHeader gives the first field only, so the fields are read one by one.
 */
function conflictingLengths(uReq: uWS.HttpRequest): string[] | null {
  const seen = new Set<string>();
  let n = 0;
  uReq.forEach((k, v) => {
    if (k !== 'content-length') return;
    n++;
    for (const part of v.split(',')) seen.add(part.trim());
  });
  return n > 0 && seen.size > 1 ? [...seen] : null;
}

/**
 * Wraps a route handler into a uWS handler. `pattern` is the route's uWS pattern: its
 * `:name` segments are the path parameters, decoded here once (a malformed escape answers
 * 400 INVALID_PATH naming the parameter, after the `before` hook, so an unauthenticated
 * request still gets its 401).
 */
export function wrap<P>(handler: Handler<P>, opts: RouteOptions<P> = {}, pattern = ''): (res: uWS.HttpResponse, req: uWS.HttpRequest) => void {
  const names = paramNames(pattern);
  return (res, uReq) => {
    const started = performance.now();
    const state: SendState & { reqId: string } = { done: false, reqId: requestId(uReq.getHeader('x-request-id')), observe: observeRequest(opts.route ?? pattern, uReq.getCaseSensitiveMethod()) };
    res.onAborted(() => {
      state.done = true;
      state.aborted = true;
      state.onAbort?.();
    });
    const params: string[] = [];
    let badParam: ApiError | null = null;
    names.forEach((name, i) => {
      const decoded = decodePathSegment(name, uReq.getParameter(i) ?? '');
      if (decoded instanceof ApiError) badParam ??= decoded;
      else params.push(decoded);
    });
    const req: Request<P> = {
      recycleBody: () => {
        const b = req.body;
        req.body = EMPTY;
        bodyPool.release(b);
      },
      method: uReq.getCaseSensitiveMethod(),
      url: uReq.getUrl(),
      query: uReq.getQuery() ?? '',
      params,
      authorization: uReq.getHeader('authorization'),
      contentType: uReq.getHeader('content-type'),
      body: EMPTY,
      id: state.reqId,
    };
    const contentLength = uReq.getHeader('content-length');

    // The body is read from the start, synchronously attached: uWS delivers body chunks only
    // to an onData registered by then, so waiting for an asynchronous `before` (a key lookup)
    // first could lose the body and hang the request. A compressed body is decompressed here,
    // before any handler sees it; an unknown coding is refused without reading the body. Its
    // errors (415, 413, 400) are answered only after `before`, like every body error.
    let body: Promise<Buffer> | null = null;
    const lengths = opts.body ? conflictingLengths(uReq) : null;
    if (lengths) {
      const err = new ApiError('INVALID_BODY', `the request has conflicting Content-Length values (${lengths.slice(0, 4).map((l) => JSON.stringify(l.slice(0, 20))).join(', ')}): its body's length is unknown; send one Content-Length`);
      FRAMING.add(err);
      body = Promise.reject(err);
    } else if (opts.body) {
      const max = opts.maxBodyBytes ?? 1024 * 1024;
      const coding = parseContentEncoding(uReq.getHeader('content-encoding'));
      if (coding instanceof ApiError) body = Promise.reject(coding);
      // Only an identity body may come from the pool: the decompressor's input is left to the GC.
      else if (coding === 'identity') body = readBody(res, state, contentLength, max, true);
      else body = readBody(res, state, contentLength, max, false).then((raw) => decodeBody(raw, coding, max));
    }
    body?.catch(() => undefined);
    const answer = (reply: Reply): void => {
      const aborted = state.done;
      send(res, state, reply);
      log.debug('request', { method: req.method, path: req.url, status: aborted ? 'aborted' : reply.status, ms: Math.round((performance.now() - started) * 10) / 10 });
    };
    const run = async (): Promise<void> => {
      try {
        if (opts.before) {
          const early = await opts.before(req);
          if (early) return answer(early);
        }
        if (badParam) throw badParam;
        if (body) req.body = await body;
        if (state.done) return;
        answer(await handler(req));
      } catch (err) {
        answer(errorReply(err, req));
      }
    };
    // Every line logged while handling the request carries its id.
    void withRequest(state.reqId, run);
  };
}

/**
 * One path segment, percent-decoded strictly (RFC 3986 escapes of UTF-8): a malformed escape
 * (`%ZZ`, a lone `%`, a truncated or overlong UTF-8 sequence such as `%C0%AF`) is refused
 * rather than taken literally or decoded a second time.
 */
export function decodePathSegment(name: string, raw: string): string | ApiError {
  try {
    return decodeURIComponent(raw);
  } catch {
    const shown = raw.length > 80 ? `${raw.slice(0, 80)}…` : raw;
    return new ApiError('INVALID_PATH', `${name}: the path segment ${JSON.stringify(shown)} is not valid percent-encoded UTF-8`);
  }
}

/**
 * Collects the body. With a Content-Length the buffer is allocated once (`pooled`: from the
 * body pool when large, src/http/body-pool.ts); a declared or actual size over the limit
 * answers 413 at once.
 */
function readBody(res: uWS.HttpResponse, state: { done: boolean }, contentLength: string, max: number, pooled: boolean): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = contentLength === '' ? -1 : Number(contentLength);
    const tooLarge = (): ApiError => new ApiError('PAYLOAD_TOO_LARGE', `request body larger than the limit of ${max} bytes`);
    if (declared > max) {
      reject(tooLarge());
      return;
    }
    let buf = declared >= 0 ? ((pooled ? bodyPool.acquire(declared) : null) ?? Buffer.allocUnsafe(declared)) : Buffer.allocUnsafe(64 * 1024);
    let len = 0;
    let failed = false;
    res.onData((chunk, isLast) => {
      if (failed || state.done) return;
      const n = chunk.byteLength;
      if (len + n > max) {
        failed = true;
        reject(tooLarge());
        return;
      }
      if (len + n > buf.length) {
        const bigger = Buffer.allocUnsafe(Math.min(max, Math.max(buf.length * 2, len + n)));
        buf.copy(bigger, 0, 0, len);
        buf = bigger;
      }
      Buffer.from(chunk).copy(buf, len);
      len += n;
      if (isLast) resolve(len === buf.length ? buf : buf.subarray(0, len));
    });
  });
}

export { uWS };
