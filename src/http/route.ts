/**
 * The one route type. Every feature exports its routes as `Route[]` with paths relative to
 * the prefix the route table (src/routes.ts) mounts them under, as Fastify plugins are
 * registered with a prefix; the Server (src/http/server.ts) turns them into uWS handlers.
 *
 * Authentication is not known here: a route names who may call it (`auth`), and the route
 * table hands the Server the functions that check it (`AuthHooks`: the organization API-key
 * lookup, the operator-token guard). `P` is what the API-key hook finds (the principal,
 * src/orgs); handlers of `auth: 'api-key'` routes read it as `req.principal`.
 */

export interface Request<P = unknown> {
  method: string;
  url: string;
  query: string;
  /**
   * The path parameters (the `:name` segments of the route pattern, in order), each
   * percent-decoded exactly once, by the wrapper (src/http/wrap.ts). Handlers must not
   * decode them again; `pathParams` reads them by name.
   */
  params: string[];
  authorization: string;
  contentType: string;
  body: Buffer;
  /** Set by the API-key hook before the handler of an `auth: 'api-key'` route runs. */
  principal?: P;
  /** The request id: a valid incoming X-Request-Id, or a generated one; sent back on every answer. */
  id?: string;
  /**
   * Hands the memory of `body` back for reuse by another request (src/http/body-pool.ts) and
   * sets `body` to an empty buffer. Call it only when nothing refers to the body (or a view of
   * it) any more, queued network writes included; never calling it is always safe.
   */
  recycleBody?: () => void;
}

export interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
  /** Close the connection after the answer (the request's framing cannot be trusted). */
  close?: boolean;
  /**
   * A body written while it is produced (chunked), in place of `body`: see BodySource.
   */
  stream?: BodySource;
}

/**
 * A body pulled piece by piece by the HTTP layer (src/http/wrap.ts), the next piece only once
 * the socket has taken the previous one: a client that reads slowly holds back the source,
 * which holds back whatever it reads from.
 */
export interface BodySource {
  /**
   * The next piece, or null after the last one (the body is then ended properly). A rejection
   * ends the connection without the body's end (the status line is out already), so a client
   * cannot take the part it received for the whole; the HTTP layer logs it.
   */
  next(): Promise<Buffer | null>;
  /** The client went away or the answer was ended: stop, and free what is held. Idempotent. */
  cancel(): void;
  /** Set by the HTTP layer once the answer has begun: ends it abnormally now (the connection is closed). */
  abort?: (reason: string) => void;
}

export type Handler<P = unknown> = (req: Request<P>) => Reply | Promise<Reply>;

export type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

/**
 * Who may call a route:
 *   'none'      anyone (health, the OpenAPI document, the settings page's static files)
 *   'api-key'   `Authorization: Bearer <organization API key>` (401 otherwise); the principal
 *               is set on the request before the body is judged
 *   'operator'  `Authorization: Bearer <OPERATOR_TOKEN>`; without an operator hook (no token
 *               configured) the route is not mounted at all
 */
export type Auth = 'none' | 'api-key' | 'operator';

export interface Route<P = unknown> {
  method: Method;
  /** uWS pattern relative to the mount prefix; `:name` segments are path parameters. */
  path: string;
  handler: Handler<P>;
  /** Default 'none'. */
  auth?: Auth;
  /**
   * The route reads a request body of at most this many bytes (a compressed body is held to
   * it twice: as received and once decompressed); larger bodies answer 413 unread. Absent:
   * no body is read.
   */
  bodyLimit?: number;
}

/** A guard answers 401 by throwing; it runs before the body is judged (while it is being read). */
export type Guard = (req: Request) => Reply | undefined | Promise<Reply | undefined>;

/** The authentication functions, injected by the route table. */
export interface AuthHooks<P> {
  /** Finds the principal of an `auth: 'api-key'` request, or throws 401. */
  apiKey?: (req: Request) => Promise<P>;
  /** Lets an `auth: 'operator'` request through, or throws 401. */
  operator?: Guard;
}

/** The `:name` segments of a uWS route pattern, in order. */
export const paramNames = (pattern: string): string[] => pattern.split('/').filter((seg) => seg.startsWith(':')).map((seg) => seg.slice(1));

/**
 * Path parameters by name: the `:name` segments of `pattern`, read from `req.params`, which
 * the wrapper has already percent-decoded once (a malformed escape never reaches a handler:
 * it answers 400 INVALID_PATH there). Nothing is decoded here. A prefix added when the
 * route is mounted has no parameters, so the positions hold.
 */
export function pathParams(pattern: string): (req: Request, name: string) => string {
  const positions = new Map<string, number>();
  paramNames(pattern).forEach((name, i) => positions.set(name, i));
  return (req, name) => {
    const i = positions.get(name);
    if (i === undefined) throw new Error(`route ${pattern} has no parameter ${name}`);
    return req.params[i] ?? '';
  };
}
