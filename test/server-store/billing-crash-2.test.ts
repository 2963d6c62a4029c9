/**
 * test/api/billing-crash-2.test.ts in server mode: every service of the file runs with CLICKHOUSE_URL
 * against its isolation's engine host test front (test/helpers/service.ts, TEST_STORE=server).
 */
process.env.TEST_STORE = 'server';
await import('../api/billing-crash-2.test.js');
