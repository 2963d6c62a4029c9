/**
 * Test helpers on top of the one service harness (harness/service.ts: isolations, the service
 * as a child process in its own process group, the engine host test front of TEST_STORE=server,
 * clean-up): tap set-up (`useService`, `startService`), subtest options by store mode, and the
 * HTTP helpers API tests share.
 */
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import type { Test } from 'tap';
import { NATS_URL, OPERATOR_TOKEN, ServiceProcess, cleanup, isolation, parseLogLines, serverStore, type Isolation } from '../../harness/service.js';

export { NATS_URL, OPERATOR_TOKEN, REDIS_URL, ServiceProcess, TEST_WEBHOOK_KEY, cleanup, isolation, serverStore, type Isolation } from '../../harness/service.js';

/**
 * Tap options for a subtest that depends on the embedded store (the service's own engine
 * host child): skipped, with `reason`, when the file runs in server mode.
 */
export function embeddedOnly(reason: string): { skip?: string } {
  return serverStore() ? { skip: `embedded store only: ${reason}` } : {};
}

/** Tap options for a subtest of server mode only: skipped, with `reason`, on the embedded store. */
export function serverOnly(reason: string): { skip?: string } {
  return serverStore() ? {} : { skip: `server store only: ${reason}` };
}

/** The service's JSON log lines so far (pino: one object per line, fields in any order). */
export function logLines(svc: ServiceProcess, msg?: string): Record<string, unknown>[] {
  return parseLogLines(svc.output, msg);
}

/**
 * When `t` has failed by its teardown: the last warn and error lines each of these services
 * logged, on stderr, which the suite's output shows — so that a failure seen once in CI can
 * be read afterwards (the processes and their output are gone by then).
 */
export function logsOnFailure(t: Test, procs: () => readonly (ServiceProcess | null | undefined)[]): void {
  t.teardown(() => {
    if (t.passing()) return;
    for (const p of procs()) {
      if (!p?.child) continue;
      const lines = p.output
        .split('\n')
        .filter((l) => /"level":"(warn|error|fatal)"/.test(l))
        .slice(-40)
        .map((l) => (l.length > 800 ? `${l.slice(0, 800)}…` : l));
      console.error(`--- failed: ${t.name}; ${p.env.ROLE ?? 'all'} process ${p.proc?.pid ?? '?'} (${p.iso.natsPrefix}), its last warn/error lines:\n${lines.join('\n') || '(none)'}`);
    }
  });
}

/**
 * The usual set-up of an API test file: one service (ROLE=all unless `env` says otherwise)
 * with its own isolation, started before the tests and removed with all it made afterwards.
 */
export function useService(t: Test, name: string, env: Record<string, string> = {}): { iso: Isolation; svc: ServiceProcess } {
  const iso = isolation(name);
  const svc = new ServiceProcess(iso, env);
  logsOnFailure(t, () => [svc]);
  t.before(() => svc.start().then(() => undefined));
  t.teardown(async () => {
    await svc.stop();
    await cleanup(iso);
  });
  return { iso, svc };
}

/** A service for one test: started now, stopped and its isolation cleaned at that test's teardown. */
export async function startService(t: Test, name: string, env: Record<string, string> = {}): Promise<{ iso: Isolation; svc: ServiceProcess }> {
  const iso = isolation(name);
  const svc = new ServiceProcess(iso, env);
  logsOnFailure(t, () => [svc]);
  t.teardown(async () => {
    await svc.stop();
    await cleanup(iso);
  });
  await svc.start();
  return { iso, svc };
}

export interface HttpResult<T = any> {
  status: number;
  headers: Headers;
  body: T;
}

/** The body of an answer whose status is one of `expected`; any other answer throws, naming its status and body. */
export async function ok(r: Promise<{ status: number; body: any }>, expected: readonly number[] = [200, 201]): Promise<any> {
  const res = await r;
  if (!expected.includes(res.status)) throw new Error(`${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** An answer as sent: its status and its body text, unparsed. */
export interface RawAnswer {
  status: number;
  text: string;
}

/** POSTs an analytics query with `key`; `timeoutMs`, when given, aborts a request that takes longer. */
export async function queryRaw(base: string, key: string, query: string, timeoutMs?: number): Promise<RawAnswer> {
  const res = await fetch(`${base}/api/v2/analytics/query`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ query }),
    ...(timeoutMs === undefined ? {} : { signal: AbortSignal.timeout(timeoutMs) }),
  });
  return { status: res.status, text: await res.text() };
}

export async function http<T = any>(base: string, method: string, p: string, opts: { token?: string; body?: unknown; raw?: string } = {}): Promise<HttpResult<T>> {
  const headers: Record<string, string> = {};
  if (opts.token !== undefined) headers.authorization = `Bearer ${opts.token}`;
  let body: string | undefined;
  if (opts.raw !== undefined) body = opts.raw;
  else if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers['content-type'] = 'application/json';
  }
  const res = await fetch(base + p, { method, headers, body });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON: keep the text so the assertion shows it */
  }
  return { status: res.status, headers: res.headers, body: parsed as T };
}

export interface TestOrg {
  id: string;
  live: string;
  test: string;
}

export async function createOrg(base: string, limits?: Record<string, number>): Promise<TestOrg> {
  const r = await http(base, 'POST', '/admin/v1/organizations', { token: OPERATOR_TOKEN, body: { name: 'test org' } });
  if (r.status !== 201) throw new Error(`create org: ${r.status} ${JSON.stringify(r.body)}`);
  const org = { id: r.body.id as string, live: r.body.apiKeys.live as string, test: r.body.apiKeys.test as string };
  if (limits) {
    const l = await http(base, 'PATCH', `/admin/v1/organizations/${org.id}/limits`, { token: OPERATOR_TOKEN, body: limits });
    if (l.status !== 200) throw new Error(`set limits: ${l.status} ${JSON.stringify(l.body)}`);
  }
  return org;
}

export function signal(i: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { eventName: 'api_call', customer: { externalCustomerId: `cus_${i % 7}` }, data: { n: i, region: i % 2 ? 'eu' : 'us' }, ...extra };
}

export function batch(n: number, extra: (i: number) => Record<string, unknown> = () => ({})): { signals: Record<string, unknown>[] } {
  return { signals: Array.from({ length: n }, (_, i) => signal(i, extra(i))) };
}

export const sendBatch = (base: string, key: string, body: unknown): Promise<HttpResult> => http(base, 'POST', '/api/v2/signals/bulk', { token: key, body });

export async function counts(base: string, orgId: string): Promise<{ live: number; test: number }> {
  const r = await http(base, 'GET', `/admin/v1/organizations/${orgId}/stats`, { token: OPERATOR_TOKEN });
  if (r.status !== 200) throw new Error(`stats: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.signals;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls until `fn` returns a value that `done` accepts; returns the last value after the timeout. */
export async function waitFor<T>(fn: () => Promise<T>, done: (v: T) => boolean, timeoutMs = 20_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  let v = await fn();
  while (!done(v) && Date.now() < end) {
    await sleep(100);
    v = await fn();
  }
  return v;
}

/**
 * The engine host kills the service logged whose reason names `orgId` (any kill when
 * undefined), once at least one is there or `timeoutMs` has passed: a statement whose answer was ended
 * at its deadline has the host killed only once it has kept working a while after.
 */
export async function hostKills(svc: ServiceProcess, orgId?: string, timeoutMs = 15_000): Promise<Record<string, unknown>[]> {
  const kills = (): Record<string, unknown>[] => logLines(svc, 'killing the engine host').filter((l) => orgId === undefined || String(l.reason).includes(orgId));
  return waitFor(async () => kills(), (k) => k.length > 0, timeoutMs);
}

/** Waits until the pipeline consumer has nothing pending or unacked, then a little more. */
export async function drained(iso: Isolation, timeoutMs = 60_000): Promise<void> {
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    const end = Date.now() + timeoutMs;
    for (;;) {
      const ci = await jsm.consumers.info(`${iso.natsPrefix}_SIGNALS`, 'pipeline');
      if (ci.num_pending === 0 && ci.num_ack_pending === 0) return;
      if (Date.now() > end) throw new Error(`pipeline not drained: ${ci.num_pending} pending, ${ci.num_ack_pending} unacked`);
      await sleep(100);
    }
  } finally {
    await nc.close();
  }
}
