/**
 * The store over the engine host (src/store/hosted): a read-only analytics statement the host
 * died under is run once more on the next host; the statement whose deadline passed ends its
 * host and is not run again; the pipeline's calls work across a kill.
 * Runs the compiled code (dist/), like the other API tests.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const dist = (p: string) => pathToFileURL(path.join(ROOT, 'dist/src', p)).href;
const { HostedStore } = (await import(dist('store/hosted/index.js'))) as typeof import('../../src/store/hosted/index.js');
const { loadConfig } = (await import(dist('config.js'))) as typeof import('../../src/config.js');

const dir = mkdtempSync(path.join(tmpdir(), 'billing-hosted-'));
const cfg = loadConfig({ OPERATOR_TOKEN: 'hosted-store-test-token', DATA_DIR: dir, ROLE: 'pipeline', ANALYTICS_ENGINE_SESSIONS: '2' }, []);
const store = new HostedStore(cfg);
t.teardown(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});
await store.init();

const LONG = 'SELECT count() AS n FROM numbers(300000000) WHERE sipHash64(number) % 1000 = 7';

/** Resolves once the engine lists a statement containing `marker` as running. */
async function running(marker: string): Promise<void> {
  for (;;) {
    const out = await store.analytics.select(`SELECT count() FROM system.processes WHERE query LIKE '%${marker}%' AND query NOT LIKE '%system.processes%'`, {});
    if (Number(JSON.parse(out.toString()).data[0][0]) > 0) return;
  }
}

t.test('a statement the host died under runs once more on the next host', async (t) => {
  const g1 = await store.supervisor.current();
  const q = store.analytics.select(`${LONG} AND 1 = 1`, { max_execution_time: 60 });
  await running('AND 1 = 1');
  t.ok(store.supervisor.kill(g1.n, 'test: another statement’s deadline'), 'killed while it ran');
  const out = JSON.parse((await q).toString());
  t.match(out.data[0][0], /^\d+$/, 'answered, from the next host');
  const g2 = await store.supervisor.current();
  t.ok(g2.n > g1.n && g2.pid !== g1.pid, 'by a new host process');
});

t.test('the statement whose deadline passed ends its host and is not run again', async (t) => {
  const g1 = await store.supervisor.current();
  const stop = new AbortController();
  const q = store.analytics.select(`${LONG} AND 2 = 2`, { max_execution_time: 60 }, stop.signal).then(
    () => 'answered',
    () => 'refused',
  );
  await running('AND 2 = 2');
  stop.abort();
  t.equal(await q, 'refused');
  await g1.exited;
  t.pass('its host was ended');
  const g2 = await store.supervisor.current();
  const again = await store.analytics.select("SELECT count() FROM system.processes WHERE query LIKE '%AND 2 = 2%' AND query NOT LIKE '%system.processes%'", {});
  t.equal(Number(JSON.parse(again.toString()).data[0][0]), 0, `not running on the next host (generation ${g2.n})`);
});

t.test('the pipeline’s calls across a kill', async (t) => {
  const row = (i: number) => JSON.stringify({ org_id: 'o1', livemode: true, signal_id: `sig_${i}`, batch_id: 'b', event_name: 'e', customer_id: 'c', unit_id: null, idempotency_key: null, timestamp: '2026-11-01 00:00:00.000', received_at: '2026-11-01 00:00:00.000', data: {} });
  await store.insertSignals(Buffer.from(`${row(1)}\n${row(2)}\n`));
  const g = await store.supervisor.current();
  store.supervisor.kill(g.n, 'test');
  await g.exited;
  t.same([...(await store.existingSignalIds('o1', ['sig_1', 'sig_3']))], ['sig_1'], 'reads wait for the next host');
  await store.insertSignals(Buffer.from(`${row(3)}\n`));
  t.same(await store.countSignals('o1'), { live: 3, test: 0 });
  await store.ping();
  t.pass('ping answers');
});
