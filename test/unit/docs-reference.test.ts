/**
 * The reference documentation against the code, both ways, so that neither documents what the
 * other does not have:
 * - settings: every environment variable the service reads (loadConfig, watched reading a real
 *   environment, and the few read straight from process.env in src/) is a row of the
 *   Configuration table of docs/operations.md, and every row names a variable it reads;
 * - metrics: every metric of the registry (src/metrics) is a row of the metrics table of
 *   docs/operations.md with its type and labels, and every row is a registered metric;
 * - error codes: a status and code written together anywhere in the docs ("409 `CONFLICT`")
 *   is a code of the catalogue (src/errors.ts) with that status, and every catalogued code is
 *   raised somewhere in src/ (the catalogue against docs/api.md's table: test/unit/errors.test.ts).
 * Routes are checked against a running service: test/api/docs-routes.test.ts.
 */
import t from 'tap';
import path from 'node:path';
import { readdirSync, readFileSync } from 'node:fs';
import { loadConfig } from '../../src/config.js';
import { registry } from '../../src/metrics/index.js';
import { ERRORS } from '../../src/errors.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const read = (p: string): string => readFileSync(path.join(ROOT, p), 'utf8');
const OPERATIONS = read('docs/operations.md');

/** The text of a `## heading` section of docs/operations.md (up to the next `## `). */
function section(heading: string): string {
  const start = OPERATIONS.indexOf(`\n## ${heading}`);
  if (start < 0) throw new Error(`docs/operations.md: no section "${heading}"`);
  const end = OPERATIONS.indexOf('\n## ', start + 5);
  return OPERATIONS.slice(start, end < 0 ? undefined : end);
}

/** Table rows of a section: its cells, for rows after the header and the separator. */
function rows(text: string): string[][] {
  return text
    .split('\n')
    .filter((l) => l.startsWith('| ') && !/^\|[-| ]+\|$/.test(l))
    .slice(1)
    .map((l) => l.slice(1, -1).split(' | ').map((c) => c.trim()));
}

/** Every .ts file under a folder of the project. */
function sources(dir: string): string[] {
  return readdirSync(path.join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts'))
    .map((f) => path.join(dir, f));
}

t.test('settings: what the service reads is the Configuration table of docs/operations.md, and nothing else', async (t) => {
  // Every name loadConfig asks the environment for (it asks for each, set or not).
  const asked = new Set<string>();
  const env = new Proxy<Record<string, string | undefined>>({ OPERATOR_TOKEN: 'o'.repeat(32) }, {
    get: (target, name) => {
      if (typeof name === 'string') asked.add(name);
      return target[name as string];
    },
  });
  loadConfig(env, []);
  // And the ones a module reads itself (src/cli is the operator's terminal tool, documented with it in docs/api.md).
  for (const f of sources('src').filter((f) => !f.startsWith(`src${path.sep}cli${path.sep}`))) {
    for (const m of read(f).matchAll(/process\.env\.([A-Z][A-Z0-9_]*)/g)) asked.add(m[1]!);
  }
  t.ok(asked.size > 50, `${asked.size} settings read`);
  const documented = new Set(rows(section('Configuration')).flatMap((cells) => [...cells[0]!.matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((m) => m[1]!)));
  t.same([...asked].filter((n) => !documented.has(n)).sort(), [], 'every setting read is documented');
  t.same([...documented].filter((n) => !asked.has(n)).sort(), [], 'every documented setting is read');
});

t.test('metrics: the registry is the metrics table of docs/operations.md, with types and labels', async (t) => {
  const table = new Map<string, { type: string; labels: string[] }>();
  for (const cells of rows(section('Metrics and the dashboard'))) {
    // Labels: the backticked names outside parentheses (inside them: a label's values).
    const labels = [...cells[2]!.replace(/\([^)]*\)/g, '').matchAll(/`([a-z_]+)`/g)].map((m) => m[1]!);
    for (const m of cells[0]!.matchAll(/`([a-z_*]+)`/g)) table.set(m[1]!, { type: cells[1]!, labels });
  }
  const registered = await registry.getMetricsAsJSON();
  t.ok(registered.length >= 20, `${registered.length} metrics registered`);
  for (const m of registered) {
    const row = table.get(m.name);
    if (!row) {
      t.fail(`${m.name} is registered but not documented`);
      continue;
    }
    t.equal(row.type, String(m.type), `${m.name}: type`);
    t.same([...row.labels].sort(), [...(registry.getSingleMetric(m.name) as unknown as { labelNames: string[] }).labelNames].sort(), `${m.name}: labels`);
  }
  // prom-client's default metrics (startDefaultMetrics) are one row of their own.
  const names = new Set(registered.map((m) => m.name));
  t.same([...table.keys()].filter((n) => !names.has(n) && !n.endsWith('_*')).sort(), [], 'every documented metric is registered');
  t.same([...table.keys()].filter((n) => n.endsWith('_*')).sort(), ['nodejs_*', 'process_*']);
});

t.test('error codes: a status with a code in the docs is a catalogued code with that status; every catalogued code is raised', async (t) => {
  const docs = [
    'README.md',
    ...readdirSync(path.join(ROOT, 'docs'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`),
    ...readdirSync(path.join(ROOT, 'packages')).map((p) => `packages/${p}/README.md`),
  ];
  const status: Record<string, number> = Object.fromEntries(Object.entries(ERRORS).map(([code, d]) => [code, d.status]));
  const wrong: string[] = [];
  let pairs = 0;
  for (const f of docs) {
    let text: string;
    try {
      text = read(f);
    } catch {
      continue;
    }
    for (const m of text.matchAll(/\b([45]\d\d)\b[ `]{1,3}([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b/g)) {
      pairs++;
      if (status[m[2]!] !== Number(m[1])) wrong.push(`${f}: "${m[0]}" (catalogue: ${status[m[2]!] ?? 'no such code'})`);
    }
  }
  t.ok(pairs > 30, `${pairs} status-and-code pairs read`);
  t.same(wrong, [], 'each names a catalogued code with its status');

  // Raised: a literal 'CODE' somewhere in src/ (the OpenAPI document only describes them).
  const text = sources('src').filter((f) => f !== path.join('src', 'openapi.ts')).map(read).join('\n');
  t.same(Object.keys(ERRORS).filter((code) => !text.includes(`'${code}'`)), [], 'no catalogued code that nothing raises');
});
