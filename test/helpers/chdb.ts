/**
 * An embedded engine in this test process (its own temporary data directory), opened
 * through the real store so tests see exactly what the service sees.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Test } from 'tap';
import { loadConfig, type Config } from '../../src/config.js';
import { ChdbStore } from '../../src/store/chdb/index.js';

export async function openTestStore(t: Test, env: Record<string, string> = {}): Promise<{ store: ChdbStore; cfg: Config }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'billing-chdb-unit-'));
  const cfg = loadConfig({ OPERATOR_TOKEN: 'unit-test-operator-token', DATA_DIR: dir, ...env }, []);
  const store = new ChdbStore(cfg);
  await store.init();
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { store, cfg };
}
