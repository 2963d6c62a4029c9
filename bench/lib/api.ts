/**
 * The HTTP side of benchmarks: a small JSON client, the operator token of this run, and an
 * organization whose token bucket never refuses. The service itself (start, stop, isolation,
 * clean-up) comes from the one harness shared with the tests, harness/service.ts.
 */
import { randomBytes } from 'node:crypto';

export const OPERATOR_TOKEN = `bench-operator-${randomBytes(12).toString('hex')}`;

export interface HttpResult<T> {
  status: number;
  body: T;
}

export async function http<T = unknown>(url: string, method: string, token: string | null, body?: unknown): Promise<HttpResult<T>> {
  const headers: Record<string, string> = {};
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* keep the text */
  }
  return { status: res.status, body: parsed as T };
}

export interface BenchOrg {
  id: string;
  liveKey: string;
}

/** Creates an organization whose token bucket never refuses (1e9 burst, 1e9/s). */
export async function createUnlimitedOrg(baseUrl: string, operatorToken: string): Promise<BenchOrg> {
  const r = await http<{ id: string; apiKeys: { live: string } }>(`${baseUrl}/admin/v1/organizations`, 'POST', operatorToken, { name: 'bench' });
  if (r.status !== 201) throw new Error(`POST /admin/v1/organizations: ${r.status} ${JSON.stringify(r.body)}`);
  const org = { id: r.body.id, liveKey: r.body.apiKeys.live };
  const l = await http(`${baseUrl}/admin/v1/organizations/${org.id}/limits`, 'PATCH', operatorToken, { burst: 1_000_000_000, refillPerSecond: 1_000_000_000 });
  if (l.status !== 200) throw new Error(`PATCH /admin/v1/organizations/${org.id}/limits: ${l.status} ${JSON.stringify(l.body)}`);
  return org;
}
