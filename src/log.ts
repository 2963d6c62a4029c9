/** A small structured logger: one JSON object per line on stderr. */
export type Level = 'debug' | 'info' | 'warn' | 'error';
const ORDER: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };
let threshold = ORDER.info;

export function setLogLevel(level: Level): void {
  threshold = ORDER[level];
}

function write(level: Level, msg: string, fields?: Record<string, unknown>): void {
  if (ORDER[level] < threshold) return;
  const rec: Record<string, unknown> = { t: new Date().toISOString(), level, msg, pid: process.pid, ...fields };
  if (fields?.err instanceof Error) rec.err = { name: fields.err.name, message: fields.err.message, stack: fields.err.stack };
  process.stderr.write(`${JSON.stringify(rec)}\n`);
}

export const log = {
  debug: (msg: string, f?: Record<string, unknown>) => write('debug', msg, f),
  info: (msg: string, f?: Record<string, unknown>) => write('info', msg, f),
  warn: (msg: string, f?: Record<string, unknown>) => write('warn', msg, f),
  error: (msg: string, f?: Record<string, unknown>) => write('error', msg, f),
};
