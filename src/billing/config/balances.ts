/**
 * Credit balances of one customer as the official client reads them
 * (`GET /api/v2/customers/{id}/credits/balances`: `{data: CreditBalance[]}`): one balance per
 * credits currency of the customer's credit pools, in the order the first pool of each
 * currency was created, with one grant per pool.
 *
 *   total     = Σ pools' granted + top-ups
 *   used      = Σ pools' credits consumed, as committed by the billing evaluator
 *               (the same figure as `consumedCredits` of GET …/credit-pools)
 *   available = total − used (negative when usage outran the pools: draws are never blocked)
 *
 * The numbers are derived from the exact decimals, which are answered beside them as
 * `totalDecimal`, `usedDecimal`, `availableDecimal`. Pools never expire and have no periods,
 * rollover or seats here, so those fields are honest constants: `periodStart` is the earliest
 * pool's creation, `periodEnd`, `rolloverEndDate`, `expiresAt` and `rolloverAmount` are null,
 * `isInRolloverWindow` false, `recipient` "organization" (the customer). Credits currencies are
 * UUIDs without names in this service: `currencyName` and `currencyKey` carry the id.
 */
import { parseDecimal, sub, sum, toCanonicalString, toJsonNumber, type Dec } from '../decimal.js';
import type { CreditPool } from '../model.js';

const exact = (s: string): Dec => parseDecimal(s, { maxDecimalPlaces: 1000, maxIntegerDigits: 1000 });

/** The three figures, as numbers and exact decimal strings. */
function figures(total: Dec, used: Dec) {
  const available = sub(total, used);
  return {
    available: toJsonNumber(available),
    used: toJsonNumber(used),
    total: toJsonNumber(total),
    availableDecimal: toCanonicalString(available),
    usedDecimal: toCanonicalString(used),
    totalDecimal: toCanonicalString(total),
  };
}

/** `consumed`: credits consumed per pool id (decimal strings; absent: none). */
export function creditBalances(pools: readonly CreditPool[], consumed: Record<string, string>) {
  const byCurrency = new Map<string, CreditPool[]>();
  for (const p of pools) {
    if (p.creditsCurrencyId === null) continue; // a pool always has one (it takes its credit-priced attribute's)
    const list = byCurrency.get(p.creditsCurrencyId);
    if (list) list.push(p);
    else byCurrency.set(p.creditsCurrencyId, [p]);
  }
  return [...byCurrency].map(([creditsCurrencyId, of]) => {
    const grants = of.map((p) => {
      const total = sum([p.granted, ...p.topUps.map((t) => t.credits)].map(exact));
      const used = exact(Object.hasOwn(consumed, p.id) ? consumed[p.id]! : '0');
      return {
        total,
        used,
        view: {
          ...figures(total, used),
          rolloverAmount: null,
          periodStart: p.createdAt,
          periodEnd: null,
          rolloverEndDate: null,
          expiresAt: null,
          isInRolloverWindow: false,
          poolId: p.id,
          orderLineAttributeId: p.orderLineAttributeId,
        },
      };
    });
    return {
      creditsCurrencyId,
      currencyName: creditsCurrencyId,
      currencyKey: creditsCurrencyId,
      ...figures(sum(grants.map((g) => g.total)), sum(grants.map((g) => g.used))),
      periodStart: of.map((p) => p.createdAt).sort()[0] ?? null,
      periodEnd: null,
      rolloverEndDate: null,
      recipient: 'organization' as const,
      grants: grants.map((g) => g.view),
    };
  });
}
