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
export const SIGNAL_COLUMNS = [
  'org_id', 'livemode', 'signal_id', 'batch_id', 'event_name', 'customer_id', 'unit_id',
  'idempotency_key', 'timestamp', 'received_at', 'data',
] as const;

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
      unit_id Nullable(String),
      idempotency_key Nullable(String),
      timestamp DateTime64(3, 'UTC'),
      received_at DateTime64(3, 'UTC'),
      ingested_at DateTime64(3, 'UTC') DEFAULT now64(3),
      data JSON
    ) ENGINE = MergeTree
    PARTITION BY toYYYYMM(timestamp)
    ORDER BY (org_id, livemode, timestamp, signal_id)`,
    // One row per priced signal, written by the billing engine (issue 5); read through the
    // analytics view fact_cost. cost_amount is in minor units with fractional cents.
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
      quantity Decimal(38, 12),
      unit_price Decimal(38, 12),
      cost_amount Decimal(38, 12),
      currency LowCardinality(String)
    ) ENGINE = MergeTree
    PARTITION BY toYYYYMM(created_at)
    ORDER BY (org_id, livemode, created_at, signal_id)`,
    // One row per signal that consumed credits from a pool (billing engine).
    `CREATE TABLE IF NOT EXISTS ${db}.credit_consumption (
      org_id LowCardinality(String),
      livemode Bool,
      signal_id String,
      created_at DateTime64(3, 'UTC'),
      customer_id String,
      unit_id Nullable(String),
      order_line_attribute_id String,
      pool_id String,
      credits_currency_id Nullable(String),
      credits Decimal(38, 12),
      balance_after Decimal(38, 12)
    ) ENGINE = MergeTree
    PARTITION BY toYYYYMM(created_at)
    ORDER BY (org_id, livemode, created_at, signal_id)`,
  ];
}

/** Which of these signal ids of an organization a table already holds (redelivery checks). */
export const EXISTING_IN_SQL = (db: string, table: 'signals' | 'costs' | 'credit_consumption'): string =>
  `SELECT signal_id FROM ${db}.${table} WHERE org_id = {org:String} AND signal_id IN {ids:Array(String)}`;

export const INSERT_SETTINGS = { max_partitions_per_insert_block: '0' };


export const COUNT_SQL = (db: string): string =>
  `SELECT toUInt8(livemode) AS live, count() AS n FROM ${db}.signals WHERE org_id = {org:String} GROUP BY livemode`;
