/**
 * The function allowlist of the analytics compiler (src/analytics/compiler/functions.ts)
 * held against the real engine, opened in this process: its own `system.functions` says
 * every allowed name exists with the same aggregate/non-aggregate nature, every alias and
 * case-insensitive spelling means the canonical name, every allowed combinator exists, and
 * a real call of every function with the catalogue's smallest and largest argument count is
 * accepted while one fewer or one more is refused for its arity. So an engine upgrade that
 * renames, removes or changes a function fails here, not in production. The names known to be
 * dangerous, and every engine function of the dangerous families, are refused.
 */
import t from 'tap';
import { openTestStore } from '../helpers/chdb.js';
import { toEngineError } from '../../src/store/engine-error.js';
import {
  ALIASES,
  ALLOWED_COMBINATORS,
  CASE_INSENSITIVE,
  MAX_COMBINATORS,
  allowedFunctionNames,
  lookupFunction,
  type FunctionSpec,
} from '../../src/analytics/compiler/functions.js';

interface EngineFunction {
  isAggregate: boolean;
  caseInsensitive: boolean;
  aliasTo: string;
}

type Outcome = { ok: true; rows: unknown[][] } | { ok: false; code: string; reason: string };

const ARITY_ERRORS = new Set(['NUMBER_OF_ARGUMENTS_DOESNT_MATCH', 'TOO_FEW_ARGUMENTS_FOR_FUNCTION', 'TOO_MANY_ARGUMENTS_FOR_FUNCTION']);

t.test('the allowlist against the engine', async (t) => {
  const { store } = await openTestStore(t);
  const run = async (sql: string): Promise<Outcome> => {
    try {
      const out = JSON.parse((await store.analytics.select(sql, {})).toString('utf8')) as { data: unknown[][] };
      return { ok: true, rows: out.data };
    } catch (err) {
      const e = toEngineError(err);
      return { ok: false, code: e.codeName, reason: e.reason };
    }
  };
  const rows = async (sql: string): Promise<unknown[][]> => {
    const r = await run(sql);
    if (!r.ok) throw new Error(`${sql}: ${r.code} ${r.reason}`);
    return r.rows;
  };

  const engine = new Map<string, EngineFunction>();
  for (const [name, agg, ci, alias] of (await rows('SELECT name, is_aggregate, case_insensitive, alias_to FROM system.functions')) as [string, number, number, string][]) {
    engine.set(name, { isAggregate: agg === 1, caseInsensitive: ci === 1, aliasTo: alias });
  }
  const combinators = new Set(((await rows('SELECT name FROM system.aggregate_function_combinators')) as [string][]).map(([n]) => n));
  t.ok(engine.size > 1000, `the engine lists ${engine.size} functions`);

  const names = allowedFunctionNames();

  t.test('every allowed name is the engine\'s own name for a function of the same nature', async (t) => {
    t.ok(names.length >= 300 && names.length <= 600, `${names.length} allowed names: a few hundred`);
    const wrong: string[] = [];
    for (const name of names) {
      const spec = lookupFunction(name)!;
      const f = engine.get(name);
      if (!f) wrong.push(`${name}: not in system.functions`);
      else if (f.aliasTo !== '') wrong.push(`${name}: an alias of ${f.aliasTo} (print the engine's own name)`);
      else if (f.isAggregate !== (spec.kind === 'aggregate' || spec.kind === 'window')) wrong.push(`${name}: is_aggregate=${f.isAggregate} but the catalogue says ${spec.kind}`);
      if (spec.name !== name) wrong.push(`${name}: looks up as ${spec.name}`);
    }
    t.same(wrong, [], 'no mismatch');
  });

  t.test('every alias is the engine\'s alias of the name printed', async (t) => {
    const wrong: string[] = [];
    for (const [alias, target] of Object.entries(ALIASES)) {
      const f = engine.get(alias);
      if (!f) wrong.push(`${alias}: not in system.functions`);
      else if (f.aliasTo !== target) wrong.push(`${alias}: the engine aliases it to ${JSON.stringify(f.aliasTo)}, the catalogue to ${target}`);
      if (lookupFunction(alias)?.name !== target) wrong.push(`${alias}: looks up as ${lookupFunction(alias)?.name}`);
    }
    t.same(wrong, [], `${Object.keys(ALIASES).length} aliases`);
  });

  t.test('case-insensitive spellings: only where the engine registers the name so', async (t) => {
    const wrong: string[] = [];
    for (const written of CASE_INSENSITIVE) {
      if (!engine.get(written)?.caseInsensitive) wrong.push(`${written}: not case-insensitive in the engine`);
      const canonical = lookupFunction(written)?.name;
      for (const v of [written.toUpperCase(), written.toLowerCase(), written[0]!.toUpperCase() + written.slice(1).toLowerCase()]) {
        if (lookupFunction(v)?.name !== canonical) wrong.push(`${v}: looks up as ${lookupFunction(v)?.name}, not ${canonical}`);
      }
    }
    t.same(wrong, [], `${CASE_INSENSITIVE.length} spellings`);
    // Everything else is case-sensitive, as in the engine.
    for (const n of ['toStartOfMonth', 'arrayMap', 'uniqExact', 'cityHash64', 'JSONAllPaths', 'multiIf', 'replaceAll']) {
      t.ok(lookupFunction(n), `${n} is allowed`);
      t.equal(engine.get(n)?.caseInsensitive, false, `${n} is case-sensitive in the engine`);
      t.equal(lookupFunction(n.toUpperCase()), undefined, `${n.toUpperCase()} is not allowed`);
      t.equal(lookupFunction(n.toLowerCase()), undefined, `${n.toLowerCase()} is not allowed`);
    }
    t.equal(lookupFunction('COUNT')?.name, 'count');
    t.equal(lookupFunction('Sum')?.name, 'sum');
    t.equal(lookupFunction('LOWER')?.name, 'lower');
    t.equal(lookupFunction('date_trunc')?.name, 'dateTrunc');
    t.equal(lookupFunction('DATEDIFF')?.name, 'dateDiff');
    t.equal(lookupFunction('ROW_NUMBER')?.name, 'row_number');
    t.equal(lookupFunction('DENSE_RANK')?.name, 'denseRank');
  });

  t.test('aggregate combinators: the allowed ones exist, resolve and run; the others are refused', async (t) => {
    for (const c of ALLOWED_COMBINATORS) t.ok(combinators.has(c), `${c} is an engine combinator`);
    const cases: [string, string, string, number, number][] = [
      // written, printed, a real call, minArgs, maxArgs
      ['sumIf', 'sumIf', 'sumIf(number, number > 1)', 2, 2],
      ['countIf', 'countIf', 'countIf(number > 1)', 1, 2],
      ['COUNTIf', 'countIf', 'COUNTIf(number > 1)', 1, 2],
      ['uniqArray', 'uniqArray', 'uniqArray([number, 1])', 1, Infinity],
      ['avgOrNull', 'avgOrNull', 'avgOrNull(number)', 1, 1],
      ['sumDistinct', 'sumDistinct', 'sumDistinct(number % 2)', 1, 1],
      ['maxOrDefault', 'maxOrDefault', 'maxOrDefault(number)', 1, 1],
      ['sumMap', 'sumMap', "sumMap(map('k', number))", 1, 1],
      ['sumArrayIf', 'sumArrayIf', 'sumArrayIf([number], number > 0)', 2, 2],
      ['uniqExactIfOrNull', 'uniqExactIfOrNull', 'uniqExactIfOrNull(number, number > 5)', 2, Infinity],
      ['groupArrayIf', 'groupArrayIf', 'groupArrayIf(2)(number, number > 0)', 2, 2],
      ['quantileIf', 'quantileIf', 'quantileIf(0.5)(number, number > 0)', 2, 2],
      ['medianIf', 'quantileIf', 'medianIf(number, number > 0)', 2, 2],
      ['argMaxIf', 'argMaxIf', 'argMaxIf(number, number, number < 2)', 3, 3],
      ['groupArrayArray', 'groupArrayArray', 'groupArrayArray([number])', 1, 1],
    ];
    for (const [written, printed, call, min, max] of cases) {
      const spec = lookupFunction(written);
      t.equal(spec?.name, printed, `${written} resolves to ${printed}`);
      t.equal(spec?.kind, 'aggregate', `${written} is an aggregate`);
      t.same([spec?.minArgs, spec?.maxArgs], [min, max], `${written}: ${min}..${max} arguments`);
      const r = await run(`SELECT ${call} FROM numbers(3)`);
      t.ok(r.ok, `${call} runs in the engine${r.ok ? '' : `: ${r.code} ${r.reason}`}`);
    }
    const refused = [
      'sumState', 'sumMerge', 'uniqMergeState', 'sumSimpleState', 'sumResample', 'sumForEach', 'sumArgMax', 'sumNull', 'countStateIf',
      'sumIfState', 'quantileMerge', 'groupArrayState', 'sumif', 'sumIF', 'SUMIF', 'Array', 'OrNull', 'Distinct', 'IfIf',
      'arrayMapIf', 'lowerIf', 'row_numberIf', 'rankIf', 'ifIf', 'multiIfIf', 'sumIfIfIfIf', 'throwIfIf', 'aggThrowIf', 'aggThrowOrNull',
    ];
    t.equal(MAX_COMBINATORS, 3);
    for (const n of refused) t.equal(lookupFunction(n), undefined, `${n} is refused`);
    for (const n of refused) {
      const base = /^(.*?)(State|Merge|SimpleState|Resample|ForEach|ArgMax|Null)/.exec(n);
      if (base && engine.has(base[1]!)) t.ok(combinators.has(base[2]!), `${base[2]} is a real engine combinator (the refusal matters)`);
    }
  });

  t.test('refused: every name known to be dangerous, and the dangerous families of the engine', async (t) => {
    const issue = [
      'editDistance', 'editDistanceUTF8', 'levenshteinDistance', 'damerauLevenshteinDistance', 'jaroSimilarity', 'jaroWinklerSimilarity', 'stringJaccardIndex',
      'file', 'url', 'hostName', 'hostname', 'HOSTNAME', 'fqdn', 'FQDN', 'chdb', 'CHDB', 'version', 'VERSION', 'revision', 'uptime', 'buildId', 'getSetting', 'getSettingOrDefault',
      'getServerSetting', 'getMergeTreeSetting', 'getMacro', 'currentDatabase', 'current_database', 'DATABASE', 'database', 'SCHEMA', 'currentUser', 'user', 'currentQueryID', 'queryID',
      'inIgnoreSet', 'notInIgnoreSet', 'nullInIgnoreSet', 'globalIn', 'globalNotIn', 'globalNullIn', 'globalInIgnoreSet', 'globalNotInIgnoreSet',
      'throwIf', 'sleep', 'sleepEachRow', 'aggThrow', 'dictGet', 'dictGetString', 'dictHas', 'dictGetOrDefault', 'joinGet', 'joinGetOrNull', 'hasColumnInTable',
      'rand', 'rand64', 'randCanonical', 'randomString', 'randomPrintableASCII', 'randomFixedString', 'randomStringUTF8', 'generateUUIDv4', 'generateRandom',
      'arrayReduce', 'arrayReduceInRanges', 'arrayFold', 'arrayShuffle', 'arrayRandomSample', 'formatQuery', 'formatQuerySingleLine', 'reinterpretAsString', 'reinterpret',
      'bar', 'sparkbar', 'filesystemAvailable', 'addressToSymbol', 'demangle', 'catboostEvaluate', 'transactionID', 'getClientHTTPHeader', 'showCertificate',
      'numbers', 'remote', 'merge', 'view', 'input', 's3', 'hdfs', 'mysql', 'postgresql', 'executable', 'cluster', 'values', 'format_', 'CAST', '_CAST', 'accurateCast',
      'toAggregateFunction', 'initializeAggregation', 'finalizeAggregation', 'runningAccumulate', 'materialize', 'ignore', 'identity', 'blockSize', 'rowNumberInBlock',
      'rowNumberInAllBlocks', 'runningDifference', 'neighbor', 'nowInBlock', 'isConstant', 'dumpColumnStructure', 'currentProfiles', 'tcpPort', 'serverUUID',
      '__getScalar', '__bitWrapperFunc', 'indexHint', 'zookeeperSessionUptime', 'evalMLMethod', 'logTrace', 'tid', 'connectionId', 'displayName', 'hasThreadFuzzer',
      'toString ', ' sum', 'su\u006d\u200b', 'sum\u0000', '', 'constructor', '__proto__', 'toString.call', 'hasOwnProperty', 'valueOf',
    ];
    for (const n of issue) t.equal(lookupFunction(n), undefined, `${JSON.stringify(n)} is refused`);
    const families = /distance|similarity|jaccard|^dict|^file|^url|ignoreset|^global|sleep|throw|^rand|^random|^generate|^getsetting|^getserver|^getmacro|hostname|^fqdn|^version|^chdb|^current(?!_date$|_timestamp$)|^initial|^reinterpret|^address|^dump|^filesystem|^joinget|^transaction|^catboost|^__|query_?id|^s3|^hdfs|^azure|^mysql|^postgres|^bar$|^runningaccumulate|^zookeeper|^getclient/i;
    const risky = [...engine.keys()].filter((n) => families.test(n));
    t.ok(risky.length > 80, `${risky.length} engine functions of the dangerous families`);
    const allowed = risky.filter((n) => lookupFunction(n) !== undefined);
    t.same(allowed, [], 'none of them is allowed, in any of its spellings');
    t.same(risky.filter((n) => lookupFunction(n.toUpperCase()) !== undefined || lookupFunction(n.toLowerCase()) !== undefined), []);
    // An aggregate of the engine that is not in the catalogue stays refused with every combinator.
    for (const n of [...engine.entries()].filter(([name, f]) => f.isAggregate && !lookupFunction(name)).map(([name]) => name)) {
      for (const c of ALLOWED_COMBINATORS) {
        if (lookupFunction(n + c) !== undefined) t.fail(`${n}${c} is allowed although ${n} is not`);
      }
    }
  });

  t.test('arity: the catalogue\'s bounds are the engine\'s, by a real call of every function', async (t) => {
    // Inside the catalogue's bounds the engine must not refuse a call for its argument count
    // (other errors, e.g. of type, are the probe's plain arguments); outside them it must
    // refuse the call, unless the language is deliberately narrower than the engine.
    const problems: string[] = [];
    const narrowerSeen = new Set<string>();
    let calls = 0;
    for (const name of names) {
      const spec = lookupFunction(name)!;
      const counts: [number, boolean][] = [[spec.minArgs, true]];
      if (spec.minArgs > 0) counts.push([spec.minArgs - 1, false]);
      if (Number.isFinite(spec.maxArgs)) {
        if (spec.maxArgs !== spec.minArgs) counts.push([spec.maxArgs, true]);
        counts.push([spec.maxArgs + 1, false]);
      } else {
        counts.push([spec.minArgs + 2, true]);
      }
      const paramCounts: [number, boolean][] = spec.params
        ? [[spec.params.min, true], [spec.params.max, true], [spec.params.max + 1, false], ...(spec.params.min > 0 ? [[spec.params.min - 1, false] as [number, boolean]] : [])]
        : [];
      const probes: [string, boolean, string][] = [
        ...counts.map(([n, ok]): [string, boolean, string] => [probe(spec, n, spec.params?.min ?? 0), ok, `${name}#${n}`]),
        ...paramCounts.map(([p, ok]): [string, boolean, string] => [probe(spec, spec.minArgs, p), ok, `${name}#params${p}`]),
      ];
      for (const [sql, accepted, key] of probes) {
        calls++;
        const r = await run(sql);
        if (accepted && !r.ok && (ARITY_ERRORS.has(r.code) || r.code === 'SYNTAX_ERROR')) problems.push(`${sql}: refused for its arity (${r.reason.slice(0, 160)})`);
        if (!accepted && r.ok) {
          if (NARROWER[key.replace(/#.*/, '#more')] !== undefined || NARROWER[key] !== undefined) narrowerSeen.add(NARROWER[key] !== undefined ? key : key.replace(/#.*/, '#more'));
          else problems.push(`${sql}: accepted by the engine, outside the catalogue's bounds`);
        }
      }
    }
    t.same(problems, [], `${calls} calls of ${names.length} functions`);
    t.same([...narrowerSeen].sort(), Object.keys(NARROWER).sort(), 'every deliberate narrowing is still one (the engine accepts more)');
  });

  t.test('literal arguments: what the catalogue requires constant, the engine computes once, and the bounds hold', async (t) => {
    // The engine itself refuses a column where the catalogue wants a literal for these: the
    // compiler's refusal changes no honest query.
    for (const sql of [
      'SELECT toDecimal64(number, number) FROM numbers(2)',
      'SELECT formatDateTime(now(), toString(number)) FROM numbers(2)',
      "SELECT dateDiff(toString(number), now(), now()) FROM numbers(2)",
      'SELECT ntile(number) OVER () FROM numbers(2)',
    ]) {
      const r = await run(sql);
      t.notOk(r.ok, `${sql}: refused by the engine too`);
    }
    for (const [name, pos, bound] of [['repeat', 1, 100], ['leftPad', 1, 1000], ['rightPad', 1, 1000], ['arrayWithConstant', 0, 1000], ['arrayResize', 1, 1000]] as const) {
      const spec = lookupFunction(name)!;
      t.ok(spec.constantArgs?.includes(pos), `${name}: argument ${pos} must be a literal`);
      t.equal(spec.maxConstant?.[pos], bound, `${name}: argument ${pos} at most ${bound}`);
      t.ok(spec.generates, `${name}: a generator (not allowed in a lambda body)`);
    }
    const range = lookupFunction('range')!;
    t.same(range.constantArgs, [0, 1, 2], 'range: every argument is a literal');
    t.equal(range.maxRangeElements, 1000, 'range: at most 1000 elements, whatever the start');
    t.ok(range.generates, 'range: a generator');
    // What the compiler counts is what the engine generates.
    for (const [args, n] of [['1000', 1000], ['-500, 500', 1000], ['1000000, 1001000', 1000], ['0, 1000, 1', 1000], ['1000, 0, -1', 1000], ['0, 10000, 10', 1000], ['5, 1', 0], ['0, 10, -1', 0], ['0, 10, 3', 4]] as const) {
      const r = await run(`SELECT length(range(${args}))`);
      t.ok(r.ok && r.rows[0]?.[0] === n, `range(${args}) has ${n} elements in the engine: ${JSON.stringify(r)}`);
    }
    for (const name of ['groupArray', 'groupUniqArray', 'topK', 'topKWeighted', 'groupArraySorted', 'histogram']) {
      const spec = lookupFunction(name)!;
      t.ok(spec.params && spec.maxParam && spec.maxParam[0]! <= 10_000, `${name}: its size parameter is bounded`);
    }
    for (const name of ['match', 'like', 'ilike', 'extract', 'extractAll', 'replaceRegexpAll', 'replaceRegexpOne', 'splitByRegexp', 'regexpExtract']) {
      const spec = lookupFunction(name)!;
      t.ok(spec.constantArgs?.includes(name === 'splitByRegexp' ? 0 : 1), `${name}: the pattern is a literal`);
    }
    for (const name of ['position', 'positionUTF8', 'positionCaseInsensitive', 'positionCaseInsensitiveUTF8', 'locate', 'countSubstrings', 'replaceAll', 'replaceOne', 'substringIndex', 'hasAll', 'hasAny', 'hasSubstr']) {
      t.ok(lookupFunction(name)!.constantArgs?.includes(1), `${name}: the needle is a literal (a needle from the data is quadratic per row)`);
    }
    for (const name of ['arrayMap', 'arrayFilter', 'arrayExists', 'arrayAll', 'arraySum', 'arraySort', 'arrayCount', 'arrayFirst']) {
      const spec = lookupFunction(name)!;
      t.equal(spec.kind, 'higher-order');
      t.same(spec.lambdaArgs, [0], `${name}: the lambda comes first`);
    }
    for (const name of names) {
      const s = lookupFunction(name)!;
      for (const p of Object.keys(s.maxConstant ?? {})) if (!s.constantArgs?.includes(Number(p))) t.fail(`${name}: a bound on argument ${p}, which is not a literal`);
      if (s.lambdaArgs && s.kind !== 'higher-order') t.fail(`${name}: lambdas in a ${s.kind}`);
      if (s.params && s.kind !== 'aggregate') t.fail(`${name}: parameters on a ${s.kind}`);
    }
  });
});

/**
 * Where the language accepts fewer arguments than the engine, on purpose (key: name#count of
 * the refused call, or name#more for "any count beyond the catalogue's", name#paramsN for N
 * parameters). The test fails if the engine stops accepting these, so the list stays true.
 */
const NARROWER: Record<string, string> = {
  'coalesce#0': 'coalesce() of nothing is NULL: not useful',
  'concat#0': 'concat() of nothing',
  'arrayZip#0': 'arrayZip() of nothing',
  'cityHash64#0': 'a hash of nothing',
  'sipHash64#0': 'a hash of nothing',
  'xxHash64#0': 'a hash of nothing',
  'xxHash32#0': 'a hash of nothing',
  'toDateTime64OrNull#1': 'the scale is required, as for toDateTime64',
  'row_number#1': 'the engine ignores arguments of row_number',
  'percentRank#1': 'the engine ignores arguments of percentRank',
  'cume_dist#1': 'the engine ignores arguments of cume_dist',
  'quantiles#params101': 'at most 100 levels',
  'quantilesExact#params101': 'at most 100 levels',
  'quantilesExactLow#params101': 'at most 100 levels',
  'quantilesExactHigh#params101': 'at most 100 levels',
  'quantilesTDigest#params101': 'at most 100 levels',
  'quantilesTiming#params101': 'at most 100 levels',
  'quantilesExactWeighted#params101': 'at most 100 levels',
  'quantilesTDigestWeighted#params101': 'at most 100 levels',
  'quantilesDeterministic#params101': 'at most 100 levels',
};

/** Argument values where the engine's arity depends on the type of an earlier argument. */
const ARG_VALUES: Record<string, string[]> = {
  toString: ['now()', "'UTC'"],
};

/** Parameter values a parametric aggregate accepts, by position (default: a quantile level). */
const PARAM_VALUES: Record<string, string[]> = {
  groupConcat: ["','", '5', '5'],
  groupArray: ['5', '5'],
  groupUniqArray: ['5', '5'],
  groupArrayLast: ['5', '5'],
  groupArraySorted: ['5', '5'],
  topK: ['5', '3', "'counts'", '1'],
  topKWeighted: ['5', '3', "'counts'", '1'],
  histogram: ['5', '5'],
  quantileDD: ['0.01', '0.5', '0.5'],
};

/**
 * A call of `spec` with `n` arguments and `p` parameters: for higher-order functions a
 * lambda of the right width first (once there is room for an array) and arrays after it,
 * small literals elsewhere.
 */
function probe(spec: FunctionSpec, n: number, p: number): string {
  const lambdaFirst = spec.kind === 'higher-order' && spec.lambdaArgs?.includes(0) && n >= 2;
  const args = Array.from({ length: n }, (_, i) => {
    if (lambdaFirst && i === 0) return `(${Array.from({ length: n - 1 }, (_, k) => `x${k}`).join(', ')}) -> x0`;
    if (spec.kind === 'higher-order') return '[1]';
    return ARG_VALUES[spec.name]?.[i] ?? '1';
  });
  const params = Array.from({ length: p }, (_, i) => (PARAM_VALUES[spec.name] ?? [])[i] ?? '0.5');
  const call = `${spec.name}${spec.params && p > 0 ? `(${params.join(', ')})` : ''}(${args.join(', ')})`;
  switch (spec.kind) {
    case 'aggregate':
      return `SELECT ${call} FROM numbers(1)`;
    case 'window':
      return `SELECT ${call} OVER () FROM numbers(1)`;
    default:
      return `SELECT ${call}`;
  }
}
