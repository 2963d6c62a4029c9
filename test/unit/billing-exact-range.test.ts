/**
 * Every signal whose exact values fit the stored type is priced, and only those (the quantity
 * rule, src/billing/quantity.ts, and the evaluator's checks, src/billing/evaluator/evaluate.ts,
 * against src/store/stored.ts): quantities, prices and credits per unit of magnitudes on
 * both sides of Decimal(76, 24)'s limits, judged by a reference (decimal.js) on the actual
 * values: quantity, cost, credits drawn and the pool's balance after the draw.
 */
import t from 'tap';
import fc from 'fast-check';
import { Decimal as DecimalJs } from 'decimal.js';
import { ZERO_PERIOD, capPeriods, evaluate, emptyState, type BillableSignal } from '../../src/billing/evaluator/evaluate.js';
import { capKey, emptyConfig, type BillingConfig } from '../../src/billing/model.js';

const Decimal = DecimalJs.clone({ precision: 300 });
const exact = (d: DecimalJs): string => (d.isZero() ? '0' : d.toFixed());
const CUR = '6f1c2b1e-0000-4000-8000-0000000000e1';
const T0 = Date.parse('2026-03-10T10:00:00Z');
const NOW = '2026-01-01T00:00:00Z';

/** Customer cus_1 (unit root), attribute ola_1 for `e` priced per data.q, a pool of `granted` credits and a cap on root. */
function config(unitPrice: string, creditsPerUnit: string | null, granted: string, cap: string): BillingConfig {
  const c = emptyConfig();
  c.customers.cus_1 = {
    id: 'cus_1', externalId: 'acme', name: 'Acme', createdAt: NOW, updatedAt: NOW,
    units: { root: { externalId: 'root', externalType: 'company', name: null, parentExternalId: null, createdAt: NOW, updatedAt: NOW } },
  };
  c.plans.plan_1 = { id: 'plan_1', name: 'Pro', createdAt: NOW };
  c.attributes.ola_1 = {
    id: 'ola_1', customerId: 'cus_1', planId: 'plan_1', eventName: 'e', quantity: { kind: 'path', path: 'q' }, unitPrice, currency: 'USD',
    includedQuantity: null, creditsCurrencyId: creditsPerUnit === null ? null : CUR, creditsPerUnit, createdAt: NOW,
  };
  if (creditsPerUnit !== null) {
    c.pools.cp_1 = { id: 'cp_1', customerId: 'cus_1', orderLineAttributeId: 'ola_1', creditsCurrencyId: CUR, granted, topUps: [], createdAt: NOW };
    c.caps[capKey('cus_1', 'root', CUR)] = { customerId: 'cus_1', unitExternalId: 'root', creditsCurrencyId: CUR, amount: cap, frequency: 'MONTHLY', effectiveFrom: NOW, updatedAt: NOW };
  }
  return c;
}

let n = 0;
/** The one place a test signal is built (the signal's customer field is named here only). */
const signal = (q: unknown): BillableSignal => ({ id: `sig_${n++}`, eventName: 'e', customerId: 'acme', unitId: 'root', ts: T0, data: { q } });

function evaluateOne(cfg: BillingConfig, s: BillableSignal) {
  const refs = capPeriods({ orgId: 'org_x', mode: 'live', config: cfg, signals: [s] });
  return evaluate({ orgId: 'org_x', mode: 'live', config: cfg, state: emptyState(), signals: [s], evaluatedAt: T0, periods: Object.fromEntries(refs.map((r) => [r.key, ZERO_PERIOD])) });
}

const INT_DIGITS = 52;
const PLACES = 24;
const fits = (d: DecimalJs): boolean => d.dp() <= PLACES && d.abs().lt(new Decimal(10).pow(INT_DIGITS));

/** A decimal text with `intDigits` digits before the point (0: below 1) and `places` after, the digits random. */
const decimalOf = (intDigits: number, places: number, digits: string): string => {
  const pick = (k: number, from: number): string => Array.from({ length: k }, (_, i) => digits[(from + i) % digits.length]!).join('');
  const int = intDigits === 0 ? '0' : `${'123456789'[Number(digits[0]) % 9]}${pick(intDigits - 1, 1)}`;
  const frac = places === 0 ? '' : `${pick(places - 1, 3)}${'123456789'[Number(digits[1]) % 9]}`;
  return frac ? `${int}.${frac}` : int;
};

t.test('123456789012345678901.123456 at unit price 1 is priced, drawn, depletes the pool and reaches the cap', async (t) => {
  const cfg = config('1', '1', '1000', '5');
  const out = evaluateOne(cfg, signal('123456789012345678901.123456'));
  t.same(out.unpriced, []);
  t.same(out.costs.map((c) => [c.quantity, c.cost_amount]), [['123456789012345678901.123456', '123456789012345678901.123456']]);
  t.same(out.consumption.map((c) => [c.credits, c.balance_after]), [['123456789012345678901.123456', new Decimal(1000).minus('123456789012345678901.123456').toFixed()]]);
  t.ok(out.events.some((e) => e.event === 'billing-credits-depleted'), 'billing-credits-depleted');
  t.ok(out.events.some((e) => e.event === 'billing-credit-cap-reached'), 'billing-credit-cap-reached');
});

t.test('property: priced exactly when quantity, cost, credits and balance fit the stored type; otherwise unpriced with the reason, and nothing else', async () => {
  const magnitude = fc.record({
    qInt: fc.integer({ min: 0, max: 56 }),
    qPlaces: fc.integer({ min: 0, max: 28 }),
    pInt: fc.integer({ min: 0, max: 30 }),
    pPlaces: fc.integer({ min: 0, max: 12 }),
    cInt: fc.integer({ min: 0, max: 30 }),
    cPlaces: fc.integer({ min: 0, max: 6 }),
    gInt: fc.integer({ min: 0, max: 30 }), // a pool's credits: at most 30 integer digits (configuration)
    digits: fc.stringMatching(/^[0-9]{40}$/),
    credits: fc.boolean(),
  });
  fc.assert(
    fc.property(magnitude, (m) => {
      const q = decimalOf(m.qInt, m.qPlaces, m.digits);
      const price = decimalOf(m.pInt, m.pPlaces, m.digits.slice(5));
      const perUnit = decimalOf(m.cInt, m.cPlaces, m.digits.slice(9));
      const granted = decimalOf(m.gInt, 0, m.digits.slice(13));
      const cfg = config(price, m.credits ? perUnit : null, granted, '1');
      const out = evaluateOne(cfg, signal(q));
      const dq = new Decimal(q);
      const cost = dq.times(price);
      const credits = m.credits ? dq.times(perUnit) : null;
      const balance = credits ? new Decimal(granted).minus(credits) : null;
      const quantityFits = fits(dq);
      const amountsFit = fits(cost) && (credits === null || (fits(credits) && fits(balance!)));
      const where = `q=${q} price=${price} perUnit=${m.credits ? perUnit : '-'} granted=${granted}`;
      if (quantityFits && amountsFit) {
        if (out.unpriced.length !== 0) throw new Error(`${where}: unpriced ${JSON.stringify(out.unpriced[0])}`);
        const c = out.costs[0]!;
        if (c.quantity !== exact(dq) || c.cost_amount !== exact(cost)) throw new Error(`${where}: cost row ${c.quantity} ${c.cost_amount}, expected ${exact(dq)} ${exact(cost)}`);
        if (credits) {
          const d = out.consumption[0];
          if (!d || d.credits !== exact(credits) || d.balance_after !== exact(balance!)) throw new Error(`${where}: draw ${JSON.stringify(d)}`);
        } else if (out.consumption.length !== 0) throw new Error(`${where}: a draw without credits`);
      } else {
        const reasons = quantityFits ? ['AMOUNT_OUT_OF_RANGE'] : ['QUANTITY_TOO_LARGE', 'QUANTITY_TOO_MANY_DECIMAL_PLACES'];
        if (out.unpriced.length !== 1 || !reasons.includes(out.unpriced[0]!.reason)) throw new Error(`${where}: expected one of ${reasons}, got ${JSON.stringify(out.unpriced)}`);
        if (out.costs.length + out.consumption.length + out.events.length !== 0) throw new Error(`${where}: an unpriced signal changed something`);
        if (JSON.stringify(out.state) !== JSON.stringify(emptyState())) throw new Error(`${where}: state changed`);
      }
    }),
    { numRuns: 3_000 },
  );
});
