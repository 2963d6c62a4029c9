/**
 * parseLimits (src/admin/routes.ts): the PATCH /admin/v1/organizations/:id/limits body.
 */
import t from 'tap';
import fc from 'fast-check';
import { ApiError } from '../../src/errors.js';
import { parseLimits } from '../../src/admin/routes.js';
import { LIMIT_BOUNDS } from '../../src/shared/org-limits.js';

function limitsError(body: unknown): ApiError {
  try {
    parseLimits(body);
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error(`expected INVALID_LIMITS for ${JSON.stringify(body)}`);
}

t.test('accepted values', async (t) => {
  t.same(parseLimits({ burst: 500 }), { burst: 500 });
  t.same(parseLimits({ burst: 1_000_000_000 }), { burst: 1_000_000_000 });
  t.same(parseLimits({ refillPerSecond: 0.001 }), { refillPerSecond: 0.001 });
  t.same(parseLimits({ refillPerSecond: 1.5 }), { refillPerSecond: 1.5 }, 'fractional refill');
  t.same(parseLimits({ refillPerSecond: 1_000_000_000 }), { refillPerSecond: 1_000_000_000 });
  t.same(parseLimits({ analyticsConcurrency: 1 }), { analyticsConcurrency: 1 });
  t.same(parseLimits({ analyticsConcurrency: 1000 }), { analyticsConcurrency: 1000 });
  t.same(parseLimits({ burst: 20_000, refillPerSecond: 2_000, analyticsConcurrency: 8 }), { burst: 20_000, refillPerSecond: 2_000, analyticsConcurrency: 8 });
  t.same(parseLimits({ burst: 500.0 }), { burst: 500 }, '500.0 is the whole number 500');
  t.same(parseLimits(JSON.parse('{"burst": 5e3}')), { burst: 5000 }, 'exponent notation of a whole number');
});

t.test('each bad value is INVALID_LIMITS naming the field', async (t) => {
  const cases: [unknown, string][] = [
    [{ burst: 499 }, 'burst: must be a whole number between 500 and 1000000000, got 499'],
    [{ burst: 1.5 }, 'burst: must be a whole number between 500 and 1000000000, got 1.5'],
    [{ burst: 500.5 }, 'burst: must be a whole number between 500 and 1000000000, got 500.5'],
    [{ burst: 1_000_000_001 }, 'burst: must be a whole number between 500 and 1000000000, got 1000000001'],
    [{ burst: -500 }, 'burst: must be a whole number between 500 and 1000000000, got -500'],
    [{ burst: '1000' }, 'burst: must be a whole number between 500 and 1000000000, got "1000"'],
    [{ burst: null }, 'burst: must be a whole number between 500 and 1000000000, got null'],
    [{ burst: true }, 'burst: must be a whole number between 500 and 1000000000, got true'],
    [{ burst: [1000] }, 'burst: must be a whole number between 500 and 1000000000, got [1000]'],
    [{ burst: {} }, 'burst: must be a whole number between 500 and 1000000000, got {}'],
    [{ refillPerSecond: 0 }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got 0'],
    [{ refillPerSecond: -0 }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got 0'],
    [{ refillPerSecond: -1 }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got -1'],
    [{ refillPerSecond: 0.0009 }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got 0.0009'],
    [{ refillPerSecond: 0.000999999 }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got 0.000999999'],
    [{ refillPerSecond: 0.00001 }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got 0.00001'],
    [{ refillPerSecond: 1e-300 }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got 1e-300'],
    [{ refillPerSecond: Number.MIN_VALUE }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got 5e-324'],
    [{ refillPerSecond: 1e10 }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got 10000000000'],
    [{ refillPerSecond: 1_000_000_000.5 }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got 1000000000.5'],
    [{ refillPerSecond: '10' }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got "10"'],
    [{ refillPerSecond: Infinity }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got null'],
    [{ refillPerSecond: NaN }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got null'],
    [{ refillPerSecond: null }, 'refillPerSecond: must be a number between 0.001 and 1000000000, got null'],
    [{ analyticsConcurrency: 0 }, 'analyticsConcurrency: must be a whole number between 1 and 1000, got 0'],
    [{ analyticsConcurrency: 1001 }, 'analyticsConcurrency: must be a whole number between 1 and 1000, got 1001'],
    [{ analyticsConcurrency: 2.5 }, 'analyticsConcurrency: must be a whole number between 1 and 1000, got 2.5'],
    [{ analyticsConcurrency: '4' }, 'analyticsConcurrency: must be a whole number between 1 and 1000, got "4"'],
    [{ foo: 1 }, 'foo: unknown field; allowed: burst, refillPerSecond, analyticsConcurrency'],
    [{ Burst: 1000 }, 'Burst: unknown field; allowed: burst, refillPerSecond, analyticsConcurrency'],
    [{ burst: 1000, extra: 1 }, 'extra: unknown field; allowed: burst, refillPerSecond, analyticsConcurrency'],
    [{}, 'at least one of burst, refillPerSecond, analyticsConcurrency is required'],
    [null, 'body must be a JSON object with burst, refillPerSecond and/or analyticsConcurrency'],
    [[], 'body must be a JSON object with burst, refillPerSecond and/or analyticsConcurrency'],
    [[{ burst: 1000 }], 'body must be a JSON object with burst, refillPerSecond and/or analyticsConcurrency'],
    ['{"burst":1000}', 'body must be a JSON object with burst, refillPerSecond and/or analyticsConcurrency'],
    [1000, 'body must be a JSON object with burst, refillPerSecond and/or analyticsConcurrency'],
  ];
  for (const [body, details] of cases) {
    const e = limitsError(body);
    t.equal(e.code, 'INVALID_LIMITS', `${JSON.stringify(body)}: code`);
    t.equal(e.status, 400);
    t.equal(e.details, details, JSON.stringify(body));
  }
});

t.test('keys inherited from Object.prototype are unknown fields', async (t) => {
  // JSON.parse makes them own properties of the body; LIMIT_BOUNDS only inherits them, so
  // they are unknown fields (not "between undefined and undefined").
  for (const k of ['toString', 'constructor', 'hasOwnProperty', 'valueOf', '__proto__', 'isPrototypeOf']) {
    const body = JSON.parse(`{"${k}": 1000}`) as unknown;
    const e = limitsError(body);
    t.equal(e.code, 'INVALID_LIMITS', `${k}: code`);
    t.equal(e.status, 400, `${k}: status`);
    t.equal(e.details, `${k}: unknown field; allowed: burst, refillPerSecond, analyticsConcurrency`, `${k}: says unknown field`);
    const e2 = limitsError(JSON.parse(`{"burst": 1000, "${k}": 1000}`) as unknown);
    t.equal(e2.details, `${k}: unknown field; allowed: burst, refillPerSecond, analyticsConcurrency`, `${k} after a good field: refused`);
  }
});

t.test('a bad field anywhere refuses the whole patch', async (t) => {
  const e = limitsError({ burst: 1000, refillPerSecond: 0 });
  t.match(e.details, /^refillPerSecond: /);
  const e2 = limitsError({ refillPerSecond: 5, analyticsConcurrency: 0, burst: 1000 });
  t.match(e2.details, /^analyticsConcurrency: /);
});

t.test('property: accepted iff every field is within its bounds', async (t) => {
  const fieldValue = fc.oneof(
    fc.integer({ min: -10, max: 2_000 }),
    fc.integer({ min: 999_999_000, max: 1_000_001_000 }),
    fc.double({ min: -1, max: 2e9, noNaN: true }),
    fc.double({ min: 0, max: 0.01, noNaN: true }),
    fc.constantFrom(0, -0, 0.5, 0.0009, 0.000999999, 0.001, 0.0010001, 1e-5, 499, 500, 1000, 1001, 1e9, 1e9 + 1, Infinity, -Infinity, NaN),
  );
  const body = fc.record(
    { burst: fieldValue, refillPerSecond: fieldValue, analyticsConcurrency: fieldValue },
    { requiredKeys: [] },
  );
  // The documented bounds, written out here rather than read from LIMIT_BOUNDS, so that a
  // change to LIMIT_BOUNDS is noticed.
  const SPEC = {
    burst: { min: 500, max: 1_000_000_000, integer: true },
    refillPerSecond: { min: 0.001, max: 1_000_000_000, integer: false },
    analyticsConcurrency: { min: 1, max: 1_000, integer: true },
  } as const;
  t.same(LIMIT_BOUNDS, SPEC, 'LIMIT_BOUNDS are the documented bounds');
  await fc.assert(
    fc.property(body, (b) => {
      const keys = Object.keys(b) as (keyof typeof SPEC)[];
      const inBounds = (k: keyof typeof SPEC, v: number): boolean => {
        const bd = SPEC[k];
        if (!Number.isFinite(v) || v < bd.min || v > bd.max) return false;
        return !bd.integer || Number.isInteger(v);
      };
      const ok = keys.length > 0 && keys.every((k) => inBounds(k, b[k]!));
      let accepted: boolean;
      try {
        const out = parseLimits(b);
        accepted = true;
        if (JSON.stringify(out) !== JSON.stringify(b)) return false;
      } catch (err) {
        if (!(err instanceof ApiError) || err.code !== 'INVALID_LIMITS') return false;
        accepted = false;
      }
      return accepted === ok;
    }),
    { numRuns: 500 },
  );
  t.pass('parseLimits agrees with the bounds');
});
