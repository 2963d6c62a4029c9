/**
 * The analytics language's own syntax tree (what grammar.ts builds, resolve.ts checks and
 * printer.ts prints). `at` is the offset in the query text of the node's first token, for
 * error positions; it is not part of a node's meaning (tests compare trees without it).
 */
export type Query = Select | SetQuery;

export interface SetQuery {
  k: 'set';
  /** Two or more SELECTs (or parenthesized queries); ops[i] joins selects[i] and selects[i + 1]. */
  selects: Query[];
  ops: ('UNION ALL' | 'UNION DISTINCT')[];
  at: number;
}

export interface Cte {
  name: string;
  query: Query;
  at: number;
}

export interface WithAlias {
  name: string;
  expr: Expr;
  at: number;
}

export interface SelectItem {
  expr: Expr | Star;
  alias?: string;
}

export interface Star {
  k: 'star';
  /** `t.*`: the source's name or alias. */
  table?: string;
  at: number;
}

export interface OrderItem {
  expr: Expr;
  desc: boolean;
  nulls?: 'FIRST' | 'LAST';
}

export interface Select {
  k: 'select';
  ctes: Cte[];
  withAliases: WithAlias[];
  distinct: boolean;
  items: SelectItem[];
  from?: From;
  where?: Expr;
  groupBy: Expr[];
  having?: Expr;
  orderBy: OrderItem[];
  limitBy?: { limit: bigint; offset?: bigint; by: Expr[] };
  limit?: { limit: bigint; offset?: bigint };
  at: number;
}

export type From = TableRef | SubqueryRef | GeneratorRef | Join | ArrayJoin;

/** A view or a CTE, by name. */
export interface TableRef {
  k: 'table';
  name: string;
  alias?: string;
  at: number;
}

export interface SubqueryRef {
  k: 'subquery';
  query: Query;
  alias?: string;
  at: number;
}

/** `numbers(n)` / `numbers(offset, n)`: the one row generator, with literal, bounded arguments. */
export interface GeneratorRef {
  k: 'numbers';
  args: bigint[];
  alias?: string;
  at: number;
}

export type JoinKind = 'INNER' | 'LEFT' | 'RIGHT' | 'FULL' | 'CROSS';

export interface Join {
  k: 'join';
  kind: JoinKind;
  left: From;
  right: TableRef | SubqueryRef | GeneratorRef;
  on?: Expr;
  using?: string[];
  at: number;
}

export interface ArrayJoin {
  k: 'arrayJoin';
  leftJoin: boolean;
  left: From;
  items: { expr: Expr; alias?: string }[];
  at: number;
}

export interface TypeName {
  name: string;
  args: TypeArg[];
}
export type TypeArg =
  | { k: 'type'; type: TypeName }
  | { k: 'int'; value: bigint }
  | { k: 'string'; value: string }
  | { k: 'enum'; name: string; value: bigint }
  | { k: 'field'; name: string; type: TypeName };

export type IntervalUnit = 'NANOSECOND' | 'MICROSECOND' | 'MILLISECOND' | 'SECOND' | 'MINUTE' | 'HOUR' | 'DAY' | 'WEEK' | 'MONTH' | 'QUARTER' | 'YEAR';

export type FrameBound =
  | { k: 'unbounded'; dir: 'PRECEDING' | 'FOLLOWING' }
  | { k: 'current' }
  | { k: 'offset'; n: Expr; dir: 'PRECEDING' | 'FOLLOWING' };

export interface WindowSpec {
  partitionBy: Expr[];
  orderBy: OrderItem[];
  frame?: { unit: 'ROWS' | 'RANGE'; start: FrameBound; end?: FrameBound };
}

export type BinaryOp = '*' | '/' | '%' | '+' | '-' | '||' | '=' | '!=' | '<' | '>' | '<=' | '>=' | 'LIKE' | 'NOT LIKE' | 'ILIKE' | 'NOT ILIKE' | 'AND' | 'OR';

export type Expr =
  | { k: 'int'; value: bigint; at: number }
  | { k: 'float'; value: number; at: number }
  | { k: 'string'; value: string; at: number }
  | { k: 'bool'; value: boolean; at: number }
  | { k: 'null'; at: number }
  | { k: 'array'; items: Expr[]; at: number }
  | { k: 'tuple'; items: Expr[]; at: number }
  | { k: 'interval'; value: Expr; unit: IntervalUnit; at: number }
  /** A column, alias, lambda parameter or JSON subcolumn: `a`, `t.a`, `data.x.y`. */
  | { k: 'ident'; parts: string[]; at: number }
  | { k: 'call'; name: string; params?: Expr[]; args: Expr[]; distinct: boolean; over?: WindowSpec; at: number }
  /** `count(*)`'s argument. */
  | { k: 'allColumns'; at: number }
  | { k: 'lambda'; params: string[]; body: Expr; at: number }
  | { k: 'unary'; op: '-' | 'NOT'; expr: Expr; at: number }
  | { k: 'binary'; op: BinaryOp; left: Expr; right: Expr; at: number }
  | { k: 'in'; not: boolean; expr: Expr; rhs: Expr | { k: 'inTable'; name: string; at: number }; at: number }
  | { k: 'between'; not: boolean; expr: Expr; low: Expr; high: Expr; at: number }
  | { k: 'isNull'; not: boolean; expr: Expr; at: number }
  | { k: 'ternary'; cond: Expr; then: Expr; else: Expr; at: number }
  | { k: 'case'; operand?: Expr; whens: { when: Expr; then: Expr }[]; else?: Expr; at: number }
  | { k: 'cast'; expr: Expr; type: TypeName; at: number }
  | { k: 'index'; expr: Expr; index: Expr; at: number }
  | { k: 'tupleElement'; expr: Expr; index: bigint; at: number }
  | { k: 'subquery'; query: Query; at: number };

export type ExprOf<K extends Expr['k']> = Extract<Expr, { k: K }>;
