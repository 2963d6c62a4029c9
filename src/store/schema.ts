/**
 * Table definitions shared by both store implementations.
 *
 * `signals` holds one row per accepted signal. Notes on the choices:
 * - ORDER BY starts with the organization, so every per-organization read is an index range.
 * - PARTITION BY month of the signal's timestamp; an insert may touch several months, so
 *   inserts run with max_partitions_per_insert_block = 0. Exactly-once does not rely on an
 *   insert landing as one part (see src/pipeline/consumer.ts).
 * - `data` is ClickHouse's JSON type, so `data.<path>::<Type>` works in analytics queries.
 * - Plain MergeTree: no reliance on background merges for exact counts (Lago #4725).
 */
import { STORED_DECIMAL } from './stored.js';

export const SIGNAL_COLUMNS = [
  'org_id', 'livemode', 'signal_id', 'batch_id', 'event_name', 'customer_id', 'external_customer_id',
  'product_id', 'external_product_id', 'unit_id',
  'idempotency_key', 'timestamp', 'received_at', 'data',
] as const;

/**
 * The columns of each billing table, as created below (a test checks they match): the
 * allowlist a compact insert's column list is checked against before any SQL is printed
 * (`compactColumns`).
 */
export const BILLING_COLUMNS = {
  costs: ['org_id', 'livemode', 'signal_id', 'created_at', 'event_name', 'customer_id', 'unit_id', 'plan_id', 'order_line_attribute_id', 'quantity', 'unit_price', 'cost_amount', 'currency', 'draw_pool_id', 'draw_credits_currency_id', 'draw_credits', 'draw_balance_after'],
  unpriced: ['org_id', 'livemode', 'signal_id', 'created_at', 'event_name', 'customer_id', 'unit_id', 'plan_id', 'order_line_attribute_id', 'reason', 'detail'],
} as const satisfies Record<BillingTable, readonly string[]>;

export type BillingTable = 'costs' | 'unpriced';

/**
 * The column list of a compact insert into `table`, checked: every column of the table
 * (BILLING_COLUMNS), each once, in any order. Returns a copy; throws on anything else (the
 * list comes from a message on the bus: never printed into SQL unchecked; and a row without
 * its organization, mode or time would be stored where the redelivery check never finds it).
 */
export function compactColumns(table: BillingTable, columns: readonly unknown[]): string[] {
  const known: readonly string[] = BILLING_COLUMNS[table];
  const out: string[] = [];
  for (const c of columns) {
    if (typeof c !== 'string' || !known.includes(c) || out.includes(c)) throw new Error(`insert into ${table}: column ${JSON.stringify(c)} is not one of the table's, or repeated`);
    out.push(c);
  }
  if (out.length !== known.length) throw new Error(`insert into ${table}: the column list lacks ${known.filter((c) => !out.includes(c)).join(', ')}`);
  return out;
}

export function schemaStatements(db: string): string[] {
  return [
    `CREATE DATABASE IF NOT EXISTS ${db}`,
    `CREATE TABLE IF NOT EXISTS ${db}.signals (
      org_id LowCardinality(String),
      livemode Bool,
      signal_id String,
      batch_id String,
      event_name LowCardinality(String),
      customer_id String,
      external_customer_id String,
      product_id String,
      external_product_id String,
      unit_id Nullable(String),
      idempotency_key Nullable(String),
      timestamp DateTime64(3, 'UTC'),
      received_at DateTime64(3, 'UTC'),
      ingested_at DateTime64(3, 'UTC') DEFAULT now64(3),
      data JSON
    ) ENGINE = MergeTree
    PARTITION BY toYYYYMM(timestamp)
    ORDER BY (org_id, livemode, timestamp, signal_id)`,
    // One row per priced signal, written by the billing engine; read through the
    // analytics view fact_cost. cost_amount is in minor units with fractional cents. Every
    // decimal is STORED_DECIMAL, which holds every product exactly (src/store/stored.ts).
    // A signal that drew credits from a pool has the draw in the same row (draw_*: the pool,
    // its credits currency, the credits, the pool's balance after; null when it drew none),
    // read through the analytics view fact_credit_consumption (the rows with a draw), so a
    // priced signal is one row to render, send, parse and store, not two.
    `CREATE TABLE IF NOT EXISTS ${db}.costs (
      org_id LowCardinality(String),
      livemode Bool,
      signal_id String,
      created_at DateTime64(3, 'UTC'),
      event_name LowCardinality(String),
      customer_id String,
      unit_id Nullable(String),
      plan_id String,
      order_line_attribute_id String,
      quantity ${STORED_DECIMAL},
      unit_price ${STORED_DECIMAL},
      cost_amount ${STORED_DECIMAL},
      currency LowCardinality(String),
      draw_pool_id Nullable(String),
      draw_credits_currency_id Nullable(String),
      draw_credits Nullable(${STORED_DECIMAL}),
      draw_balance_after Nullable(${STORED_DECIMAL})
    ) ENGINE = MergeTree
    PARTITION BY toYYYYMM(created_at)
    ORDER BY (org_id, livemode, created_at, signal_id)`,
    // One row per signal an attribute applies to that was not priced, with the reason
    // (src/billing/quantity.ts); read through the analytics view fact_unpriced.
    `CREATE TABLE IF NOT EXISTS ${db}.unpriced (
      org_id LowCardinality(String),
      livemode Bool,
      signal_id String,
      created_at DateTime64(3, 'UTC'),
      event_name LowCardinality(String),
      customer_id String,
      unit_id Nullable(String),
      plan_id String,
      order_line_attribute_id String,
      reason LowCardinality(String),
      detail String
    ) ENGINE = MergeTree
    PARTITION BY toYYYYMM(created_at)
    ORDER BY (org_id, livemode, created_at, signal_id)`,
  ];
}

/** Which of these signal ids of an organization a table already holds (redelivery checks). */
export type RowTable = 'signals' | 'costs' | 'unpriced';

export const EXISTING_IN_SQL = (db: string, table: RowTable): string =>
  `SELECT signal_id FROM ${db}.${table} WHERE org_id = {org:String} AND signal_id IN {ids:Array(String)}`;

export const INSERT_SETTINGS = { max_partitions_per_insert_block: '0' };


export const COUNT_SQL = (db: string): string =>
  `SELECT toUInt8(livemode) AS live, count() AS n FROM ${db}.signals WHERE org_id = {org:String} GROUP BY livemode`;
