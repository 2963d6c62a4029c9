/**
 * The billing core: pure, I/O-free rules for credit pools, overage and credit caps, with
 * exact decimals and UTC cap periods. Nothing here reads a clock, a store or the network;
 * the caller keeps the state (pool balances, cumulative usage, cap period totals and flags)
 * and applies signals one at a time in one agreed order, then publishes the events these
 * functions build under their deterministic ids.
 *
 * Modules (each explains its rules at the top):
 * - decimal.ts   exact decimals: strict parsing, canonical strings, add/sub/mul/compare, JSON numbers
 * - instant.ts   RFC 3339 UTC instants and calendar arithmetic
 * - periods.ts   credit-cap periods from effectiveFrom and frequency
 * - credits.ts   credit pools: consumption, top-ups, depletion and credit overage
 * - overage.ts   included-quantity overage
 * - caps.ts      credit caps, once per cap and period
 * - event-id.ts  deterministic event ids
 * - events.ts    payload builders for spec sections 2.6, 2.7 and 2.8
 */
export * from './decimal.js';
export * from './instant.js';
export * from './periods.js';
export * from './credits.js';
export * from './overage.js';
export * from './caps.js';
export * from './event-id.js';
export * from './events.js';
