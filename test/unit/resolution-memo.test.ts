/**
 * The store's memo of customer resolutions (src/billing/config/store.ts `resolveIdentities`),
 * kept per organization and mode under the bucket state it holds for. Found by a review: a
 * resolution that finished after its organization's memo had been dropped (another
 * organization's answers filled the bound meanwhile) still counted its answers, so the count
 * drifted above what was kept and, past the bound, every new answer dropped every other
 * organization. The store's reads are replaced here (the memo's bookkeeping is the subject);
 * test/api/billing-config.test.ts checks the answers against a real bucket.
 */
import t from 'tap';
import { BillingConfigStore } from '../../src/billing/config/store.js';

interface Memo {
  label: string;
  ids: Map<string, unknown>;
}

t.test('the count of kept answers is what the memos hold, however resolutions interleave', async (t) => {
  /** The store's parts this test sets or reads (private to it). */
  interface Internals {
    resolved: Map<string, Memo>;
    resolvedCount: number;
    resolution: unknown;
    identitiesOf: (org: string, mode: string, keys: string[]) => Promise<null[]>;
    resolveIdentities: BillingConfigStore['resolveIdentities'];
  }
  const s = Object.create(BillingConfigStore.prototype) as Internals;
  s.resolved = new Map<string, Memo>();
  s.resolvedCount = 0;
  const view = { label: '1.10.10', current: () => true, getMany: async () => [], get: async () => null };
  s.resolution = { view: async () => view };
  let release: (() => void) | null = null;
  // Memo keys: 'c' (a customer) + the kind-prefixed reference.
  s.identitiesOf = async (_org, _mode, keys) => {
    if (keys[0] === 'cx:b0') await new Promise<void>((r) => (release = r));
    return keys.map(() => null);
  };
  const refs = (p: string, n: number): string[] => Array.from({ length: n }, (_, i) => `x:${p}${i}`);
  const kept = (): number => [...s.resolved.values()].reduce((a, m) => a + m.ids.size, 0);

  await s.resolveIdentities('org_slow', 'live', refs('a', 30_000), []);
  const late = s.resolveIdentities('org_slow', 'live', refs('b', 10_000), []); // its reads wait
  await new Promise((r) => setTimeout(r, 10));
  await s.resolveIdentities('org_other', 'live', refs('c', 30_000), []); // past the bound: org_slow's memo is dropped
  release!();
  const answers = await late;
  t.equal(answers.customers.length, 10_000, 'the late resolution answers');
  t.equal(s.resolvedCount, kept(), `counted ${s.resolvedCount}, kept ${kept()}`);
  for (let k = 0; k < 3; k++) await s.resolveIdentities(`org_x${k}`, 'live', refs('d', 5), []);
  t.equal(s.resolvedCount, kept(), 'still, after more organizations');
  t.ok(s.resolved.has('org_other.live'), 'within the bound, no organization dropped for nothing');
  t.ok(kept() <= 50_000 + 15, 'the bound holds (one organization may pass it by its own answers)');
});
