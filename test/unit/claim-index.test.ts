/**
 * The compact claim index (src/pipeline/claim-index.ts) against a plain model: claim → the
 * owners of its adds, in order, with their log sequences.
 */
import t from 'tap';
import fc from 'fast-check';
import { createHash, randomBytes } from 'node:crypto';
import { ClaimIndex, GENERATION_SPAN_MS, claimDigest, home, ownerDigest } from '../../src/pipeline/claim-index.js';

const HOUR = 3600 * 1000;
/** A claim as the rows worker makes one (base64url sha256), or a batch mark. */
const claimOf = (n: number): string => (n % 7 === 0 ? `batch_bat_${n}` : createHash('sha256').update(`key-${n}`).digest('base64url'));
const ownerOf = (n: number): string => `sig_${n.toString(36)}_${n % 500}`;

interface Add {
  claim: number;
  owner: number;
  /** Hours after the previous add's message. */
  gapHours: number;
}

/** Adds in log order (sequences 1, 2, …; times by the gaps). */
function build(adds: Add[]): { index: ClaimIndex; model: Map<string, { owner: string; seq: number }>; times: number[] } {
  const index = new ClaimIndex();
  const model = new Map<string, { owner: string; seq: number }>();
  const times: number[] = [];
  let at = 1_700_000_000_000;
  adds.forEach((a, i) => {
    at += a.gapHours * HOUR;
    times.push(at);
    index.add(i + 1, at, claimOf(a.claim), ownerOf(a.owner));
    model.set(claimOf(a.claim), { owner: ownerOf(a.owner), seq: i + 1 });
  });
  return { index, model, times };
}

const adds = fc.array(fc.record({ claim: fc.nat(60), owner: fc.nat(40), gapHours: fc.oneof(fc.constant(0), fc.nat(10)) }), { minLength: 1, maxLength: 200 });

t.test('without expiry: the last owner added holds each claim; others see it held; unknown claims are free', async (t) => {
  fc.assert(
    fc.property(adds, fc.nat(40), (list, probe) => {
      const { index, model } = build(list);
      for (let c = 0; c <= 70; c++) {
        const claim = claimOf(c);
        const m = model.get(claim);
        if (!m) {
          if (index.heldBy(claim, ownerOf(probe)) !== 'none' || index.has(claim)) return false;
          continue;
        }
        if (!index.has(claim) || index.heldBy(claim, m.owner) !== 'same') return false;
        if (ownerOf(probe) !== m.owner && index.heldBy(claim, ownerOf(probe)) !== 'other') return false;
      }
      return true;
    }),
    { numRuns: 300 },
  );
});

t.test('expiry: never forgets a claim whose last add is at or after the first sequence; forgets all once every generation is past', async (t) => {
  fc.assert(
    fc.property(adds, fc.nat(210), (list, firstSeq) => {
      const { index, model } = build(list);
      index.expireBefore(firstSeq);
      for (const [claim, m] of model) if (m.seq >= firstSeq && index.heldBy(claim, m.owner) !== 'same') return false;
      index.expireBefore(list.length + 1);
      return index.size === 0 && [...model.keys()].every((c) => !index.has(c));
    }),
    { numRuns: 300 },
  );
});

t.test('expiry forgets a generation at most GENERATION_SPAN_MS of messages after its claims', async (t) => {
  const index = new ClaimIndex();
  const t0 = 1_700_000_000_000;
  index.add(1, t0, claimOf(1), ownerOf(1));
  index.add(2, t0 + GENERATION_SPAN_MS - 1, claimOf(2), ownerOf(2)); // same generation
  index.add(3, t0 + GENERATION_SPAN_MS + 1, claimOf(3), ownerOf(3)); // a new one
  index.expireBefore(2);
  t.equal(index.heldBy(claimOf(1), ownerOf(1)), 'same', 'kept while its generation holds a claim still in the log');
  index.expireBefore(3);
  t.equal(index.heldBy(claimOf(1), ownerOf(1)), 'none', 'forgotten with its generation');
  t.equal(index.heldBy(claimOf(2), ownerOf(2)), 'none');
  t.equal(index.heldBy(claimOf(3), ownerOf(3)), 'same');
  t.equal(index.size, 1);
});

t.test('a claim added again in a newer generation is found with its newer owner, and outlives the older one', async (t) => {
  const index = new ClaimIndex();
  const t0 = 1_700_000_000_000;
  index.add(1, t0, claimOf(5), 'sig_old_0');
  index.add(2, t0 + GENERATION_SPAN_MS + 1, claimOf(5), 'sig_new_0');
  t.equal(index.heldBy(claimOf(5), 'sig_new_0'), 'same');
  t.equal(index.heldBy(claimOf(5), 'sig_old_0'), 'other');
  index.expireBefore(2);
  t.equal(index.heldBy(claimOf(5), 'sig_new_0'), 'same', 'the older generation ended; the newer claim stands');
});

t.test('claims chosen to share low bits do not pile up (the home slot is seeded)', async (t) => {
  // Claims whose first word is zero (a claim is any 43-character base64url text: its first 16
  // bytes): with the raw bits as the home slot they made one run in every table, each insert
  // probing past all the others; seeded, they spread like any others.
  const chosen = Array.from({ length: 10_000 }, () => Buffer.concat([Buffer.alloc(4), randomBytes(28)]).toString('base64url'));
  const random = Array.from({ length: 10_000 }, () => randomBytes(32).toString('base64url'));
  /** Distinct home slots the claims get in a table of 2^14 slots. */
  const homes = (keys: string[]): number => {
    const k = new Uint32Array(4);
    const seen = new Set<number>();
    for (const key of keys) {
      claimDigest(key, k);
      seen.add(home(k[0]!, k[1]!, 14));
    }
    return seen.size;
  };
  const [c, r] = [homes(chosen), homes(random)];
  t.ok(c > 0.9 * r, `chosen claims take ${c} home slots, random ones ${r} (the raw low bits: 1)`);
  // And the table works with them: every one found.
  const index = new ClaimIndex();
  for (const key of chosen) index.add(1, 0, key, 'sig_x_0');
  t.ok(chosen.every((key) => index.heldBy(key, 'sig_x_0') === 'same'));
});

t.test('many claims: generations grow, every claim is found, memory is typed arrays', async (t) => {
  const index = new ClaimIndex();
  const n = 300_000;
  for (let i = 0; i < n; i++) index.add(1 + (i >> 8), 1_700_000_000_000, claimOf(i * 7 + 1), ownerOf(i));
  t.equal(index.size, n);
  let found = 0;
  for (let i = 0; i < n; i += 997) if (index.heldBy(claimOf(i * 7 + 1), ownerOf(i)) === 'same') found++;
  t.equal(found, Math.ceil(n / 997));
  t.equal(index.heldBy(claimOf(n * 7 + 1), ownerOf(0)), 'none');
});

t.test('digests: a base64url sha256 is read, anything else hashed; owners differ', async (t) => {
  const a = new Uint32Array(4);
  const b = new Uint32Array(4);
  const h = createHash('sha256').update('k').digest();
  claimDigest(h.toString('base64url'), a);
  t.same([...a], [h.readUInt32LE(0), h.readUInt32LE(4), h.readUInt32LE(8), h.readUInt32LE(12)]);
  // A customer's idempotency key spelled like a batch mark has the sha256 of that text as its
  // claim: it must not be the mark's (a redelivered signal would lose its own claim to it).
  claimDigest('batch_bat_1', b);
  claimDigest(createHash('sha256').update('batch_bat_1').digest('base64url'), a);
  t.not(`${[...a]}`, `${[...b]}`, 'the mark and the key spelled like it are distinct claims');
  const index = new ClaimIndex();
  index.add(1, 0, createHash('sha256').update('batch_bat_1').digest('base64url'), 'sig_k_0');
  index.add(1, 0, 'batch_bat_1', 'bat_1');
  t.equal(index.heldBy(createHash('sha256').update('batch_bat_1').digest('base64url'), 'sig_k_0'), 'same');
  t.equal(index.heldBy('batch_bat_1', 'bat_1'), 'same');
  t.equal(index.size, 2);
  const o1 = new Uint32Array(2);
  const o2 = new Uint32Array(2);
  ownerDigest('sig_abc_1', o1);
  ownerDigest('sig_abc_2', o2);
  t.not(`${o1[0]}.${o1[1]}`, `${o2[0]}.${o2[1]}`);
});
