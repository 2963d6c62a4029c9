/**
 * The stored decimal type in the real engine (chdb, through the store): every decimal column of
 * the billing tables is STORED_DECIMAL, a row keeps every digit up to its limits, and starting
 * again (init) alters nothing and keeps every row.
 *
 * Only this file's main thread uses chdb (one chdb thread per process).
 */
import t from 'tap';
import type { Session } from 'chdb';
import { openTestStore } from '../helpers/chdb.js';
import { STORED_DECIMAL } from '../../src/store/stored.js';

/** The decimal columns of the billing tables, as `table\tcolumn\ttype`, sorted (a cost row's credit draw is null when it drew none). */
const DECIMAL_COLUMNS = [
  `costs\tcost_amount\t${STORED_DECIMAL}`,
  `costs\tdraw_balance_after\tNullable(${STORED_DECIMAL})`,
  `costs\tdraw_credits\tNullable(${STORED_DECIMAL})`,
  `costs\tquantity\t${STORED_DECIMAL}`,
  `costs\tunit_price\t${STORED_DECIMAL}`,
];

t.test('the decimal columns are of the stored type, keep every digit, and a second start changes nothing', async (t) => {
  const { store, cfg } = await openTestStore(t);
  const session = (store as unknown as { session: Session }).session;
  const db = cfg.clickhouseDatabase;
  const q = async (sql: string): Promise<string> => (await session.queryAsync(sql, { format: 'TSVRaw' })).text().trim();
  const types = () => q(`SELECT table, name, type FROM system.columns WHERE database = '${db}' AND table IN ('costs', 'unpriced') AND type LIKE '%Decimal%' ORDER BY table, name`);
  const mutations = () => q(`SELECT count() FROM system.mutations WHERE database = '${db}'`);

  t.equal(await types(), DECIMAL_COLUMNS.join('\n'), 'every decimal column is STORED_DECIMAL');
  const cost = (id: string, amount: string) => ({ org_id: 'org_1', livemode: true, signal_id: id, created_at: 0, event_name: 'e', customer_id: 'c', unit_id: null, plan_id: 'p', order_line_attribute_id: 'o', quantity: '7.5', unit_price: '0.333333333333', cost_amount: amount, currency: 'USD' });
  await store.insertCosts(Buffer.from(JSON.stringify(cost('sig_a', '2.4999999999975')) + '\n'));
  t.equal(await q(`SELECT toString(cost_amount) FROM ${db}.costs WHERE signal_id = 'sig_a'`), '2.4999999999975', 'a row keeps every digit');
  const widest = `${'9'.repeat(52)}.${'9'.repeat(24)}`;
  await store.insertCosts(Buffer.from(JSON.stringify(cost('sig_widest', widest)) + '\n'));
  t.equal(await q(`SELECT toString(cost_amount) FROM ${db}.costs WHERE signal_id = 'sig_widest'`), widest, '52 integer digits and 24 places');
  await store.insertCosts(Buffer.from(JSON.stringify({ ...cost('sig_d', '1'), draw_pool_id: 'cp', draw_credits_currency_id: null, draw_credits: '0.000000000000123456', draw_balance_after: '0.999999999999876544' }) + '\n'));
  t.equal(await q(`SELECT toString(draw_credits), toString(draw_balance_after) FROM ${db}.costs WHERE signal_id = 'sig_d'`), '0.000000000000123456\t0.999999999999876544', 'a credit draw keeps every digit');
  t.equal(await q(`SELECT toString(draw_credits) FROM ${db}.costs WHERE signal_id = 'sig_a'`), '\\N', 'none on a row that drew none');

  const before = Number(await mutations());
  await store.init();
  t.equal(Number(await mutations()), before, 'a second start alters nothing');
  t.equal(await types(), DECIMAL_COLUMNS.join('\n'));
  t.equal(await q(`SELECT count() FROM ${db}.costs`), '3', 'and keeps every row');
});
