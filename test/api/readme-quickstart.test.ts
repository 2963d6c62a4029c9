/**
 * The README's first example, run as written: the `js` block after "With the official client"
 * is taken from README.md, saved as a module beside the checkout's node_modules and run with
 * node against a running service, with only the service's and the receiver's ports put in
 * place of 8080 and 9000. Its webhook test delivery must reach a receiver that verifies it
 * with the receiver package and the organization's secret.
 */
import t from 'tap';
import http from 'node:http';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { verifyWebhook } from '../../packages/receiver/src/index.js';
import { createOrg, http as call, useService } from '../helpers/service.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const { svc } = useService(t, 'readme-quickstart');

/** The first ```js block after `marker` in the README. */
function example(marker: string): string {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const at = readme.indexOf(marker);
  if (at < 0) throw new Error(`README has no "${marker}"`);
  const m = /```js\n([\s\S]*?)```/.exec(readme.slice(at));
  if (!m) throw new Error(`no js block after "${marker}"`);
  return m[1]!;
}

t.test("the README's official-client example runs as written", async (t) => {
  const org = await createOrg(svc.url);
  const secret = (await call(svc.url, 'POST', '/api/v2/webhooks/rotate-secret', { token: org.test })).body.signingSecret as string;
  const verified: string[] = [];
  const receiver = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const v = verifyWebhook(raw, String(req.headers['x-webhook-signature'] ?? ''), secret);
      if (v.ok) verified.push(JSON.parse(raw.toString()).event);
      res.writeHead(v.ok ? 200 : 401).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => receiver.close(() => r())));
  const receiverPort = (receiver.address() as { port: number }).port;
  const servicePort = new URL(svc.url).port;

  const code = example('**With the official client**')
    .replaceAll('127.0.0.1:8080', `127.0.0.1:${servicePort}`)
    .replaceAll('127.0.0.1:9000', `127.0.0.1:${receiverPort}`);
  t.not(code.indexOf(`127.0.0.1:${servicePort}`), -1, 'the example names the service URL');
  // Beside the checkout's node_modules, so that `import '@paid-ai/paid-node'` resolves as in a project that installed it.
  const dir = mkdtempSync(path.join(ROOT, '.tap-readme-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'first.mjs');
  writeFileSync(file, code);
  const out = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, [file], { env: { ...process.env, PAID_API_KEY: org.test }, timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
  t.equal(out.code, 0, `the example exits cleanly: ${out.stderr}`);
  t.match(out.stdout, /ingested: 1/, 'it prints the bulk answer');
  t.match(out.stdout, /success: true/, 'it prints the test delivery');
  t.same(verified, ['billing-credits-depleted'], 'the receiver verified the test delivery');
});
