/**
 * The stored decimal type in the real engine (chdb, through the store): a data directory
 * made with narrower decimals (decimal columns Decimal(38, 12), no unpriced table) is widened on
 * start, keeps its rows, then stores every digit; a second start changes nothing.
 *
 * Only this file's main thread uses chdb (one chdb thread per process).
 */
import t from 'tap';
import type { Session } from 'chdb';
import { openTestStore } from '../helpers/chdb.js';
import { STORED_DECIMAL_COLUMNS } from '../../src/store/schema.js';
import { STORED_DECIMAL } from '../../src/store/stored.js';

t.test('an old data directory is widened on start, once, and keeps its rows', async (t) => {
  const { store, cfg } = await openTestStore(t);
  const session = (store as unknown as { session: Session }).session;
  const db = cfg.clickhouseDatabase;
  const q = async (sql: string): Promise<string> => (await session.queryAsync(sql, { format: 'TSVRaw' })).text().trim();
  const types = () => q(`SELECT table, name, type FROM system.columns WHERE database = '${db}' AND table IN ('costs', 'credit_consumption') AND type LIKE 'Decimal%' ORDER BY table, name`);
  const mutations = () => q(`SELECT count() FROM system.mutations WHERE database = '${db}'`);

  // The tables as the previous version created them.
  for (const { table, column } of STORED_DECIMAL_COLUMNS) await q(`ALTER TABLE ${db}.${table} MODIFY COLUMN ${column} Decimal(38, 12)`);
  await q(`DROP TABLE ${db}.unpriced`);
  t.match(await types(), /Decimal\(38, 12\)/);
  const cost = (id: string, amount: string) => ({ org_id: 'org_1', livemode: true, signal_id: id, created_at: 0, event_name: 'e', customer_id: 'c', unit_id: null, plan_id: 'p', order_line_attribute_id: 'o', quantity: '7.5', unit_price: '0.333333333333', cost_amount: amount, currency: 'USD' });
  await store.insertCosts(Buffer.from(JSON.stringify(cost('sig_old', '2.499999999997')) + '\n'));
  await store.insertConsumption(Buffer.from(JSON.stringify({ org_id: 'org_1', livemode: true, signal_id: 'sig_old', created_at: 0, customer_id: 'c', unit_id: null, order_line_attribute_id: 'o', pool_id: 'cp', credits_currency_id: null, credits: '0.000000123456', balance_after: '0.999999876544' }) + '\n'));
  const before = Number(await mutations());

  await store.init();
  t.equal(
    await types(),
    STORED_DECIMAL_COLUMNS.map(({ table, column }) => `${table}\t${column}\t${STORED_DECIMAL}`).sort().join('\n'),
    'every decimal column widened',
  );
  t.equal(Number(await mutations()), before + STORED_DECIMAL_COLUMNS.length, 'one ALTER per column');
  t.equal(await q(`SELECT toString(cost_amount) FROM ${db}.costs WHERE signal_id = 'sig_old'`), '2.499999999997', 'rows already stored are kept as they were');
  t.equal(await q(`SELECT toString(credits), toString(balance_after) FROM ${db}.credit_consumption WHERE signal_id = 'sig_old'`), '0.000000123456\t0.999999876544');
  t.equal(await q(`SELECT count() FROM ${db}.unpriced`), '0', 'the unpriced table is created');

  await store.insertCosts(Buffer.from(JSON.stringify(cost('sig_new', '2.4999999999975')) + '\n'));
  t.equal(await q(`SELECT toString(cost_amount) FROM ${db}.costs WHERE signal_id = 'sig_new'`), '2.4999999999975', 'a new row keeps every digit');
  const widest = `${'9'.repeat(52)}.${'9'.repeat(24)}`;
  await store.insertCosts(Buffer.from(JSON.stringify(cost('sig_widest', widest)) + '\n'));
  t.equal(await q(`SELECT toString(cost_amount) FROM ${db}.costs WHERE signal_id = 'sig_widest'`), widest, '52 integer digits and 24 places');

  await store.init();
  t.equal(Number(await mutations()), before + STORED_DECIMAL_COLUMNS.length, 'a second start alters nothing');
  t.equal(await q(`SELECT count() FROM ${db}.costs`), '3', 'and keeps every row');
});
