/**
 * src/shared/node-flags.ts: every way the service is started passes its Node options — the README's
 * run command (scripts/run.sh), the Dockerfile, `npm start` — and the harness the tests and
 * benches start it with; a process started without them says so.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { NODE_FLAGS, SEMI_SPACE_MB, WORKER_YOUNG_GENERATION_MB, missingNodeFlags } from '../../src/shared/node-flags.js';
import { createWorkerPool } from '../../src/shared/worker-pool.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (f: string): string => readFileSync(path.join(ROOT, f), 'utf8');

t.test('each launcher starts node with the flags, before the entry point', async (t) => {
  const flags = NODE_FLAGS.join(' ');
  t.match(read('scripts/run.sh'), `exec node ${flags} dist/src/main.js`, 'scripts/run.sh');
  t.match(read('Dockerfile'), `CMD ["node", ${NODE_FLAGS.map((f) => JSON.stringify(f)).join(', ')}, "dist/src/main.js"]`, 'Dockerfile');
  t.equal((JSON.parse(read('package.json')) as { scripts: { start: string } }).scripts.start, `node ${flags} dist/src/main.js`, 'npm start');
  t.match(read('harness/service.ts'), '[...NODE_FLAGS, ', 'the test and bench harness');
});

t.test('missingNodeFlags names what a process lacks; the flags are ones node accepts', async (t) => {
  t.same(missingNodeFlags([...NODE_FLAGS]), []);
  t.same(missingNodeFlags([]), [...NODE_FLAGS]);
  const r = spawnSync(process.execPath, [...NODE_FLAGS, '-e', 'process.exit(0)'], { encoding: 'utf8' });
  t.equal(r.status, 0, `node ${NODE_FLAGS.join(' ')} starts: ${r.stderr}`);
});

t.test("the worker pool's threads get the young generation the flag gives the main thread (three semi-spaces)", async (t) => {
  t.equal(WORKER_YOUNG_GENERATION_MB, 3 * SEMI_SPACE_MB);
  const dir = mkdtempSync(path.join(tmpdir(), 'pool-'));
  const file = path.join(dir, 'limits.mjs');
  writeFileSync(file, "import { resourceLimits } from 'node:worker_threads';\nexport default () => resourceLimits;\n");
  const pool = createWorkerPool(1, 4);
  t.teardown(async () => {
    await pool.destroy();
    rmSync(dir, { recursive: true, force: true });
  });
  const limits = (await pool.run(null, { filename: pathToFileURL(file).href })) as { maxYoungGenerationSizeMb: number };
  t.equal(limits.maxYoungGenerationSizeMb, WORKER_YOUNG_GENERATION_MB, 'as a worker sees it');
});
