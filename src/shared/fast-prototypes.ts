/**
 * String.prototype back in V8's fast mode, once every module is loaded.
 *
 * ioredis declares `class VerbatimString extends String` (resp/verbatim-string.js). Making
 * String.prototype the prototype of a new class puts it in dictionary mode, and the service's
 * own use does not bring it back (lookups on strings, primitives, never did: read with
 * %HasFastProperties after a run). Optimized code then cannot fold the lookup of a string
 * method (`s.charCodeAt`, `s.slice`, …): every call goes through the generic LoadIC and is not
 * inlined. That was 3–4% of the machine's CPU in the pipeline bench (the claim index's
 * `charCodeAt`; docs/architecture.md, "Process details"), and more in every other string-heavy path.
 * The worker threads are separate V8 instances that do not load ioredis: not affected.
 *
 * A property lookup through an ordinary object whose prototype is String.prototype, once the
 * lookup's IC runs, has V8 optimize that prototype as a prototype again, which returns it to
 * fast mode. No native syntax, no flag; a V8 that never slowed it down is
 * unaffected. test/unit/fast-prototypes.test.ts checks the effect with V8's own
 * %HasFastProperties in a child process.
 */

/** Brings String.prototype back to fast mode (call after the imports that may have slowed it: main.ts `start`). Never throws. */
export function restoreFastStringPrototype(): void {
  const probe = Object.create(String.prototype) as { charCodeAt?: unknown };
  // Enough runs for the function to have feedback and its load IC to run (V8 allocates
  // feedback lazily, after a few calls).
  for (let i = 0; i < 64; i++) lookup(probe);
}

function lookup(o: { charCodeAt?: unknown }): boolean {
  return typeof o.charCodeAt === 'function';
}
