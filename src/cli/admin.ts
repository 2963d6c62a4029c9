#!/usr/bin/env node
/**
 * billing-admin: the operator API for people at a terminal. It talks to a running
 * service over HTTP (the same /admin/v1 API, same validation), so it never bypasses it.
 *
 *   billing-admin create-org [--name <name>]
 *   billing-admin get-org <orgId>
 *   billing-admin set-limits <orgId> [--burst N] [--refill-per-second N] [--analytics-concurrency N]
 *
 * Environment: BILLING_URL (default http://127.0.0.1:8080), OPERATOR_TOKEN (required).
 * Prints the JSON answer on stdout; exits 0 on success, 1 on an API error, 2 on bad usage.
 */
import { isMain } from '../is-main.js';

const USAGE = `usage:
  billing-admin create-org [--name <name>]
  billing-admin get-org <orgId>
  billing-admin set-limits <orgId> [--burst N] [--refill-per-second N] [--analytics-concurrency N]
environment: BILLING_URL (default http://127.0.0.1:8080), OPERATOR_TOKEN (required)`;

class UsageError extends Error {}

const FLAG_FIELDS: Record<string, string> = {
  '--burst': 'burst',
  '--refill-per-second': 'refillPerSecond',
  '--analytics-concurrency': 'analyticsConcurrency',
};

function flags(args: string[], allowed: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < args.length; i++) {
    let a = args[i]!;
    let v: string | undefined;
    if (a.includes('=')) [a, v] = [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)];
    else v = args[++i];
    if (!allowed.includes(a)) throw new UsageError(`unknown option ${a}`);
    if (v === undefined) throw new UsageError(`${a} needs a value`);
    out[a] = v;
  }
  return out;
}

export function request(argv: string[]): { method: string; path: string; body?: unknown } {
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'create-org': {
      const f = flags(rest, ['--name']);
      return { method: 'POST', path: '/admin/v1/organizations', body: f['--name'] ? { name: f['--name'] } : {} };
    }
    case 'get-org': {
      if (rest.length !== 1) throw new UsageError('get-org takes one organization id');
      return { method: 'GET', path: `/admin/v1/organizations/${encodeURIComponent(rest[0]!)}` };
    }
    case 'set-limits': {
      const [id, ...opts] = rest;
      if (!id || id.startsWith('--')) throw new UsageError('set-limits needs an organization id');
      const f = flags(opts, Object.keys(FLAG_FIELDS));
      if (Object.keys(f).length === 0) throw new UsageError('set-limits needs at least one of --burst, --refill-per-second, --analytics-concurrency');
      const body: Record<string, number> = {};
      for (const [flag, value] of Object.entries(f)) {
        const n = Number(value);
        if (value.trim() === '' || !Number.isFinite(n)) throw new UsageError(`${flag} must be a number, got ${JSON.stringify(value)}`);
        body[FLAG_FIELDS[flag]!] = n;
      }
      return { method: 'PATCH', path: `/admin/v1/organizations/${encodeURIComponent(id)}/limits`, body };
    }
    default:
      throw new UsageError(cmd ? `unknown command ${cmd}` : 'no command given');
  }
}

async function main(): Promise<number> {
  let req;
  try {
    req = request(process.argv.slice(2));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`billing-admin: ${err.message}\n${USAGE}\n`);
    return 2;
  }
  const token = process.env.OPERATOR_TOKEN;
  if (!token) {
    process.stderr.write(`billing-admin: OPERATOR_TOKEN is not set\n${USAGE}\n`);
    return 2;
  }
  const base = (process.env.BILLING_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
  let res: Response;
  try {
    res = await fetch(base + req.path, {
      method: req.method,
      headers: { authorization: `Bearer ${token}`, ...(req.body ? { 'content-type': 'application/json' } : {}) },
      body: req.body ? JSON.stringify(req.body) : undefined,
    });
  } catch (err) {
    process.stderr.write(`billing-admin: cannot reach ${base}: ${(err as Error).message}\n`);
    return 1;
  }
  const text = await res.text();
  (res.ok ? process.stdout : process.stderr).write(`${text}\n`);
  return res.ok ? 0 : 1;
}

if (isMain(import.meta.url)) {
  main().then((code) => process.exit(code));
}
