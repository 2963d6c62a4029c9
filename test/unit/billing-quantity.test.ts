/**
 * The quantity rule (src/billing/quantity.ts), the stored type it is sized for
 * (src/store/stored.ts), the exact reading of JSON-number texts a double does not keep
 * (src/pipeline/exact-numbers.ts).
 */
import t from 'tap';
import fc from 'fast-check';
import { Decimal as DecimalJs } from 'decimal.js';
import { readQuantity } from '../../src/billing/quantity.js';
import { QUANTITY_MAX_DECIMAL_PLACES, QUANTITY_MAX_INTEGER_DIGITS, STORED_DECIMAL } from '../../src/store/stored.js';
import { fitsStored } from '../../src/billing/stored.js';
import { decimalFromJsonNumberText, parseDecimal, toCanonicalString } from '../../src/billing/decimal.js';
import { doubleKeeps, exactNumbers, exactNumberTexts } from '../../src/pipeline/exact-numbers.js';
import { integerDigitsOfValue, placesOf, readJsonNumberText } from '../../src/shared/json-number.js';

/** The reference: decimal.js with room for every digit these tests produce (its default of 20 would round). */
const Decimal = DecimalJs.clone({ precision: 200 });
const F = 'data.n';
/** Exact canonical text of a decimal text (reference: decimal.js, no rounding on construction). */
const exact = (text: string): string => {
  const d = new Decimal(text);
  return d.isZero() ? '0' : d.toFixed();
};
const reasonOf = (value: unknown, text?: string): string => {
  const r = readQuantity(value, text, F);
  return r.ok ? `ok ${toCanonicalString(r.quantity)}` : r.reason;
};

t.test('the rule by example: every refusal has its reason and names the path', async (t) => {
  t.equal(reasonOf(7.5), 'ok 7.5');
  t.equal(reasonOf('0.000000000001'), 'ok 0.000000000001', '12 places');
  t.equal(reasonOf('999999999999999.999999999999'), 'ok 999999999999999.999999999999', '15 integer digits and 12 places');
  t.equal(reasonOf('123456789012345678901.123456'), 'ok 123456789012345678901.123456', '21 integer digits: within the stored type');
  t.equal(reasonOf('9'.repeat(52) + '.' + '9'.repeat(24)), `ok ${'9'.repeat(52)}.${'9'.repeat(24)}`, 'the stored type\'s largest value');
  t.equal(reasonOf('1.50'), 'ok 1.5', 'trailing zeros are not places');
  t.equal(reasonOf('1.' + '0'.repeat(30)), 'ok 1', 'not even thirty of them');
  t.equal(reasonOf(-0), 'ok 0');
  t.equal(reasonOf(undefined), 'QUANTITY_MISSING');
  t.equal(reasonOf(null), 'QUANTITY_MISSING');
  t.equal(reasonOf(true), 'QUANTITY_NOT_A_NUMBER');
  t.equal(reasonOf({ a: 1 }), 'QUANTITY_NOT_A_NUMBER');
  t.equal(reasonOf([1]), 'QUANTITY_NOT_A_NUMBER');
  t.equal(reasonOf('1e3'), 'QUANTITY_NOT_A_NUMBER', 'a string has no exponent');
  t.equal(reasonOf(' 1'), 'QUANTITY_NOT_A_NUMBER');
  t.equal(reasonOf(''), 'QUANTITY_NOT_A_NUMBER');
  t.equal(reasonOf(-1), 'QUANTITY_NEGATIVE');
  t.equal(reasonOf('-0.5'), 'QUANTITY_NEGATIVE');
  t.equal(reasonOf('0.' + '0'.repeat(24) + '1'), 'QUANTITY_TOO_MANY_DECIMAL_PLACES', '25 places');
  t.equal(reasonOf(1e-25), 'QUANTITY_TOO_MANY_DECIMAL_PLACES');
  t.equal(reasonOf('1' + '0'.repeat(52)), 'QUANTITY_TOO_LARGE', '53 integer digits');
  t.equal(reasonOf(1e52), 'QUANTITY_TOO_LARGE');
  t.equal(reasonOf(1e15), 'ok 1000000000000000');

  const detail = (v: unknown, text?: string): string => {
    const r = readQuantity(v, text, 'data.usage.tokens');
    return r.ok ? '' : r.detail;
  };
  t.equal(detail('0.1234567890123456789012345'), 'data.usage.tokens has 25 decimal places; at most 24 are allowed');
  t.equal(detail('1'.repeat(53)), 'data.usage.tokens has 53 integer digits; at most 52 are allowed');
  t.equal(detail(-2), 'data.usage.tokens must not be negative');
  t.equal(detail(undefined), 'data.usage.tokens is missing');
  t.equal(detail(false), 'data.usage.tokens must be a JSON number or a decimal string, got boolean');
  t.ok(detail('x'.repeat(10_000)).length < 200, 'a long refused value is quoted only in part');
});

t.test('a JSON number is taken at the value its text states, not the double', async (t) => {
  t.equal(reasonOf(0.1, '0.10000000000000000001'), 'ok 0.10000000000000000001', '20 places, though the double prints 0.1');
  t.equal(reasonOf(0.1, '0.1000000000000000000000001'), 'QUANTITY_TOO_MANY_DECIMAL_PLACES', '25 places');
  t.equal(reasonOf(123456789012.34567, '123456789012.3456789012345'), 'ok 123456789012.3456789012345');
  t.equal(reasonOf(1.2345678901234568e20, '123456789012345678901.123456'), 'ok 123456789012345678901.123456', 'the digits as written');
  t.equal(reasonOf(1234567890.1234567, '1234567890.123456789012'), 'ok 1234567890.123456789012', '22 significant digits, exact');
  t.equal(reasonOf(0, '1e-400'), 'QUANTITY_TOO_MANY_DECIMAL_PLACES', 'not the 0 a double reads');
  t.equal(reasonOf(Infinity, '1e400'), 'QUANTITY_TOO_LARGE', 'not Infinity');
  t.equal(reasonOf(0, '1e-99999999999'), 'QUANTITY_TOO_MANY_DECIMAL_PLACES', 'an exponent beyond any range is judged from the text');
  t.equal(reasonOf(0, '0e-99999999999'), 'ok 0');
  t.equal(reasonOf(1500, '1.5e3'), 'ok 1500');
  t.equal(reasonOf(-1, '-1.00000000000000000001'), 'QUANTITY_NEGATIVE');
  t.same(readQuantity(7.5, false, 'data.q'), { ok: false, reason: 'QUANTITY_DIGITS_NOT_KEPT', detail: 'data.q is a JSON number in a batch with more long numbers than the service keeps the digits of; send it as a decimal string' }, 'texts withheld: a number is not priced at its double');
  t.equal(reasonOf('7.5', false as unknown as string), 'ok 7.5', 'a decimal string is unaffected');
  t.throws(() => decimalFromJsonNumberText('01'), { code: 'SYNTAX' });
  t.throws(() => decimalFromJsonNumberText('1.'), { code: 'SYNTAX' });
});

/** Decimal texts: up to 60 integer digits and 30 places (either side of the stored type's 52 and 24), sometimes zeros at either end. */
const decimalText = fc
  .tuple(fc.stringMatching(/^(0|[1-9][0-9]{0,59})$/), fc.stringMatching(/^[0-9]{0,30}$/))
  .map(([i, f]) => (f === '' ? i : `${i}.${f}`));

t.test('property: a quantity is read exactly when it has ≤ 24 places and ≤ 52 integer digits (the stored type), at its exact value, in every form', async () => {
  fc.assert(
    fc.property(decimalText, fc.integer({ min: -3, max: 3 }), (text, shift) => {
      const value = new Decimal(text);
      const places = value.dp();
      const intDigits = value.isZero() || value.lt(1) ? (value.isZero() ? 1 : 0) : value.e + 1;
      const within = places <= QUANTITY_MAX_DECIMAL_PLACES && intDigits <= QUANTITY_MAX_INTEGER_DIGITS;
      // The same value as a string, as a JSON number's text (also in exponent form), and as a double.
      const asExponent = `${value.times(new Decimal(10).pow(-shift)).toFixed()}e${shift}`;
      const forms: [unknown, string | undefined][] = [[text, undefined], [Number(text), text], [Number(asExponent), asExponent]];
      if (doubleKeeps(text)) forms.push([Number(text), undefined]);
      for (const [v, x] of forms) {
        const r = readQuantity(v, x, F);
        if (r.ok !== within) throw new Error(`${JSON.stringify([v, x])}: ok=${r.ok}, expected ${within}`);
        if (r.ok && toCanonicalString(r.quantity) !== exact(text)) throw new Error(`${text} read as ${toCanonicalString(r.quantity)}`);
        if (!r.ok && !(places > QUANTITY_MAX_DECIMAL_PLACES ? ['QUANTITY_TOO_MANY_DECIMAL_PLACES'] : []).concat(intDigits > QUANTITY_MAX_INTEGER_DIGITS ? ['QUANTITY_TOO_LARGE'] : []).includes(r.reason)) {
          throw new Error(`${text}: reason ${r.reason}`);
        }
      }
    }),
    { numRuns: 2_000 },
  );
});

t.test(`the stored type ${STORED_DECIMAL}: its bounds`, async (t) => {
  t.ok(fitsStored(parseDecimal('9'.repeat(52) + '.' + '9'.repeat(24), { maxIntegerDigits: 60, maxDecimalPlaces: 30 })), '52 integer digits and 24 places fit');
  t.notOk(fitsStored(parseDecimal('1' + '0'.repeat(52), { maxIntegerDigits: 60 })), '53 integer digits do not fit');
  t.notOk(fitsStored(parseDecimal('0.' + '0'.repeat(24) + '1', { maxDecimalPlaces: 30 })), '25 places do not fit');
  t.equal(QUANTITY_MAX_INTEGER_DIGITS, 52);
  t.equal(QUANTITY_MAX_DECIMAL_PLACES, 24);
});

const batch = (dataTexts: string[]): string => `{"signals":[${dataTexts.map((d, i) => `{"eventName":"e","customer":{"externalCustomerId":"c${i}"},"data":${d}}`).join(',')}]}`;

t.test('exact number texts: found where a double loses them, by path, nowhere else', async (t) => {
  t.equal(exactNumberTexts(batch(['{"n":7.5,"s":"0.10000000000000000001"}', '{"m":{"k":123456789012345}}'])), null, 'the common case: nothing to keep (a long number inside a string is a string)');
  t.equal(exactNumberTexts(batch(['{"n":1234567890123456}'])), null, '16 digits a double keeps');
  t.same(
    exactNumberTexts(batch(['{"n":0.10000000000000000001,"a":[0.10000000000000000001],"u":{"v":{"w":1e-400}},"x.y":12345678901234567.5}', '{"n":1}', '{}'])),
    [{ n: '0.10000000000000000001', 'u.v.w': '1e-400', 'x.y': '12345678901234567.5' }, null, null],
    'per signal, by dot-joined path; arrays skipped',
  );
  t.same(exactNumberTexts(batch(['{"__proto__":0.10000000000000000001}']))?.[0], JSON.parse('{"__proto__":"0.10000000000000000001"}'), 'a key such as __proto__ is an own property');
  t.same(exactNumberTexts(batch(['{"k\\"\\\\":1e400}'])), [{ 'k"\\': '1e400' }], 'escaped keys');
  const five = Array.from({ length: 5 }, () => '{"q":0.10000000000000000001}');
  const texts = JSON.stringify({ q: '0.10000000000000000001' });
  t.same(exactNumberTexts(batch(five), 3 * Buffer.byteLength(texts)), [{ q: '0.10000000000000000001' }, { q: '0.10000000000000000001' }, { q: '0.10000000000000000001' }, false, false], 'past the budget a signal\'s texts are withheld, and it says so');
});

t.test('property: the exact texts and the parsed data together give every number its written value', async () => {
  const numberText = fc.oneof(
    decimalText,
    fc.tuple(decimalText, fc.integer({ min: -400, max: 400 })).map(([d, e]) => `${d}e${e}`),
    fc.double({ noNaN: true, noDefaultInfinity: true }).map((n) => JSON.stringify(n)),
  );
  fc.assert(
    fc.property(fc.array(fc.array(numberText, { maxLength: 4 }), { minLength: 1, maxLength: 4 }), (signals) => {
      const texts = signals.map((nums) => `{${nums.map((n, i) => `"k${i}":{"v":${n}}`).join(',')}}`);
      const raw = batch(texts);
      const parsed = JSON.parse(raw) as { signals: { data: Record<string, { v: number }> }[] };
      const found = exactNumberTexts(raw);
      signals.forEach((nums, s) =>
        nums.forEach((n, i) => {
          const exact = found?.[s];
          const x = exact ? exact[`k${i}.v`] : undefined;
          const read = x ?? JSON.stringify(parsed.signals[s]!.data[`k${i}`]!.v);
          if (!new Decimal(read).eq(new Decimal(n))) throw new Error(`${n} read as ${read}`);
          if (x !== undefined && doubleKeeps(n)) throw new Error(`${n} needlessly kept`);
        }),
      );
    }),
    { numRuns: 500 },
  );
});

t.test('exponents of any size: judged on the value the text states, never a double\'s 0 or Infinity', async (t) => {
  const refusal = (text: string, value: unknown = Number(text)): string => {
    const r = readQuantity(value, text, 'data.q');
    return r.ok ? `ok ${toCanonicalString(r.quantity)}` : `${r.reason}: ${r.detail}`;
  };
  t.equal(refusal('1e-99999999999999999999'), 'QUANTITY_TOO_MANY_DECIMAL_PLACES: data.q has 99999999999999999999 decimal places; at most 24 are allowed');
  t.equal(refusal('1e-9007199254740993'), 'QUANTITY_TOO_MANY_DECIMAL_PLACES: data.q has 9007199254740993 decimal places; at most 24 are allowed', 'an exponent past 2^53, counted exactly');
  t.equal(refusal('9e-9000000000000000'), 'QUANTITY_TOO_MANY_DECIMAL_PLACES: data.q has 9000000000000000 decimal places; at most 24 are allowed', 'the limit named is the quantity\'s');
  t.equal(refusal('-1e-400'), 'QUANTITY_NEGATIVE: data.q must not be negative', 'the sign first, as for any quantity');
  t.equal(refusal('1e400', '1e400'), 'QUANTITY_TOO_LARGE: data.q has 401 integer digits; at most 52 are allowed', 'the string the stored data holds for it');
  t.equal(refusal('-1e400', '-1e400'), 'QUANTITY_NEGATIVE: data.q must not be negative');
  t.equal(refusal('12e308'), 'QUANTITY_TOO_LARGE: data.q has 310 integer digits; at most 52 are allowed');
  t.equal(refusal('1e+999999999'), 'QUANTITY_TOO_LARGE: data.q has 1000000000 integer digits; at most 52 are allowed');
  t.equal(refusal('1e99999999999999999999'), 'QUANTITY_TOO_LARGE: data.q has 100000000000000000000 integer digits; at most 52 are allowed');
  t.equal(refusal('0e99999999999999999999'), 'ok 0', 'a zero is zero at any exponent');
  t.equal(refusal('-0.000e-99999999999999999999'), 'ok 0');
  t.equal(refusal('0.0000000000000000000000001e+30'), 'ok 100000');
  t.equal(refusal('1000e-27'), 'ok 0.000000000000000000000001', 'trailing zeros of the significand are not places');
  t.equal(refusal(`1${'0'.repeat(100)}e-49`), `ok 1${'0'.repeat(51)}`, '52 integer digits');
  const long = '9'.repeat(1_000_000);
  t.equal(refusal(`1e${long}`), 'QUANTITY_TOO_LARGE: data.q has more than 1000000000000000000000000000000000000000 integer digits; at most 52 are allowed', 'an exponent of a million digits: stated by what the count exceeds');
  t.equal(refusal(`1.5e-${long}`), 'QUANTITY_TOO_MANY_DECIMAL_PLACES: data.q has more than 1000000000000000000000000000000000000000 decimal places; at most 24 are allowed');
  t.equal(refusal(`-1e${long}`), 'QUANTITY_NEGATIVE: data.q must not be negative');
  t.equal(refusal(`0e${long}`), 'ok 0');
  t.equal(refusal(`1e${'9'.repeat(40)}`), `QUANTITY_TOO_LARGE: data.q has 1${'0'.repeat(40)} integer digits; at most 52 are allowed`, 'forty digits of exponent are read exactly');
  t.equal(refusal(`5e-${'0'.repeat(100)}5`), 'ok 0.00005', 'leading zeros of the exponent are not digits');
  for (const text of ['1e-99999999999999999999', '1e-9007199254740993', '9e-9000000000000000', '1e309', '-1e400', '0.0000000000000000000000001e-400', `1e${long}`, `1e-${long}`]) t.notOk(doubleKeeps(text), `the double does not keep ${text}`);
  for (const text of ['0e99999999999999999999', '-0', '-0e-5', '1e308', '5e-324', '0.0000000000000000000000001e+30']) t.ok(doubleKeeps(text), `the double keeps ${text}`);
});

t.test('numbers beyond the double\'s range keep their key in the data to store, as the string of their text', async (t) => {
  const found = exactNumbers(batch(['{"q":1e400,"n":{"m":-1e400},"a":[1e309,2],"k":"me","t":0.10000000000000000001}', '{"q":1e-400}', '{"q":1}']));
  t.same(found?.data, [{ q: '1e400', n: { m: '-1e400' }, a: ['1e309', 2], k: 'me', t: 0.1 }, null, null], 'only signals with such a number; every other number is the double');
  t.same(found?.texts, [{ q: '1e400', 'n.m': '-1e400', t: '0.10000000000000000001' }, { q: '1e-400' }, null], 'their texts are kept for billing as before');
  t.same(Object.keys(exactNumbers(batch(['{"__proto__":1e400}']))!.data[0]!), ['__proto__'], 'an own property');
  const withheld = exactNumbers(batch(['{"q":1e400}', '{"q":1e400}']), Buffer.byteLength(JSON.stringify({ q: '1e400' })));
  t.same(withheld?.data, [{ q: '1e400' }, { q: '1e400' }], 'the stored data does not depend on the texts\' budget');
});

t.test('property: a JSON number\'s value is read exactly at exponents far past 2^53', async () => {
  // A canonical value (significand without trailing zeros, power of ten as a bigint), written
  // as a JSON number in one of its many forms: point moved, zeros added, exponent written
  // with a sign, a plus or leading zeros.
  const value = fc.record({
    negative: fc.boolean(),
    digits: fc.stringMatching(/^[1-9]([0-9]{0,30}[1-9])?$/),
    exponent: fc.oneof(fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }), fc.bigInt({ min: -400n, max: 400n })),
  });
  const form = fc.record({ pointAt: fc.nat({ max: 40 }), leadingZeros: fc.nat({ max: 5 }), trailingZeros: fc.nat({ max: 5 }), plus: fc.boolean(), expZeros: fc.nat({ max: 3 }) });
  fc.assert(
    fc.property(value, form, ({ negative, digits, exponent }, f) => {
      const all = digits + '0'.repeat(f.trailingZeros);
      const point = Math.min(f.pointAt, all.length + f.leadingZeros);
      const padded = '0'.repeat(Math.max(0, point - all.length + 1)) + all;
      const intPart = padded.slice(0, padded.length - point).replace(/^0+(?=\d)/, '');
      const frac = padded.slice(padded.length - point);
      // all = digits × 10^trailingZeros, and the text states (all / 10^point) × 10^e.
      const e = exponent - BigInt(f.trailingZeros) + BigInt(point);
      const expText = `${e < 0n ? '-' : f.plus ? '+' : ''}${'0'.repeat(f.expZeros)}${(e < 0n ? -e : e).toString()}`;
      const text = `${negative ? '-' : ''}${intPart}${frac === '' ? '' : `.${frac}`}e${expText}`;
      const v = readJsonNumberText(text);
      if (v === null || v.negative !== negative || v.digits !== digits || v.exponent !== exponent || !v.exact) throw new Error(`${text}: read as ${JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? x.toString() : x))}`);
      const places = exponent < 0n ? -exponent : 0n;
      const integers = BigInt(digits.length) + exponent > 0n ? BigInt(digits.length) + exponent : 0n;
      if (placesOf(v) !== places || integerDigitsOfValue(v) !== integers) throw new Error(`${text}: places ${placesOf(v)}, integer digits ${integerDigitsOfValue(v)}`);
      // The rule on that value: sign, then places, then integer digits, with exact counts.
      const r = readQuantity(Number(text), text, 'data.q');
      const expected = negative
        ? 'QUANTITY_NEGATIVE data.q must not be negative'
        : places > 24n
          ? `QUANTITY_TOO_MANY_DECIMAL_PLACES data.q has ${places} decimal places; at most 24 are allowed`
          : integers > 52n
            ? `QUANTITY_TOO_LARGE data.q has ${integers} integer digits; at most 52 are allowed`
            : `ok ${exact(`${digits}e${exponent}`)}`;
      const got = r.ok ? `ok ${toCanonicalString(r.quantity)}` : `${r.reason} ${r.detail}`;
      if (got !== expected) throw new Error(`${text}: ${got}, expected ${expected}`);
      // The double keeps it only when it is within the double's range, and then at its value.
      const top = BigInt(digits.length) - 1n + exponent;
      if (doubleKeeps(text) && (top > 308n || top < -324n || !new Decimal(String(Number(text))).eq(new Decimal(`${negative ? '-' : ''}${digits}e${exponent}`)))) throw new Error(`${text}: kept by the double`);
    }),
    { numRuns: 3_000 },
  );
});
