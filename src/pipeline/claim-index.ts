/**
 * The claims of one organization and mode held in memory (dedupe.ts), compactly: per claim
 * its first 128 bits (a claim is the base64url sha256 of an idempotency key; any other claim,
 * a batch mark, is hashed with sha256 first, in another domain) and a 64-bit digest of its
 * owner, in typed arrays: 24 bytes a slot (claim and owner side by side) in open-addressing tables at most half full, 50–100
 * bytes a claim, where a Map of strings took about 250. The owner is only ever compared (is this the signal that holds the
 * key?), so its digest serves; two ids of this service's signals sharing a 64-bit digest is a
 * chance of 2^-64 per comparison.
 *
 * Claims are kept in generations: the newest takes every claim added, growing by doubling up
 * to GENERATION_SLOTS slots; a new one starts when it is full or when the claim's message is
 * GENERATION_SPAN_MS younger than its first. Each generation knows the last log sequence it
 * holds, and `expireBefore` drops whole generations the window has passed (the log removes
 * its oldest messages first): a claim is forgotten at most a span after its message left the
 * log (6 hours on a window of at least 7 days), never before. A lookup asks the generations
 * newest first: a claim added again later (after its first claim's window) is found with its
 * newer owner.
 */
import { createHash, randomBytes } from 'node:crypto';

/** Slots of the largest generation (2^21: a million claims at half load, 48 MB). */
const GENERATION_SLOTS = 1 << 21;
const FIRST_SLOTS = 8;
/** A generation takes the claims of messages at most this much younger than its first one. */
export const GENERATION_SPAN_MS = 6 * 3600 * 1000;

/** base64url character → its 6 bits (-1: not base64url). */
const SIX = new Int8Array(128).fill(-1);
'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'.split('').forEach((c, i) => (SIX[c.charCodeAt(0)] = i));
const bytes = new Uint8Array(16);
const MARK_DOMAIN = createHash('sha256').update('usage-billing claim-index: not a key hash').digest();

/**
 * A claim's home slot in a table of 2^bits slots: its words mixed with a seed drawn once per
 * process, the high bits taken. A claim is the sha256 of a customer's key, so its raw bits
 * are the customer's to choose: keys picked to share low bits would pile up in one run of a
 * linear-probing table (50,000 such keys took 3 s to insert against 30 ms), which a seed the
 * customer cannot know prevents.
 */
const SEED = randomBytes(8);
const SEED_A = SEED.readUInt32LE(0);
const SEED_B = SEED.readUInt32LE(4);
export function home(w0: number, w1: number, bits: number): number {
  let h = Math.imul(w0 ^ SEED_A, 0x9e3779b1) ^ Math.imul(w1 ^ SEED_B, 0x85ebca77);
  h ^= h >>> 15;
  h = Math.imul(h, 0xc2b2ae3d);
  h ^= h >>> 13;
  h = Math.imul(h, 0x27d4eb2f);
  return (h >>> (32 - bits)) >>> 0;
}

/** A claim's 128 bits, as four 32-bit words: the first 16 bytes a 43-character base64url text (a sha256) encodes, else of its sha256. */
export function claimDigest(claim: string, out: Uint32Array): void {
  if (!decodeHash(claim)) {
    // Another domain than the keys' hashes: an idempotency key spelled like a batch mark
    // ("batch_<id>") has the sha256 of that text as its claim, which must not be the mark's.
    const h = createHash('sha256').update(claim).digest();
    for (let i = 0; i < 16; i++) bytes[i] = h[i]! ^ MARK_DOMAIN[i]!;
  }
  out[0] = (bytes[0]! | (bytes[1]! << 8) | (bytes[2]! << 16) | (bytes[3]! << 24)) >>> 0;
  out[1] = (bytes[4]! | (bytes[5]! << 8) | (bytes[6]! << 16) | (bytes[7]! << 24)) >>> 0;
  out[2] = (bytes[8]! | (bytes[9]! << 8) | (bytes[10]! << 16) | (bytes[11]! << 24)) >>> 0;
  out[3] = (bytes[12]! | (bytes[13]! << 8) | (bytes[14]! << 16) | (bytes[15]! << 24)) >>> 0;
  // All zero marks an empty slot: such a digest (a chance of 2^-128 for a hash) takes one bit.
  if ((out[0] | out[1] | out[2] | out[3]) === 0) out[0] = 1;
}

/** The first 16 bytes of a 43-character base64url text into `bytes`; false for any other text. */
function decodeHash(claim: string): boolean {
  if (claim.length !== 43) return false;
  for (let i = 0; i < 43; i++) {
    const c = claim.charCodeAt(i);
    if (c >= 128 || SIX[c]! < 0) return false;
  }
  let acc = 0;
  let bits = 0;
  let n = 0;
  for (let i = 0; n < 16; i++) {
    acc = (acc << 6) | SIX[claim.charCodeAt(i)]!;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes[n++] = (acc >>> bits) & 0xff;
      acc &= (1 << bits) - 1;
    }
  }
  return true;
}

/** A 64-bit digest of an owner (a signal or batch id), as two 32-bit words (cyrb53's mixing). */
export function ownerDigest(owner: string, out: Uint32Array): void {
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < owner.length; i++) {
    const c = owner.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  out[0] = h1 >>> 0;
  out[1] = h2 >>> 0;
}

/** Words of a slot: 4 of the claim (all zero: the slot is empty), 2 of the owner. */
const SLOT = 6;

class Generation {
  /**
   * The slots, each SLOT words side by side (a probe reads one cache line, where three arrays
   * — claims, owners, used marks — cost three misses in a table of millions). An empty slot is
   * all zero: no claim digest is (claimDigest).
   */
  table: Uint32Array;
  count = 0;
  /** The last log sequence a claim of it came from. */
  lastSeq = 0;

  /** log2(slots). */
  readonly bits: number;

  constructor(
    readonly slots: number,
    /** The time of its first claim's message (epoch ms). */
    readonly startMs: number,
  ) {
    this.bits = Math.log2(slots);
    this.table = new Uint32Array(slots * SLOT);
  }

  /** The slot holding claim `k` (its first word's index), or the empty slot where it would go. */
  slotOf(k: Uint32Array): number {
    const t = this.table;
    const mask = this.slots - 1;
    const k0 = k[0]!;
    const k1 = k[1]!;
    const k2 = k[2]!;
    const k3 = k[3]!;
    for (let i = home(k0, k1, this.bits); ; i = (i + 1) & mask) {
      const j = i * SLOT;
      const w0 = t[j]!;
      const w1 = t[j + 1]!;
      const w2 = t[j + 2]!;
      const w3 = t[j + 3]!;
      if ((w0 | w1 | w2 | w3) === 0) return j;
      if (w0 === k0 && w1 === k1 && w2 === k2 && w3 === k3) return j;
    }
  }

  /** Whether the slot at `j` (slotOf) holds a claim. */
  taken(j: number): boolean {
    const t = this.table;
    return (t[j]! | t[j + 1]! | t[j + 2]! | t[j + 3]!) !== 0;
  }

  put(k: Uint32Array, o: Uint32Array): void {
    const j = this.slotOf(k);
    const t = this.table;
    if (!this.taken(j)) {
      this.count++;
      t[j] = k[0]!;
      t[j + 1] = k[1]!;
      t[j + 2] = k[2]!;
      t[j + 3] = k[3]!;
    }
    t[j + 4] = o[0]!;
    t[j + 5] = o[1]!;
  }

  /** The same claims in twice the slots. */
  grown(): Generation {
    const g = new Generation(this.slots * 2, this.startMs);
    g.lastSeq = this.lastSeq;
    g.count = this.count;
    const mask = g.slots - 1;
    const from = this.table;
    const to = g.table;
    for (let j = 0; j < from.length; j += SLOT) {
      if (!this.taken(j)) continue;
      // Distinct claims: each goes to the first free slot from its home.
      let i = home(from[j]!, from[j + 1]!, g.bits);
      while (g.taken(i * SLOT)) i = (i + 1) & mask;
      for (let w = 0; w < SLOT; w++) to[i * SLOT + w] = from[j + w]!;
    }
    return g;
  }
}

export type Holder = 'none' | 'same' | 'other';

export class ClaimIndex {
  /** Oldest first. */
  private gens: Generation[] = [];
  private readonly k = new Uint32Array(4);
  private readonly o = new Uint32Array(2);
  /** Claims held (a claim added again in a newer generation counts twice until the older one ends). */
  size = 0;

  /** Adds (or replaces, within the newest generation) the claim of log message `seq`, of time `atMs`. */
  add(seq: number, atMs: number, claim: string, owner: string): void {
    claimDigest(claim, this.k);
    ownerDigest(owner, this.o);
    let g = this.gens.at(-1);
    if (g && atMs - g.startMs > GENERATION_SPAN_MS) g = undefined;
    if (!g || (g.count + 1) * 2 > g.slots) {
      if (g && g.slots < GENERATION_SLOTS) this.gens[this.gens.length - 1] = g = g.grown();
      else this.gens.push((g = new Generation(FIRST_SLOTS, atMs)));
    }
    const before = g.count;
    g.put(this.k, this.o);
    this.size += g.count - before;
    if (seq > g.lastSeq) g.lastSeq = seq;
  }

  has(claim: string): boolean {
    claimDigest(claim, this.k);
    for (let n = this.gens.length - 1; n >= 0; n--) {
      const g = this.gens[n]!;
      if (g.taken(g.slotOf(this.k))) return true;
    }
    return false;
  }

  /** Whether `owner` holds `claim` ('same'), another does ('other'), or none. */
  heldBy(claim: string, owner: string): Holder {
    claimDigest(claim, this.k);
    for (let n = this.gens.length - 1; n >= 0; n--) {
      const g = this.gens[n]!;
      const j = g.slotOf(this.k);
      if (!g.taken(j)) continue;
      ownerDigest(owner, this.o);
      return g.table[j + 4] === this.o[0] && g.table[j + 5] === this.o[1] ? 'same' : 'other';
    }
    return 'none';
  }

  /** Drops the generations whose every claim comes from a log message before `firstSeq` (removed from the log). */
  expireBefore(firstSeq: number): void {
    while (this.gens.length > 0 && this.gens[0]!.lastSeq < firstSeq) this.size -= this.gens.shift()!.count;
  }

  clear(): void {
    this.gens = [];
    this.size = 0;
  }
}
