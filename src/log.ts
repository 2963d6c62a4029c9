/**
 * Logging: pino, one JSON object per line on stdout, written asynchronously (pino's
 * sonic-boom destination; flushed synchronously on exit and after `fatal`).
 *
 * Call sites keep the shape `log.info(msg, { fields })`; this module adapts it to pino's
 * `info(fields, msg)`. Every line carries `role` (set once by main) and, while an HTTP
 * request is being handled, its `reqId` (see `withRequest`, used by src/ingress/http.ts),
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

const destination = pino.destination({ dest: 1, sync: false });
const root: Logger = pino(
  {
    level: 'info',
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    // Level names ("info"), not numbers, as the hand-written logger wrote them.
    formatters: { level: (label) => ({ level: label }) },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
  },
  destination,
);

let base: Logger = root;

/** Set once at start from the validated configuration (src/config.ts owns LOG_LEVEL). */
export function configureLog(opts: { level: Level; role?: string }): void {
  root.level = opts.level;
  base = opts.role ? root.child({ role: opts.role }) : root;
}

/** Kept for callers of the old logger. */
export function setLogLevel(level: Level): void {
  configureLog({ level });
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
  /** Logs and flushes synchronously: for the last words before exiting. */
  fatal(msg: string, fields?: Fields): void;
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
  const write = (level: Level | 'fatal', msg: string, fields?: Fields): void => {
    const l = target();
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
      write('fatal', msg, f);
      flushLog();
    },
    child: (more) => adapter({ ...bindings, ...more }),
  };
}

export const log: Log = adapter(null);

/** A child logger naming the module it logs for. */
export const moduleLog = (module: string): Log => log.child({ module });

// One child logger per module of the service (imported as `log`, e.g. `import { pipelineLog as log }`).
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
