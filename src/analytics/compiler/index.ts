/**
 * The analytics query compiler: the caller's text → tokens → the project's AST (grammar.ts)
 * → names resolved against the views, the query's CTEs and aliases, functions checked against
 * the allowlist (resolve.ts) → the SQL the engine runs, printed with the caller's scope
 * (printer.ts). Only printed text ever reaches the engine.
 *
 * Compiled trees are remembered by text (LRU): a repeated query is only printed again, for
 * the caller at hand (the tree holds no scope). Refusals are remembered too: a refused text
 * sent again is refused without compiling it again. What is remembered is bounded by its
 * texts' length as well as their number (a tree is about 75 bytes of memory per character of
 * its text: an array literal of 20 KB makes one of 1.5 MB), and a refusal is kept without
 * the stack it was thrown from (which holds the parser's frames: 1.4 MB for a 20 KB text
 * refused at the nesting limit).
 */
import type { Query } from './ast.js';
import { parse } from './grammar.js';
import { Printer } from './printer.js';
import { resolve, type ViewSchema } from './resolve.js';
import { CompileError } from './errors.js';
import type { Mode } from '../../shared/mode.js';

export { CompileError } from './errors.js';
export type { ViewSchema } from './resolve.js';

export interface Compiled {
  ast: Query;
  /** References that read a view (the printer scopes each). */
  viewRefs: Set<object>;
  /** Calls printed with the allowlist's spelling. */
  callNames: Map<object, string>;
}

export interface Scope {
  orgId: string;
  mode: Mode;
}

/** Parses and checks one query; throws a CompileError naming the problem and its position. */
export function compile(text: string, views: readonly ViewSchema[]): Compiled {
  try {
    const ast = parse(text);
    const { viewRefs, callNames } = resolve(ast, views, text);
    // Printed once here too, so a tree the printer cannot handle is refused now, not at run time.
    new Printer().query(ast);
    return { ast, viewRefs, callNames };
  } catch (err) {
    // The parser bounds the depth of the tree; this is the last resort if that bound is too high.
    if (err instanceof RangeError) throw new CompileError('INVALID_QUERY', 'the query is nested too deeply', text, 0);
    throw err;
  }
}

/** The SQL for the engine: the compiled query with every view read scoped to `scope`. */
export function printScoped(c: Compiled, scope: Scope, analyticsDb: string): string {
  return new Printer({ analyticsDb, orgId: scope.orgId, live: scope.mode === 'live', viewRefs: c.viewRefs, callNames: c.callNames }).query(c.ast);
}

/** The most characters of query text whose outcomes are remembered at once (with their trees: about 75 MB at most). */
export const CACHED_CHARS_MAX = 1_000_000;

export class QueryCompiler {
  /** Outcomes by text: the tree, or the refusal (a refused text sent again is not compiled again). */
  private readonly cache = new Map<string, Compiled | CompileError>();
  /** The characters of the texts remembered. */
  private chars = 0;

  constructor(
    private readonly views: readonly ViewSchema[],
    private readonly analyticsDb: string,
    private readonly cacheSize = 1_000,
    private readonly cachedCharsMax = CACHED_CHARS_MAX,
  ) {}

  /** How many texts, and how many of their characters, are remembered. */
  get remembered(): { texts: number; chars: number } {
    return { texts: this.cache.size, chars: this.chars };
  }

  /** The statement to run for `scope`, or a CompileError. */
  compile(text: string, scope: Scope): string {
    return this.print(this.cached(text) ?? this.compileNew(text), scope);
  }

  /** The outcome of compiling `text` if it is remembered (an LRU of `cacheSize` texts), else undefined. */
  cached(text: string): Compiled | CompileError | undefined {
    const c = this.cache.get(text);
    if (c) {
      this.cache.delete(text);
      this.cache.set(text, c);
    }
    return c;
  }

  /** Compiles `text` (the work the compile gate meters) and remembers the outcome, accepted or refused. */
  compileNew(text: string): Compiled | CompileError {
    let c: Compiled | CompileError;
    try {
      c = compile(text, this.views);
    } catch (err) {
      if (!(err instanceof CompileError)) throw err;
      // Its stack as text only: the captured frames (the parser's, with their receivers) would be kept with it.
      Object.defineProperty(err, 'stack', { value: `${err.name}: ${err.message}`, writable: true, configurable: true });
      c = err;
    }
    if (this.cache.delete(text)) this.chars -= text.length;
    this.cache.set(text, c);
    this.chars += text.length;
    for (const [old] of this.cache) {
      if (this.cache.size <= this.cacheSize && this.chars <= this.cachedCharsMax) break;
      this.cache.delete(old);
      this.chars -= old.length;
    }
    return c;
  }

  /** The statement for `scope` of a compiled text; a refusal is thrown. */
  print(c: Compiled | CompileError, scope: Scope): string {
    if (c instanceof CompileError) throw c;
    return printScoped(c, scope, this.analyticsDb);
  }
}
