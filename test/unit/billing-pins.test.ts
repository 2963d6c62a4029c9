/**
 * What a reader outside the evaluator takes from a partition's pin (src/billing/evaluator/pins.ts
 * pendingFrom): the first sequence of the group pending, or null once it is committed — read
 * from the pin's first and last bytes for the current forms, whatever its documents hold; and
 * how the API's balance (customer-state.ts `consumed`) uses it beside the partition's ack floor.
 */
import t from 'tap';
import fc from 'fast-check';
import type { KvEntry } from '@nats-io/kv';
import { pendingFrom, pinKey } from '../../src/billing/evaluator/pins.js';
import { CustomerStates, customerStateKey } from '../../src/billing/evaluator/customer-state.js';
import { partitionOf } from '../../src/billing/evaluator/partition.js';
import { donePin, type Pin } from '../../src/billing/evaluator/consumer.js';
import { emptyConfig } from '../../src/billing/model.js';

const entry = (text: string, operation = 'PUT'): KvEntry => {
  const value = new TextEncoder().encode(text);
  return { operation, length: value.length, value, json: () => JSON.parse(text) } as unknown as KvEntry;
};

const pinArb = fc
  .record({ seq: fc.integer({ min: 1, max: 2 ** 40 }), n: fc.integer({ min: 1, max: 5 }), name: fc.string(), id: fc.string({ minLength: 1 }) })
  .map(({ seq, n, name, id }): Pin => {
    const config = emptyConfig();
    // Texts that look like the markers read, inside the documents: they must not count.
    config.customers[id] = { id, externalId: `${name}"done":true}`, name: ',"done":true}', createdAt: '', updatedAt: '', units: {} } as never;
    const seqs = Array.from({ length: n }, (_, i) => seq + 2 * i);
    return { seq, last: seqs.at(-1)!, seqs, scopes: [{ orgId: 'org_1', mode: 'live', revisions: { k: 3 }, config }] };
  });

t.test('a pending pin gives its first sequence; the same pin committed gives none', async (t) => {
  fc.assert(
    fc.property(pinArb, (pin) => {
      t.equal(pendingFrom(entry(JSON.stringify(pin))), pin.seq);
      t.equal(pendingFrom(entry(JSON.stringify(donePin(pin)))), null);
    }),
    { numRuns: 200 },
  );
});

t.test('a spilled pin is pending; a pin in no form this version writes is an error; no pin, or a deleted one, has nothing pending', async (t) => {
  t.equal(pendingFrom(entry(JSON.stringify({ seq: 7, last: 7, seqs: [7], spilled: { id: 'x', parts: 3 } }))), 7, 'spilled: pending');
  t.throws(() => pendingFrom(entry(JSON.stringify({ seq: 9, orgId: 'o', mode: 'live', revisions: {}, config: emptyConfig() }))), /in no form this version writes/);
  t.equal(pendingFrom(null), null);
  t.equal(pendingFrom(entry('', 'DEL')), null);
});

t.test("a customer's balance as committed (CustomerStates.consumed): the ack floor answers without the pin; above it, the pin decides", async (t) => {
  const key = customerStateKey('org_1', 'live', 'cus_1');
  const k = partitionOf('org_1', 'live', 'cus_1', 8);
  const state = { seq: 40, before: { consumed: { cp_1: '3' }, usage: {} }, after: { consumed: { cp_1: '9' }, usage: {} } };
  const view = (pin: unknown, floor: number | null | Error) => {
    const asked: string[] = [];
    const kv = new Map<string, KvEntry>([[key, entry(JSON.stringify(state))], ...(pin ? ([[pinKey(k), entry(JSON.stringify(pin))]] as const) : [])]);
    const reader = {
      get: async (x: string) => (asked.push(x), kv.get(x) ?? null),
      getMany: async (xs: readonly string[]) => xs.map((x) => (asked.push(x), kv.get(x) ?? null)),
    };
    const floors: number[] = [];
    const states = new CustomerStates(null as never, reader, 8, async (p) => {
      floors.push(p);
      if (floor instanceof Error) throw floor;
      return floor;
    });
    return { consumed: () => states.consumed('org_1', 'live', 'cus_1'), asked, floors };
  };
  const pending = { seq: 40, last: 44, seqs: [40, 44], scopes: [] };
  const a = view(pending, 40);
  t.same(await a.consumed(), { cp_1: '9' }, 'its group acked (the floor at its first message): after, whatever the pin says');
  t.same([a.asked, a.floors], [[key], [k]], "the pin is not read; the floor asked is its partition's");
  const b = view(pending, 39);
  t.same(await b.consumed(), { cp_1: '3' }, 'above the floor, the pin holds its group pending: before');
  t.same(b.asked, [key, pinKey(k)], 'the pin read');
  t.same(await view({ ...pending, scopes: [], done: true }, 39).consumed(), { cp_1: '9' }, 'above the floor, its group committed (not acked yet): after');
  t.same(await view({ ...pending, seq: 50, seqs: [50] }, 39).consumed(), { cp_1: '9' }, 'above the floor, a later group pending: after');
  t.same(await view(pending, new Error('no consumer')).consumed(), { cp_1: '3' }, 'the floor unknown: the pin decides');
  t.same(await view(null, null).consumed(), { cp_1: '9' }, 'no pin: after');
});
