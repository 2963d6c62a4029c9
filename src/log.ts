/**
 * Logging: pino, one JSON object per line on stdout, written asynchronously (pino's
 * sonic-boom destination; what is buffered is flushed synchronously on exit, and `fatal`
 * and `now` lines are written synchronously).
 *
 * Call sites keep the shape `log.info(msg, { fields })`; this module adapts it to pino's
 * `info(fields, msg)`. Every line carries `role` (set once by main) and, while an HTTP
 * request is being handled, its `reqId` (see `withRequest`, used by src/http/wrap.ts),
 * found through AsyncLocalStorage, so no call site has to pass it. `moduleLog('name')` is a
 * child logger adding `module`. Secrets are redacted by field name wherever they sit (top
 * level or one object down, plus request headers), whatever a future call site passes.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { pino, type Logger } from 'pino';

export type Level = 'debug' | 'info' | 'warn' | 'error';
export type Fields = Record<string, unknown>;

/** Field names whose values never reach a log line. */
const SECRET_FIELDS = [
  'apiKey',
  'apiKeys',
  'authorization',
  'signingSecret',
  'previousSigningSecret',
  'secret',
  'token',
  'password',
  'operatorToken',
  'encryptionKey',
  'webhookEncryptionKey',
];
export const REDACT_PATHS = [
  ...SECRET_FIELDS,
  ...SECRET_FIELDS.map((f) => `*.${f}`),
  'headers.authorization',
  'headers.cookie',
  'req.headers.authorization',
  'req.headers.cookie',
  '*.headers.authorization',
];

const OPTIONS = {
  level: 'info',
  base: { pid: process.pid },
  timestamp: pino.stdTimeFunctions.isoTime,
  // Level names ("info"), not numbers, as the hand-written logger wrote them.
  formatters: { level: (label: string) => ({ level: label }) },
  redact: { paths: REDACT_PATHS, censor: '[redacted]' },
};
const destination = pino.destination({ dest: 1, sync: false });
const root: Logger = pino(OPTIONS, destination);
let roleBindings: Fields = {};
let base: Logger = root;

// Lines that must be out before the process dies (`fatal`, `now`): written synchronously by a
// second logger on the same descriptor, made on first use. An asynchronous write still in
// flight at that moment may land after such a line.
let syncRoot: Logger | null = null;
const syncBase = (): Logger => {
  syncRoot ??= pino({ ...OPTIONS, level: root.level }, pino.destination({ dest: 1, sync: true }));
  return syncRoot.child(roleBindings);
};

/** Set once at start from the validated configuration (src/config.ts owns LOG_LEVEL). */
export function configureLog(opts: { level: Level; role?: string }): void {
  root.level = opts.level;
  if (syncRoot) syncRoot.level = opts.level;
  roleBindings = opts.role ? { role: opts.role } : {};
  base = opts.role ? root.child(roleBindings) : root;
}

/** The level alone (the role bindings stay). */
export function setLogLevel(level: Level): void {
  root.level = level;
  if (syncRoot) syncRoot.level = level;
}

const requestContext = new AsyncLocalStorage<{ reqId: string }>();

/** Runs `fn` with `reqId` attached to every line logged from it (and what it awaits). */
export function withRequest<T>(reqId: string, fn: () => T): T {
  return requestContext.run({ reqId }, fn);
}

/** The request id of the request being handled, if any. */
export const currentRequestId = (): string | undefined => requestContext.getStore()?.reqId;

export interface Log {
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
  /** Written synchronously, with what is buffered flushed first: the last words before exiting. */
  fatal(msg: string, fields?: Fields): void;
  /** Written synchronously: a line that must be out before the process dies (e.g. a SIGKILL). */
  now(level: Level, msg: string, fields?: Fields): void;
  child(bindings: Fields): Log;
}

function adapter(bindings: Fields | null): Log {
  let cachedFor: Logger | null = null;
  let cached: Logger = root;
  const target = (): Logger => {
    if (!bindings) return base;
    if (cachedFor !== base) {
      cachedFor = base;
      cached = base.child(bindings);
    }
    return cached;
  };
  const write = (level: Level | 'fatal', msg: string, fields?: Fields, sync = false): void => {
    const l = sync ? (bindings ? syncBase().child(bindings) : syncBase()) : target();
    if (!l.isLevelEnabled(level)) return;
    const reqId = requestContext.getStore()?.reqId;
    l[level](reqId === undefined ? (fields ?? {}) : { reqId, ...fields }, msg);
  };
  return {
    debug: (msg, f) => write('debug', msg, f),
    info: (msg, f) => write('info', msg, f),
    warn: (msg, f) => write('warn', msg, f),
    error: (msg, f) => write('error', msg, f),
    fatal: (msg, f) => {
      flushLog();
      write('fatal', msg, f, true);
    },
    now: (level, msg, f) => {
      flushLog();
      write(level, msg, f, true);
    },
    child: (more) => adapter({ ...bindings, ...more }),
  };
}

export const log: Log = adapter(null);

/** A child logger naming the module it logs for. */
export const moduleLog = (module: string): Log => log.child({ module });

// One child logger per module of the service (imported as `log`, e.g. `import { pipelineLog as log }`).
export const adminLog = moduleLog('admin');
export const analyticsLog = moduleLog('analytics');
export const billingLog = moduleLog('billing');
export const httpLog = moduleLog('http');
export const ingressLog = moduleLog('ingress');
export const natsLog = moduleLog('nats');
export const orgsLog = moduleLog('orgs');
export const pipelineLog = moduleLog('pipeline');
export const ratelimitLog = moduleLog('ratelimit');
export const storeLog = moduleLog('store');
export const webhooksLog = moduleLog('webhooks');

/** Writes out what is buffered, synchronously (before process.exit). */
export function flushLog(): void {
  try {
    destination.flushSync();
  } catch {
    // Not ready yet (nothing written) or the descriptor is gone: nothing to flush.
  }
}
