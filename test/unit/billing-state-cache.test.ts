/**
 * src/billing/evaluator/state-cache.ts: a lane's state keys as of its last commit. Trusted (the
 * lane's own pin in use), known keys are answered from memory and only the others are read, in
 * one round; untrusted, every key is read again and what is known is replaced; the bound
 * drops the oldest.
 */
import t from 'tap';
import { StateCache, knownOf, type Known } from '../../src/billing/evaluator/state-cache.js';
import type { KvEntry } from '@nats-io/kv';

/** A store of keys with its reads counted, as the state bucket. */
function store(initial: Record<string, Known>): { data: Record<string, Known>; rounds: string[][]; read: (keys: readonly string[]) => Promise<Known[]> } {
  const data = { ...initial };
  const rounds: string[][] = [];
  return {
    data,
    rounds,
    read: async (keys) => {
      rounds.push([...keys]);
      return keys.map((k) => data[k] ?? { value: null, revision: 0 });
    },
  };
}

t.test('trusted: known keys from memory, the others read in one round and kept', async (t) => {
  const s = store({ a: { value: { seq: 1 }, revision: 3 }, b: { value: { seq: 2 }, revision: 4 } });
  const c = new StateCache(100);
  t.same(await c.readMany(['a', 'b', 'x'], true, s.read), [{ value: { seq: 1 }, revision: 3 }, { value: { seq: 2 }, revision: 4 }, { value: null, revision: 0 }]);
  t.same(s.rounds, [['a', 'b', 'x']], 'nothing known yet: all read, one round');
  c.set('a', { seq: 9 }, 5); // this lane wrote it
  s.data.b = { value: { seq: 7 }, revision: 8 }; // (only a group of another holder could: then the pin write fails)
  t.same(await c.readMany(['a', 'b', 'x', 'y'], true, s.read), [{ value: { seq: 9 }, revision: 5 }, { value: { seq: 2 }, revision: 4 }, { value: null, revision: 0 }, { value: null, revision: 0 }]);
  t.same(s.rounds[1], ['y'], 'only the key not known is read');
  t.equal(s.rounds.length, 2);
  t.same(await c.readMany(['a'], true, s.read), [{ value: { seq: 9 }, revision: 5 }]);
  t.equal(s.rounds.length, 2, 'all known: no read at all');
});

t.test('untrusted: every key read again, what is known replaced', async (t) => {
  const s = store({ a: { value: { seq: 1 }, revision: 3 } });
  const c = new StateCache(100);
  c.set('a', { seq: 0 }, 1);
  t.same(await c.readMany(['a'], false, s.read), [{ value: { seq: 1 }, revision: 3 }]);
  t.same(s.rounds, [['a']]);
  t.same(await c.readMany(['a'], true, s.read), [{ value: { seq: 1 }, revision: 3 }], 'the fresh value is what is known now');
  t.equal(s.rounds.length, 1);
  c.clear();
  t.equal(c.size, 0);
  await c.readMany(['a'], true, s.read);
  t.equal(s.rounds.length, 2, 'after clear, read again');
});

t.test('the bound drops the oldest', async (t) => {
  const c = new StateCache(2);
  c.set('a', { seq: 1 }, 1);
  c.set('b', { seq: 2 }, 1);
  c.set('a', { seq: 3 }, 2); // a again: now the newest
  c.set('c', { seq: 4 }, 1); // b out
  t.equal(c.size, 2);
  const s = store({});
  const got = await c.readMany(['a', 'b', 'c'], true, s.read);
  t.same(s.rounds, [['b']], 'the oldest (b) was dropped, a and c kept');
  t.same(got.map((g) => g.revision), [2, 0, 1]);
});

t.test('knownOf: a KV entry as value and revision', async (t) => {
  const entry = (operation: string, json: unknown, revision: number) => ({ operation, length: json === undefined ? 0 : 1, revision, json: () => json }) as unknown as KvEntry;
  t.same(knownOf(entry('PUT', { seq: 1 }, 7)), { value: { seq: 1 }, revision: 7 });
  t.same(knownOf(entry('DEL', undefined, 8)), { value: null, revision: 8 });
  t.same(knownOf(null), { value: null, revision: 0 });
});
