/**
 * The web settings page (GET /settings) end to end in headless Chromium (playwright-core
 * driving Debian's `chromium`, installed by scripts/ensure-chromium.sh when missing),
 * against the real service and a plain HTTP receiver in this test that verifies deliveries
 * with its own HMAC code (spec 5.2), not the service's.
 */
import t from 'tap';
import http from 'node:http';
import { execFileSync } from 'node:child_process';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { createOrg, http as call, OPERATOR_TOKEN, useService, waitFor, type TestOrg } from '../helpers/service.js';
import { EVENT_NAMES as WEBHOOK_EVENTS } from '../../src/bus/events.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const EVENT = 'billing-payment-succeeded';
/** Browser-side expressions (this file is type-checked without the DOM library). */
const KEY_IN_SESSION = "sessionStorage.getItem('billing.apiKey')";

const { svc } = useService(t, 'settingspage');

interface Received {
  path: string;
  raw: Buffer;
  signature: string;
  envelope: { event: string; isTest: boolean; data: any };
}

/** A plain receiver: answers 200, keeps every body and signature header. */
const got: Received[] = [];
const receiver = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const raw = Buffer.concat(chunks);
    got.push({ path: req.url ?? '', raw, signature: String(req.headers['x-webhook-signature'] ?? ''), envelope: JSON.parse(raw.toString()) });
    res.writeHead(200).end();
  });
});
let receiverUrl = '';

/** Spec 5.2, written out here: pairs on ",", each on its first "=", HMAC-SHA256 of "<t>.<raw body>", base64 with padding. */
function verifies(r: Received, secret: string): boolean {
  const pairs = new Map<string, string>();
  for (const p of r.signature.split(',')) {
    const i = p.indexOf('=');
    if (i > 0) pairs.set(p.slice(0, i), p.slice(i + 1));
  }
  const ts = pairs.get('t');
  const sig = pairs.get('s');
  if (!ts || !sig || Math.abs(Date.now() - Number(ts)) > 5 * 60_000) return false;
  const expected = Buffer.from(createHmac('sha256', secret).update(`${ts}.`).update(r.raw).digest('base64'));
  const given = Buffer.from(sig);
  return expected.length === given.length && timingSafeEqual(expected, given);
}

let browser: Browser;
let context: BrowserContext;
let page: Page;
let org: TestOrg;
const problems: string[] = [];

t.before(async () => {
  // Installs Debian's chromium when missing (as root), otherwise fails with the command to run.
  const out = execFileSync('bash', [`${ROOT}scripts/ensure-chromium.sh`], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 600_000 });
  const executablePath = out.trim().split('\n').pop()!;
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as { port: number }).port}`;
  browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
  context = await browser.newContext();
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: svc.url });
  page = await context.newPage();
  page.setDefaultTimeout(10_000);
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (m) => {
    // Refused API calls (401, 400) are logged by Chromium as failed loads: expected here.
    if (m.type() === 'error' && !/^Failed to load resource/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  org = await createOrg(svc.url);
});

t.teardown(async () => {
  await browser?.close();
  receiver.closeAllConnections();
  await new Promise<void>((r) => receiver.close(() => r()));
});

const api = (method: string, path: string, body?: unknown) => call(svc.url, method, path, { token: org.live, body });
const msg = (event: string) => page.locator(`#msg-${event}`);

t.test('the page and its assets: served without a key, with strict headers', async (t) => {
  for (const [path, type] of [['/settings', /^text\/html/], ['/settings/', /^text\/html/], ['/settings/app.js', /^text\/javascript/], ['/settings/app.css', /^text\/css/]] as const) {
    const r = await fetch(svc.url + path);
    t.equal(r.status, 200, path);
    t.match(r.headers.get('content-type'), type, `${path} content type`);
    const csp = r.headers.get('content-security-policy') ?? '';
    t.match(csp, /default-src 'none'/, `${path}: CSP`);
    t.match(csp, /script-src 'self'(;|$)/, `${path}: scripts from this origin only`);
    t.notMatch(csp, /unsafe-inline|unsafe-eval/, `${path}: no inline code`);
    t.equal(r.headers.get('x-frame-options'), 'DENY');
    t.equal(r.headers.get('referrer-policy'), 'no-referrer');
    t.equal(r.headers.get('cache-control'), 'no-store');
    t.equal(r.headers.get('x-content-type-options'), 'nosniff');
    const text = await r.text();
    if (path.startsWith('/settings') && type.source.includes('html')) t.notMatch(text, /<script>|<style>|\sstyle=|\son[a-z]+=/i, 'no inline script, style or handler');
  }
  t.equal((await fetch(`${svc.url}/settings`, { method: 'POST' })).status, 405);
});

t.test('enter the key: the ten events', async (t) => {
  await page.goto(`${svc.url}/settings`);
  t.equal(await page.locator('#webhooks-section').isVisible(), false, 'nothing shown without a key');
  await page.getByLabel('API key', { exact: true }).fill('sk_not_a_key_at_all_1234');
  await page.getByRole('button', { name: 'Use key' }).click();
  await page.getByText(/refused the key/).waitFor();
  t.equal(await page.evaluate<string | null>(KEY_IN_SESSION), null, 'a refused key is not kept');

  await page.getByLabel('API key', { exact: true }).fill(org.live);
  await page.getByRole('button', { name: 'Use key' }).click();
  await page.locator('#webhooks tbody tr').nth(9).waitFor();
  t.equal(await page.locator('#webhooks tbody tr').count(), 10, 'ten rows');
  t.same(await page.locator('#webhooks tbody th').allTextContents(), [...WEBHOOK_EVENTS], 'the ten events of spec 6, in order');
  for (const e of WEBHOOK_EVENTS) {
    t.equal(await page.getByLabel(`URL for ${e}`).inputValue(), '', `${e}: no URL yet`);
    t.equal(await page.getByRole('switch', { name: `Enabled for ${e}` }).isChecked(), false, `${e}: disabled`);
  }
  t.match(await page.locator('#secret-status').textContent(), /No signing secret yet/);
  t.match(await page.locator('#key-status').textContent(), new RegExp(`…${org.live.slice(-4)}`));
});

t.test('configure one event: saved, persisted across a reload, and through the API', async (t) => {
  await page.getByLabel(`URL for ${EVENT}`).fill(`${receiverUrl}/hook`);
  await page.getByRole('switch', { name: `Enabled for ${EVENT}` }).check();
  await page.getByRole('button', { name: `Save ${EVENT}` }).click();
  await msg(EVENT).filter({ hasText: 'Saved.' }).waitFor();

  await page.reload();
  await page.locator('#webhooks tbody tr').nth(9).waitFor();
  t.equal(await page.getByLabel(`URL for ${EVENT}`).inputValue(), `${receiverUrl}/hook`, 'the URL after a reload (the key came from sessionStorage)');
  t.equal(await page.getByRole('switch', { name: `Enabled for ${EVENT}` }).isChecked(), true, 'enabled after a reload');
  const list = await api('GET', '/api/v2/webhooks');
  const w = list.body.data.find((x: { name: string }) => x.name === EVENT);
  t.match(w, { name: EVENT, url: `${receiverUrl}/hook`, enabled: true, lastStatus: null }, 'the API agrees');
  t.match(w.updatedAt, /^\d{4}-/);
  t.equal(list.body.data.filter((x: { url: string | null }) => x.url !== null).length, 1, 'no other event touched');
  t.equal(await page.locator(`tr[data-event="${EVENT}"] th`).getAttribute('title'), w.description, 'the event row says when it fires');
  t.equal(await page.locator(`#last-${EVENT}`).textContent(), '—', 'no delivery yet');

  // The same page with a trailing slash: its script, style sheet and API calls still resolve.
  await page.goto(`${svc.url}/settings/`);
  await page.locator('#webhooks tbody tr').nth(9).waitFor();
  t.equal(await page.getByLabel(`URL for ${EVENT}`).inputValue(), `${receiverUrl}/hook`, 'at /settings/ too');
  await page.goto(`${svc.url}/settings`);
  await page.locator('#webhooks tbody tr').nth(9).waitFor();
});

t.test('Test, rotate, signatures', async (t) => {
  // No secret yet: the API's refusal is shown on the row.
  await page.getByRole('button', { name: `Test ${EVENT}` }).click();
  await msg(EVENT).filter({ hasText: 'Test not sent' }).waitFor();
  t.match(await msg(EVENT).textContent(), /signing secret.*WEBHOOK_NOT_READY/);

  const rotate = async (): Promise<string> => {
    await page.getByRole('button', { name: 'Rotate signing secret' }).click();
    const dialog = page.getByRole('dialog', { name: 'Rotate the signing secret?' });
    await dialog.waitFor();
    await dialog.getByRole('button', { name: 'Rotate now' }).click();
    await page.locator('#secret-once').waitFor();
    t.ok(await page.getByText('you will not see it again').isVisible(), 'the one-time warning is shown');
    const secret = await page.getByLabel('New signing secret').inputValue();
    t.match(secret, /^whsec_[A-Za-z0-9_-]{43}$/);
    return secret;
  };

  // Cancelling the dialog changes nothing.
  await page.getByRole('button', { name: 'Rotate signing secret' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Cancel' }).click();
  t.equal(await page.getByRole('dialog').count(), 0, 'dialog closed');
  t.same((await api('GET', '/api/v2/webhooks')).body.signingSecret, { exists: false, createdAt: null }, 'cancel: no secret made');

  const first = await rotate();
  await page.getByRole('button', { name: 'Copy' }).click();
  await page.locator('#copy-status').filter({ hasText: 'Copied' }).waitFor();
  t.equal(await page.evaluate<string>('navigator.clipboard.readText()'), first, 'Copy puts the secret on the clipboard');
  t.match(await page.locator('#secret-status').textContent(), /A signing secret exists/);

  const test = async (): Promise<Received> => {
    const before = got.length;
    await page.getByRole('button', { name: `Test ${EVENT}` }).click();
    await msg(EVENT).filter({ hasText: /^Test: / }).waitFor();
    t.match(await msg(EVENT).textContent(), /^Test: delivered 200 in \d+(\.\d+)? ms\.$/, 'the result on the page');
    t.equal(got.length, before + 1, 'the receiver got the test delivery');
    const r = got[before]!;
    t.equal(r.path, '/hook');
    t.match(r.envelope, { event: EVENT, isTest: true });
    t.match(r.envelope.data.payment.id, /^pay_test_/);
    return r;
  };
  const d1 = await test();
  t.ok(verifies(d1, first), 'signed with the secret the page showed');
  await page.locator(`#last-${EVENT}`).filter({ hasText: /^success/ }).waitFor();
  t.match(await page.locator(`#last-${EVENT}`).textContent(), /^successtest /, 'the last delivery on the row: the test, delivered');

  await page.getByRole('button', { name: /I have stored it/ }).click();
  t.equal(await page.locator('#secret-once').isVisible(), false, 'hidden');
  t.equal(await page.getByLabel('New signing secret').inputValue(), '', 'and dropped from the page');

  const second = await rotate();
  t.not(second, first);
  const d2 = await test();
  t.ok(verifies(d2, second), 'the next delivery verifies with the new secret');
  t.notOk(verifies(d2, first), 'and not with the old one');

  await page.reload();
  await page.locator('#webhooks tbody tr').nth(9).waitFor();
  t.equal(await page.locator('#secret-once').isVisible(), false, 'after a reload the secret is gone for good');
  t.notMatch(await page.content(), second);
});

t.test('delivery log: newest first, refresh, resend', async (t) => {
  const rows = page.locator('#deliveries tbody tr');
  await page.getByRole('button', { name: 'Refresh' }).click();
  await page.locator('#log-status').filter({ hasText: /attempts?, newest first/ }).waitFor();
  t.equal(await rows.count(), 2, 'the two test deliveries');
  const times = await page.locator('#deliveries tbody tr td:first-child time').evaluateAll((els) => els.map((e) => e.getAttribute('datetime')!));
  t.same(times, [...times].sort().reverse(), 'newest first');
  t.match(await rows.first().textContent(), new RegExp(`${EVENT}.*test.*delivered.*200`));
  t.equal(await page.locator('#deliveries').getByRole('button', { name: /^Resend / }).count(), 0, 'test deliveries have no Resend');

  // A real event (from the operator API): delivered by the dispatcher, then resent from the page.
  const payment = { id: 'pay_e2e_1', invoiceId: null, invoiceNumber: null, customerId: 'cus_1', customerName: null, amount: 990, currency: 'USD', status: 'posted', paymentDate: '2026-11-01T10:00:00Z', paymentType: 'card', externalPaymentId: 'ch_e2e' };
  const before = got.length;
  const ev = await call(svc.url, 'POST', `/admin/v1/organizations/${org.id}/events`, { token: OPERATOR_TOKEN, body: { mode: 'live', event: EVENT, data: { payment } } });
  t.equal(ev.status, 202, JSON.stringify(ev.body));
  await waitFor(async () => got.length, (n) => n > before, 15_000);
  const real = got[before]!;
  t.match(real.envelope, { event: EVENT, isTest: false });
  const log = await waitFor(() => api('GET', '/api/v2/webhook-deliveries'), (r) => r.body.deliveries.some((d: { isTest: boolean }) => !d.isTest), 10_000);
  const delivery = log.body.deliveries.find((d: { isTest: boolean }) => !d.isTest);

  await page.getByRole('button', { name: 'Refresh' }).click();
  const resend = page.getByRole('button', { name: `Resend ${delivery.deliveryId}` });
  await resend.waitFor();
  t.equal(await rows.count(), 3);
  t.match(await rows.first().textContent(), new RegExp(`${EVENT}.*delivered.*200`), 'the real delivery is the newest row');
  const n = got.length;
  await resend.click();
  await page.locator('#log-status').filter({ hasText: /^Resent / }).waitFor();
  await waitFor(async () => got.length, (x) => x > n, 15_000);
  t.equal(got[n]!.raw.toString(), real.raw.toString(), 'the receiver got the same event again');
  await waitFor(() => api('GET', '/api/v2/webhook-deliveries'), (r) => r.body.deliveries.length >= 4, 10_000);
  await page.getByRole('button', { name: 'Refresh' }).click();
  await rows.nth(3).waitFor();
  t.equal(await rows.count(), 4, 'the resent attempt is in the log');
  t.match(await rows.first().textContent(), new RegExp(`${EVENT}.*delivered.*200`), 'and is the newest row');
});

t.test('a refused URL: the API error on the page, nothing changed', async (t) => {
  const before = (await api('GET', '/api/v2/webhooks')).body.data;
  const direct = await api('PATCH', `/api/v2/webhooks/${EVENT}`, { url: 'http://10.0.0.1/' });
  t.equal(direct.status, 400);

  const url = page.getByLabel(`URL for ${EVENT}`);
  await url.fill('http://10.0.0.1/');
  await page.getByRole('button', { name: `Save ${EVENT}` }).click();
  await msg(EVENT).filter({ hasText: 'Not saved' }).waitFor();
  t.equal(await msg(EVENT).textContent(), `Not saved: ${direct.body.details} (INVALID_WEBHOOK)`, "the API's details, inline on the row");
  t.equal(await url.getAttribute('aria-invalid'), 'true', 'the field is marked invalid');
  t.equal(await url.inputValue(), 'http://10.0.0.1/', 'what the user typed stays for correction');
  t.same((await api('GET', '/api/v2/webhooks')).body.data, before, 'nothing changed');

  // Markup in what the API echoes back stays text.
  await url.fill('https://<img src=x id=pwned>.example/');
  await page.getByRole('button', { name: `Save ${EVENT}` }).click();
  await msg(EVENT).filter({ hasText: 'Not saved' }).waitFor();
  t.equal(await page.locator('#pwned, #msg-' + EVENT + ' img').count(), 0, 'no element made from data');
  t.same((await api('GET', '/api/v2/webhooks')).body.data, before, 'still nothing changed');

  await page.reload();
  await page.locator('#webhooks tbody tr').nth(9).waitFor();
  t.equal(await url.inputValue(), `${receiverUrl}/hook`, 'after a reload: the stored URL');
});

t.test('the key: in sessionStorage only, and forgotten on request', async (t) => {
  const stored = await page.evaluate<{ session: string | null; local: string; cookie: string }>(`({
    session: sessionStorage.getItem('billing.apiKey'),
    local: Object.keys(localStorage).map((k) => k + '=' + localStorage.getItem(k)).join('\\n'),
    cookie: document.cookie,
  })`);
  t.equal(stored.session, org.live, 'in sessionStorage');
  t.equal(stored.local, '', 'nothing in localStorage');
  t.equal(stored.cookie, '', 'no cookie');
  t.same(await context.cookies(), [], 'no cookie in the browser');
  t.notMatch(JSON.stringify(await context.storageState()), org.live, 'not in any persistent storage');

  await page.getByRole('button', { name: 'Forget key' }).click();
  t.equal(await page.evaluate<string | null>(KEY_IN_SESSION), null, 'gone');
  t.equal(await page.locator('#webhooks-section').isVisible(), false, 'settings hidden');
  t.equal(await page.locator('#webhooks tbody tr').count(), 0);
  await page.reload();
  await page.getByLabel('API key', { exact: true }).waitFor();
  t.equal(await page.locator('#webhooks-section').isVisible(), false, 'still asks for a key after a reload');
  t.same(problems, [], 'no script error or CSP violation on the page');
});
