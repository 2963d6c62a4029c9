/**
 * The code's layering (README "Map of the code"), checked on the real import graph of src/
 * and workers/ read with TypeScript's own pre-processor (static imports, re-exports and
 * dynamic import()):
 *   floors          shared, errors, log, metrics, config, is-main, http, bus
 *   infrastructure  ratelimit, orgs, store
 *   features        ingress, pipeline, analytics, billing, webhooks, admin, workers
 *   top             main, routes, openapi, cli
 * A unit imports its own layer or lower ones; a feature imports no other feature (workers, the
 * piscina entry files, may run a feature's pure code); nothing imports the top but the top;
 * there is no import cycle, between folders or between files.
 */
import t from 'tap';
import ts from 'typescript';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

const LAYERS: Record<string, number> = {
  shared: 0, errors: 0, log: 0, metrics: 0, config: 0, 'is-main': 0, http: 0, bus: 0,
  ratelimit: 1, orgs: 1, store: 1,
  ingress: 2, pipeline: 2, analytics: 2, billing: 2, webhooks: 2, admin: 2, workers: 2,
  main: 3, routes: 3, openapi: 3, cli: 3,
};
const FEATURE = 2;
/** The worker entry files run these features' pure code inside piscina threads. */
const WORKER_MAY_RUN = new Set(['billing', 'pipeline', 'ingress']);

type Graph = Map<string, Set<string>>;

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...sourceFiles(p));
    else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

/** file (relative to the root) → the files it imports (relative), local imports only. */
function importGraph(): Graph {
  const files = [...sourceFiles(path.join(ROOT, 'src')), ...sourceFiles(path.join(ROOT, 'workers'))];
  const known = new Set(files.map((f) => path.relative(ROOT, f)));
  const g: Graph = new Map();
  for (const f of files) {
    const rel = path.relative(ROOT, f);
    const deps = new Set<string>();
    for (const { fileName } of ts.preProcessFile(readFileSync(f, 'utf8'), true, true).importedFiles) {
      if (!fileName.startsWith('.')) continue;
      const target = path.relative(ROOT, path.resolve(path.dirname(f), fileName)).replace(/\.js$/, '.ts');
      if (known.has(target)) deps.add(target);
      else if (known.has(path.join(target.replace(/\.ts$/, ''), 'index.ts'))) deps.add(path.join(target.replace(/\.ts$/, ''), 'index.ts'));
    }
    g.set(rel, deps);
  }
  return g;
}

/** The layering unit of a file: its folder under src/ (or the file's own name at src/'s top), or workers. */
export function unitOf(file: string): string {
  const parts = file.split(path.sep);
  if (parts[0] === 'workers') return 'workers';
  return parts.length === 2 ? parts[1]!.replace(/\.ts$/, '') : parts[1]!;
}

function violations(edges: Iterable<[string, string]>): string[] {
  const out: string[] = [];
  for (const [from, to] of edges) {
    const a = unitOf(from), b = unitOf(to);
    if (a === b) continue;
    const la = LAYERS[a], lb = LAYERS[b];
    if (la === undefined) { out.push(`${from}: unit "${a}" has no layer (add it to the map)`); continue; }
    if (lb === undefined) { out.push(`${to}: unit "${b}" has no layer (add it to the map)`); continue; }
    if (lb > la) out.push(`${from} → ${to}: ${a} (layer ${la}) imports ${b} (layer ${lb}), a higher layer`);
    else if (la === FEATURE && lb === FEATURE && !(a === 'workers' && WORKER_MAY_RUN.has(b))) {
      out.push(`${from} → ${to}: feature ${a} imports feature ${b}`);
    }
  }
  return out;
}

/** Every strongly connected component of more than one node (Tarjan), each sorted. */
function cycles(g: Graph): string[][] {
  let index = 0;
  const idx = new Map<string, number>(), low = new Map<string, number>(), on = new Set<string>();
  const stack: string[] = [], out: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index); low.set(v, index); index++;
    stack.push(v); on.add(v);
    for (const w of g.get(v) ?? []) {
      if (!idx.has(w)) { visit(w); low.set(v, Math.min(low.get(v)!, low.get(w)!)); }
      else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      let w: string;
      do { w = stack.pop()!; on.delete(w); scc.push(w); } while (w !== v);
      if (scc.length > 1 || g.get(v)?.has(v)) out.push(scc.sort());
    }
  };
  for (const v of g.keys()) if (!idx.has(v)) visit(v);
  return out;
}

const folderGraph = (g: Graph): Graph => {
  const f: Graph = new Map();
  for (const [from, deps] of g) {
    const a = unitOf(from);
    if (!f.has(a)) f.set(a, new Set());
    for (const to of deps) if (unitOf(to) !== a) f.get(a)!.add(unitOf(to));
  }
  return f;
};

const edgesOf = (g: Graph): [string, string][] => [...g].flatMap(([a, ds]) => [...ds].map((b): [string, string] => [a, b]));

t.test('the checker itself: it sees each kind of violation', async (t) => {
  const s = path.sep;
  t.match(violations([[`src${s}store${s}x.ts`, `src${s}analytics${s}y.ts`]])[0], /higher layer/);
  t.match(violations([[`src${s}billing${s}x.ts`, `src${s}pipeline${s}y.ts`]])[0], /feature billing imports feature pipeline/);
  t.match(violations([[`src${s}http${s}x.ts`, `src${s}main.ts`]])[0], /higher layer/);
  t.match(violations([[`src${s}billing${s}x.ts`, `workers${s}rows.ts`]])[0], /feature billing imports feature workers/);
  t.match(violations([[`src${s}newthing${s}x.ts`, `src${s}log.ts`]])[0], /has no layer/);
  t.same(violations([[`workers${s}billing.ts`, `src${s}billing${s}evaluator${s}evaluate.ts`], [`src${s}routes.ts`, `src${s}webhooks${s}api.ts`]]), []);
  const g: Graph = new Map([['a', new Set(['b'])], ['b', new Set(['c'])], ['c', new Set(['a'])], ['d', new Set(['a'])]]);
  t.same(cycles(g), [['a', 'b', 'c']]);
});

t.test('the real graph', async (t) => {
  const g = importGraph();
  t.ok(g.size > 50, `read ${g.size} files`);
  t.ok(edgesOf(g).length > 100, 'and their imports');

  t.test('every import goes down the layers; no feature imports another', async (t) => {
    t.same(violations(edgesOf(g)), []);
  });
  t.test('no folder-level import cycle', async (t) => {
    t.same(cycles(folderGraph(g)), []);
  });
  t.test('no file-level import cycle', async (t) => {
    t.same(cycles(g), []);
  });
  t.test('the only folders imported by more than one feature are the floors and the infrastructure', async (t) => {
    const fg = folderGraph(g);
    for (const [a, deps] of fg) {
      if (LAYERS[a] !== FEATURE) continue;
      for (const b of deps) t.ok(LAYERS[b]! < FEATURE || (a === 'workers' && WORKER_MAY_RUN.has(b)), `${a} → ${b}`);
    }
  });
});
