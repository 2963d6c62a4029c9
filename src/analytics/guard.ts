/**
 * The guard of analytics queries: decides with ClickHouse's own parser, never with
 * patterns over the text.
 *
 * 1. `formatQuerySingleLine` with the text bound as a query parameter: the engine refuses
 *    more than one statement and returns the one statement, normalized (comments gone,
 *    `x::T` as CAST). Only this normalized text is inspected and executed.
 * 2. `EXPLAIN AST` of the normalized text (parse only, nothing runs), read by ast.ts, and
 *    checked node by node against policy.ts:
 *      - the root is a SELECT (or WITH … SELECT, UNION, INTERSECT, EXCEPT) with no
 *        INTO OUTFILE, FORMAT or SETTINGS; no SETTINGS anywhere inside either (the
 *        organization scope travels in a setting);
 *      - only known SELECT node types;
 *      - table names are unqualified (no `db.table`); they resolve in the analytics
 *        database, which holds only the views, or to the query's own WITH names;
 *      - table functions only from the generator allowlist; no denied function anywhere;
 *      - `x IN db.table` is refused like a qualified table.
 * Accepted texts are remembered (LRU), so a repeated query skips the two parser calls.
 */
import { ApiError } from '../errors.js';
import { AstFormatError, nodeName, parseExplainAst, walk, type AstNode } from './ast.js';
import { toEngineError, cleanReason, type EngineError } from './engine-error.js';
import { ALLOWED_NODE_TYPES, ALLOWED_TABLE_FUNCTIONS, IN_FUNCTIONS, isDeniedFunction } from './policy.js';

export const MAX_QUERY_CHARS = 20_480;

export interface QueryParser {
  /** The engine's formatQuerySingleLine of `text`, bound as a parameter (never as SQL). */
  normalize(text: string): Promise<string>;
  /** The engine's `EXPLAIN AST <sql>` output. */
  explainAst(sql: string): Promise<string>;
}

const KIND_NAMES: Record<string, string> = {
  InsertQuery: 'INSERT', AlterQuery: 'ALTER', CreateQuery: 'CREATE', DropQuery: 'DROP', RenameQuery: 'RENAME',
  SetQuery: 'SET', KillQueryQuery: 'KILL', OptimizeQuery: 'OPTIMIZE', Explain: 'EXPLAIN', ShowTables: 'SHOW',
  DescribeQuery: 'DESCRIBE', ExistsTableQuery: 'EXISTS', UseQuery: 'USE', TruncateQuery: 'TRUNCATE',
};

export class QueryGuard {
  private readonly accepted = new Map<string, string>();

  constructor(
    private readonly parser: QueryParser,
    private readonly internalNames: readonly string[],
    private readonly cacheSize = 1_000,
  ) {}

  /** The normalized statement to execute, or an ApiError (400/403) naming the problem. */
  async check(text: string): Promise<string> {
    const hit = this.accepted.get(text);
    if (hit !== undefined) {
      this.accepted.delete(text);
      this.accepted.set(text, hit);
      return hit;
    }
    const normalized = await this.normalize(text);
    let astText: string;
    try {
      astText = await this.parser.explainAst(normalized);
    } catch (err) {
      throw this.parseError(toEngineError(err));
    }
    let root: AstNode;
    try {
      root = parseExplainAst(astText);
    } catch (err) {
      if (err instanceof AstFormatError) throw new ApiError('INVALID_QUERY', 'the query could not be analysed (identifiers may not contain line breaks or control characters)');
      throw err;
    }
    checkTree(root, normalized);
    this.accepted.set(text, normalized);
    if (this.accepted.size > this.cacheSize) this.accepted.delete(this.accepted.keys().next().value!);
    return normalized;
  }

  private async normalize(text: string): Promise<string> {
    let out: string;
    try {
      out = await this.parser.normalize(text);
    } catch (err) {
      throw this.parseError(toEngineError(err));
    }
    out = out.replace(/\n$/, '');
    if (out.trim() === '') throw new ApiError('INVALID_QUERY', 'the query is empty (only comments or whitespace)');
    return out;
  }

  private parseError(e: EngineError): ApiError {
    if (/multi-statements are not allowed/i.test(e.reason)) {
      return new ApiError('MULTIPLE_STATEMENTS', 'exactly one statement is allowed; the query contains several');
    }
    if (e.codeName === 'UNKNOWN_QUERY_PARAMETER') {
      return new ApiError('INVALID_QUERY', 'query parameters ({name:Type}) are not supported; write the values in the query');
    }
    if (e.codeName === 'SYNTAX_ERROR' || e.codeName.startsWith('CANNOT_PARSE') || e.codeName === 'TOO_DEEP_AST' || e.codeName === 'TOO_BIG_AST' || e.codeName === 'QUERY_IS_TOO_LARGE') {
      return new ApiError('INVALID_QUERY', cleanReason(e.reason, this.internalNames));
    }
    return new ApiError('INVALID_QUERY', `the query could not be parsed (${e.codeName || 'unknown error'})`);
  }
}

/** Applies the policy to a parsed statement; throws the ApiError of the first violation. */
export function checkTree(root: AstNode, normalized: string): void {
  if (root.type !== 'SelectWithUnionQuery') {
    const kind = KIND_NAMES[root.type] ?? (/^[A-Za-z]+/.exec(normalized)?.[0]?.toUpperCase() ?? root.type);
    throw new ApiError('NOT_A_SELECT', `only SELECT or WITH … SELECT is allowed, not ${kind}`);
  }
  for (const extra of root.children.slice(1)) {
    if (extra.type === 'Literal') throw new ApiError('CLAUSE_NOT_ALLOWED', 'INTO OUTFILE is not allowed');
    if (extra.type === 'Identifier') throw new ApiError('CLAUSE_NOT_ALLOWED', 'a FORMAT clause is not allowed: results are always JSON');
    if (extra.type === 'Set') throw new ApiError('CLAUSE_NOT_ALLOWED', 'a SETTINGS clause is not allowed');
    throw new ApiError('CLAUSE_NOT_ALLOWED', `a ${extra.type} clause is not allowed`);
  }
  for (const { node, parent } of walk(root)) {
    if (node.type === 'Set') throw new ApiError('CLAUSE_NOT_ALLOWED', 'a SETTINGS clause is not allowed, in subqueries either');
    if (!ALLOWED_NODE_TYPES.has(node.type)) {
      throw new ApiError('FORBIDDEN', `unsupported construct in an analytics query: ${node.type}`);
    }
    if (node.type === 'TableIdentifier') {
      const name = nodeName(node);
      if (name.includes('.')) throw new ApiError('FORBIDDEN', `only the analytics views can be read; "${name}" names another database`);
    } else if (node.type === 'Function') {
      const name = nodeName(node);
      if (parent?.type === 'TableExpression') {
        if (!ALLOWED_TABLE_FUNCTIONS.has(name.toLowerCase())) throw new ApiError('FORBIDDEN', `table function ${name}() is not allowed; only the analytics views can be read`);
      } else if (isDeniedFunction(name)) {
        throw new ApiError('FORBIDDEN', `function ${name}() is not allowed in analytics queries`);
      }
      if (IN_FUNCTIONS.has(name.toLowerCase())) {
        const rhs = node.children[0]?.children[1];
        if (rhs?.type === 'Identifier' && nodeName(rhs).includes('.')) {
          throw new ApiError('FORBIDDEN', `only the analytics views can be read; "IN ${nodeName(rhs)}" names another database`);
        }
      }
    }
  }
}
