/**
 * The compiler's cost bounds (src/analytics/compiler/resolve.ts with functions.ts): what a
 * hostile tenant can make one query cost is bounded before anything reaches the engine.
 *   - parametric aggregates' size parameters (groupArray(N), topK(N)) are bounded (maxParam);
 *   - literal bounds (maxConstant) hold on the absolute value, and range() on the number of
 *     elements it generates;
 *   - array and tuple literals and negative numbers are literals where one is required;
 *   - a lambda body reads only the lambda's own parameters and literals (no outer columns,
 *     aliases, aggregates, subqueries or generators), so a lambda cannot be quadratic in the
 *     data within one row;
 *   - all numbers() reads of one query together generate a bounded number of rows;
 *   - what the compiler remembers of the texts it was given is bounded in memory.
 */
import t, { type Test } from 'tap';
import fc from 'fast-check';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { CACHED_CHARS_MAX, CompileError, QueryCompiler, compile } from '../../src/analytics/compiler/index.js';
import { MAX_GENERATED_ROWS } from '../../src/analytics/compiler/grammar.js';
import { MAX_IN_SET_DEPTH } from '../../src/analytics/compiler/resolve.js';
import { VIEW_SCHEMAS } from '../../src/store/views.js';

function outcome(q: string): string {
  try {
    compile(q, VIEW_SCHEMAS);
    return 'ok';
  } catch (err) {
    if (err instanceof CompileError) return `${err.code}: ${err.message}`;
    throw err;
  }
}

function refused(t: Test, q: string, why: RegExp): void {
  const o = outcome(q);
  t.match(o, /^INVALID_QUERY: /, `${q} is refused`);
  t.match(o, why, `${q}: ${o}`);
}

function accepted(t: Test, q: string): void {
  t.equal(outcome(q), 'ok', q);
}

t.test('parametric aggregates: the size parameter is bounded (maxParam)', async (t) => {
  refused(t, 'SELECT groupArray(2000000000)(id) FROM fact_signal', /parameter 1 of groupArray\(\) is at most 10000/);
  refused(t, 'SELECT groupArray(1e9)(id) FROM fact_signal', /parameter 1 of groupArray\(\) is at most/);
  refused(t, 'SELECT array_agg(20000)(id) FROM fact_signal', /at most 10000/);
  refused(t, 'SELECT groupArrayIf(20000)(id, 1) FROM fact_signal', /at most 10000/);
  refused(t, 'SELECT topK(100000000)(id) FROM fact_signal', /parameter 1 of topK\(\) is at most/);
  refused(t, 'SELECT topK(10, 1000)(id) FROM fact_signal', /parameter 2 of topK\(\) is at most 100/);
  refused(t, 'SELECT groupArraySorted(-20000)(id) FROM fact_signal', /at most 10000/);
  refused(t, "SELECT groupConcat(',', 100000)(id) FROM fact_signal", /parameter 2 of groupConcat\(\) is at most/);
  refused(t, 'SELECT histogram(5000)(1) FROM fact_signal', /at most 1000/);
  refused(t, "SELECT groupArray('99999999')(id) FROM fact_signal", /parameter 1 of groupArray\(\) must be a number/);
  accepted(t, 'SELECT groupArray(10000)(id), topK(10, 3, \'counts\')(id), groupConcat(\',\', 5)(id), groupConcat(\',\')(id), histogram(10)(1) FROM fact_signal');
  accepted(t, 'SELECT groupArray(id), quantiles(0.1, 0.9)(1) FROM fact_signal');
});

t.test('literal bounds hold on the absolute value; range() on the elements it generates', async (t) => {
  refused(t, 'SELECT range(-1000000000, 1)', /range\(\) generates at most 1000 elements/);
  refused(t, 'SELECT range(-1000, 1000)', /range\(\) generates at most 1000 elements/);
  refused(t, 'SELECT range(0, 1000000, 1)', /at most 1000/);
  refused(t, 'SELECT length(arrayResize([1], -100000000))', /argument 2 of arrayResize\(\) is at most 1000 in absolute value/);
  refused(t, 'SELECT arrayWithConstant(-5000, 1)', /at most 1000 in absolute value/);
  refused(t, "SELECT repeat('a', -(1000))", /argument 2 of repeat\(\) (is at most|must be a literal)/);
  refused(t, "SELECT leftPad('a', -100000)", /at most 1000 in absolute value/);
  refused(t, 'SELECT round(1.5, -100)', /at most 76 in absolute value/);
  accepted(t, 'SELECT range(1000), range(-500, 500), range(1000000, 1001000), range(0, 1000, 1), range(1000, 0, -1), range(0, 10000, 10), arrayResize([1], 1000), arrayWithConstant(1000, 1)');
  accepted(t, 'SELECT range(5, 1), range(0, 10, -1)');
  refused(t, 'SELECT range(0, 10, 0)', /step/);
  for (const q of ['SELECT range(1e8)', 'SELECT range(0, 1e8)', 'SELECT range(0., 10., 1.)', "SELECT range('100000000')", 'SELECT range(NULL)', 'SELECT range(true)']) refused(t, q, /range\(\) takes integer literals/);
});

t.test('array and tuple literals and negative numbers are literals', async (t) => {
  accepted(t, "SELECT hasAll(data.tags::Array(String), ['a', 'b']), hasAny(data.tags::Array(String), ['x']), hasSubstr([1, 2, 3], [2, 3]) FROM fact_signal");
  accepted(t, "SELECT transform(event_name, ['a', 'b'], ['A', 'B'], 'other'), transform(1, [1, 2], [-1, -2]) FROM fact_signal");
  accepted(t, 'SELECT round(1.2345, -2), round(1.5, -(2)), toDecimal32(1, 2)');
  accepted(t, "SELECT hasAll([(1, 'a')], [(1, 'a')]), hasAny([[1], [2]], [[1]]), hasAll([NULL, 1], [NULL])");
  refused(t, 'SELECT hasAll([1], [toUInt8(1)])', /argument 2 of hasAll\(\) must be a literal/);
  refused(t, 'SELECT hasAll([1], [number]) FROM numbers(1)', /must be a literal/);
  refused(t, `SELECT transform(1, [${Array(1_001).fill('1').join(', ')}], [1], 0)`, /a literal array argument of transform\(\) has at most 1000 elements/);
  accepted(t, `SELECT transform(1, [${Array(1_000).fill('1').join(', ')}], [${Array(1_000).fill('1').join(', ')}], 0)`);
  // The needle of an array-against-array test is compared with every element of the row's array.
  refused(t, `SELECT hasAll(['a'], [${Array(101).fill("'a'").join(', ')}])`, /a literal array argument of hasAll\(\) has at most 100 elements/);
  refused(t, `SELECT hasAny([1], [[${Array(100).fill('1').join(', ')}]])`, /hasAny\(\) has at most 100 elements/);
  accepted(t, `SELECT hasAny([1], [${Array(100).fill('1').join(', ')}])`);
});

t.test('a lambda body reads only its own parameters and literals', async (t) => {
  // Quadratic within one row, where the engine does not check its time limit.
  refused(t, 'SELECT arrayFilter(x -> has(a, x), a) FROM (SELECT groupArray(id) AS a FROM fact_signal)', /lambda.*only its own parameters.*"a"/);
  refused(t, 'SELECT arrayMap(x -> x + n, [1, 2]) FROM (SELECT 1 AS n)', /"n"/);
  refused(t, 'SELECT arrayMap(x -> length(id), [1]) FROM fact_signal', /"id"/);
  refused(t, 'SELECT arrayMap(x -> fact_signal.id, [1]) FROM fact_signal', /"fact_signal\.id"/);
  refused(t, 'WITH (SELECT groupArray(id) FROM fact_signal) AS a SELECT arrayFilter(x -> has(a, x), a)', /"a" comes from outside the lambda/);
  refused(t, 'WITH upper(id) AS w SELECT arrayMap(x -> w, [1]) FROM fact_signal', /"w"/);
  // A WITH name for a literal is the literal (the engine substitutes it): allowed, unless something closer has the name.
  accepted(t, "WITH 2 AS factor, ['a', 'b'] AS keys SELECT arrayMap(x -> x * factor, [1, 2]), arrayFilter(x -> has(keys, x), ['a']), arrayMap(x -> -factor, [1])");
  accepted(t, 'WITH 2 AS factor SELECT (SELECT arrayMap(x -> x * factor, [1]))');
  refused(t, 'WITH 2 AS w SELECT arrayMap(x -> w, [1]) FROM (SELECT groupArray(1) AS w)', /"w"/);
  refused(t, 'WITH 2 AS w SELECT groupArray(id) AS w, arrayMap(x -> w, [1]) FROM fact_signal', /"w"/);
  refused(t, 'WITH 2 AS w SELECT arrayMap(w -> arrayMap(y -> w, [1]), [1])', /"w"/);
  refused(t, 'SELECT arrayMap(x -> count(), [1]) FROM fact_signal', /aggregate function count\(\) inside a lambda/);
  refused(t, 'SELECT arrayMap(x -> sum(x), [1])', /aggregate function sum\(\) inside a lambda/);
  refused(t, 'SELECT arrayMap(x -> (SELECT groupArray(id) FROM fact_signal), [1])', /subquery inside a lambda/);
  refused(t, 'SELECT arrayMap(x -> x IN (SELECT 1), [1])', /subquery inside a lambda/);
  refused(t, 'SELECT arrayMap(x -> arrayMap(y -> has(x, y), x), [[1, 2]])', /"x"/);
  refused(t, 'SELECT arraySum(x -> arraySum(y -> 1, range(1000)), range(1000)) FROM numbers(1000000000)', /range\(\) generates .* not allowed inside a lambda/);
  refused(t, "SELECT arrayMap(x -> repeat(x, 100), ['a'])", /repeat\(\) .*inside a lambda/);
  refused(t, 'SELECT arrayMap(x -> row_number() OVER (), [1])', /inside a lambda/);
  accepted(t, 'SELECT arrayMap(x -> x * 2 + 1, [1, 2]), arrayFilter((x, y) -> x > y, [1, 3], [2, 2]), arrayMap(x -> arrayMap(y -> y + 1, x), [[1], [2, 3]])');
  accepted(t, "SELECT arrayMap(x -> concat(x, '!'), data.tags::Array(String)), arrayCount(x -> x > 1, [1, 2]), arraySort(x -> -x, [1, 2]) FROM fact_signal");
  accepted(t, "SELECT arrayMap(x -> hasAny(x, ['a']), [['a']]), arrayMap(x -> transform(x, [1], [2], 0), [1])");
});

t.test('numbers(): all reads of one query together generate a bounded number of rows', async (t) => {
  const max = MAX_GENERATED_ROWS;
  t.equal(max, 1_000_000_000n);
  accepted(t, 'SELECT count() FROM numbers(1000000000)');
  accepted(t, 'SELECT count() FROM numbers(1000) AS a, numbers(1000000) AS b');
  refused(t, 'SELECT count() FROM numbers(1000000000) AS a, numbers(1000000000) AS b', /numbers\(\) reads of a query generate at most 1000000000 rows together/);
  refused(t, 'SELECT count() FROM numbers(100000) AS a CROSS JOIN numbers(100000) AS b', /together/);
  refused(t, 'SELECT count() FROM numbers(100000) AS a WHERE a.number IN (SELECT number FROM numbers(100000))', /together/);
  refused(t, 'SELECT count() FROM (SELECT * FROM numbers(100000)) AS a, (SELECT * FROM numbers(100000)) AS b', /together/);
  refused(t, 'SELECT (SELECT count() FROM numbers(1000000000)) + (SELECT count() FROM numbers(1000000000))', /together/);
  refused(t, 'SELECT count() FROM numbers(1000000000) UNION ALL SELECT count() FROM numbers(1000000000)', /together/);
  // A CTE is read once per reference.
  refused(t, 'WITH n AS (SELECT number FROM numbers(100000)) SELECT count() FROM n AS a, n AS b', /together/);
  refused(t, 'WITH n AS (SELECT number FROM numbers(1000)) SELECT count() FROM n AS a, n AS b, n AS c, n AS d', /together/);
  refused(t, 'WITH n AS (SELECT number FROM numbers(100000)) SELECT count() FROM n WHERE number IN n', /together/);
  refused(t, 'WITH n AS (SELECT number FROM numbers(1000)), m AS (SELECT * FROM n AS a, n AS b) SELECT count() FROM m AS a, m AS b', /together/);
  accepted(t, 'WITH n AS (SELECT number FROM numbers(1000000000)) SELECT count() FROM n');
  accepted(t, 'WITH n AS (SELECT number FROM numbers(1000000000)), m AS (SELECT 1) SELECT count() FROM m');
  accepted(t, 'SELECT count() FROM numbers(0) AS a, numbers(1000000000) AS b');
  accepted(t, 'SELECT count() FROM numbers(5, 1000000000)');
});

t.test('generated lambdas: refused exactly when a body reads something other than its own parameters and literals', async (t) => {
  // Each generated body carries what it reads; the oracle is the generator's own knowledge.
  interface Body {
    text: string;
    /** Reads something a lambda body may not (an outer column, an enclosing parameter, a subquery, an aggregate, a generator). */
    bad: boolean;
  }
  const body = (own: string, outer: string | undefined, depth: number): fc.Arbitrary<Body> => {
    const leaves: fc.Arbitrary<Body>[] = [
      fc.constant({ text: own, bad: false }),
      fc.constantFrom('1', "'s'", '-2', '[1, 2]', 'factor').map((x) => ({ text: x, bad: false })),
      fc.constantFrom('n', 'a', 'fact_signal.id', 'id').map((x) => ({ text: x, bad: true })),
      fc.constantFrom('(SELECT 1)', 'count()', 'range(3)', "repeat('a', 2)", 'sum(1) OVER ()').map((x) => ({ text: x, bad: true })),
    ];
    if (outer) leaves.push(fc.constant({ text: outer, bad: true }));
    if (depth === 0) return fc.oneof(...leaves);
    const sub = body(own, outer, depth - 1);
    return fc.oneof(
      ...leaves,
      fc.tuple(sub, sub).map(([x, y]) => ({ text: `(${x.text} = ${y.text})`, bad: x.bad || y.bad })),
      sub.map((x) => ({ text: `toString(${x.text})`, bad: x.bad })),
      sub.map((x) => ({ text: `has([${x.text}], 1)`, bad: x.bad })),
      // A nested lambda: its body may read only `y`; its array argument is in this body.
      fc.tuple(body('y', own, depth - 1), fc.constantFrom({ text: `[${own}]`, bad: false }, { text: '[1, 2]', bad: false }, { text: 'a', bad: true })).map(([inner, arr]) => ({
        text: `arrayCount(y -> ${inner.text} = ${inner.text}, ${arr.text})`,
        bad: inner.bad || arr.bad,
      })),
    );
  };
  const q = body('x', undefined, 3).map((b) => ({ text: `WITH 2 AS factor SELECT arrayMap(x -> ${b.text}, a) FROM (SELECT [1, 2] AS a, 3 AS n) AS s, fact_signal`, bad: b.bad }));
  let refusedN = 0;
  let acceptedN = 0;
  for (const s of fc.sample(q, { numRuns: 600, seed: 11 })) {
    const o = outcome(s.text);
    if (s.bad) {
      refusedN++;
      if (!/^INVALID_QUERY: /.test(o)) t.fail(`${s.text}: should be refused, ${o}`);
    } else {
      acceptedN++;
      // Accepted by the cost rules; the engine may still refuse a type mismatch, not the compiler.
      if (o !== 'ok') t.fail(`${s.text}: should compile, ${o}`);
    }
  }
  t.ok(refusedN > 100 && acceptedN > 50, `${refusedN} refused and ${acceptedN} accepted`);
});

t.test('the parser\'s work is linear-bounded: no exponential backtracking on parenthesized subqueries', async (t) => {
  // `((SELECT X) + 1)` is first tried as a query, then re-read as an expression; nested, every
  // level doubled the work: 22 levels (338 characters) took 2.8 s in the service's event loop,
  // before any slot or limit, and each further level doubles it.
  const nested = (k: number): string => {
    let p = '1';
    for (let i = 0; i < k; i++) p = `((SELECT ${p}) + 1)`;
    return `SELECT ${p}`;
  };
  for (const k of [1, 2, 3, 4]) accepted(t, nested(k));
  accepted(t, 'SELECT ((SELECT 1) + 1) * ((SELECT 2) + 2), ((SELECT 1) UNION ALL (SELECT 2)) FROM fact_signal WHERE id IN ((SELECT id FROM fact_signal) UNION ALL (SELECT signal_id FROM fact_cost))');
  for (const k of [24, 60]) refused(t, nested(k), /parenthesized subqueries inside expressions/);
  const flat = `SELECT ${Array.from({ length: 150 }, () => '((SELECT 1) + 1)').join(' + ')}`;
  accepted(t, flat);
  // The budget is per token of the query: many moderately nested groups side by side are fine.
  accepted(t, `SELECT ${Array(40).fill(nested(4).slice('SELECT '.length)).join(' + ')}`);
});

t.test('the engine\'s expanded query is bounded: at most 256 SELECTs after CTEs are inlined', async (t) => {
  // The engine inlines a CTE at every reference and analyses the result without checking its
  // time limit: 16 CTEs each reading the previous twice (about 700 characters) held it 31 s.
  const chain = (k: number, body: (prev: string) => string): string =>
    `WITH c0 AS (SELECT id FROM fact_signal), ${Array.from({ length: k }, (_, i) => `c${i + 1} AS (${body(`c${i}`)})`).join(', ')} SELECT count() FROM c${k}`;
  const join = (p: string): string => `SELECT a.id AS id FROM ${p} AS a, ${p} AS b`;
  const union = (p: string): string => `SELECT id FROM ${p} UNION ALL SELECT id FROM ${p}`;
  const inSub = (p: string): string => `SELECT id FROM ${p} WHERE id IN ${p}`;
  accepted(t, chain(6, union));
  accepted(t, chain(6, join));
  refused(t, chain(8, union), /expands to more than 256 SELECTs/);
  refused(t, chain(8, join), /expands to more than 256 SELECTs/);
  refused(t, chain(16, join), /expands to more than 256 SELECTs/);
  refused(t, chain(9, inSub), /expands to more than 256 SELECTs/);
  refused(t, Array(257).fill('SELECT 1').join(' UNION ALL '), /expands to more than 256 SELECTs/);
  accepted(t, Array(256).fill('SELECT 1').join(' UNION ALL '));
  // Each CTE's own expansion is bounded too, read or not.
  refused(t, `WITH c0 AS (SELECT 1), ${Array.from({ length: 20 }, (_, i) => `c${i + 1} AS (SELECT * FROM c${i} AS a, c${i} AS b)`).join(', ')} SELECT 1`, /expands to more than 256 SELECTs/);
  accepted(t, `WITH c0 AS (SELECT 1), ${Array.from({ length: 7 }, (_, i) => `c${i + 1} AS (SELECT * FROM c${i} AS a, c${i} AS b)`).join(', ')} SELECT 1`);
});

t.test('the sets of IN nest at most MAX_IN_SET_DEPTH deep (the engine analyses each level twice over)', async (t) => {
  const chain = (d: number): string => (d === 0 ? '(1)' : `(SELECT 1 WHERE 1 IN ${chain(d - 1)})`);
  accepted(t, `SELECT 1 WHERE 1 IN ${chain(MAX_IN_SET_DEPTH)}`);
  refused(t, `SELECT 1 WHERE 1 IN ${chain(MAX_IN_SET_DEPTH + 1)}`, /the sets of IN nest more than 8 levels deep/);
  refused(t, `SELECT 1 WHERE 1 IN ${chain(30)}`, /the sets of IN nest more than 8 levels deep/);
  // The function form, NOT IN, and FROM subqueries between the levels count alike.
  const fn = (d: number): string => (d === 0 ? '(1)' : `(SELECT 1 WHERE notIn(2, ${fn(d - 1)}))`);
  accepted(t, `SELECT 1 WHERE in(1, ${fn(MAX_IN_SET_DEPTH)})`);
  refused(t, `SELECT 1 WHERE in(1, ${fn(MAX_IN_SET_DEPTH + 1)})`, /nest more than 8/);
  const via = (d: number): string => (d === 0 ? '(1)' : `(SELECT x FROM (SELECT 1 AS x WHERE 1 IN ${via(d - 1)}))`);
  accepted(t, `SELECT 1 WHERE 1 IN ${via(MAX_IN_SET_DEPTH)}`);
  refused(t, `SELECT 1 WHERE 1 IN ${via(MAX_IN_SET_DEPTH + 1)}`, /nest more than 8/);
  // A CTE counts at the depth where it is referenced, by IN or by FROM.
  const cte = `WITH c AS (SELECT 1 AS x WHERE 1 IN ${chain(MAX_IN_SET_DEPTH - 1)}) `;
  accepted(t, `${cte}SELECT 1 WHERE 1 IN c`);
  refused(t, `${cte}SELECT 1 WHERE 1 IN (SELECT 1 WHERE 1 IN c)`, /nest more than 8/);
  accepted(t, `${cte}SELECT 1 WHERE 1 IN (SELECT x FROM c)`);
  refused(t, `${cte}SELECT 1 WHERE 1 IN (SELECT 1 WHERE 1 IN (SELECT x FROM c))`, /nest more than 8/);
  // Sets side by side do not nest; nor do scalar subqueries or EXISTS.
  accepted(t, `SELECT 1 WHERE ${Array.from({ length: 20 }, () => '1 IN (SELECT 1)').join(' AND ')}`);
  const scalar = (d: number): string => (d === 0 ? '1' : `(SELECT 1 WHERE 1 = ${scalar(d - 1)})`);
  accepted(t, `SELECT ${scalar(20)}`);
});

t.test("what the compiler remembers is bounded by its texts' length, and a refusal keeps no parser frames", async (t) => {
  setFlagsFromString('--expose_gc');
  const gc = runInNewContext('gc') as () => void;
  const scope = { orgId: 'org_remembered', mode: 'live' as const };
  // 20 KB texts: array literals (accepted: a tree of about 1.5 MB each) and parentheses past the nesting limit (refused).
  const arrays = (i: number): string => `SELECT [${'[1],'.repeat(4_990)}[${i}]]`;
  const nested = (i: number): string => `SELECT ${'('.repeat(19_980)}${i}`;
  const c = new QueryCompiler(VIEW_SCHEMAS, 'analytics');
  gc();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < 150; i++) {
    c.compile(arrays(i), scope);
    t.throws(() => c.compile(nested(i), scope), /nests deeper/);
  }
  gc();
  const grown = (process.memoryUsage().heapUsed - before) / 2 ** 20;
  const { texts, chars } = c.remembered;
  t.ok(chars <= CACHED_CHARS_MAX, `${chars} characters of text remembered (at most ${CACHED_CHARS_MAX})`);
  t.ok(texts < 60, `${texts} texts of 20 KB remembered`);
  t.ok(grown < 150, `the heap grew ${grown.toFixed(0)} MB for 300 such texts (each remembered refusal with its frames held 1.4 MB)`);
  // The last ones are still answered from memory, the refusal as before.
  t.ok(c.cached(arrays(149)) !== undefined && c.cached(nested(149)) instanceof CompileError);
  t.throws(() => c.compile(nested(149), scope), /nests deeper/);
});
