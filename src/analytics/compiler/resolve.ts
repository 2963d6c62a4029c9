/**
 * Name resolution and checks over the AST: every table name is a view or a CTE of the query,
 * every column name a column of a source in scope, an alias, a named WITH expression or a
 * lambda parameter; every function is on the allowlist (functions.ts) with its arity, its
 * lambdas only where the function takes them, its constant arguments literal and bounded.
 *
 * The result says which table references are views (the printer replaces each with a read
 * scoped to the caller) — nothing else is read.
 */
import type { Expr, From, Query, Select, TableRef } from './ast.js';
import { CompileError } from './errors.js';
import { lookupFunction, type FunctionSpec } from './functions.js';

export interface ViewSchema {
  name: string;
  columns: { name: string; type: string }[];
}

interface Col {
  /** A JSON column: `col.path…` reads a subcolumn. */
  json: boolean;
}
type Cols = Map<string, Col>;

interface Source {
  name?: string;
  columns: Cols;
}

interface Env {
  ctes: Map<string, Cols>;
  /** Names defined with WITH expr AS name (visible in nested subqueries too). */
  names: Set<string>;
}

export interface Resolution {
  /** Table references in FROM that read a view. */
  viewRefs: Set<object>;
  /** Function calls whose name the allowlist spells differently (case): the allowlist's spelling. */
  callNames: Map<object, string>;
}

export class Resolver {
  private readonly views: Map<string, Cols>;
  private readonly viewList: string;
  private readonly viewRefs = new Set<object>();
  private readonly callNames = new Map<object, string>();

  constructor(
    views: readonly ViewSchema[],
    private readonly src: string,
  ) {
    this.views = new Map(views.map((v) => [v.name, new Map(v.columns.map((c) => [c.name, { json: c.type === 'JSON' }]))]));
    this.viewList = views.map((v) => v.name).join(', ');
  }

  resolve(q: Query): Resolution {
    this.query(q, { ctes: new Map(), names: new Set() });
    return { viewRefs: this.viewRefs, callNames: this.callNames };
  }

  private fail(reason: string, at: number, code: 'INVALID_QUERY' | 'FORBIDDEN' = 'INVALID_QUERY'): CompileError {
    return new CompileError(code, reason, this.src, at);
  }

  private query(q: Query, env: Env): Cols {
    if (q.k === 'set') {
      const first = this.query(q.selects[0]!, env);
      for (const s of q.selects.slice(1)) this.query(s, env);
      return first;
    }
    return this.select(q, env);
  }

  private select(s: Select, outer: Env): Cols {
    const env: Env = { ctes: new Map(outer.ctes), names: new Set(outer.names) };
    for (const cte of s.ctes) {
      if (env.ctes.has(cte.name) && !outer.ctes.has(cte.name)) throw this.fail(`the CTE "${cte.name}" is defined twice`, cte.at);
      env.ctes.set(cte.name, this.query(cte.query, env));
    }
    for (const w of s.withAliases) env.names.add(w.name);
    const sources: Source[] = [];
    const aliases = new Set<string>();
    const deferred: Expr[] = [];
    if (s.from) this.from(s.from, env, sources, aliases, deferred);
    for (const item of s.items) if (item.alias !== undefined) aliases.add(item.alias);
    const scope: Scope = { env, sources, aliases, lambda: new Set() };
    for (const w of s.withAliases) this.expr(w.expr, scope);
    for (const e of deferred) this.expr(e, scope);
    const out: Cols = new Map();
    for (const item of s.items) {
      const e = item.expr;
      if (e.k === 'star') {
        let from = sources;
        if (e.table !== undefined) {
          from = sources.filter((x) => x.name === e.table);
          if (from.length === 0) throw this.fail(`"${e.table}.*": no table or alias "${e.table}" in this FROM`, e.at);
        } else if (sources.length === 0) throw this.fail('"*" needs a FROM', e.at);
        for (const src of from) for (const [n, c] of src.columns) out.set(n, c);
        continue;
      }
      this.expr(e, scope);
      const json = e.k === 'ident' && this.isJsonColumn(e.parts, scope);
      if (item.alias !== undefined) out.set(item.alias, { json });
      else if (e.k === 'ident') {
        out.set(e.parts.join('.'), { json });
        out.set(e.parts[e.parts.length - 1]!, { json });
      }
    }
    for (const e of [s.where, ...s.groupBy, s.having, ...s.orderBy.map((o) => o.expr), ...(s.limitBy?.by ?? [])]) if (e) this.expr(e, scope);
    return out;
  }

  private from(f: From, env: Env, sources: Source[], aliases: Set<string>, deferred: Expr[]): void {
    switch (f.k) {
      case 'table': {
        const cte = env.ctes.get(f.name);
        let columns: Cols;
        if (cte) columns = cte;
        else {
          const view = this.views.get(f.name);
          if (!view) throw this.fail(`unknown table "${f.name}": only the analytics views (${this.viewList}) and the query's CTEs can be read`, f.at, 'FORBIDDEN');
          this.viewRefs.add(f);
          columns = view;
        }
        this.addSource(sources, { name: f.alias ?? f.name, columns }, f.at);
        return;
      }
      case 'subquery': {
        const columns = this.query(f.query, env);
        this.addSource(sources, f.alias === undefined ? { columns } : { name: f.alias, columns }, f.at);
        return;
      }
      case 'numbers':
        this.addSource(sources, { name: f.alias ?? 'numbers', columns: new Map([['number', { json: false }]]) }, f.at);
        return;
      case 'join': {
        this.from(f.left, env, sources, aliases, deferred);
        const before = sources.length;
        this.from(f.right, env, sources, aliases, deferred);
        if (f.on) deferred.push(f.on);
        for (const u of f.using ?? []) {
          const right = sources.slice(before).some((x) => x.columns.has(u));
          const left = sources.slice(0, before).some((x) => x.columns.has(u));
          if (!right || !left) throw this.fail(`USING column "${u}" is not on both sides of the join`, f.at);
        }
        return;
      }
      case 'arrayJoin':
        this.from(f.left, env, sources, aliases, deferred);
        for (const item of f.items) {
          deferred.push(item.expr);
          if (item.alias !== undefined) aliases.add(item.alias);
        }
        return;
    }
  }

  private addSource(sources: Source[], s: Source, at: number): void {
    if (s.name !== undefined && sources.some((x) => x.name === s.name)) throw this.fail(`two tables in this FROM are named "${s.name}"; give one an alias`, at);
    sources.push(s);
  }

  private isJsonColumn(parts: string[], scope: Scope): boolean {
    if (parts.length === 1) return scope.sources.some((x) => x.columns.get(parts[0]!)?.json === true) && !scope.aliases.has(parts[0]!);
    if (parts.length === 2) return scope.sources.some((x) => x.name === parts[0] && x.columns.get(parts[1]!)?.json === true);
    return false;
  }

  private ident(e: Extract<Expr, { k: 'ident' }>, scope: Scope): void {
    const [p0, p1] = e.parts as [string, string | undefined];
    const n = e.parts.length;
    const shown = e.parts.join('.');
    if (scope.lambda.has(p0)) {
      if (n > 1) throw this.fail(`"${shown}": a lambda parameter has no subcolumns here`, e.at);
      return;
    }
    if (n === 1 && (scope.aliases.has(p0) || scope.env.names.has(p0))) return;
    const direct = scope.sources.filter((x) => x.columns.has(p0));
    if (direct.length > 0) {
      if (n > 1 && !direct.some((x) => x.columns.get(p0)!.json)) {
        if (p1 !== undefined && scope.sources.some((x) => x.name === p0 && x.columns.has(p1))) return;
        throw this.fail(`"${shown}": ${p0} is not a JSON column, so it has no subcolumns`, e.at);
      }
      return;
    }
    if (n >= 2) {
      const src = scope.sources.find((x) => x.name === p0);
      if (src) {
        const col = src.columns.get(p1!);
        if (!col) throw this.fail(`unknown column "${p1}" in "${p0}"`, e.at);
        if (n > 2 && !col.json) throw this.fail(`"${shown}": ${p1} is not a JSON column, so it has no subcolumns`, e.at);
        return;
      }
      if (!scope.sources.some((x) => x.name === p0) && n >= 2 && (this.views.has(p1!) || /^(system|information_schema|billing|default|analytics)$/i.test(p0))) {
        throw this.fail(`only the analytics views can be read; "${shown}" names another database`, e.at, 'FORBIDDEN');
      }
    }
    throw this.fail(`unknown column "${shown}" (see GET /api/v2/analytics/schema for the views' columns)`, e.at);
  }

  private expr(e: Expr, scope: Scope): void {
    switch (e.k) {
      case 'int':
      case 'float':
      case 'string':
      case 'bool':
      case 'null':
        return;
      case 'allColumns':
        return;
      case 'ident':
        return this.ident(e, scope);
      case 'array':
      case 'tuple':
        for (const x of e.items) this.expr(x, scope);
        return;
      case 'interval':
        return this.expr(e.value, scope);
      case 'lambda':
        throw this.fail('a lambda (x -> …) is only allowed as an argument of a higher-order function such as arrayMap', e.at);
      case 'unary':
        return this.expr(e.expr, scope);
      case 'binary':
        this.expr(e.left, scope);
        return this.expr(e.right, scope);
      case 'in':
        this.expr(e.expr, scope);
        if (e.rhs.k === 'inTable') {
          if (scope.env.ctes.has(e.rhs.name)) return;
          if (this.views.has(e.rhs.name)) throw this.fail(`"IN ${e.rhs.name}": write IN (SELECT <column> FROM ${e.rhs.name})`, e.rhs.at);
          throw this.fail(`"IN ${e.rhs.name}": only a list, a subquery or a CTE of the query can follow IN`, e.rhs.at, 'FORBIDDEN');
        }
        return this.expr(e.rhs, scope);
      case 'between':
        this.expr(e.expr, scope);
        this.expr(e.low, scope);
        return this.expr(e.high, scope);
      case 'isNull':
        return this.expr(e.expr, scope);
      case 'ternary':
        this.expr(e.cond, scope);
        this.expr(e.then, scope);
        return this.expr(e.else, scope);
      case 'case':
        if (e.operand) this.expr(e.operand, scope);
        for (const w of e.whens) {
          this.expr(w.when, scope);
          this.expr(w.then, scope);
        }
        if (e.else) this.expr(e.else, scope);
        return;
      case 'cast':
        return this.expr(e.expr, scope);
      case 'index':
        this.expr(e.expr, scope);
        return this.expr(e.index, scope);
      case 'tupleElement':
        return this.expr(e.expr, scope);
      case 'subquery':
        this.query(e.query, scope.env);
        return;
      case 'call':
        return this.call(e, scope);
    }
  }

  private call(e: Extract<Expr, { k: 'call' }>, scope: Scope): void {
    const spec = lookupFunction(e.name);
    if (!spec) throw this.fail(`function ${e.name}() is not allowed in analytics queries (unknown, or outside the analytics language)`, e.at);
    // The engine gets the allowlist's spelling when it differs only in case (COUNT → count).
    if (spec.name !== e.name && spec.name.toLowerCase() === e.name.toLowerCase()) this.callNames.set(e, spec.name);
    const n = e.args.length;
    if (n < spec.minArgs || n > spec.maxArgs) {
      const want = spec.minArgs === spec.maxArgs ? `${spec.minArgs}` : spec.maxArgs === Infinity ? `at least ${spec.minArgs}` : `${spec.minArgs} to ${spec.maxArgs}`;
      throw this.fail(`${e.name}() takes ${want} argument${want === '1' ? '' : 's'}, not ${n}`, e.at);
    }
    if (e.params) {
      if (!spec.params) throw this.fail(`${e.name}() takes no parameters: write ${e.name}(…), not ${e.name}(…)(…)`, e.at);
      if (e.params.length < spec.params.min || e.params.length > spec.params.max) throw this.fail(`${e.name}() takes ${spec.params.min} to ${spec.params.max} parameters, not ${e.params.length}`, e.at);
      for (const p of e.params) if (literalValue(p) === undefined) throw this.fail(`the parameters of ${e.name}() must be literals`, p.at);
    }
    if (e.distinct && spec.kind !== 'aggregate') throw this.fail(`DISTINCT only goes in an aggregate function's arguments, not ${e.name}()`, e.at);
    if (e.over) {
      if (spec.kind !== 'aggregate' && spec.kind !== 'window') throw this.fail(`${e.name}() is not an aggregate or window function, so it takes no OVER`, e.at);
      for (const p of e.over.partitionBy) this.expr(p, scope);
      for (const o of e.over.orderBy) this.expr(o.expr, scope);
      for (const b of [e.over.frame?.start, e.over.frame?.end]) if (b?.k === 'offset') this.expr(b.n, scope);
    } else if (spec.kind === 'window') throw this.fail(`${e.name}() is a window function: it needs OVER (…)`, e.at);
    e.args.forEach((a, i) => this.arg(e.name, spec, a, i, scope));
  }

  private arg(fn: string, spec: FunctionSpec, a: Expr, i: number, scope: Scope): void {
    if (a.k === 'allColumns') {
      if (fn.toLowerCase() !== 'count') throw this.fail(`${fn}(*) is not in the analytics language`, a.at);
      return;
    }
    if (a.k === 'lambda') {
      if (!spec.lambdaArgs?.includes(i)) throw this.fail(`argument ${i + 1} of ${fn}() cannot be a lambda`, a.at);
      const inner: Scope = { ...scope, lambda: new Set([...scope.lambda, ...a.params]) };
      return this.expr(a.body, inner);
    }
    if (spec.constantArgs?.includes(i)) {
      const v = literalValue(a);
      if (v === undefined) throw this.fail(`argument ${i + 1} of ${fn}() must be a literal`, a.at);
      const max = spec.maxConstant?.[i];
      if (max !== undefined && (typeof v !== 'number' || v > max)) throw this.fail(`argument ${i + 1} of ${fn}() is at most ${max}`, a.at);
      return;
    }
    this.expr(a, scope);
  }
}

interface Scope {
  env: Env;
  sources: Source[];
  aliases: Set<string>;
  lambda: Set<string>;
}

/** The value of a literal argument (numbers as JS numbers), or undefined when `e` is not a literal. */
function literalValue(e: Expr): number | string | boolean | null | undefined {
  switch (e.k) {
    case 'int':
      return Number(e.value);
    case 'float':
      return e.value;
    case 'string':
      return e.value;
    case 'bool':
      return e.value;
    case 'null':
      return null;
    default:
      return undefined;
  }
}

/** Checks `q` against the views; returns which references read a view. */
export function resolve(q: Query, views: readonly ViewSchema[], src: string): Resolution {
  return new Resolver(views, src).resolve(q);
}

export type { TableRef };
