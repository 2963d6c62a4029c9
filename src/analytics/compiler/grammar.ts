/**
 * THE GRAMMAR of the analytics language: a documented subset of ClickHouse's SELECT, parsed by
 * recursive descent into the project's own AST (ast.ts). This module is the only place the
 * language is defined; docs/api.md "Analytics" documents it. Anything not below is refused with a
 * CompileError naming the construct and its line:column.
 *
 *   statement   := query [';'] EOF
 *   query       := operand (UNION (ALL | DISTINCT) operand)*
 *   operand     := select | '(' query ')'
 *   select      := [WITH with_item (',' with_item)*]
 *                  SELECT [DISTINCT] select_item (',' select_item)*
 *                  [FROM from] [WHERE expr]
 *                  [GROUP BY expr (',' expr)*] [HAVING expr]
 *                  [ORDER BY order_item (',' order_item)*]
 *                  [LIMIT n [(OFFSET | ',') m] BY expr (',' expr)*]
 *                  [LIMIT n [OFFSET m] | LIMIT m ',' n]            -- n, m: integer literals
 *   with_item   := name AS '(' query ')'                             -- a CTE
 *                | expr AS name                                     -- a named expression
 *   select_item := '*' | name '.' '*' | expr [[AS] alias]           -- no APPLY/EXCEPT/REPLACE/COLUMNS
 *   from        := source (join)*
 *   source      := view_or_cte [[AS] alias] | '(' query ')' [[AS] alias]
 *                | numbers '(' [offset ','] count ')' [[AS] alias]  -- literals, count ≤ MAX_GENERATED_ROWS
 *   join        := [INNER | LEFT [OUTER] | RIGHT [OUTER] | FULL [OUTER]] JOIN source (ON expr | USING names)
 *                | CROSS JOIN source | ',' source
 *                | [LEFT] ARRAY JOIN expr [[AS] alias] (',' expr [[AS] alias])*
 *   order_item  := expr [ASC | DESC] [NULLS (FIRST | LAST)]
 *   expr        := lambda | ternary
 *   lambda      := name '->' expr | '(' name (',' name)* ')' '->' expr   -- only as arguments of higher-order functions
 *   ternary     := or ['?' expr ':' expr]
 *   or          := and (OR and)*              and := not (AND not)*     not := NOT not | null_between
 *   null_between:= compare (IS [NOT] NULL | [NOT] BETWEEN compare AND compare)*
 *   compare     := additive ((= | == | != | <> | < | > | <= | >=) additive
 *                          | [NOT] (LIKE | ILIKE) additive | [NOT] IN in_rhs)*
 *   in_rhs      := '(' query ')' | '(' expr, … ')' | cte | additive
 *   additive    := mult (('+' | '-' | '||') mult)*          -- ClickHouse: || binds like + and -
 *   mult        := unary (('*' | '/' | '%') unary)*
 *   unary       := '-' unary | postfix           -- '-' right before a number is a negative literal
 *   postfix     := primary ('[' expr ']' | '.' integer | '::' type)*
 *                  -- number::T casts the number's text, as ClickHouse does; (literal)::T and
 *                  -- [..]::T / (..)::T of literals are refused (ClickHouse casts their text)
 *   primary     := integer | float | string | NULL | TRUE | FALSE | NOT null_between
 *                | '[' [expr (',' expr)*] ']' | '(' expr ')' | '(' expr ',' … ')' | '(' query ')'
 *                | INTERVAL expr unit | CASE [expr] (WHEN expr THEN expr)+ [ELSE expr] END
 *                | CAST '(' expr AS type ')' | CAST '(' expr ',' 'type' ')'
 *                | function | name ('.' name)*           -- column, alias, t.column, data.json.path
 *   function    := name '(' [DISTINCT] [args] ')' ['(' args ')'] [OVER '(' window ')']   -- quantile(0.5)(x)
 *                | count '(' '*' ')'
 *   window      := [PARTITION BY expr, …] [ORDER BY order_item, …] [(ROWS | RANGE) frame]
 *   frame       := BETWEEN bound AND bound | bound
 *   bound       := UNBOUNDED (PRECEDING | FOLLOWING) | CURRENT ROW | expr (PRECEDING | FOLLOWING)
 *   type        := Int8…Int256 | UInt8…UInt256 | Float32 | Float64 | Bool | String | UUID | IPv4 | IPv6
 *                | Date | Date32 | DateTime ['(' 'tz' ')'] | DateTime64 '(' p [',' 'tz'] ')'
 *                | Decimal '(' P [',' S] ')' | Decimal32..256 '(' S ')' | FixedString '(' n ')'
 *                | Nullable '(' type ')' | Array '(' type ')' | LowCardinality '(' type ')'
 *                | Tuple '(' [name] type, … ')' | Map '(' type ',' type ')' | Enum8/Enum16 '(' 'a' = n, … ')'
 *   unit        := NANOSECOND … YEAR (singular, case-insensitive)
 *
 * Names: ASCII identifiers, or quoted with backticks or double quotes (ClickHouse escapes).
 * Comments: `--` to end of line and `/* … *\/` (nested). Whitespace: ASCII only.
 * Not in the language (examples): SETTINGS, FORMAT, INTO OUTFILE, table functions other than
 * numbers(), database-qualified names, PREWHERE, FINAL, SAMPLE, GLOBAL, ANY/ASOF/SEMI/ANTI joins,
 * WITH TOTALS, INTERSECT/EXCEPT, column transformers and matchers, query parameters, named windows (WINDOW),
 * QUALIFY, WITH FILL, INTERPOLATE, GROUPING SETS/ROLLUP/CUBE, aliases inside expressions, `#`
 * comments, recursive CTEs.
 */
import type { Cte, Expr, From, FrameBound, IntervalUnit, OrderItem, Query, Select, SelectItem, SubqueryRef, GeneratorRef, TableRef, TypeArg, TypeName, WindowSpec, WithAlias } from './ast.js';
import { CompileError } from './errors.js';
import { tokenize, type Token } from './lexer.js';

/** The largest count `numbers()` may generate. */
export const MAX_GENERATED_ROWS = 1_000_000_000n;
/** Nesting depth of expressions and queries (parentheses, subqueries, function arguments). */
export const MAX_DEPTH = 200;
/** Depth of the tree, chains of operators included (`1 + 1 + …` nests one level per operator). */
export const MAX_TREE_DEPTH = 1_000;
/** Tokens the parser may read again after giving up an attempt, per token of the query (plus a constant). */
export const MAX_RETRY_TOKENS_PER_TOKEN = 16;
const RETRY_TOKENS_BASE = 256;

const NOT_SELECT = new Set(['INSERT', 'ALTER', 'CREATE', 'DROP', 'SYSTEM', 'SET', 'KILL', 'OPTIMIZE', 'EXPLAIN', 'SHOW', 'DESCRIBE', 'DESC', 'EXISTS', 'USE', 'TRUNCATE', 'RENAME', 'GRANT', 'REVOKE', 'ATTACH', 'DETACH', 'DELETE', 'UPDATE', 'BACKUP', 'RESTORE', 'WATCH', 'CHECK', 'UNDROP', 'EXCHANGE', 'MOVE', 'BEGIN', 'COMMIT', 'ROLLBACK', 'REPLACE', 'UNDO']);

/** Words that end an expression: never a bare column name or an implicit alias. */
const RESERVED = new Set([
  'SELECT', 'FROM', 'WHERE', 'PREWHERE', 'GROUP', 'ORDER', 'BY', 'LIMIT', 'OFFSET', 'HAVING', 'UNION', 'INTERSECT', 'EXCEPT', 'ALL', 'DISTINCT',
  'JOIN', 'INNER', 'LEFT', 'RIGHT', 'FULL', 'CROSS', 'OUTER', 'ON', 'USING', 'ARRAY', 'AS', 'WITH', 'SETTINGS', 'FORMAT', 'INTO', 'WINDOW',
  'AND', 'OR', 'NOT', 'LIKE', 'ILIKE', 'IN', 'BETWEEN', 'IS', 'ASC', 'DESC', 'ASCENDING', 'DESCENDING', 'NULLS', 'FINAL', 'SAMPLE', 'GLOBAL',
  'ANY', 'SEMI', 'ANTI', 'ASOF', 'PASTE', 'THEN', 'ELSE', 'END', 'WHEN', 'CASE', 'QUALIFY', 'OVER', 'COLLATE', 'TOTALS', 'APPLY', 'REPLACE',
  'INTERVAL', 'CAST', 'PARTITION', 'ROWS', 'RANGE', 'PRECEDING', 'FOLLOWING', 'UNBOUNDED', 'CURRENT', 'ROW', 'FILL', 'INTERPOLATE', 'TOP', 'NULL', 'TRUE', 'FALSE',
]);

const LITERAL_KINDS = new Set(['int', 'float', 'string', 'null', 'bool', 'array', 'tuple']);

const UNITS: readonly IntervalUnit[] = ['NANOSECOND', 'MICROSECOND', 'MILLISECOND', 'SECOND', 'MINUTE', 'HOUR', 'DAY', 'WEEK', 'MONTH', 'QUARTER', 'YEAR'];

const SIMPLE_TYPES = ['Int8', 'Int16', 'Int32', 'Int64', 'Int128', 'Int256', 'UInt8', 'UInt16', 'UInt32', 'UInt64', 'UInt128', 'UInt256', 'Float32', 'Float64', 'Bool', 'String', 'UUID', 'IPv4', 'IPv6', 'Date', 'Date32'];
const WRAPPER_TYPES = ['Nullable', 'Array', 'LowCardinality'];
const TYPE_NAMES = new Map([...SIMPLE_TYPES, ...WRAPPER_TYPES, 'DateTime', 'DateTime64', 'Decimal', 'Decimal32', 'Decimal64', 'Decimal128', 'Decimal256', 'FixedString', 'Tuple', 'Map', 'Enum8', 'Enum16'].map((n) => [n.toLowerCase(), n]));

/** Parses one statement of the analytics language. */
export function parse(src: string): Query {
  return new Parser(src).statement();
}

/** Parses a type name on its own (the string form of CAST(x, 'Type')). */
export function parseTypeText(text: string, src: string, at: number): TypeName {
  let p: Parser;
  try {
    p = new Parser(text);
  } catch (err) {
    if (err instanceof CompileError) throw new CompileError('INVALID_QUERY', `type ${JSON.stringify(text)}: ${err.reason}`, src, at);
    throw err;
  }
  try {
    const t = p.type();
    p.expectEof();
    return t;
  } catch (err) {
    if (err instanceof CompileError) throw new CompileError('INVALID_QUERY', `type ${JSON.stringify(text)}: ${err.reason}`, src, at);
    throw err;
  }
}

class Parser {
  private readonly toks: Token[];
  private i = 0;
  private depth = 0;
  /** Operator links on the current path of left-deep chains (a + b + c …). */
  private links = 0;
  /**
   * Tokens read by attempts that were given up (a parenthesized group tried as a query, then
   * read as an expression). Nested, such attempts double the work per level; past
   * MAX_RETRY_TOKENS_PER_TOKEN per token of the query the query is refused, so parsing stays
   * linear in the query's length.
   */
  private retried = 0;

  constructor(private readonly src: string) {
    this.toks = tokenize(src);
  }

  // ── tokens ────────────────────────────────────────────────────────────────────────────

  private get t(): Token {
    return this.toks[this.i]!;
  }
  private peek(n = 1): Token {
    return this.toks[Math.min(this.i + n, this.toks.length - 1)]!;
  }
  private next(): Token {
    const t = this.t;
    if (t.kind !== 'eof') this.i++;
    return t;
  }
  /** The current token is the keyword `w` (case-insensitive, unquoted). */
  private isKw(w: string, tok = this.t): boolean {
    return tok.kind === 'ident' && tok.text.toUpperCase() === w;
  }
  private acceptKw(w: string): boolean {
    if (!this.isKw(w)) return false;
    this.i++;
    return true;
  }
  private expectKw(w: string): Token {
    if (!this.isKw(w)) throw this.unexpected(w);
    return this.next();
  }
  private isOp(o: string, tok = this.t): boolean {
    return tok.kind === 'op' && tok.text === o;
  }
  private acceptOp(o: string): boolean {
    if (!this.isOp(o)) return false;
    this.i++;
    return true;
  }
  private expectOp(o: string): Token {
    if (!this.isOp(o)) throw this.unexpected(`"${o}"`);
    return this.next();
  }
  expectEof(): void {
    if (this.t.kind !== 'eof') throw this.unexpected('the end of the query');
  }

  private err(reason: string, at = this.t.at, code: 'INVALID_QUERY' | 'FORBIDDEN' | 'CLAUSE_NOT_ALLOWED' | 'MULTIPLE_STATEMENTS' | 'NOT_A_SELECT' = 'INVALID_QUERY'): CompileError {
    return new CompileError(code, reason, this.src, at);
  }

  private describe(tok: Token): string {
    switch (tok.kind) {
      case 'eof':
        return 'the end of the query';
      case 'string':
        return 'a string';
      case 'int':
      case 'float':
        return `the number ${tok.text}`;
      case 'qident':
        return `the quoted name ${JSON.stringify(tok.text)}`;
      case 'op':
        return `"${tok.text}"`;
      default:
        return `"${tok.text}"`;
    }
  }

  /** A syntax error at the current token, with a clearer message for constructs outside the language. */
  private unexpected(expected: string): CompileError {
    const tok = this.t;
    const w = tok.kind === 'ident' ? tok.text.toUpperCase() : '';
    if (w === 'SETTINGS') return this.err('a SETTINGS clause is not allowed (in subqueries either): the service sets the limits', tok.at, 'CLAUSE_NOT_ALLOWED');
    if (w === 'FORMAT') return this.err('a FORMAT clause is not allowed: results are always JSON', tok.at, 'CLAUSE_NOT_ALLOWED');
    if (w === 'INTO') return this.err('INTO OUTFILE is not allowed', tok.at, 'CLAUSE_NOT_ALLOWED');
    if (w === 'APPLY' || w === 'EXCEPT' || w === 'REPLACE' || w === 'COLUMNS') return this.err(`column transformers and matchers (${w}) are not in the analytics language`, tok.at);
    if (['FINAL', 'SAMPLE', 'GLOBAL', 'ANY', 'ASOF', 'SEMI', 'ANTI', 'PASTE', 'INTERSECT', 'WINDOW', 'QUALIFY', 'COLLATE', 'INTERPOLATE', 'TOP'].includes(w)) {
      return this.err(`${w} is not in the analytics language`, tok.at);
    }
    return this.err(`Syntax error: expected ${expected}, found ${this.describe(tok)}`, tok.at);
  }

  private enter(at: number): void {
    if (++this.depth > MAX_DEPTH) throw this.err(`the query nests deeper than ${MAX_DEPTH} levels`, at);
  }
  private leave(): void {
    this.depth--;
  }
  /** One more link in a left-deep chain (binary operators, postfix operators, joins). */
  private link(at: number): void {
    if (++this.links + this.depth > MAX_TREE_DEPTH) throw this.err(`the query's expressions nest deeper than ${MAX_TREE_DEPTH} levels (long chains of operators count)`, at);
  }

  /** An identifier (unquoted and not reserved, or quoted). */
  private name(what: string): string {
    const tok = this.t;
    if (tok.kind === 'qident' || (tok.kind === 'ident' && !RESERVED.has(tok.text.toUpperCase()))) {
      this.i++;
      return tok.text;
    }
    throw this.unexpected(what);
  }
  private isName(tok = this.t): boolean {
    return tok.kind === 'qident' || (tok.kind === 'ident' && !RESERVED.has(tok.text.toUpperCase()));
  }

  // ── statements and queries ────────────────────────────────────────────────────────────

  statement(): Query {
    const first = this.t;
    if (first.kind === 'eof') throw this.err('the query is empty (only comments or whitespace)');
    if (first.kind === 'ident' && NOT_SELECT.has(first.text.toUpperCase()) && !this.isOp('(', this.peek())) {
      throw this.err(`only SELECT or WITH … SELECT is allowed, not ${first.text.toUpperCase()}`, first.at, 'NOT_A_SELECT');
    }
    if (!this.isKw('SELECT') && !this.isKw('WITH') && !this.isOp('(')) throw this.unexpected('SELECT or WITH');
    const q = this.query();
    if (this.acceptOp(';')) {
      if (this.t.kind !== 'eof') throw this.err('exactly one statement is allowed; the query contains several', this.t.at, 'MULTIPLE_STATEMENTS');
    }
    if (this.t.kind !== 'eof') throw this.unexpected('the end of the query');
    return q;
  }

  private query(): Query {
    const at = this.t.at;
    this.enter(at);
    const selects: Query[] = [this.operand()];
    const ops: ('UNION ALL' | 'UNION DISTINCT')[] = [];
    while (this.isKw('UNION')) {
      const u = this.next();
      if (this.acceptKw('ALL')) ops.push('UNION ALL');
      else if (this.acceptKw('DISTINCT')) ops.push('UNION DISTINCT');
      else throw this.err('write UNION ALL or UNION DISTINCT', u.at);
      selects.push(this.operand());
    }
    this.leave();
    return selects.length === 1 ? selects[0]! : { k: 'set', selects, ops, at };
  }

  private operand(): Query {
    if (this.isOp('(')) {
      this.next();
      const q = this.query();
      this.close();
      return q;
    }
    return this.select();
  }

  private overRetried(): boolean {
    return this.retried > this.toks.length * MAX_RETRY_TOKENS_PER_TOKEN + RETRY_TOKENS_BASE;
  }

  /** A closing parenthesis of a subquery. */
  private close(): void {
    if (!this.isOp(')')) throw this.unexpected('")"');
    this.next();
  }

  private select(): Select {
    const at = this.t.at;
    const ctes: Cte[] = [];
    const withAliases: WithAlias[] = [];
    if (this.acceptKw('WITH')) {
      if (this.isKw('RECURSIVE')) throw this.err('recursive CTEs are not in the analytics language');
      do {
        const tok = this.t;
        if (this.isName() && this.isKw('AS', this.peek()) && this.isOp('(', this.peek(2)) && (this.isKw('SELECT', this.peek(3)) || this.isKw('WITH', this.peek(3)) || this.isOp('(', this.peek(3)))) {
          const name = this.name('a CTE name');
          this.expectKw('AS');
          this.expectOp('(');
          const query = this.query();
          this.close();
          ctes.push({ name, query, at: tok.at });
        } else {
          const expr = this.expr();
          this.expectKw('AS');
          withAliases.push({ name: this.anyName('a name after AS'), expr, at: tok.at });
        }
      } while (this.acceptOp(','));
    }
    this.expectKw('SELECT');
    const distinct = this.acceptKw('DISTINCT');
    if (this.isKw('ON') && distinct) throw this.err('DISTINCT ON is not in the analytics language');
    if (this.isKw('ALL')) this.next();
    const items: SelectItem[] = [];
    do items.push(this.selectItem());
    while (this.acceptOp(','));
    const s: Select = { k: 'select', ctes, withAliases, distinct, items, groupBy: [], orderBy: [], at };
    if (this.acceptKw('FROM')) s.from = this.from();
    if (this.isKw('PREWHERE')) throw this.err('PREWHERE is not in the analytics language (views do not support it); use WHERE');
    if (this.acceptKw('WHERE')) s.where = this.expr();
    if (this.isKw('GROUP')) {
      this.next();
      this.expectKw('BY');
      if (this.isKw('ALL') || this.isKw('ROLLUP') || this.isKw('CUBE') || this.isKw('GROUPING')) throw this.err(`GROUP BY ${this.t.text.toUpperCase()} is not in the analytics language`);
      do s.groupBy.push(this.expr());
      while (this.acceptOp(','));
    }
    if (this.isKw('WITH') && this.isKw('TOTALS', this.peek())) throw this.err('WITH TOTALS is not in the analytics language (the response has no place for a totals row)');
    if (this.acceptKw('HAVING')) s.having = this.expr();
    if (this.isKw('ORDER')) {
      this.next();
      this.expectKw('BY');
      s.orderBy = this.orderItems();
    }
    if (this.isKw('LIMIT')) {
      this.next();
      const first = this.count('LIMIT');
      let limit = first;
      let offset: bigint | undefined;
      if (this.acceptOp(',')) {
        offset = first;
        limit = this.count('LIMIT');
      } else if (this.acceptKw('OFFSET')) offset = this.count('OFFSET');
      if (this.acceptKw('BY')) {
        const by: Expr[] = [];
        do by.push(this.expr());
        while (this.acceptOp(','));
        s.limitBy = { limit, by, ...(offset !== undefined ? { offset } : {}) };
        if (this.isKw('LIMIT')) {
          this.next();
          const n = this.count('LIMIT');
          s.limit = { limit: n };
          if (this.acceptKw('OFFSET')) s.limit.offset = this.count('OFFSET');
          else if (this.acceptOp(',')) s.limit = { offset: n, limit: this.count('LIMIT') };
        }
      } else s.limit = { limit, ...(offset !== undefined ? { offset } : {}) };
    }
    return s;
  }

  /** A non-negative integer literal (LIMIT and OFFSET counts). */
  private count(what: string): bigint {
    const tok = this.t;
    if (tok.kind !== 'int') throw this.err(`${what} takes a non-negative integer literal, found ${this.describe(tok)}`);
    this.next();
    const v = BigInt(tok.text);
    if (v > 18446744073709551615n) throw this.err(`${what} ${tok.text} is too large`, tok.at);
    return v;
  }

  private selectItem(): SelectItem {
    const tok = this.t;
    if (this.isOp('*')) {
      this.next();
      this.noTransformer();
      return { expr: { k: 'star', at: tok.at } };
    }
    if (this.isName() && this.isOp('.', this.peek()) && this.isOp('*', this.peek(2))) {
      const table = this.name('a name');
      this.i += 2;
      this.noTransformer();
      return { expr: { k: 'star', table, at: tok.at } };
    }
    if (this.isKw('COLUMNS') && this.isOp('(', this.peek())) throw this.err('COLUMNS(…) matchers are not in the analytics language');
    const expr = this.expr();
    const alias = this.alias();
    return alias === undefined ? { expr } : { expr, alias };
  }

  private noTransformer(): void {
    if (this.isKw('APPLY') || this.isKw('EXCEPT') || this.isKw('REPLACE')) throw this.err(`column transformers (${this.t.text.toUpperCase()}) are not in the analytics language`);
  }

  /** `AS name` (after AS any word is a name: `AS rows`) or a bare alias that is not a keyword. */
  private alias(): string | undefined {
    if (this.acceptKw('AS')) return this.anyName('a name after AS');
    if (this.isName()) return this.name('an alias');
    return undefined;
  }

  private anyName(what: string): string {
    const tok = this.t;
    if (tok.kind === 'ident' || tok.kind === 'qident') {
      this.i++;
      return tok.text;
    }
    throw this.unexpected(what);
  }

  // ── FROM ──────────────────────────────────────────────────────────────────────────────

  private from(): From {
    const base = this.links;
    let left: From = this.source();
    for (;;) {
      const tok = this.t;
      if (this.isOp(',') || this.isKw('ARRAY') || this.isKw('LEFT') || this.isKw('RIGHT') || this.isKw('FULL') || this.isKw('CROSS') || this.isKw('INNER') || this.isKw('JOIN')) this.link(tok.at);
      if (this.acceptOp(',')) {
        left = { k: 'join', kind: 'CROSS', left, right: this.source(), at: tok.at };
        continue;
      }
      if (this.isKw('ARRAY') || (this.isKw('LEFT') && this.isKw('ARRAY', this.peek()))) {
        const leftJoin = this.acceptKw('LEFT');
        this.expectKw('ARRAY');
        this.expectKw('JOIN');
        const items: { expr: Expr; alias?: string }[] = [];
        do {
          const expr = this.expr();
          const alias = this.alias();
          items.push(alias === undefined ? { expr } : { expr, alias });
        } while (this.acceptOp(','));
        left = { k: 'arrayJoin', leftJoin, left, items, at: tok.at };
        continue;
      }
      let kind: 'INNER' | 'LEFT' | 'RIGHT' | 'FULL' | 'CROSS' | undefined;
      if (this.isKw('JOIN')) kind = 'INNER';
      else if (this.acceptKw('INNER')) kind = 'INNER';
      else if (this.acceptKw('LEFT')) kind = 'LEFT';
      else if (this.acceptKw('RIGHT')) kind = 'RIGHT';
      else if (this.acceptKw('FULL')) kind = 'FULL';
      else if (this.acceptKw('CROSS')) kind = 'CROSS';
      if (kind === undefined) {
        if (this.isKw('GLOBAL') || this.isKw('ANY') || this.isKw('ALL') || this.isKw('ASOF') || this.isKw('SEMI') || this.isKw('ANTI') || this.isKw('PASTE')) throw this.unexpected('a join');
        this.links = base;
        return left;
      }
      if (kind !== 'INNER' && kind !== 'CROSS') this.acceptKw('OUTER');
      this.expectKw('JOIN');
      const right = this.source();
      if (kind === 'CROSS') {
        left = { k: 'join', kind, left, right, at: tok.at };
        continue;
      }
      if (this.acceptKw('ON')) left = { k: 'join', kind, left, right, on: this.expr(), at: tok.at };
      else if (this.acceptKw('USING')) {
        const paren = this.acceptOp('(');
        const using: string[] = [];
        do using.push(this.name('a column name'));
        while (this.acceptOp(','));
        if (paren) this.expectOp(')');
        left = { k: 'join', kind, left, right, using, at: tok.at };
      } else throw this.unexpected('ON or USING');
    }
  }

  private source(): TableRef | SubqueryRef | GeneratorRef {
    const tok = this.t;
    if (this.isOp('(')) {
      this.next();
      if (!this.isKw('SELECT') && !this.isKw('WITH') && !this.isOp('(')) throw this.unexpected('a subquery');
      const query = this.query();
      this.close();
      const alias = this.alias();
      return alias === undefined ? { k: 'subquery', query, at: tok.at } : { k: 'subquery', query, alias, at: tok.at };
    }
    if (!this.isName()) throw this.unexpected('a view, a CTE or a subquery');
    const name = this.name('a table');
    if (this.isOp('.')) {
      const rest = this.peek();
      const second = rest.kind === 'ident' || rest.kind === 'qident' ? `.${rest.text}` : '';
      throw this.err(`only the analytics views can be read; "${name}${second}" names another database`, tok.at, 'FORBIDDEN');
    }
    if (this.isOp('(')) {
      if (name !== 'numbers') throw this.err(`table function ${name}() is not allowed; only the analytics views (and numbers()) can be read`, tok.at, 'FORBIDDEN');
      this.next();
      const args: bigint[] = [this.count('numbers()')];
      if (this.acceptOp(',')) args.push(this.count('numbers()'));
      this.expectOp(')');
      const n = args[args.length - 1]!;
      if (n > MAX_GENERATED_ROWS) throw this.err(`numbers() generates at most ${MAX_GENERATED_ROWS} rows`, tok.at);
      const alias = this.alias();
      return alias === undefined ? { k: 'numbers', args, at: tok.at } : { k: 'numbers', args, alias, at: tok.at };
    }
    const alias = this.alias();
    return alias === undefined ? { k: 'table', name, at: tok.at } : { k: 'table', name, alias, at: tok.at };
  }

  private orderItems(): OrderItem[] {
    const out: OrderItem[] = [];
    do {
      const expr = this.expr();
      let desc = false;
      if (this.acceptKw('DESC') || this.acceptKw('DESCENDING')) desc = true;
      else if (this.acceptKw('ASC') || this.acceptKw('ASCENDING')) desc = false;
      const item: OrderItem = { expr, desc };
      if (this.acceptKw('NULLS')) {
        if (this.acceptKw('FIRST')) item.nulls = 'FIRST';
        else if (this.acceptKw('LAST')) item.nulls = 'LAST';
        else throw this.unexpected('FIRST or LAST');
      }
      if (this.isKw('WITH') && this.isKw('FILL', this.peek())) throw this.err('WITH FILL is not in the analytics language');
      out.push(item);
    } while (this.acceptOp(','));
    return out;
  }

  // ── expressions ───────────────────────────────────────────────────────────────────────

  expr(): Expr {
    const at = this.t.at;
    this.enter(at);
    try {
      // name -> body
      if (this.isName() && this.isOp('->', this.peek())) {
        const p = this.name('a parameter');
        this.next();
        return { k: 'lambda', params: [p], body: this.expr(), at };
      }
      // (a, b) -> body
      if (this.isOp('(')) {
        let j = 1;
        const params: string[] = [];
        for (;;) {
          const tok = this.peek(j);
          if (!this.isName(tok)) break;
          params.push(tok.text);
          const sep = this.peek(j + 1);
          if (this.isOp(')', sep)) {
            if (this.isOp('->', this.peek(j + 2))) {
              this.i += j + 3;
              return { k: 'lambda', params, body: this.expr(), at };
            }
            break;
          }
          if (!this.isOp(',', sep)) break;
          j += 2;
        }
      }
      return this.ternary();
    } finally {
      this.leave();
    }
  }

  private ternary(): Expr {
    const cond = this.or();
    if (!this.isOp('?')) return cond;
    this.next();
    const then = this.expr();
    this.expectOp(':');
    return { k: 'ternary', cond, then, else: this.expr(), at: cond.at };
  }

  private or(): Expr {
    const base = this.links;
    let left = this.and();
    while (this.acceptKw('OR')) {
      this.link(this.toks[this.i - 1]!.at);
      left = { k: 'binary', op: 'OR', left, right: this.and(), at: left.at };
    }
    this.links = base;
    return left;
  }

  private and(): Expr {
    const base = this.links;
    let left = this.not();
    while (this.acceptKw('AND')) {
      this.link(this.toks[this.i - 1]!.at);
      left = { k: 'binary', op: 'AND', left, right: this.not(), at: left.at };
    }
    this.links = base;
    return left;
  }

  private not(): Expr {
    const tok = this.t;
    if (this.isKw('NOT')) {
      this.next();
      this.enter(tok.at);
      const expr = this.not();
      this.leave();
      return { k: 'unary', op: 'NOT', expr, at: tok.at };
    }
    return this.nullBetween();
  }

  /** IS [NOT] NULL applies to all before it, BETWEEN too (its bounds are comparisons), as in ClickHouse. */
  private nullBetween(): Expr {
    const base = this.links;
    let e = this.compare();
    for (;;) {
      if (this.isKw('IS')) {
        this.link(this.t.at);
        this.next();
        const not = this.acceptKw('NOT');
        this.expectKw('NULL');
        e = { k: 'isNull', not, expr: e, at: e.at };
        continue;
      }
      let not = false;
      if (this.isKw('NOT') && this.isKw('BETWEEN', this.peek())) {
        this.next();
        not = true;
      }
      if (!this.isKw('BETWEEN')) {
        this.links = base;
        return e;
      }
      this.link(this.next().at);
      const low = this.compare();
      this.expectKw('AND');
      e = { k: 'between', not, expr: e, low, high: this.compare(), at: e.at };
    }
  }

  private compare(): Expr {
    const base = this.links;
    let left = this.additive();
    for (;;) {
      const tok = this.t;
      if (tok.kind === 'op' && ['=', '==', '!=', '<>', '<', '>', '<=', '>='].includes(tok.text)) {
        this.link(tok.at);
        this.next();
        const op = tok.text === '==' ? '=' : tok.text === '<>' ? '!=' : (tok.text as '=' | '!=' | '<' | '>' | '<=' | '>=');
        left = { k: 'binary', op, left, right: this.additive(), at: left.at };
        continue;
      }
      let not = false;
      if (this.isKw('NOT') && (this.isKw('LIKE', this.peek()) || this.isKw('ILIKE', this.peek()) || this.isKw('IN', this.peek()))) {
        this.next();
        not = true;
      } else if (this.isKw('GLOBAL')) throw this.err('GLOBAL IN is not in the analytics language');
      if (this.isKw('LIKE') || this.isKw('ILIKE') || this.isKw('IN')) this.link(this.t.at);
      if (this.acceptKw('LIKE')) left = { k: 'binary', op: not ? 'NOT LIKE' : 'LIKE', left, right: this.additive(), at: left.at };
      else if (this.acceptKw('ILIKE')) left = { k: 'binary', op: not ? 'NOT ILIKE' : 'ILIKE', left, right: this.additive(), at: left.at };
      else if (this.acceptKw('IN')) left = { k: 'in', not, expr: left, rhs: this.inRhs(), at: left.at };
      else {
        this.links = base;
        return left;
      }
    }
  }

  private inRhs(): Expr | { k: 'inTable'; name: string; at: number } {
    const tok = this.t;
    if (this.isName() && !this.isOp('(', this.peek())) {
      if (this.isOp('.', this.peek())) {
        const rest = this.peek(2);
        throw this.err(`only the analytics views can be read; "IN ${tok.text}.${rest.text}" names another database`, tok.at, 'FORBIDDEN');
      }
      this.next();
      return { k: 'inTable', name: tok.text, at: tok.at };
    }
    return this.additive();
  }

  private additive(): Expr {
    const base = this.links;
    let left = this.mult();
    for (;;) {
      if (this.isOp('+') || this.isOp('-') || this.isOp('||')) this.link(this.t.at);
      if (this.acceptOp('+')) left = { k: 'binary', op: '+', left, right: this.mult(), at: left.at };
      else if (this.acceptOp('-')) left = { k: 'binary', op: '-', left, right: this.mult(), at: left.at };
      else if (this.acceptOp('||')) left = { k: 'binary', op: '||', left, right: this.mult(), at: left.at };
      else {
        this.links = base;
        return left;
      }
    }
  }

  private mult(): Expr {
    const base = this.links;
    let left = this.unary();
    for (;;) {
      const tok = this.t;
      if (tok.kind === 'op' && (tok.text === '*' || tok.text === '/' || tok.text === '%')) {
        this.link(tok.at);
        this.next();
        left = { k: 'binary', op: tok.text, left, right: this.unary(), at: left.at };
      } else {
        this.links = base;
        return left;
      }
    }
  }

  private unary(): Expr {
    const tok = this.t;
    if (this.isOp('-')) {
      const num = this.peek();
      if (num.kind === 'int' || num.kind === 'float') {
        this.i += 2;
        return this.postfix(this.number(num, tok.at));
      }
      this.next();
      this.enter(tok.at);
      const expr = this.unary();
      this.leave();
      return { k: 'unary', op: '-', expr, at: tok.at };
    }
    return this.postfix(this.primary());
  }

  /** A number literal; `minusAt` is the position of a '-' right before it (a negative literal). */
  private number(tok: Token, minusAt?: number): Expr {
    const at = minusAt ?? tok.at;
    if (tok.kind === 'int') {
      const v = BigInt(tok.text);
      return { k: 'int', value: minusAt !== undefined ? -v : v, at };
    }
    const v = Number(tok.text);
    if (!Number.isFinite(v)) throw this.err(`the number ${tok.text} is out of range`, tok.at);
    return { k: 'float', value: minusAt !== undefined ? -v : v, at };
  }

  private postfix(e: Expr): Expr {
    const base = this.links;
    for (;;) {
      const tok = this.t;
      if (this.isOp('[') || this.isOp('::') || (this.isOp('.') && this.peek().kind === 'int')) this.link(tok.at);
      if (this.isOp('[')) {
        this.next();
        const index = this.expr();
        this.expectOp(']');
        e = { k: 'index', expr: e, index, at: e.at };
      } else if (this.isOp('.') && this.peek().kind === 'int') {
        this.next();
        const n = this.next();
        e = { k: 'tupleElement', expr: e, index: BigInt(n.text), at: e.at };
      } else if (this.isOp('::')) {
        const before = this.toks[this.i - 1]!;
        this.next();
        const type = this.type();
        if ((before.kind === 'op' && (before.text === ')' || before.text === ']')) && LITERAL_KINDS.has(e.k)) {
          throw this.err('"::" after a parenthesized, array or tuple literal casts its text in ClickHouse; write CAST(… AS Type)', tok.at);
        }
        // ClickHouse casts a number literal's text: 1.50::String is '1.50', 0x10::String '0x10'.
        if ((e.k === 'int' || e.k === 'float') && (before.kind === 'int' || before.kind === 'float')) e = { k: 'string', value: this.src.slice(e.at, before.end), at: e.at };
        e = { k: 'cast', expr: e, type, at: e.at };
      } else if (this.isOp('.')) {
        throw this.err('Syntax error: "." here is not in the analytics language (names are name.name, tuple elements .N)', tok.at);
      } else {
        this.links = base;
        return e;
      }
    }
  }

  private primary(): Expr {
    const tok = this.t;
    switch (tok.kind) {
      case 'int':
      case 'float':
        this.next();
        return this.number(tok);
      case 'string':
        this.next();
        return { k: 'string', value: tok.text, at: tok.at };
      case 'eof':
        throw this.unexpected('an expression');
      case 'op':
        if (tok.text === '(') return this.paren();
        if (tok.text === '[') {
          this.next();
          const items: Expr[] = [];
          if (!this.isOp(']')) {
            do items.push(this.expr());
            while (this.acceptOp(','));
          }
          this.expectOp(']');
          return { k: 'array', items, at: tok.at };
        }
        if (tok.text === '*') throw this.err('"*" is only allowed as a whole select item or in count(*)', tok.at);
        throw this.unexpected('an expression');
      case 'qident':
        return this.identOrCall();
      case 'ident': {
        const w = tok.text.toUpperCase();
        if (w === 'NULL') {
          this.next();
          return { k: 'null', at: tok.at };
        }
        if (w === 'TRUE' || w === 'FALSE') {
          this.next();
          return { k: 'bool', value: w === 'TRUE', at: tok.at };
        }
        if (w === 'CASE') return this.caseExpr();
        if (w === 'CAST' && this.isOp('(', this.peek())) return this.castExpr();
        if (w === 'INTERVAL') {
          this.next();
          const value = this.additive();
          const u = this.t;
          const unit = u.kind === 'ident' ? UNITS.find((x) => x === u.text.toUpperCase()) : undefined;
          if (!unit) throw this.unexpected(`an interval unit (${UNITS.join(', ')})`);
          this.next();
          return { k: 'interval', value, unit, at: tok.at };
        }
        if (w === 'NOT') {
          // NOT inside an operand (`1 + NOT 0 = 1`, `not(1) + 1`) takes everything down to its own
          // priority, as in ClickHouse: NOT (0 = 1), NOT ((1) + 1).
          this.next();
          this.enter(tok.at);
          const expr = this.nullBetween();
          this.leave();
          return { k: 'unary', op: 'NOT', expr, at: tok.at };
        }
        if (w === 'EXISTS') throw this.err('EXISTS is not in the analytics language; use IN or count()', tok.at);
        if (RESERVED.has(w) && !this.isOp('(', this.peek())) throw this.unexpected('an expression');
        return this.identOrCall();
      }
    }
  }

  /** `(` … `)`: a subquery, a tuple or a parenthesized expression. */
  private paren(): Expr {
    const open = this.expectOp('(');
    if (this.isKw('SELECT') || this.isKw('WITH')) {
      const query = this.query();
      this.close();
      return { k: 'subquery', query, at: open.at };
    }
    // `((SELECT …) UNION ALL (SELECT …))` is a subquery, `((SELECT 1) + 1)` an expression:
    // try the query first, and read an expression if that fails.
    let j = 0;
    while (this.isOp('(', this.peek(j))) j++;
    if (j > 0 && (this.isKw('SELECT', this.peek(j)) || this.isKw('WITH', this.peek(j)))) {
      const start = this.i;
      const depth = this.depth;
      const links = this.links;
      try {
        const query = this.query();
        if (this.isOp(')')) {
          this.next();
          return { k: 'subquery', query, at: open.at };
        }
      } catch (err) {
        if (!(err instanceof CompileError) || err.code !== 'INVALID_QUERY' || this.overRetried()) throw err;
      }
      this.retried += Math.max(this.i - start, 1);
      if (this.overRetried()) {
        throw this.err('the query nests parenthesized subqueries inside expressions too deeply to parse in bounded time (each level is read twice); name the subqueries with WITH', open.at);
      }
      this.i = start;
      this.depth = depth;
      this.links = links;
    }
    if (this.isOp(')')) throw this.err('an empty tuple is written tuple()', open.at);
    const first = this.expr();
    if (this.acceptOp(')')) return first;
    const items = [first];
    while (this.acceptOp(',')) {
      if (this.isOp(')')) break;
      items.push(this.expr());
    }
    this.expectOp(')');
    return { k: 'tuple', items, at: open.at };
  }

  private caseExpr(): Expr {
    const at = this.next().at;
    const operand = this.isKw('WHEN') ? undefined : this.expr();
    const whens: { when: Expr; then: Expr }[] = [];
    while (this.acceptKw('WHEN')) {
      const when = this.expr();
      this.expectKw('THEN');
      whens.push({ when, then: this.expr() });
    }
    if (whens.length === 0) throw this.unexpected('WHEN');
    const e: Expr = { k: 'case', whens, at };
    if (operand) e.operand = operand;
    if (this.acceptKw('ELSE')) e.else = this.expr();
    this.expectKw('END');
    return e;
  }

  private castExpr(): Expr {
    const at = this.next().at;
    this.expectOp('(');
    const expr = this.expr();
    let type: TypeName;
    if (this.acceptKw('AS')) type = this.type();
    else {
      this.expectOp(',');
      const s = this.t;
      if (s.kind !== 'string') throw this.unexpected('a type name as a string');
      this.next();
      type = parseTypeText(s.text, this.src, s.at);
    }
    this.expectOp(')');
    return { k: 'cast', expr, type, at };
  }

  private identOrCall(): Expr {
    const tok = this.t;
    const first = this.next().text;
    if (this.isOp('(') && tok.kind === 'ident') return this.call(first, tok.at);
    const parts = [first];
    while (this.isOp('.') && (this.peek().kind === 'ident' || this.peek().kind === 'qident')) {
      this.next();
      parts.push(this.next().text);
    }
    if (this.isOp('.') && this.isOp('*', this.peek())) throw this.err('"name.*" is only allowed as a whole select item', tok.at);
    if (this.isOp('(')) throw this.err(`"${parts.join('.')}(": qualified function names are not in the analytics language`, tok.at);
    return { k: 'ident', parts, at: tok.at };
  }

  private call(name: string, at: number): Expr {
    let args = this.args(name);
    let distinct = args.distinct;
    let params: Expr[] | undefined;
    if (this.isOp('(')) {
      params = args.list;
      if (distinct) throw this.err('DISTINCT goes in the argument list, not the parameter list', at);
      args = this.args(name);
      distinct = args.distinct;
    }
    const e: Expr = { k: 'call', name, args: args.list, distinct, at };
    if (params) e.params = params;
    if (this.isKw('OVER')) {
      this.next();
      if (!this.isOp('(')) throw this.err('named windows are not in the analytics language; write OVER (…)');
      this.next();
      e.over = this.window();
      this.expectOp(')');
    }
    return e;
  }

  private args(name: string): { list: Expr[]; distinct: boolean } {
    this.expectOp('(');
    const distinct = this.acceptKw('DISTINCT');
    const list: Expr[] = [];
    if (this.isOp('*') && this.isOp(')', this.peek()) && !distinct) {
      const star = this.next();
      if (name.toLowerCase() !== 'count') throw this.err(`${name}(*) is not in the analytics language; only count(*)`, star.at);
      this.next();
      return { list: [{ k: 'allColumns', at: star.at }], distinct };
    }
    if (!this.isOp(')')) {
      do list.push(this.expr());
      while (this.acceptOp(','));
    }
    this.expectOp(')');
    return { list, distinct };
  }

  private window(): WindowSpec {
    const w: WindowSpec = { partitionBy: [], orderBy: [] };
    if (this.isKw('PARTITION')) {
      this.next();
      this.expectKw('BY');
      do w.partitionBy.push(this.expr());
      while (this.acceptOp(','));
    }
    if (this.isKw('ORDER')) {
      this.next();
      this.expectKw('BY');
      w.orderBy = this.orderItems();
    }
    if (this.isKw('ROWS') || this.isKw('RANGE')) {
      const unit = this.next().text.toUpperCase() as 'ROWS' | 'RANGE';
      if (this.acceptKw('BETWEEN')) {
        const start = this.bound();
        this.expectKw('AND');
        w.frame = { unit, start, end: this.bound() };
      } else w.frame = { unit, start: this.bound() };
    }
    return w;
  }

  private bound(): FrameBound {
    if (this.acceptKw('UNBOUNDED')) {
      if (this.acceptKw('PRECEDING')) return { k: 'unbounded', dir: 'PRECEDING' };
      this.expectKw('FOLLOWING');
      return { k: 'unbounded', dir: 'FOLLOWING' };
    }
    if (this.acceptKw('CURRENT')) {
      this.expectKw('ROW');
      return { k: 'current' };
    }
    const n = this.additive();
    if (this.acceptKw('PRECEDING')) return { k: 'offset', n, dir: 'PRECEDING' };
    this.expectKw('FOLLOWING');
    return { k: 'offset', n, dir: 'FOLLOWING' };
  }

  // ── types ─────────────────────────────────────────────────────────────────────────────

  type(): TypeName {
    const tok = this.t;
    if (tok.kind !== 'ident' && tok.kind !== 'qident') throw this.unexpected('a type name');
    const name = TYPE_NAMES.get(tok.text.toLowerCase());
    if (!name) throw this.err(`type ${tok.text} is not in the analytics language`, tok.at);
    this.next();
    this.enter(tok.at);
    try {
      const args: TypeArg[] = [];
      const hasArgs = this.isOp('(');
      if (hasArgs) {
        this.next();
        if (!this.isOp(')')) {
          do args.push(this.typeArg(name));
          while (this.acceptOp(','));
        }
        this.expectOp(')');
      }
      checkTypeArgs(name, args, hasArgs, (m) => this.err(`${name}: ${m}`, tok.at));
      return { name, args };
    } finally {
      this.leave();
    }
  }

  private typeArg(outer: string): TypeArg {
    const tok = this.t;
    if (outer === 'Enum8' || outer === 'Enum16') {
      if (tok.kind !== 'string') throw this.unexpected("'name' = value");
      this.next();
      this.expectOp('=');
      const neg = this.acceptOp('-');
      const v = this.t;
      if (v.kind !== 'int') throw this.unexpected('an integer');
      this.next();
      return { k: 'enum', name: tok.text, value: neg ? -BigInt(v.text) : BigInt(v.text) };
    }
    if (tok.kind === 'int') {
      this.next();
      return { k: 'int', value: BigInt(tok.text) };
    }
    if (tok.kind === 'string') {
      this.next();
      return { k: 'string', value: tok.text };
    }
    if (outer === 'Tuple' && (tok.kind === 'ident' || tok.kind === 'qident') && (this.peek().kind === 'ident' || this.peek().kind === 'qident')) {
      this.next();
      return { k: 'field', name: tok.text, type: this.type() };
    }
    return { k: 'type', type: this.type() };
  }
}

const isType = (a: TypeArg | undefined): boolean => a?.k === 'type';
const isInt = (a: TypeArg | undefined, max: bigint): boolean => a?.k === 'int' && a.value <= max;

/** The arguments each parametric type takes. */
function checkTypeArgs(name: string, args: TypeArg[], hasArgs: boolean, fail: (m: string) => CompileError): void {
  const n = args.length;
  if (SIMPLE_TYPES.includes(name) || name === 'DateTime') {
    if (name === 'DateTime' && hasArgs) {
      if (n !== 1 || args[0]!.k !== 'string') throw fail("takes one time zone string: DateTime('UTC')");
      return;
    }
    if (hasArgs) throw fail('takes no arguments');
    return;
  }
  if (WRAPPER_TYPES.includes(name)) {
    if (n !== 1 || !isType(args[0])) throw fail('takes one type');
    return;
  }
  switch (name) {
    case 'DateTime64':
      if (n < 1 || n > 2 || !isInt(args[0], 9n) || (n === 2 && args[1]!.k !== 'string')) throw fail("takes a precision 0–9 and an optional time zone: DateTime64(3, 'UTC')");
      return;
    case 'Decimal':
      if (n < 1 || n > 2 || !isInt(args[0], 76n) || (n === 2 && !isInt(args[1], 76n))) throw fail('takes a precision and a scale: Decimal(P, S)');
      return;
    case 'Decimal32':
    case 'Decimal64':
    case 'Decimal128':
    case 'Decimal256':
      if (n !== 1 || !isInt(args[0], 76n)) throw fail('takes a scale');
      return;
    case 'FixedString':
      if (n !== 1 || !isInt(args[0], 1_000_000n) || (args[0] as { value: bigint }).value === 0n) throw fail('takes a length 1–1,000,000');
      return;
    case 'Tuple':
      if (n === 0 || !args.every((a) => a.k === 'type' || a.k === 'field')) throw fail('takes types, optionally named');
      return;
    case 'Map':
      if (n !== 2 || !isType(args[0]) || !isType(args[1])) throw fail('takes a key type and a value type');
      return;
    case 'Enum8':
    case 'Enum16':
      if (n === 0 || !args.every((a) => a.k === 'enum')) throw fail("takes 'name' = value pairs");
      return;
  }
  throw fail('is not in the analytics language');
}
