/**
 * The billing rows message body (src/billing/evaluator/rows-body.ts): rows rendered once as
 * JSONEachRow lines with a header of counts, read back per table; the object form of earlier
 * versions still read; a body whose header disagrees with its lines refused; a row line's
 * signal id read from its start as JSON.parse reads it, whatever text the row carries.
 */
import t from 'tap';
import fc from 'fast-check';
import { readRows, renderRows, signalIdOf } from '../../src/billing/evaluator/rows-body.js';
import type { ConsumptionRow, CostRow, UnpricedRow } from '../../src/billing/evaluator/evaluate.js';

const enc = new TextEncoder();
const text = fc.string({ unit: 'binary', maxLength: 10 });
const id = fc.stringMatching(/^sig_[A-Za-z0-9]{1,20}$/);
const base = (signal: string, name: string) => ({ org_id: 'org_abcdefghijklmnopqrst', livemode: true, signal_id: signal, created_at: 1, event_name: name, customer_id: 'cus_1', unit_id: name, plan_id: 'plan_1', order_line_attribute_id: 'ola_1' });
const costArb = fc.record({ s: id, name: text }).map(({ s, name }): CostRow => ({ ...base(s, name), quantity: '1', unit_price: '0.5', cost_amount: '0.5', currency: 'USD' }));
const consumptionArb = fc.record({ s: id, name: text }).map(({ s, name }): ConsumptionRow => ({ org_id: 'org_abcdefghijklmnopqrst', livemode: false, signal_id: s, created_at: 2, customer_id: 'cus_1', unit_id: name, order_line_attribute_id: 'ola_1', pool_id: 'cp_1', credits_currency_id: 'c', credits: '1', balance_after: '-1' }));
const unpricedArb = fc.record({ s: id, name: text, detail: text }).map(({ s, name, detail }): UnpricedRow => ({ ...base(s, name), reason: 'QUANTITY_MISSING', detail }) as UnpricedRow);

t.test('rendered rows read back per table, line for line', async (t) => {
  fc.assert(
    fc.property(fc.array(costArb, { maxLength: 5 }), fc.array(consumptionArb, { maxLength: 5 }), fc.array(unpricedArb, { maxLength: 5 }), (costs, consumption, unpriced) => {
      const body = renderRows({ costs, consumption, unpriced });
      if (costs.length + consumption.length + unpriced.length === 0) return body === null;
      const back = readRows(enc.encode(body!));
      const parse = (lines: string[]) => lines.map((l) => JSON.parse(l) as unknown);
      return JSON.stringify([parse(back.costs), parse(back.consumption), parse(back.unpriced)]) === JSON.stringify([costs, consumption, unpriced]);
    }),
    { numRuns: 300 },
  );
});

t.test("the former object form is read; a body that disagrees with its header, or neither form, is refused", async (t) => {
  const cost = { signal_id: 'sig_a', cost_amount: '1' };
  t.same(readRows(enc.encode(JSON.stringify({ costs: [cost], consumption: [] }))), { costs: [JSON.stringify(cost)], consumption: [], unpriced: [] }, 'without unpriced (before fact_unpriced existed)');
  t.throws(() => readRows(enc.encode('{"v":2,"costs":2,"consumption":0,"unpriced":0}\n{"signal_id":"sig_a"}\n')), /header counts 2 lines, the body has 1/);
  t.throws(() => readRows(enc.encode('{"nothing":1}')), /neither form/);
  t.throws(() => readRows(enc.encode('not json')));
});

t.test('signalIdOf reads the id as JSON.parse would', async (t) => {
  fc.assert(
    fc.property(fc.oneof(costArb, consumptionArb, unpricedArb), (row) => {
      const line = JSON.stringify(row);
      return signalIdOf(line) === (JSON.parse(line) as { signal_id: string }).signal_id;
    }),
    { numRuns: 500 },
  );
  t.equal(signalIdOf('{"event_name":"\\"signal_id\\":\\"fake","signal_id":"sig_real"}'), 'sig_real', 'a user text that looks like the field: parsed whole');
});
