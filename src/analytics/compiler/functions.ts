/**
 * TEMPORARY PLACEHOLDER — the function allowlist catalogue is written by another helper
 * (branch of /work/wt-catalog) and replaces this file at merge. It implements the agreed
 * interface with just the functions the compiler's own tests and the service's metadata query
 * need, so this branch compiles and its tests run.
 */
export type ArgKind = 'any' | 'lambda' | 'constant';
export interface FunctionSpec {
  name: string;
  kind: 'scalar' | 'aggregate' | 'window' | 'higher-order';
  minArgs: number;
  maxArgs: number;
  lambdaArgs?: number[];
  params?: { min: number; max: number };
  constantArgs?: number[];
  maxConstant?: Record<number, number>;
}

const S = (name: string, minArgs: number, maxArgs: number, extra: Partial<FunctionSpec> = {}): FunctionSpec => ({ name, kind: 'scalar', minArgs, maxArgs, ...extra });
const A = (name: string, minArgs: number, maxArgs: number, extra: Partial<FunctionSpec> = {}): FunctionSpec => ({ name, kind: 'aggregate', minArgs, maxArgs, ...extra });
const W = (name: string, minArgs: number, maxArgs: number): FunctionSpec => ({ name, kind: 'window', minArgs, maxArgs });
const H = (name: string, minArgs: number, maxArgs: number): FunctionSpec => ({ name, kind: 'higher-order', minArgs, maxArgs, lambdaArgs: [0] });

const SPECS: FunctionSpec[] = [
  A('count', 0, 1), A('sum', 1, 1), A('avg', 1, 1), A('min', 1, 1), A('max', 1, 1), A('any', 1, 1), A('uniq', 1, Infinity), A('uniqExact', 1, Infinity),
  A('groupArray', 1, 1, { params: { min: 0, max: 1 } }), A('quantile', 1, 1, { params: { min: 0, max: 1 } }), A('argMax', 2, 2),
  W('row_number', 0, 0), W('rank', 0, 0), W('dense_rank', 0, 0), W('lagInFrame', 1, 3), W('leadInFrame', 1, 3),
  S('toDate', 1, 2), S('toDateTime', 1, 2), S('toStartOfDay', 1, 2), S('toString', 1, 2), S('toUInt64', 1, 1), S('toInt64', 1, 1), S('toInt32', 1, 1), S('toUInt128', 1, 1),
  S('toDecimal32', 2, 2, { constantArgs: [1] }), S('toDecimal128', 2, 2, { constantArgs: [1] }), S('toTypeName', 1, 1),
  S('concat', 1, Infinity), S('lower', 1, 1), S('upper', 1, 1), S('length', 1, 1), S('position', 2, 3), S('startsWith', 2, 2), S('substring', 2, 3),
  S('if', 3, 3), S('ifNull', 2, 2), S('coalesce', 1, Infinity), S('throwIf', 1, 2), S('sipHash64', 1, Infinity), S('tuple', 0, Infinity), S('now', 0, 1), S('plus', 2, 2),
  S('repeat', 2, 2, { constantArgs: [1], maxConstant: { 1: 1000 } }), S('timezone', 0, 0), S('has', 2, 2),
  S('JSONAllPaths', 1, 1), S('JSONAllPathsWithTypes', 1, 1), S('mapKeys', 1, 1), S('mapValues', 1, 1),
  H('arrayMap', 2, Infinity), H('arrayFilter', 2, Infinity), H('arrayExists', 2, Infinity),
];
const BY_NAME = new Map(SPECS.map((s) => [s.name, s]));
const CASE_INSENSITIVE = new Set(['count', 'sum', 'avg', 'min', 'max', 'if', 'concat', 'lower', 'upper', 'length', 'substring', 'coalesce', 'ifnull', 'position']);
const COMBINATORS = ['If', 'Array', 'OrNull', 'OrDefault', 'Distinct'];

/** Resolves a name as written (case rules and the -If/-Array/-OrNull/-OrDefault/-Distinct combinators); undefined = not allowed. */
export function lookupFunction(name: string): FunctionSpec | undefined {
  const exact = BY_NAME.get(name);
  if (exact) return exact;
  if (CASE_INSENSITIVE.has(name.toLowerCase())) return SPECS.find((s) => s.name.toLowerCase() === name.toLowerCase());
  for (const c of COMBINATORS) {
    if (!name.endsWith(c) || name.length === c.length) continue;
    const base = lookupFunction(name.slice(0, -c.length));
    if (!base || base.kind !== 'aggregate') continue;
    if (c === 'If') return { ...base, name, minArgs: base.minArgs + 1, maxArgs: base.maxArgs + 1 };
    return { ...base, name };
  }
  return undefined;
}
