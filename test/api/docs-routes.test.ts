/**
 * The routes of the documentation against the routes a running service serves, both ways:
 * every `METHOD /path` written in docs/*.md or README.md is served, and every route the service
 * mounts (ROLE=all, operator token and webhook key set: every route there is; the service logs
 * them once at start, `routes`) is documented in docs/api.md or docs/operations.md.
 * Paths compare with their parameters unnamed (`:customerId`, `{id}`) and without a query.
 */
import t from 'tap';
import path from 'node:path';
import { readdirSync, readFileSync } from 'node:fs';
import { logLines, useService } from '../helpers/service.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const read = (p: string): string => readFileSync(path.join(ROOT, p), 'utf8');

/** `GET /a/:x/b?q=` → `GET /a/:/b`; `[/:x]` (an optional last segment) gives both forms. */
function normalize(method: string, raw: string): string[] {
  const p = raw.replace(/\?.*$/, '').replace(/[.:;]$/, '');
  const forms = p.includes('[') ? [p.replace(/\[[^\]]*\]/g, ''), p.replace(/[[\]]/g, '')] : [p];
  return forms.map((f) => `${method} ${(f.replace(/\/(?::[A-Za-z]+|\{[A-Za-z]+\})(?=\/|$)/g, '/:').replace(/\/$/, '') || '/')}`);
}

/** The routes a Markdown file names: `METHOD /path` (in code spans or prose). */
function documented(file: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of read(file).matchAll(/\b(GET|POST|PUT|PATCH|DELETE) (\/[^\s`|,)…]*)/g)) {
    for (const r of normalize(m[1]!, m[2]!)) out.set(r, `${file}: ${m[0]}`);
  }
  return out;
}

const { svc } = useService(t, 'docsroutes');

t.test('every documented route is served, and every served route is documented', async (t) => {
  const logged = logLines(svc, 'routes')[0]?.routes as string[] | undefined;
  t.ok(Array.isArray(logged) && logged.length > 40, `the service logs the routes it serves (${logged?.length})`);
  const served = new Set((logged ?? []).flatMap((r) => normalize(r.slice(0, r.indexOf(' ')), r.slice(r.indexOf(' ') + 1))));

  const everywhere = new Map<string, string>();
  for (const f of ['README.md', ...readdirSync(path.join(ROOT, 'docs'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)]) {
    for (const [r, where] of documented(f)) everywhere.set(r, where);
  }
  t.same([...everywhere].filter(([r]) => !served.has(r)).map(([, where]) => where), [], 'no documented route the service does not serve');

  const reference = new Set([...documented('docs/api.md').keys(), ...documented('docs/operations.md').keys()]);
  t.same([...served].filter((r) => !reference.has(r)).sort(), [], 'every served route is in docs/api.md (health and metrics: docs/operations.md)');
});
