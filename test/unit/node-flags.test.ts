/**
 * src/shared/node-flags.ts: every way the service is started passes its Node options — the README's
 * run command (scripts/run.sh), the Dockerfile, `npm start` — and the harness the tests and
 * benches start it with; a process started without them says so.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { NODE_FLAGS, missingNodeFlags } from '../../src/shared/node-flags.js';

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
