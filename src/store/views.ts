/**
 * The analytics views: the only things an analytics query can name.
 *
 * Each view is a parameterized view in its own database (ANALYTICS_DATABASE, default
 * `analytics`), which holds nothing else: it reads its base table in CLICKHOUSE_DATABASE for
 * one organization and mode, given as the view's parameters `org` and `live`. The query
 * compiler (compiler/) never lets a query name a database or a parameter; its printer itself
 * writes every read of a view as `analytics.fact_signal(org = '<caller>', live = <mode>)`,
 * taking the scope from the authenticated caller — no setting and nothing in the query text
 * carries it. A view read without its parameters reads nothing (the engine refuses it).
 * There is no organization column to filter on or to leak.
 *
 * The LIMIT is a barrier, and it is load-bearing: without it the optimizer moves the
 * caller's conditions (WHERE, HAVING, conditions of subqueries and CTEs) down into the
 * read of the base table, where they run on every row of the granules read, other
 * organizations' rows included, before the scope filter. A condition that throws
 * (`throwIf(customer_id = '…')`, a failing cast) then reports another organization's
 * values in its error, or answers yes/no about them. No condition can move below a LIMIT
 * (that would change results), so the caller's expressions only ever see scoped rows. The
 * service also switches the pushdown optimizations off per query (defence in depth).
 */
import { QUANTITY_MAX_DECIMAL_PLACES, QUANTITY_MAX_INTEGER_DIGITS, STORED_DECIMAL, UNPRICED_REASONS } from './stored.js';

export interface ViewColumn {
  name: string;
  type: string;
  description: string;
}

export interface ViewDef {
  name: string;
  description: string;
  /** Base table in CLICKHOUSE_DATABASE. */
  table: string;
  /** Which of the table's rows the view shows (besides the scope), as SQL over the table's columns (none of which a view column's name may shadow). */
  rows?: string;
  columns: (ViewColumn & { expr: string })[];
}

const SCOPE_FILTER = 'org_id = {org:String} AND livemode = {live:Bool}';

/** Larger than any table can be: a LIMIT that never cuts, only stops predicate pushdown. */
export const SCOPE_BARRIER_LIMIT = '9223372036854775807';

/** Per-query settings that keep the caller's conditions above the views (besides the barrier). */
export const NO_PUSHDOWN_SETTINGS = {
  query_plan_filter_push_down: 0,
  enable_optimize_predicate_expression: 0,
  query_plan_merge_filters: 0,
  optimize_move_to_prewhere: 0,
} as const;

export const VIEWS: readonly ViewDef[] = [
  {
    name: 'fact_signal',
    description: 'One row per ingested signal of the calling organization (live or test, as the API key).',
    table: 'signals',
    columns: [
      { name: 'id', expr: 'signal_id', type: 'String', description: 'Signal id (sig_…), unique within the organization.' },
      { name: 'created_at', expr: 'timestamp', type: "DateTime64(3, 'UTC')", description: 'When the usage happened: the signal\'s timestamp, or its reception time when it had none.' },
      { name: 'received_at', expr: 'received_at', type: "DateTime64(3, 'UTC')", description: 'When the service accepted the batch.' },
      { name: 'batch_id', expr: 'batch_id', type: 'String', description: 'Id of the accepted batch (bat_…) the signal came in.' },
      { name: 'event_name', expr: 'event_name', type: 'LowCardinality(String)', description: 'The signal\'s event name.' },
      { name: 'customer_id', expr: 'customer_id', type: 'String', description: 'The customer\'s service id (cus_…): as sent (customer.customerId), or the customer the sent externalCustomerId named when the signal was stored; \'\' when none.' },
      { name: 'external_customer_id', expr: 'external_customer_id', type: 'String', description: 'The customer\'s externalId: as sent (customer.externalCustomerId), or that of the customer the sent customerId named when the signal was stored; \'\' when none.' },
      { name: 'product_id', expr: 'product_id', type: 'String', description: 'The product\'s service id (prod_…): as sent (attribution.productId), or the product the sent externalProductId named when the signal was stored; \'\' when none or no attribution.' },
      { name: 'external_product_id', expr: 'external_product_id', type: 'String', description: 'The product\'s externalId: as sent (attribution.externalProductId), or that of the product the sent productId named when the signal was stored; \'\' when none or no attribution.' },
      { name: 'unit_id', expr: 'unit_id', type: 'Nullable(String)', description: 'The customer unit the signal names, if any.' },
      { name: 'idempotency_key', expr: 'idempotency_key', type: 'Nullable(String)', description: 'The signal\'s idempotency key, if any.' },
      { name: 'data', expr: 'data', type: 'JSON', description: 'The signal\'s payload; query paths as data.<path>::<Type> (see GET /api/v2/analytics/signals/metadata).' },
    ],
  },
  {
    name: 'fact_cost',
    description: 'One row per priced signal: what it cost under its plan (filled by the billing engine).',
    table: 'costs',
    columns: [
      { name: 'signal_id', expr: 'signal_id', type: 'String', description: 'The priced signal (fact_signal.id).' },
      { name: 'created_at', expr: 'created_at', type: "DateTime64(3, 'UTC')", description: 'When the usage happened (the signal\'s created_at).' },
      { name: 'event_name', expr: 'event_name', type: 'LowCardinality(String)', description: 'The signal\'s event name.' },
      { name: 'customer_id', expr: 'customer_id', type: 'String', description: 'The customer charged.' },
      { name: 'unit_id', expr: 'unit_id', type: 'Nullable(String)', description: 'The customer unit, if the signal named one.' },
      { name: 'plan_id', expr: 'plan_id', type: 'String', description: 'The plan whose price applied.' },
      { name: 'order_line_attribute_id', expr: 'order_line_attribute_id', type: 'String', description: 'The order line attribute (ola_…) that priced the signal.' },
      { name: 'quantity', expr: 'quantity', type: STORED_DECIMAL, description: `Quantity the signal counted for (at most ${QUANTITY_MAX_INTEGER_DIGITS} integer digits and ${QUANTITY_MAX_DECIMAL_PLACES} decimal places, and a cost and draw that fit this type; others are in fact_unpriced).` },
      { name: 'unit_price', expr: 'unit_price', type: STORED_DECIMAL, description: 'Price per unit in minor units (fractional cents allowed).' },
      { name: 'cost_amount', expr: 'cost_amount', type: STORED_DECIMAL, description: 'quantity × unit_price in minor units (cents), exact: every digit of the product is stored, so sum(cost_amount) is the exact total.' },
      { name: 'currency', expr: 'currency', type: 'LowCardinality(String)', description: 'ISO 4217 currency of unit_price and cost_amount.' },
    ],
  },
  {
    name: 'fact_credit_consumption',
    description: 'One row per signal that consumed credits from a credit pool (filled by the billing engine).',
    table: 'costs',
    rows: 'draw_pool_id IS NOT NULL',
    columns: [
      { name: 'signal_id', expr: 'signal_id', type: 'String', description: 'The signal that consumed the credits (fact_signal.id).' },
      { name: 'created_at', expr: 'created_at', type: "DateTime64(3, 'UTC')", description: 'When the usage happened (the signal\'s created_at).' },
      { name: 'customer_id', expr: 'customer_id', type: 'String', description: 'The customer whose pool was drawn.' },
      { name: 'unit_id', expr: 'unit_id', type: 'Nullable(String)', description: 'The customer unit, if the signal named one.' },
      { name: 'order_line_attribute_id', expr: 'order_line_attribute_id', type: 'String', description: 'The order line attribute (ola_…) that priced the signal in credits.' },
      { name: 'pool_id', expr: 'assumeNotNull(draw_pool_id)', type: 'String', description: 'The credit pool (cp_…) drawn from.' },
      { name: 'credits_currency_id', expr: 'draw_credits_currency_id', type: 'Nullable(String)', description: 'The credits currency (UUID) of the pool, if scoped to one.' },
      { name: 'credits', expr: 'assumeNotNull(draw_credits)', type: STORED_DECIMAL, description: 'Credits this signal consumed (quantity × credits per unit), exact to the last digit.' },
      { name: 'balance_after', expr: 'assumeNotNull(draw_balance_after)', type: STORED_DECIMAL, description: 'The pool balance after this signal, exact; negative once usage went past the pool.' },
    ],
  },
  {
    name: 'fact_unpriced',
    description: 'One row per signal that an order line attribute applies to but that was not priced, with the reason (filled by the billing engine).',
    table: 'unpriced',
    columns: [
      { name: 'signal_id', expr: 'signal_id', type: 'String', description: 'The signal that was not priced (fact_signal.id).' },
      { name: 'created_at', expr: 'created_at', type: "DateTime64(3, 'UTC')", description: 'When the usage happened (the signal\'s created_at).' },
      { name: 'event_name', expr: 'event_name', type: 'LowCardinality(String)', description: 'The signal\'s event name.' },
      { name: 'customer_id', expr: 'customer_id', type: 'String', description: 'The customer the signal names.' },
      { name: 'unit_id', expr: 'unit_id', type: 'Nullable(String)', description: 'The customer unit, if the signal named one.' },
      { name: 'plan_id', expr: 'plan_id', type: 'String', description: 'The plan of the attribute.' },
      { name: 'order_line_attribute_id', expr: 'order_line_attribute_id', type: 'String', description: 'The order line attribute (ola_…) that applies to the signal.' },
      { name: 'reason', expr: 'reason', type: 'LowCardinality(String)', description: `Why it was not priced: ${UNPRICED_REASONS.join(', ')}.` },
      { name: 'detail', expr: 'detail', type: 'String', description: 'The problem in words, naming the data path (e.g. "data.usage.tokens has 13 decimal places; at most 12 are allowed").' },
    ],
  },
];

export const VIEW_NAMES: readonly string[] = VIEWS.map((v) => v.name);

/** What the compiler resolves names against: each view's columns and types. */
export const VIEW_SCHEMAS: readonly { name: string; columns: { name: string; type: string }[] }[] = VIEWS.map((v) => ({
  name: v.name,
  columns: v.columns.map(({ name, type }) => ({ name, type })),
}));

export function viewStatements(storeDb: string, analyticsDb: string): string[] {
  return [
    `CREATE DATABASE IF NOT EXISTS ${analyticsDb}`,
    ...VIEWS.map(
      (v) =>
        `CREATE OR REPLACE VIEW ${analyticsDb}.${v.name} AS SELECT ${v.columns.map((c) => (c.expr === c.name ? c.name : `${c.expr} AS ${c.name}`)).join(', ')} ` +
        `FROM ${storeDb}.${v.table} WHERE ${SCOPE_FILTER}${v.rows ? ` AND ${v.rows}` : ''} LIMIT ${SCOPE_BARRIER_LIMIT}`,
    ),
  ];
}

/** The body of GET /api/v2/analytics/schema. */
export function schemaDocument(): { views: { name: string; description: string; columns: ViewColumn[] }[] } {
  return {
    views: VIEWS.map((v) => ({
      name: v.name,
      description: v.description,
      columns: v.columns.map(({ name, type, description }) => ({ name, type, description })),
    })),
  };
}
