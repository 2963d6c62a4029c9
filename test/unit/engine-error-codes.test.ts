/**
 * The table of the engine's exception codes (src/store/error-codes.ts) is the installed
 * engine's own: every number's name as errorCodeToName gives it, and nothing more.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Session } from 'chdb';
import { errorCodes } from '../../src/store/error-codes.js';

t.test('every code and name, as the engine lists them', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'error-codes-'));
  const s = new Session(dir);
  t.teardown(() => {
    s.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const out = await s.queryAsync("SELECT number, errorCodeToName(toUInt32(number)) AS name FROM numbers(5000) WHERE name != '' ORDER BY number", { format: 'JSONCompactEachRow' });
  const engine = new Map(
    Buffer.from(out.bytes())
      .toString('utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as [string | number, string])
      .map(([n, name]) => [Number(n), name] as const),
  );
  t.ok(engine.size > 600, `the engine lists ${engine.size} codes`);
  t.same([...errorCodes()].sort((a, b) => a[0] - b[0]), [...engine], 'the same table');
});
