/**
 * Prints the AST as the one SQL text the engine receives. It quotes every identifier itself
 * (backticks, escaped), prints every literal from its parsed value (strings escaped here),
 * parenthesizes every operator expression (so the engine's precedence rules cannot read it
 * differently), and never prints SETTINGS, FORMAT, INTO, a table function other than numbers()
 * or a database-qualified name — except the one form it adds itself: each read of a view
 * becomes a read of the parameterized view in the analytics database with the caller's
 * organization and mode as its parameters, `analytics.fact_signal(org = '…', live = true)`.
 *
 * Without a scope (tests), views print as their bare names, so parse(print(parse(q))) can be
 * compared with parse(q).
 */
import type { Expr, FrameBound, From, OrderItem, Query, Select, TypeName, WindowSpec } from './ast.js';

export interface PrintScope {
  analyticsDb: string;
  orgId: string;
  live: boolean;
  /** References (from the resolver) that read a view. */
  viewRefs: Set<object>;
  /** Calls (from the resolver) to print with the allowlist's spelling. */
  callNames?: Map<object, string>;
}

export function quoteIdent(name: string): string {
  return `\`${escape(name, '`')}\``;
}

export function quoteString(value: string): string {
  return `'${escape(value, "'")}'`;
}

function escape(s: string, quote: string): string {
  let out = '';
  for (const ch of s) {
    const c = ch.charCodeAt(0);
    if (ch === '\\') out += '\\\\';
    else if (ch === quote) out += `\\${quote}`;
    else if (c < 0x20 || c === 0x7f) out += `\\x${c.toString(16).padStart(2, '0')}`;
    else out += ch;
  }
  return out;
}

const FUNCTION_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export class Printer {
  constructor(private readonly scope?: PrintScope) {}

  query(q: Query): string {
    if (q.k === 'set') {
      let out = `(${this.query(q.selects[0]!)})`;
      q.ops.forEach((op, i) => (out += ` ${op} (${this.query(q.selects[i + 1]!)})`));
      return out;
    }
    return this.select(q);
  }

  private select(s: Select): string {
    const parts: string[] = [];
    const withs = [...s.ctes.map((c) => `${quoteIdent(c.name)} AS (${this.query(c.query)})`), ...s.withAliases.map((w) => `${this.expr(w.expr)} AS ${quoteIdent(w.name)}`)];
    if (withs.length > 0) parts.push(`WITH ${withs.join(', ')}`);
    parts.push(s.distinct ? 'SELECT DISTINCT' : 'SELECT');
    parts.push(
      s.items
        .map((it) => {
          if (it.expr.k === 'star') return it.expr.table === undefined ? '*' : `${quoteIdent(it.expr.table)}.*`;
          return it.alias === undefined ? this.expr(it.expr) : `${this.expr(it.expr)} AS ${quoteIdent(it.alias)}`;
        })
        .join(', '),
    );
    if (s.from) parts.push(`FROM ${this.from(s.from)}`);
    if (s.where) parts.push(`WHERE ${this.expr(s.where)}`);
    if (s.groupBy.length > 0) parts.push(`GROUP BY ${s.groupBy.map((e) => this.expr(e)).join(', ')}`);
    if (s.having) parts.push(`HAVING ${this.expr(s.having)}`);
    if (s.orderBy.length > 0) parts.push(`ORDER BY ${this.order(s.orderBy)}`);
    if (s.limitBy) parts.push(`LIMIT ${s.limitBy.limit}${s.limitBy.offset !== undefined ? ` OFFSET ${s.limitBy.offset}` : ''} BY ${s.limitBy.by.map((e) => this.expr(e)).join(', ')}`);
    if (s.limit) parts.push(`LIMIT ${s.limit.limit}${s.limit.offset !== undefined ? ` OFFSET ${s.limit.offset}` : ''}`);
    return parts.join(' ');
  }

  private order(items: OrderItem[]): string {
    return items.map((o) => `${this.expr(o.expr)}${o.desc ? ' DESC' : ' ASC'}${o.nulls ? ` NULLS ${o.nulls}` : ''}`).join(', ');
  }

  /** A read of a view: scoped to the caller when printing for the engine. */
  private viewRead(name: string): string {
    const sc = this.scope!;
    return `${quoteIdent(sc.analyticsDb)}.${quoteIdent(name)}(org = ${quoteString(sc.orgId)}, live = ${sc.live ? 'true' : 'false'})`;
  }

  private from(f: From): string {
    switch (f.k) {
      case 'table': {
        if (this.scope?.viewRefs.has(f)) return `${this.viewRead(f.name)} AS ${quoteIdent(f.alias ?? f.name)}`;
        return `${quoteIdent(f.name)}${f.alias !== undefined ? ` AS ${quoteIdent(f.alias)}` : ''}`;
      }
      case 'subquery':
        return `(${this.query(f.query)})${f.alias !== undefined ? ` AS ${quoteIdent(f.alias)}` : ''}`;
      case 'numbers':
        return `numbers(${f.args.join(', ')})${f.alias !== undefined ? ` AS ${quoteIdent(f.alias)}` : ''}`;
      case 'join': {
        const head = `${this.from(f.left)} ${f.kind} JOIN ${this.from(f.right)}`;
        if (f.on) return `${head} ON ${this.expr(f.on)}`;
        if (f.using) return `${head} USING (${f.using.map(quoteIdent).join(', ')})`;
        return head;
      }
      case 'arrayJoin':
        return `${this.from(f.left)} ${f.leftJoin ? 'LEFT ' : ''}ARRAY JOIN ${f.items.map((it) => (it.alias === undefined ? this.expr(it.expr) : `${this.expr(it.expr)} AS ${quoteIdent(it.alias)}`)).join(', ')}`;
    }
  }

  type(t: TypeName): string {
    if (t.args.length === 0) return t.name;
    const args = t.args.map((a) => {
      switch (a.k) {
        case 'type':
          return this.type(a.type);
        case 'int':
          return a.value.toString();
        case 'string':
          return quoteString(a.value);
        case 'enum':
          return `${quoteString(a.name)} = ${a.value}`;
        case 'field':
          return `${quoteIdent(a.name)} ${this.type(a.type)}`;
      }
    });
    return `${t.name}(${args.join(', ')})`;
  }

  private window(w: WindowSpec): string {
    const parts: string[] = [];
    if (w.partitionBy.length > 0) parts.push(`PARTITION BY ${w.partitionBy.map((e) => this.expr(e)).join(', ')}`);
    if (w.orderBy.length > 0) parts.push(`ORDER BY ${this.order(w.orderBy)}`);
    if (w.frame) parts.push(w.frame.end ? `${w.frame.unit} BETWEEN ${this.bound(w.frame.start)} AND ${this.bound(w.frame.end)}` : `${w.frame.unit} ${this.bound(w.frame.start)}`);
    return parts.join(' ');
  }

  private bound(b: FrameBound): string {
    if (b.k === 'unbounded') return `UNBOUNDED ${b.dir}`;
    if (b.k === 'current') return 'CURRENT ROW';
    return `${this.expr(b.n)} ${b.dir}`;
  }

  expr(e: Expr): string {
    switch (e.k) {
      case 'int':
        return e.value.toString();
      case 'float':
        return floatText(e.value);
      case 'string':
        return quoteString(e.value);
      case 'bool':
        return e.value ? 'true' : 'false';
      case 'null':
        return 'NULL';
      case 'allColumns':
        return '*';
      case 'array':
        return `[${e.items.map((x) => this.expr(x)).join(', ')}]`;
      case 'tuple':
        return e.items.length === 1 ? `(${this.expr(e.items[0]!)},)` : `(${e.items.map((x) => this.expr(x)).join(', ')})`;
      case 'interval':
        return `INTERVAL ${this.atom(e.value)} ${e.unit}`;
      case 'ident':
        return e.parts.map(quoteIdent).join('.');
      case 'lambda':
        return `(${e.params.map(quoteIdent).join(', ')}) -> ${this.atom(e.body)}`;
      case 'unary':
        return e.op === '-' ? `-(${this.expr(e.expr)})` : `(NOT ${this.atom(e.expr)})`;
      case 'binary':
        return `(${this.atom(e.left)} ${e.op} ${this.atom(e.right)})`;
      case 'in': {
        let rhs: string;
        if (e.rhs.k === 'inTable') rhs = quoteIdent(e.rhs.name);
        else if (e.rhs.k === 'tuple' || e.rhs.k === 'subquery') rhs = this.expr(e.rhs);
        else rhs = `(${this.expr(e.rhs)})`;
        return `(${this.atom(e.expr)} ${e.not ? 'NOT IN' : 'IN'} ${rhs})`;
      }
      case 'between':
        return `(${this.atom(e.expr)} ${e.not ? 'NOT BETWEEN' : 'BETWEEN'} ${this.atom(e.low)} AND ${this.atom(e.high)})`;
      case 'isNull':
        return `(${this.atom(e.expr)} ${e.not ? 'IS NOT NULL' : 'IS NULL'})`;
      case 'ternary':
        return `(${this.atom(e.cond)} ? ${this.atom(e.then)} : ${this.atom(e.else)})`;
      case 'case': {
        let out = 'CASE';
        if (e.operand) out += ` ${this.atom(e.operand)}`;
        for (const w of e.whens) out += ` WHEN ${this.atom(w.when)} THEN ${this.atom(w.then)}`;
        if (e.else) out += ` ELSE ${this.atom(e.else)}`;
        return `${out} END`;
      }
      case 'cast':
        return `CAST(${this.expr(e.expr)} AS ${this.type(e.type)})`;
      case 'index':
        return `${this.postfixBase(e.expr)}[${this.expr(e.index)}]`;
      case 'tupleElement':
        return `(${this.expr(e.expr)}).${e.index}`;
      case 'subquery':
        return `(${this.query(e.query)})`;
      case 'call': {
        const name = this.scope?.callNames?.get(e) ?? e.name;
        if (!FUNCTION_NAME.test(name)) throw new Error(`unprintable function name ${JSON.stringify(name)}`);
        const args = `(${e.distinct ? 'DISTINCT ' : ''}${e.args.map((a) => this.expr(a)).join(', ')})`;
        const params = e.params ? `(${e.params.map((p) => this.expr(p)).join(', ')})` : '';
        return `${name}${params}${args}${e.over ? ` OVER (${this.window(e.over)})` : ''}`;
      }
    }
  }

  /** An operand: already self-delimiting, or parenthesized. */
  private atom(e: Expr): string {
    const s = this.expr(e);
    if (e.k === 'unary' && e.op === '-') return `(${s})`;
    if ((e.k === 'int' || e.k === 'float') && s.startsWith('-')) return `(${s})`;
    if (e.k === 'lambda') return `(${s})`;
    return s;
  }

  /** The base of `x[i]`: an identifier or call as it is, anything else parenthesized. */
  private postfixBase(e: Expr): string {
    if (e.k === 'ident' || e.k === 'call' || e.k === 'array' || e.k === 'subquery') return this.expr(e);
    return `(${this.expr(e)})`;
  }
}

/** A float's shortest exact text, always with a '.' or an exponent (so it stays a float). */
export function floatText(v: number): string {
  if (Object.is(v, -0)) return '-0.0';
  const s = String(v);
  return /[.e]/.test(s) ? s : `${s}.0`;
}
