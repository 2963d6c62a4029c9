/**
 * src/shared/fast-prototypes.ts: once the service's modules are loaded, String.prototype is in
 * V8's dictionary mode (ioredis's `class VerbatimString extends String`), and
 * restoreFastStringPrototype brings it back to fast mode. Read with V8's own
 * %HasFastProperties in a child process started with --allow-natives-syntax, on the built
 * service (dist: the test command builds first), through the whole module graph main.ts loads.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const dist = (f: string): string => pathToFileURL(path.join(ROOT, 'dist', f)).href;

function probe(restore: boolean): { afterImports: boolean; afterRestore: boolean | null } {
  const code = `
    await import(${JSON.stringify(dist('src/main.js'))});
    const afterImports = %HasFastProperties(String.prototype);
    let afterRestore = null;
    if (${restore}) {
      (await import(${JSON.stringify(dist('src/shared/fast-prototypes.js'))})).restoreFastStringPrototype();
      afterRestore = %HasFastProperties(String.prototype);
    }
    console.log(JSON.stringify({ afterImports, afterRestore }));
    process.exit(0);`;
  const r = spawnSync(process.execPath, ['--allow-natives-syntax', '--input-type=module', '-e', code], { encoding: 'utf8', cwd: ROOT });
  if (r.status !== 0) throw new Error(`probe failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { afterImports: boolean; afterRestore: boolean | null };
}

t.test("the service's imports leave String.prototype slow; restoreFastStringPrototype makes it fast", async (t) => {
  const r = probe(true);
  // If this fails, ioredis (or whatever did it) no longer slows String.prototype, and the restore can go.
  t.equal(r.afterImports, false, "main.ts's module graph puts String.prototype in dictionary mode");
  t.equal(r.afterRestore, true, 'fast again after the restore');
});

t.test('start() restores it: main.ts calls it before anything else', async (t) => {
  const { readFileSync } = await import('node:fs');
  const main = readFileSync(path.join(ROOT, 'src/main.ts'), 'utf8');
  const body = main.slice(main.indexOf('export async function start('));
  t.match(body.split('\n').slice(1, 4).join('\n'), /restoreFastStringPrototype\(\);/, 'the first statement of start()');
});
