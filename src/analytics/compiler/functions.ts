/**
 * The functions an analytics query may call: an allowlist, never a denylist.
 *
 * Every entry names a function by the engine's own name for it (what the printer sends),
 * its kind, its arity and the arguments that must be literals. A name that is not here is
 * not part of the language: the compiler answers 400 naming it. Nothing here reads files,
 * URLs, dictionaries, settings, other tables, or anything about the host, the engine or its
 * users; nothing throws or sleeps on purpose; nothing is random; and nothing has a per-row
 * cost that grows without bound in its arguments (no edit distances, no generators or
 * padding with a non-literal or large size: those take a bounded literal, see maxConstant;
 * substring searches and array-against-array tests take their needle as a literal, since
 * with both sides from the data they are quadratic per row).
 *
 * What this catalogue cannot bound on its own: a lambda whose body reads an array from
 * outside the lambda (`arrayFilter(x -> has(a, x), a)` with `a = groupArray(…)`) is
 * quadratic in the data within one row, where the engine does not check its time limit.
 * The compiler should allow only the lambda's own parameters and literals in a lambda body,
 * or the engine must be stoppable on the wall clock (docs/security.md, "Work isolation").
 *
 * test/unit/analytics-functions.test.ts holds this catalogue against the engine's own
 * `system.functions`: every name exists there with the same aggregate/non-aggregate nature,
 * every alias and case-insensitive spelling resolves to the name printed, and the arities
 * agree with what the engine accepts, so an engine upgrade cannot change silently what a
 * name means.
 *
 * Names as written: the canonical name exactly; an alias listed in ALIASES (`substr`,
 * `median`, `dense_rank`, …) exactly; and, for the names the engine registers
 * case-insensitively (SQL's `COUNT`, `LOWER`, `DATE_TRUNC`, …), any spelling of case. An
 * aggregate may carry combinator suffixes (`sumIf`, `uniqArray`, `avgOrNull`, `countIf`,
 * `sumMap`, chained like `sumArrayIf`), up to MAX_COMBINATORS of them; the suffixes are
 * case-sensitive, as in the engine. `-State`, `-Merge`, `-SimpleState`, `-Resample`,
 * `-ForEach` and the rest are not allowed: states are opaque binary (and `-Merge` would
 * deserialize caller-made bytes), and `-Resample` makes as many states as its parameters ask.
 */
export type ArgKind = 'any' | 'lambda' | 'constant';

export interface FunctionSpec {
  /** Canonical name as printed to the engine. */
  name: string;
  kind: 'scalar' | 'aggregate' | 'window' | 'higher-order';
  /** maxArgs Infinity = variadic. */
  minArgs: number;
  maxArgs: number;
  /** Argument positions that must/can be lambdas (higher-order). */
  lambdaArgs?: number[];
  /** Parametric aggregates: quantile(0.5)(x). */
  params?: { min: number; max: number };
  /** Argument positions that must be literals (bounded cost): a number, a string, or an array/tuple of literals. */
  constantArgs?: number[];
  /** Bound on a literal argument's absolute value (e.g. repeat count, arrayWithConstant size); the position is in constantArgs. */
  maxConstant?: Record<number, number>;
  /**
   * Bound on a parameter's absolute value (parametric aggregates: `groupArray(N)`,
   * `topK(N)`). An extension of the interface agreed for the compiler; absent = any literal.
   */
  maxParam?: Record<number, number>;
  /**
   * Builds an array or a string whose size a literal argument gives (range, arrayWithConstant,
   * arrayResize, repeat, the pads): not allowed inside a lambda body, where it would run once
   * per element (nested, the sizes multiply).
   */
  generates?: true;
  /** Elements (all levels) of an array literal argument; default MAX_LITERAL_ELEMENTS. */
  maxLiteralElements?: number;
  /** range(): the number of elements its literal arguments ask for is at most this (whatever the start). */
  maxRangeElements?: number;
}

type Extra = Omit<FunctionSpec, 'name' | 'kind' | 'minArgs' | 'maxArgs'>;

const V = Infinity;

function fns(kind: FunctionSpec['kind'], min: number, max: number, names: string[], extra: Extra = {}): FunctionSpec[] {
  return names.map((name) => ({ name, kind, minArgs: min, maxArgs: max, ...extra }));
}
const scalar = (names: string[], min: number, max = min, extra: Extra = {}): FunctionSpec[] => fns('scalar', min, max, names, extra);
const aggregate = (names: string[], min: number, max = min, extra: Extra = {}): FunctionSpec[] => fns('aggregate', min, max, names, extra);
const windowFn = (names: string[], min: number, max = min, extra: Extra = {}): FunctionSpec[] => fns('window', min, max, names, extra);
const higherOrder = (names: string[], min: number, max: number, extra: Extra = {}): FunctionSpec[] => fns('higher-order', min, max, names, { lambdaArgs: [0], ...extra });

const INT_TYPES = ['Int8', 'Int16', 'Int32', 'Int64', 'Int128', 'Int256', 'UInt8', 'UInt16', 'UInt32', 'UInt64', 'UInt128', 'UInt256'];
const FLOAT_TYPES = ['Float32', 'Float64'];
const DECIMALS: [string, number][] = [['Decimal32', 9], ['Decimal64', 18], ['Decimal128', 38], ['Decimal256', 76]];
const withVariants = (base: string): string[] => [base, `${base}OrNull`, `${base}OrZero`];

/** Bounds on literal sizes: the per-row cost of these functions grows with them. */
export const MAX_GENERATED_ELEMENTS = 1_000;
export const MAX_PAD_LENGTH = 1_000;
export const MAX_REPEAT = 100;
/** Parametric aggregates that keep N items per group. */
export const MAX_AGGREGATE_ITEMS = 10_000;
/** Elements (all levels) of an array or tuple literal given where a literal is required (needles of hasAny, transform's lists). */
export const MAX_LITERAL_ELEMENTS = 1_000;
/**
 * Elements of the literal needle of hasAll/hasAny/hasSubstr: the engine compares each element
 * of the row's array with each of the needle's (measured with chdb 3.4: hasAll of a
 * 1,000,000-string array against 999 literal strings took 10.5 s in one row, past a 5 s limit).
 */
export const MAX_NEEDLE_ELEMENTS = 100;

const SPECS: FunctionSpec[] = [
  // ── operators and arithmetic ───────────────────────────────────────────────
  ...scalar(['plus', 'minus', 'multiply', 'divide', 'intDiv', 'intDivOrZero', 'modulo', 'moduloOrZero', 'positiveModulo'], 2),
  ...scalar(['negate', 'abs', 'sign', 'sqrt', 'cbrt', 'exp', 'exp2', 'exp10', 'log', 'log2', 'log10', 'log1p', 'isNaN', 'isFinite', 'isInfinite'], 1),
  ...scalar(['pow'], 2),
  ...scalar(['round', 'roundBankers', 'floor', 'ceil', 'trunc'], 1, 2, { constantArgs: [1], maxConstant: { 1: 76 } }),
  ...scalar(['greatest', 'least'], 1, V),
  ...scalar(['equals', 'notEquals', 'less', 'greater', 'lessOrEquals', 'greaterOrEquals'], 2),
  // IN with a list or a subquery (the compiler resolves what the right side reads); never
  // globalIn or the *IgnoreSet variants.
  ...scalar(['in', 'notIn'], 2),
  // ── logical and conditional ────────────────────────────────────────────────
  ...scalar(['and', 'or'], 2, V),
  ...scalar(['xor'], 2, V),
  ...scalar(['not'], 1),
  ...scalar(['if'], 3),
  ...scalar(['multiIf'], 3, V),
  ...scalar(['caseWithExpression'], 4, V),
  ...scalar(['ifNull', 'nullIf'], 2),
  ...scalar(['coalesce'], 1, V),
  ...scalar(['isNull', 'isNotNull', 'assumeNotNull', 'toNullable', 'isZeroOrNull'], 1),
  ...scalar(['transform'], 3, 4, { constantArgs: [1, 2] }),
  // ── type conversion (reinterpret* is not here: it reads raw bytes) ─────────
  ...[...INT_TYPES, ...FLOAT_TYPES].flatMap((t) => scalar(withVariants(`to${t}`), 1)),
  ...DECIMALS.flatMap(([t, maxScale]) => scalar(withVariants(`to${t}`), 2, 2, { constantArgs: [1], maxConstant: { 1: maxScale } })),
  ...scalar(['toString'], 1, 2, { constantArgs: [1] }),
  ...scalar(['toBool', 'toUUID', 'toUUIDOrNull', 'toTypeName'], 1),
  ...scalar(['toDate', 'toDate32'], 1, 2, { constantArgs: [1] }),
  ...scalar(['toDateOrNull', 'toDateOrZero', 'toDate32OrNull', 'toDate32OrZero'], 1),
  ...scalar(withVariants('toDateTime'), 1, 2, { constantArgs: [1] }),
  ...scalar(withVariants('toDateTime64'), 2, 3, { constantArgs: [1, 2], maxConstant: { 1: 9 } }),
  ...scalar(['parseDateTimeBestEffort', 'parseDateTimeBestEffortOrNull', 'parseDateTimeBestEffortOrZero'], 1, 2, { constantArgs: [1] }),
  ...scalar(['parseDateTime64BestEffort', 'parseDateTime64BestEffortOrNull'], 1, 3, { constantArgs: [1, 2], maxConstant: { 1: 9 } }),
  ...scalar(['parseDateTime', 'parseDateTimeOrNull'], 1, 3, { constantArgs: [1, 2] }),
  // ── dates and times ────────────────────────────────────────────────────────
  ...scalar(
    [
      'toYear', 'toQuarter', 'toMonth', 'toDayOfMonth', 'toDayOfYear', 'toHour', 'toMinute', 'toSecond', 'toISOWeek', 'toISOYear',
      'toStartOfYear', 'toStartOfISOYear', 'toStartOfQuarter', 'toStartOfMonth', 'toMonday', 'toStartOfDay', 'toStartOfHour',
      'toStartOfMinute', 'toStartOfFiveMinutes', 'toStartOfTenMinutes', 'toStartOfFifteenMinutes', 'toStartOfSecond',
      'toLastDayOfMonth', 'toYYYYMM', 'toYYYYMMDD', 'toYYYYMMDDhhmmss', 'toUnixTimestamp',
      'toRelativeYearNum', 'toRelativeQuarterNum', 'toRelativeMonthNum', 'toRelativeWeekNum', 'toRelativeDayNum',
      'toRelativeHourNum', 'toRelativeMinuteNum', 'toRelativeSecondNum',
    ],
    1, 2, { constantArgs: [1] },
  ),
  ...scalar(['toDayOfWeek', 'toWeek', 'toYearWeek', 'toStartOfWeek', 'toLastDayOfWeek'], 1, 3, { constantArgs: [1, 2] }),
  ...scalar(['toTimezone'], 2, 2, { constantArgs: [1] }),
  ...scalar(['toUnixTimestamp64Second', 'toUnixTimestamp64Milli', 'toUnixTimestamp64Micro', 'toUnixTimestamp64Nano'], 1),
  ...scalar(['fromUnixTimestamp64Second', 'fromUnixTimestamp64Milli', 'fromUnixTimestamp64Micro', 'fromUnixTimestamp64Nano'], 1, 2, { constantArgs: [1] }),
  ...scalar(['fromUnixTimestamp'], 1, 3, { constantArgs: [1, 2] }),
  // The engine itself requires the interval (INTERVAL n unit, printed as toInterval*(n)) to be constant.
  ...scalar(['toStartOfInterval'], 2, 4),
  ...scalar(['dateDiff', 'age'], 3, 4, { constantArgs: [0, 3] }),
  ...scalar(['dateTrunc'], 2, 3, { constantArgs: [0, 2] }),
  ...scalar(['dateName'], 2, 3, { constantArgs: [0, 2] }),
  ...scalar(['formatDateTime', 'formatDateTimeInJodaSyntax'], 2, 3, { constantArgs: [1, 2] }),
  ...scalar(['now'], 0, 1, { constantArgs: [0] }),
  ...scalar(['today', 'yesterday'], 0),
  ...scalar(['now64'], 0, 2, { constantArgs: [0, 1], maxConstant: { 0: 9 } }),
  ...scalar(
    [
      'toIntervalNanosecond', 'toIntervalMicrosecond', 'toIntervalMillisecond', 'toIntervalSecond', 'toIntervalMinute', 'toIntervalHour',
      'toIntervalDay', 'toIntervalWeek', 'toIntervalMonth', 'toIntervalQuarter', 'toIntervalYear',
    ],
    1,
  ),
  ...scalar(
    [
      'addNanoseconds', 'addMicroseconds', 'addMilliseconds', 'addSeconds', 'addMinutes', 'addHours', 'addDays', 'addWeeks', 'addMonths',
      'addQuarters', 'addYears', 'subtractNanoseconds', 'subtractMicroseconds', 'subtractMilliseconds', 'subtractSeconds',
      'subtractMinutes', 'subtractHours', 'subtractDays', 'subtractWeeks', 'subtractMonths', 'subtractQuarters', 'subtractYears',
    ],
    2, 2,
  ),
  // ── strings ────────────────────────────────────────────────────────────────
  ...scalar(['length', 'lengthUTF8', 'empty', 'notEmpty', 'lower', 'upper', 'lowerUTF8', 'upperUTF8', 'reverse', 'reverseUTF8', 'toValidUTF8', 'initcap', 'base64Encode', 'tryBase64Decode', 'hex'], 1),
  ...scalar(['substring', 'substringUTF8'], 2, 3),
  ...scalar(['left', 'right', 'leftUTF8', 'rightUTF8'], 2),
  ...scalar(['substringIndex'], 3, 3, { constantArgs: [1] }),
  ...scalar(['concat'], 1, V),
  ...scalar(['concatWithSeparator'], 1, V),
  ...scalar(['startsWith', 'endsWith', 'startsWithUTF8', 'endsWithUTF8'], 2),
  // Substring search with a needle from the data is O(haystack × needle) per row (the engine
  // builds a naive searcher per row; measured with chdb 3.4: a 1 MB haystack and a 3 KB needle
  // took 760 ms from columns and 6 ms with the needle a literal): the needle is a literal.
  ...scalar(['position', 'positionUTF8', 'positionCaseInsensitive', 'positionCaseInsensitiveUTF8', 'locate'], 2, 3, { constantArgs: [1] }),
  ...scalar(['countSubstrings'], 2, 3, { constantArgs: [1] }),
  ...scalar(['like', 'notLike', 'ilike', 'notILike', 'match'], 2, 2, { constantArgs: [1] }),
  ...scalar(['extract', 'extractAll'], 2, 2, { constantArgs: [1] }),
  ...scalar(['regexpExtract'], 2, 3, { constantArgs: [1, 2] }),
  ...scalar(['replaceAll', 'replaceOne'], 3, 3, { constantArgs: [1] }),
  ...scalar(['replaceRegexpAll', 'replaceRegexpOne'], 3, 3, { constantArgs: [1, 2] }),
  ...scalar(['splitByChar', 'splitByString'], 2, 3, { constantArgs: [0, 2] }),
  ...scalar(['splitByRegexp'], 2, 3, { constantArgs: [0, 2] }),
  ...scalar(['splitByWhitespace', 'splitByNonAlpha'], 1, 2, { constantArgs: [1] }),
  ...scalar(['trimBoth', 'trimLeft', 'trimRight'], 1, 2, { constantArgs: [1] }),
  ...scalar(['leftPad', 'rightPad', 'leftPadUTF8', 'rightPadUTF8'], 2, 3, { constantArgs: [1, 2], maxConstant: { 1: MAX_PAD_LENGTH }, generates: true }),
  ...scalar(['repeat'], 2, 2, { constantArgs: [1], maxConstant: { 1: MAX_REPEAT }, generates: true }),
  ...scalar(['format'], 2, V, { constantArgs: [0] }),
  ...scalar(['arrayStringConcat'], 1, 2),
  ...scalar(['formatReadableSize', 'formatReadableQuantity', 'formatReadableDecimalSize'], 1, 2, { constantArgs: [1] }),
  ...scalar(['formatReadableTimeDelta'], 1, 3, { constantArgs: [1, 2] }),
  // ── JSON (the JSON type of fact_signal.data, and JSON text in strings) ─────
  ...scalar(['JSONAllPaths', 'JSONAllPathsWithTypes', 'JSONDynamicPaths', 'JSONDynamicPathsWithTypes', 'JSONSharedDataPaths', 'JSONSharedDataPathsWithTypes', 'dynamicType', 'variantType', 'isDynamicElementInSharedData', 'isValidJSON'], 1),
  ...scalar(['JSONHas', 'JSONLength', 'JSONType', 'JSONExtractString', 'JSONExtractInt', 'JSONExtractUInt', 'JSONExtractFloat', 'JSONExtractBool', 'JSONExtractRaw', 'JSONExtractKeys', 'JSONExtractArrayRaw'], 1, V),
  ...scalar(['JSONArrayLength'], 1),
  // ── arrays ─────────────────────────────────────────────────────────────────
  ...scalar(['array'], 0, V),
  ...scalar(['arrayJoin'], 1),
  ...scalar(['has', 'indexOf', 'countEqual', 'arrayElement', 'arrayElementOrNull', 'arrayPushBack', 'arrayPushFront', 'arrayRemove'], 2),
  // Each element of one array against each of the other: quadratic unless one side is a literal.
  ...scalar(['hasAll', 'hasAny', 'hasSubstr'], 2, 2, { constantArgs: [1], maxLiteralElements: MAX_NEEDLE_ELEMENTS }),
  ...scalar(['arrayPopBack', 'arrayPopFront', 'arrayReverse', 'arrayCompact', 'arrayDistinct', 'arrayEnumerate', 'arrayEnumerateUniq', 'arrayEnumerateDense', 'arrayFlatten', 'arrayDifference'], 1),
  ...scalar(['arrayUniq'], 1, V),
  ...scalar(['arraySlice'], 2, 3),
  ...scalar(['arrayConcat', 'arrayIntersect', 'arrayUnion'], 1, V),
  ...scalar(['arrayZip'], 1, V),
  // range(end), range(start, end[, step]): the bound is on the elements generated (end - start,
  // divided by the step), not on the values, so range(-1e9, 1) is refused and range(1e6, 1e6 + 10) is not.
  ...scalar(['range'], 1, 3, { constantArgs: [0, 1, 2], maxRangeElements: MAX_GENERATED_ELEMENTS, generates: true }),
  ...scalar(['arrayWithConstant'], 2, 2, { constantArgs: [0], maxConstant: { 0: MAX_GENERATED_ELEMENTS }, generates: true }),
  ...scalar(['arrayResize'], 2, 3, { constantArgs: [1], maxConstant: { 1: MAX_GENERATED_ELEMENTS }, generates: true }),
  ...higherOrder(['arrayMap', 'arrayFilter', 'arrayFill', 'arrayReverseFill', 'arraySplit', 'arrayReverseSplit'], 2, V),
  ...higherOrder(['arrayExists', 'arrayAll', 'arrayCount', 'arraySum', 'arrayAvg', 'arrayMin', 'arrayMax', 'arrayProduct', 'arrayCumSum', 'arraySort', 'arrayReverseSort'], 1, V),
  ...higherOrder(['arrayFirst', 'arrayLast', 'arrayFirstIndex', 'arrayLastIndex', 'arrayFirstOrNull', 'arrayLastOrNull'], 2, V),
  // ── tuples and maps ────────────────────────────────────────────────────────
  ...scalar(['tuple'], 0, V),
  ...scalar(['tupleElement'], 2, 3, { constantArgs: [1] }),
  ...scalar(['map'], 0, V),
  ...scalar(['mapKeys', 'mapValues'], 1),
  ...scalar(['mapContainsKey', 'mapContainsValue'], 2),
  ...scalar(['mapFromArrays'], 2),
  // ── hashes ─────────────────────────────────────────────────────────────────
  ...scalar(['cityHash64', 'sipHash64', 'xxHash64', 'xxHash32'], 1, V),
  // ── aggregates ─────────────────────────────────────────────────────────────
  ...aggregate(['count'], 0, 1),
  ...aggregate(['sum', 'avg', 'min', 'max', 'any', 'anyLast', 'anyHeavy', 'sumWithOverflow', 'sumKahan', 'groupBitAnd', 'groupBitOr', 'groupBitXor'], 1),
  ...aggregate(['uniq', 'uniqExact', 'uniqHLL12', 'uniqCombined', 'uniqCombined64'], 1, V),
  ...aggregate(['argMin', 'argMax', 'avgWeighted', 'covarPop', 'covarSamp', 'corr', 'simpleLinearRegression'], 2),
  ...aggregate(['stddevPop', 'stddevSamp', 'varPop', 'varSamp', 'skewPop', 'skewSamp', 'kurtPop', 'kurtSamp', 'deltaSum'], 1),
  ...aggregate(['entropy'], 1, V),
  ...aggregate(['groupArray', 'groupUniqArray', 'groupArrayLast'], 1, 1, { params: { min: 0, max: 1 }, maxParam: { 0: MAX_AGGREGATE_ITEMS } }),
  ...aggregate(['groupArraySorted'], 1, 1, { params: { min: 1, max: 1 }, maxParam: { 0: MAX_AGGREGATE_ITEMS } }),
  ...aggregate(['groupConcat'], 1, 1, { params: { min: 0, max: 2 }, maxParam: { 1: MAX_AGGREGATE_ITEMS } }),
  // topK(N[, load_factor[, 'counts']])(x)
  ...aggregate(['topK'], 1, 1, { params: { min: 0, max: 3 }, maxParam: { 0: MAX_AGGREGATE_ITEMS, 1: 100 } }),
  ...aggregate(['topKWeighted'], 2, 2, { params: { min: 0, max: 3 }, maxParam: { 0: MAX_AGGREGATE_ITEMS, 1: 100 } }),
  ...aggregate(['quantile', 'quantileExact', 'quantileExactLow', 'quantileExactHigh', 'quantileTDigest', 'quantileTiming'], 1, 1, { params: { min: 0, max: 1 } }),
  // quantileDD(relative_accuracy[, level])(x)
  ...aggregate(['quantileDD'], 1, 1, { params: { min: 1, max: 2 } }),
  ...aggregate(['quantileExactWeighted', 'quantileTDigestWeighted', 'quantileDeterministic'], 2, 2, { params: { min: 0, max: 1 } }),
  ...aggregate(['quantiles', 'quantilesExact', 'quantilesExactLow', 'quantilesExactHigh', 'quantilesTDigest', 'quantilesTiming'], 1, 1, { params: { min: 1, max: 100 } }),
  ...aggregate(['quantilesExactWeighted', 'quantilesTDigestWeighted', 'quantilesDeterministic'], 2, 2, { params: { min: 1, max: 100 } }),
  ...aggregate(['histogram'], 1, 1, { params: { min: 1, max: 1 }, maxParam: { 0: 1_000 } }),
  ...aggregate(['sumCount'], 1),
  // ── window functions (sum/avg/… OVER work through the aggregates above) ───
  ...windowFn(['row_number', 'rank', 'denseRank', 'percentRank', 'cume_dist'], 0),
  ...windowFn(['ntile'], 1, 1, { constantArgs: [0], maxConstant: { 0: MAX_AGGREGATE_ITEMS } }),
  ...windowFn(['lagInFrame', 'leadInFrame', 'lag', 'lead'], 1, 3, { constantArgs: [1] }),
  ...windowFn(['nth_value'], 2, 2, { constantArgs: [1] }),
];

/**
 * Aliases as written → canonical name. Each is an alias of that name in the engine's
 * `system.functions` (alias_to); the test checks it.
 */
export const ALIASES: Readonly<Record<string, string>> = {
  mod: 'modulo', power: 'pow', ln: 'log', ceiling: 'ceil', truncate: 'trunc',
  substr: 'substring', mid: 'substring', lcase: 'lower', ucase: 'upper', replace: 'replaceAll',
  lpad: 'leftPad', rpad: 'rightPad', trim: 'trimBoth', concat_ws: 'concatWithSeparator', instr: 'positionCaseInsensitive',
  date_diff: 'dateDiff', timestampDiff: 'dateDiff', timestamp_diff: 'dateDiff', DATE_TRUNC: 'dateTrunc', date_bin: 'toStartOfInterval', time_bucket: 'toStartOfInterval',
  current_date: 'today', curdate: 'today', current_timestamp: 'now', localtimestamp: 'now', DATE_FORMAT: 'formatDateTime',
  toTimeZone: 'toTimezone', FROM_UNIXTIME: 'fromUnixTimestamp',
  YEAR: 'toYear', QUARTER: 'toQuarter', MONTH: 'toMonth', DAY: 'toDayOfMonth', DAYOFMONTH: 'toDayOfMonth', DAYOFWEEK: 'toDayOfWeek',
  DAYOFYEAR: 'toDayOfYear', HOUR: 'toHour', MINUTE: 'toMinute', SECOND: 'toSecond', week: 'toWeek', yearweek: 'toYearWeek',
  CHAR_LENGTH: 'lengthUTF8', CHARACTER_LENGTH: 'lengthUTF8', OCTET_LENGTH: 'length', CARDINALITY: 'length',
  JSON_ARRAY_LENGTH: 'JSONArrayLength', array_to_string: 'arrayStringConcat', flatten: 'arrayFlatten', mapContains: 'mapContainsKey',
  median: 'quantile', medianExact: 'quantileExact', medianExactLow: 'quantileExactLow', medianExactHigh: 'quantileExactHigh',
  medianTDigest: 'quantileTDigest', medianTiming: 'quantileTiming', medianDD: 'quantileDD', medianDeterministic: 'quantileDeterministic',
  medianExactWeighted: 'quantileExactWeighted', medianTDigestWeighted: 'quantileTDigestWeighted',
  any_value: 'any', first_value: 'any', last_value: 'anyLast', max_by: 'argMax', min_by: 'argMin',
  array_agg: 'groupArray', group_concat: 'groupConcat', string_agg: 'groupConcat',
  STD: 'stddevPop', STDDEV_POP: 'stddevPop', STDDEV: 'stddevSamp', STDDEV_SAMP: 'stddevSamp', VAR_POP: 'varPop', VAR_SAMP: 'varSamp',
  COVAR_POP: 'covarPop', COVAR_SAMP: 'covarSamp', BIT_AND: 'groupBitAnd', BIT_OR: 'groupBitOr', BIT_XOR: 'groupBitXor',
  dense_rank: 'denseRank', percent_rank: 'percentRank',
};

/**
 * Names (canonical or aliases) the engine registers case-insensitively: accepted in any
 * case. The test checks each against `system.functions.case_insensitive`.
 */
export const CASE_INSENSITIVE: readonly string[] = [
  'abs', 'ceil', 'ceiling', 'floor', 'round', 'trunc', 'truncate', 'exp', 'log', 'ln', 'log2', 'log10', 'sqrt', 'pow', 'power', 'sign', 'mod',
  'greatest', 'least', 'if', 'ifNull', 'nullIf', 'coalesce', 'isNull', 'not',
  'length', 'lower', 'upper', 'lcase', 'ucase', 'concat', 'concat_ws', 'substring', 'substr', 'mid', 'position', 'locate', 'instr', 'left', 'right',
  'lpad', 'rpad', 'replace', 'reverse', 'initcap', 'CHAR_LENGTH', 'CHARACTER_LENGTH', 'OCTET_LENGTH', 'CARDINALITY', 'JSON_ARRAY_LENGTH', 'array_to_string',
  'flatten', 'now', 'today', 'current_date', 'curdate', 'current_timestamp', 'localtimestamp', 'dateDiff', 'DATE_TRUNC', 'date_bin', 'time_bucket', 'DATE_FORMAT', 'FROM_UNIXTIME', 'dateName',
  'YEAR', 'QUARTER', 'MONTH', 'DAY', 'DAYOFMONTH', 'DAYOFWEEK', 'DAYOFYEAR', 'HOUR', 'MINUTE', 'SECOND', 'week', 'yearweek',
  'count', 'sum', 'avg', 'min', 'max', 'corr', 'any_value', 'first_value', 'last_value', 'max_by', 'min_by', 'array_agg', 'group_concat', 'string_agg',
  'STD', 'STDDEV', 'STDDEV_POP', 'STDDEV_SAMP', 'VAR_POP', 'VAR_SAMP', 'COVAR_POP', 'COVAR_SAMP', 'BIT_AND', 'BIT_OR', 'BIT_XOR',
  'row_number', 'rank', 'dense_rank', 'percent_rank', 'ntile', 'nth_value', 'lag', 'lead',
];

/** Combinator suffixes an aggregate may carry, as the engine spells them (case-sensitive). */
export const ALLOWED_COMBINATORS: readonly string[] = ['If', 'Distinct', 'OrNull', 'OrDefault', 'Array', 'Map'];
export const MAX_COMBINATORS = 3;

const BY_NAME = new Map<string, FunctionSpec>();
for (const s of SPECS) {
  if (BY_NAME.has(s.name)) throw new Error(`functions.ts: ${s.name} is listed twice`);
  BY_NAME.set(s.name, Object.freeze(s));
}
for (const [alias, target] of Object.entries(ALIASES)) {
  if (!BY_NAME.has(target)) throw new Error(`functions.ts: alias ${alias} names ${target}, which is not allowed`);
  if (BY_NAME.has(alias)) throw new Error(`functions.ts: alias ${alias} is also a canonical name`);
}
const FOLDED = new Map<string, string>();
for (const written of CASE_INSENSITIVE) {
  const canonical = BY_NAME.has(written) ? written : ALIASES[written];
  if (canonical === undefined) throw new Error(`functions.ts: case-insensitive ${written} is neither allowed nor an alias`);
  FOLDED.set(written.toLowerCase(), canonical);
}

/** A name without combinators: exact canonical, exact alias, or a case-insensitive spelling. */
function lookupPlain(name: string): FunctionSpec | undefined {
  const direct = (Object.hasOwn(ALIASES, name) ? ALIASES[name] : undefined) ?? name;
  const canonical = BY_NAME.has(direct) ? direct : FOLDED.get(name.toLowerCase());
  return canonical === undefined ? undefined : BY_NAME.get(canonical);
}

function withCombinator(base: FunctionSpec, suffix: string): FunctionSpec {
  const out: FunctionSpec = { ...base, name: `${base.name}${suffix}` };
  // -If adds the condition as a last argument; the others keep the arity (-Array and -Map
  // take arrays or maps where the base takes values).
  if (suffix === 'If') {
    out.minArgs = base.minArgs + 1;
    out.maxArgs = base.maxArgs + 1;
  }
  return Object.freeze(out);
}

function lookupWithCombinators(name: string, depth: number): FunctionSpec | undefined {
  const plain = lookupPlain(name);
  if (plain) return plain;
  if (depth >= MAX_COMBINATORS) return undefined;
  for (const suffix of ALLOWED_COMBINATORS) {
    if (name.length <= suffix.length || !name.endsWith(suffix)) continue;
    const base = lookupWithCombinators(name.slice(0, -suffix.length), depth + 1);
    if (base?.kind === 'aggregate') return withCombinator(base, suffix);
  }
  return undefined;
}

/** Resolves a name as written (case rules and aggregate combinators like sumIf/uniqArray/avgOrNull/countIf applied); undefined = not allowed. */
export function lookupFunction(name: string): FunctionSpec | undefined {
  if (typeof name !== 'string' || name.length === 0 || name.length > 128) return undefined;
  return lookupWithCombinators(name, 0);
}

/** Every base (canonical) name, for the tests. */
export function allowedFunctionNames(): string[] {
  return [...BY_NAME.keys()];
}
