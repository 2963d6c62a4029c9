/**
 * src/billing/decimal.ts: strict parsing, canonical strings, exact arithmetic (or an error,
 * never rounding) and the nearest-double JSON number. Pure: no services needed.
 */
import t, { type Test } from 'tap';
import fc from 'fast-check';
import {
  DecimalError,
  PRECISION,
  ZERO,
  add,
  compare,
  decimalFromInteger,
  decimalFromNumber,
  mul,
  neg,
  parseDecimal,
  sign,
  sub,
  sum,
  toCanonicalString,
  toJsonNumber,
  type Dec,
  type DecimalErrorCode,
} from '../../src/billing/decimal.js';
import { fromMillionths, millionths } from '../helpers/billing.js';

const any = { allowNegative: true, maxDecimalPlaces: 2000, maxIntegerDigits: 2000 };
const d = (s: string): Dec => parseDecimal(s, any);
const str = (x: Dec): string => toCanonicalString(x);

function refuses(t: Test, fn: () => unknown, code: DecimalErrorCode, msg?: string): void {
  try {
    fn();
    t.fail(`expected DecimalError ${code}: ${msg ?? ''}`);
  } catch (e) {
    t.type(e, DecimalError, msg ?? code);
    t.equal((e as DecimalError).code, code, msg ?? code);
  }
}

t.test('accepts the plain decimal grammar and canonicalizes', async (t) => {
  const cases: [string, string][] = [
    ['0', '0'],
    ['-0', '0'],
    ['-0.000', '0'],
    ['1.50', '1.5'],
    ['100', '100'],
    ['100.000000', '100'],
    ['0.000001', '0.000001'],
    ['-12.345600', '-12.3456'],
    ['123456789012345678901234567890.123456', '123456789012345678901234567890.123456'],
  ];
  for (const [input, want] of cases) {
    t.equal(str(parseDecimal(input, { allowNegative: true })), want, `${input} → ${want}`);
  }
});

t.test('refuses everything else with a code naming the problem', async (t) => {
  const cases: [unknown, DecimalErrorCode][] = [
    [12, 'WRONG_TYPE'],
    [null, 'WRONG_TYPE'],
    ['', 'EMPTY'],
    ['1e3', 'EXPONENT'],
    ['1.5E-7', 'EXPONENT'],
    ['-2e+10', 'EXPONENT'],
    ['NaN', 'NOT_FINITE'],
    ['Infinity', 'NOT_FINITE'],
    ['-Infinity', 'NOT_FINITE'],
    ['+1', 'SYNTAX'],
    [' 1', 'SYNTAX'],
    ['1 ', 'SYNTAX'],
    ['.5', 'SYNTAX'],
    ['5.', 'SYNTAX'],
    ['007', 'SYNTAX'],
    ['-01.5', 'SYNTAX'],
    ['1,5', 'SYNTAX'],
    ['0x10', 'SYNTAX'],
    ['１', 'SYNTAX'],
    ['--1', 'SYNTAX'],
    ['-', 'SYNTAX'],
    ['1.0000001', 'TOO_MANY_DECIMAL_PLACES'],
    ['1'.repeat(31), 'TOO_MANY_INTEGER_DIGITS'],
    ['-1', 'NEGATIVE'],
    ['-0.000001', 'NEGATIVE'],
  ];
  for (const [input, code] of cases) refuses(t, () => parseDecimal(input), code, JSON.stringify(input));
});

t.test('error messages name the field and the limit', async (t) => {
  try {
    parseDecimal('1.1234567', { field: 'pool.granted' });
    t.fail('should throw');
  } catch (e) {
    const err = e as DecimalError;
    t.equal(err.field, 'pool.granted');
    t.equal(err.message, 'pool.granted has 7 decimal places; at most 6 are allowed');
  }
  t.equal(str(parseDecimal('1.12345678', { maxDecimalPlaces: 8 })), '1.12345678', 'the limit is an option');
});

t.test('decimalFromNumber takes the shortest round-trip decimal of a double', async (t) => {
  t.equal(str(decimalFromNumber(0.1)), '0.1', 'not 0.1000000000000000055511151231257827…');
  t.equal(str(decimalFromNumber(3)), '3');
  t.equal(str(decimalFromNumber(-0)), '0');
  t.equal(str(decimalFromNumber(1e21)), '1000000000000000000000');
  t.equal(str(decimalFromNumber(1.5e-6, { maxDecimalPlaces: 7 })), '0.0000015');
  t.equal(str(decimalFromNumber(-2.5, { allowNegative: true })), '-2.5');
  refuses(t, () => decimalFromNumber(1.5e-6), 'TOO_MANY_DECIMAL_PLACES');
  refuses(t, () => decimalFromNumber(1e31), 'TOO_MANY_INTEGER_DIGITS');
  refuses(t, () => decimalFromNumber(-1), 'NEGATIVE');
  refuses(t, () => decimalFromNumber(NaN), 'NOT_FINITE');
  refuses(t, () => decimalFromNumber(Infinity), 'NOT_FINITE');
  refuses(t, () => decimalFromNumber('1' as unknown as number), 'WRONG_TYPE');
  t.equal(str(decimalFromInteger(42)), '42');
  refuses(t, () => decimalFromInteger(2 ** 53), 'OUT_OF_RANGE');
  refuses(t, () => decimalFromInteger(0.5), 'OUT_OF_RANGE');
});

t.test('canonical strings never use exponent notation, at any magnitude', async (t) => {
  t.equal(str(d('0.' + '0'.repeat(39) + '1')), '0.' + '0'.repeat(39) + '1');
  t.equal(str(d('1' + '0'.repeat(79))), '1' + '0'.repeat(79));
  const big = mul(d('1' + '0'.repeat(79)), d('1' + '0'.repeat(79)));
  t.equal(str(big), '1' + '0'.repeat(158));
  const tiny = mul(d('0.' + '0'.repeat(39) + '1'), d('0.' + '0'.repeat(39) + '1'));
  t.equal(str(tiny), '0.' + '0'.repeat(79) + '1');
  t.equal(str(sub(d('1.25'), d('1.25'))), '0', 'zero is "0", not "-0" or "0.00"');
  t.equal(str(neg(ZERO)), '0');
  t.equal(str(mul(d('-3'), ZERO)), '0');
});

t.test('arithmetic is exact where a double is not', async (t) => {
  t.equal(str(add(d('0.1'), d('0.2'))), '0.3');
  t.equal(str(sub(d('0.3'), d('0.1'))), '0.2');
  t.equal(str(mul(d('1.1'), d('1.1'))), '1.21');
  t.equal(str(add(d('9007199254740993'), d('0.000001'))), '9007199254740993.000001');
  t.equal(str(add(d('1'), d('0.' + '0'.repeat(59) + '1'))), '1.' + '0'.repeat(59) + '1', 'precision 50 would give 1');
  t.equal(str(sum([d('0.1'), d('0.1'), d('0.1')])), '0.3');
  t.equal(str(sum([])), '0');
  t.equal(compare(d('0.30'), d('0.3')), 0);
  t.equal(compare(d('-1'), d('0.000001')), -1);
  t.equal(compare(d('2'), d('1.999999')), 1);
  t.same([sign(d('-0.000001')), sign(ZERO), sign(d('7'))], [-1, 0, 1]);
});

t.test('a result that would need more than PRECISION digits is an error, never rounded', async (t) => {
  t.equal(PRECISION, 1000);
  const n499 = d('9'.repeat(499));
  t.equal(str(mul(n499, n499)), '9'.repeat(498) + '8' + '0'.repeat(498) + '1', '998 digits: exact');
  const n600 = d('9'.repeat(600));
  refuses(t, () => mul(n600, n600), 'INEXACT', '1200 digits: refused');
  const far = d('1' + '0'.repeat(600));
  const tiny = d('0.' + '0'.repeat(500) + '1');
  refuses(t, () => add(far, tiny), 'INEXACT', 'magnitudes 1100 digits apart: refused');
  refuses(t, () => sub(far, tiny), 'INEXACT');
  t.equal(str(add(d('1' + '0'.repeat(400)), d('0.' + '0'.repeat(400) + '1'))), '1' + '0'.repeat(400) + '.' + '0'.repeat(400) + '1');
});

t.test('JSON numbers: nearest double, never -0, never Infinity', async (t) => {
  t.equal(toJsonNumber(d('0.1')), 0.1);
  t.equal(toJsonNumber(d('-2.5')), -2.5);
  t.equal(toJsonNumber(d('9007199254740993')), 9007199254740992, 'ties to even');
  t.equal(toJsonNumber(d('9007199254740995')), 9007199254740996, 'ties to even');
  t.equal(toJsonNumber(d('9007199254740993.000001')), 9007199254740994, 'above the tie rounds up');
  t.ok(Object.is(toJsonNumber(neg(d('0'))), 0));
  t.ok(Object.is(toJsonNumber(d('-0.000000')), 0));
  const beyond = mul(mul(d('1' + '0'.repeat(80)), d('1' + '0'.repeat(80))), mul(d('1' + '0'.repeat(80)), d('1' + '0'.repeat(80))));
  refuses(t, () => toJsonNumber(beyond), 'OUT_OF_RANGE');
});

// Arbitraries: decimals with up to 20 integer digits and 6 places, as strings.
const decString = fc
  .tuple(fc.boolean(), fc.bigInt({ min: 0n, max: 10n ** 26n - 1n }), fc.integer({ min: 0, max: 6 }))
  .map(([negative, digits, places]) => {
    const text = digits.toString().padStart(places + 1, '0');
    const intPart = text.slice(0, text.length - places);
    const frac = text.slice(text.length - places);
    return (negative ? '-' : '') + intPart + (places > 0 ? '.' + frac : '');
  });

t.test('property: parse ∘ canonical is the identity on values, and canonical strings are canonical', async (t) => {
  fc.assert(
    fc.property(decString, (s) => {
      const x = d(s);
      const c = str(x);
      return str(d(c)) === c && c === fromMillionths(millionths(s)) && !/e/i.test(c);
    }),
    { numRuns: 300 },
  );
  t.pass();
});

t.test('property: add, sub, mul and compare agree with BigInt arithmetic', async (t) => {
  fc.assert(
    fc.property(decString, decString, (a, b) => {
      const [x, y] = [d(a), d(b)];
      const [ma, mb] = [millionths(a), millionths(b)];
      return (
        str(add(x, y)) === fromMillionths(ma + mb) &&
        str(sub(x, y)) === fromMillionths(ma - mb) &&
        str(mul(x, y)) === fromMillionths(ma * mb, 12) &&
        compare(x, y) === (ma < mb ? -1 : ma > mb ? 1 : 0)
      );
    }),
    { numRuns: 300 },
  );
  t.pass();
});

t.test('property: toJsonNumber is the nearest double', async (t) => {
  fc.assert(
    fc.property(decString, (s) => {
      const n = toJsonNumber(d(s));
      // the double nearest to s is what the engine's own correctly rounded parser gives
      return n === Number(s) || (n === 0 && Number(s) === 0);
    }),
    { numRuns: 300 },
  );
  t.pass();
});
