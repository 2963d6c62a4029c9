/**
 * String.prototype back in V8's fast mode, once every module is loaded.
 *
 * ioredis declares `class VerbatimString extends String` (resp/verbatim-string.js). Making
 * String.prototype the prototype of a new class puts it in dictionary mode, and V8 does not
 * bring it back by itself: it had marked the prototype "should be fast" before, so the
 * lookups that would restore it stop there. Optimized code then cannot fold the lookup of a string
 * method (`s.charCodeAt`, `s.slice`, …): every call goes through the generic LoadIC and is not
 * inlined. That was 3–4% of the service's CPU in the pipeline bench (the claim index's
 * `charCodeAt`, README, Benchmarks), and more in every other string-heavy path.
 *
 * A property lookup through an object whose prototype is String.prototype makes V8 optimize
 * that prototype as a prototype again (JSObject::MakePrototypesFast from the load IC), which
 * returns it to fast mode. No native syntax, no flag; a V8 that never slowed it down is
 * unaffected. test/unit/fast-prototypes.test.ts checks the effect with V8's own
 * %HasFastProperties in a child process.
 */

/** Brings String.prototype back to fast mode (call after the imports that may have slowed it: main.ts `start`). */
export function restoreFastStringPrototype(): void {
  const probe = Object.create(String.prototype) as { charCodeAt?: unknown };
  // Enough runs for the function to have feedback and its load IC to run (V8 allocates
  // feedback lazily, after a few calls).
  let seen = 0;
  for (let i = 0; i < 64; i++) if (lookup(probe)) seen++;
  if (seen !== 64) throw new Error('String.prototype.charCodeAt is missing');
}

function lookup(o: { charCodeAt?: unknown }): boolean {
  return typeof o.charCodeAt === 'function';
}
