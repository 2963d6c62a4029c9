// The webhook settings page (GET /settings). Plain browser JavaScript, no dependencies.
//
// Everything it does goes through the public API with the organization API key the user
// enters; the key lives in sessionStorage only. Every value from the API or the user
// reaches the DOM as text (textContent, value, setAttribute), never as HTML: the page is
// served with a Content-Security-Policy that requires Trusted Types for HTML sinks.
'use strict';

(() => {
  const KEY_STORE = 'billing.apiKey';
  // The API beside this script (served at <root>/settings/app.js): the same wherever the page
  // itself is opened (/settings or /settings/).
  const API = new URL('../api/v2/', document.currentScript ? document.currentScript.src : document.baseURI);

  const $ = (id) => {
    const e = document.getElementById(id);
    if (!e) throw new Error(`missing #${id}`);
    return e;
  };

  /** An element with properties, attributes (names with "-" or "role") and text/element children. */
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === 'text') e.textContent = String(v);
      else if (k === 'class') e.className = String(v);
      else if (k === 'role' || k.includes('-')) e.setAttribute(k, String(v));
      else e[k] = v;
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  /** A refusal or failure of an API call: the API's {error, code, details}. */
  class ApiFailure extends Error {
    constructor(status, body) {
      super(body.details || body.error || `HTTP ${status}`);
      this.status = status;
      this.body = body;
    }
  }

  const describe = (err) => {
    if (err instanceof ApiFailure) {
      const b = err.body;
      const text = b.details || b.error || `HTTP ${err.status}`;
      return b.code ? `${text} (${b.code})` : text;
    }
    return err && err.message ? err.message : String(err);
  };

  const getKey = () => sessionStorage.getItem(KEY_STORE);

  async function call(method, path, body) {
    const key = getKey();
    if (!key) throw new ApiFailure(0, { error: 'No API key', details: 'enter an API key first' });
    const headers = { Authorization: `Bearer ${key}` };
    const init = { method, headers, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(new URL(path, API), init);
    } catch (err) {
      throw new ApiFailure(0, { error: 'Network error', details: `the service did not answer (${err && err.message ? err.message : err})` });
    }
    const text = await res.text();
    let data = null;
    try {
      data = text === '' ? null : JSON.parse(text);
    } catch {
      data = null;
    }
    if (!res.ok) {
      const b = data && typeof data === 'object' ? data : { error: `HTTP ${res.status}`, details: text.slice(0, 300) };
      if (res.status === 401) onUnauthorized(b);
      throw new ApiFailure(res.status, b);
    }
    return data;
  }

  /** Sets a message element's text and its kind (ok, error, info). */
  function say(node, text, kind) {
    node.textContent = text;
    node.classList.remove('ok', 'error', 'info');
    if (kind) node.classList.add(kind);
  }

  const fmtTime = (iso) => {
    if (!iso) return '—';
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
  };

  const timeEl = (iso) => (iso ? el('time', { dateTime: String(iso), title: String(iso), text: fmtTime(iso) }) : '—');

  // ---------------------------------------------------------------- the key

  const sections = ['webhooks-section', 'secret-section', 'log-section'];

  function showSections(on) {
    for (const id of sections) $(id).hidden = !on;
  }

  function onUnauthorized(body) {
    say($('key-status'), `The service refused the key: ${body.details || 'unauthorized'}. Enter another key.`, 'error');
  }

  function forgetKey(message) {
    sessionStorage.removeItem(KEY_STORE);
    $('api-key').value = '';
    showSections(false);
    $('webhooks').tBodies[0].replaceChildren();
    $('deliveries').tBodies[0].replaceChildren();
    hideSecret();
    say($('secret-status'), '', null);
    say($('rotate-status'), '', null);
    say($('log-status'), '', null);
    say($('key-status'), message, 'info');
  }

  async function useKey(key) {
    sessionStorage.setItem(KEY_STORE, key);
    $('api-key').value = '';
    say($('key-status'), 'Checking the key…', 'info');
    try {
      await loadWebhooks();
    } catch (err) {
      if (err instanceof ApiFailure && err.status === 401) {
        sessionStorage.removeItem(KEY_STORE);
        showSections(false);
        return;
      }
      say($('key-status'), `Could not load the webhooks: ${describe(err)}`, 'error');
      return;
    }
    const tail = key.length > 8 ? key.slice(-4) : '';
    say($('key-status'), tail ? `Using the key ending in …${tail} (kept in this tab's session only).` : "Using the key (kept in this tab's session only).", 'ok');
    showSections(true);
    await loadDeliveries();
  }

  // ---------------------------------------------------------------- webhooks

  /** event → {url, enabled, updatedAt} as last read from the API. */
  const saved = new Map();

  async function loadWebhooks() {
    const data = await call('GET', 'webhooks');
    renderWebhooks(data.data);
    renderSecretStatus(data.signingSecret);
  }

  const ids = (event) => ({ url: `url-${event}`, enabled: `enabled-${event}`, msg: `msg-${event}`, updated: `updated-${event}`, last: `last-${event}` });

  /** The webhook's last delivery attempt (tests included): its status and time, or a dash. */
  function lastDelivery(w) {
    if (!w.lastStatus) return '—';
    const test = w.lastDelivery && w.lastDelivery.isTest ? el('span', { class: 'badge', text: 'test' }) : null;
    return el('span', {}, el('span', { class: `outcome ${w.lastStatus === 'success' ? 'delivered' : 'failed'}`, text: String(w.lastStatus) }), test, ' ', timeEl(w.lastSentAt));
  }

  /** Shows a webhook as the API answered it (list or save) in its row. */
  function showSaved(w) {
    const event = String(w.name);
    saved.set(event, { url: w.url, enabled: w.enabled === true, updatedAt: w.updatedAt });
    $(ids(event).updated).replaceChildren(timeEl(w.updatedAt));
    $(ids(event).last).replaceChildren(lastDelivery(w));
  }

  function renderWebhooks(list) {
    const body = $('webhooks').tBodies[0];
    const rows = [];
    saved.clear();
    for (const w of list) {
      const event = String(w.name);
      saved.set(event, { url: w.url, enabled: w.enabled === true, updatedAt: w.updatedAt });
      const id = ids(event);
      const url = el('input', {
        type: 'url', id: id.url, value: w.url || '', placeholder: 'https://example.com/webhooks', spellcheck: false, autocomplete: 'off',
        'aria-label': `URL for ${event}`, 'aria-describedby': id.msg,
      });
      const enabled = el('input', { type: 'checkbox', id: id.enabled, checked: w.enabled === true, role: 'switch', 'aria-label': `Enabled for ${event}` });
      const save = el('button', { type: 'button', text: 'Save', 'aria-label': `Save ${event}` });
      const test = el('button', { type: 'button', text: 'Test', 'aria-label': `Test ${event}` });
      const msg = el('output', { id: id.msg, role: 'status', 'aria-live': 'polite', class: 'msg' });
      save.addEventListener('click', () => void saveWebhook(event, save));
      test.addEventListener('click', () => void testWebhook(event, test));
      url.addEventListener('keydown', (e) => {
        if (e.key === 'Enter') {
          e.preventDefault();
          void saveWebhook(event, save);
        }
      });
      url.addEventListener('input', () => url.removeAttribute('aria-invalid'));
      rows.push(el('tr', { 'data-event': event, 'data-webhook-id': w.id },
        el('th', { scope: 'row', title: w.description ? String(w.description) : undefined }, el('code', { text: event })),
        el('td', {}, url),
        el('td', { class: 'center' }, el('label', { class: 'switch' }, enabled, el('span', { class: 'slider', 'aria-hidden': 'true' }))),
        el('td', { class: 'nowrap' }, save, ' ', test),
        el('td', { id: id.updated }, timeEl(w.updatedAt)),
        el('td', { id: id.last, class: 'nowrap' }, lastDelivery(w)),
        el('td', {}, msg),
      ));
    }
    body.replaceChildren(...rows);
  }

  async function saveWebhook(event, button) {
    const id = ids(event);
    const urlInput = $(id.url);
    const msg = $(id.msg);
    const before = saved.get(event) || { url: null, enabled: false };
    const typed = urlInput.value.trim();
    const url = typed === '' ? null : typed;
    const enabled = $(id.enabled).checked;
    const change = {};
    if (url !== before.url) change.url = url;
    if (enabled !== before.enabled) change.enabled = enabled;
    if (Object.keys(change).length === 0) {
      say(msg, 'Nothing to save.', 'info');
      return;
    }
    button.disabled = true;
    say(msg, 'Saving…', 'info');
    try {
      const w = await call('PATCH', `webhooks/${encodeURIComponent(event)}`, change);
      showSaved(w);
      urlInput.value = w.url || '';
      urlInput.removeAttribute('aria-invalid');
      $(id.enabled).checked = w.enabled === true;
      say(msg, 'Saved.', 'ok');
    } catch (err) {
      if ('url' in change) urlInput.setAttribute('aria-invalid', 'true');
      say(msg, `Not saved: ${describe(err)}`, 'error');
    } finally {
      button.disabled = false;
    }
  }

  async function testWebhook(event, button) {
    const msg = $(ids(event).msg);
    button.disabled = true;
    say(msg, 'Sending a test delivery…', 'info');
    try {
      const r = await call('POST', `webhooks/${encodeURIComponent(event)}/test`, {});
      const status = r.statusCode === null || r.statusCode === undefined ? '' : ` ${r.statusCode}`;
      const latency = typeof r.latencyMs === 'number' ? ` in ${r.latencyMs} ms` : '';
      if (r.success) say(msg, `Test: delivered${status}${latency}.`, 'ok');
      else say(msg, `Test: failed${status}${latency}${r.error ? `: ${r.error}` : ''}.`, 'error');
      void loadDeliveries();
      void refreshLast(event);
    } catch (err) {
      say(msg, `Test not sent: ${describe(err)}`, 'error');
    } finally {
      button.disabled = false;
    }
  }

  /** Reads the webhooks again and shows the last delivery of `event` (after a test). */
  async function refreshLast(event) {
    try {
      const data = await call('GET', 'webhooks');
      const w = data.data.find((x) => x.name === event);
      if (w) $(ids(event).last).replaceChildren(lastDelivery(w));
    } catch {
      // The row keeps what it showed; the test's own result is already on it.
    }
  }

  // ---------------------------------------------------------------- signing secret

  function renderSecretStatus(s) {
    const node = $('secret-status');
    if (s && s.exists) {
      node.replaceChildren('A signing secret exists, created ', timeEl(s.createdAt), '. It cannot be shown again; rotate to get a new one.');
    } else {
      node.replaceChildren('No signing secret yet: deliveries and tests need one. Rotate to create the first.');
    }
  }

  function hideSecret() {
    $('new-secret').value = '';
    say($('copy-status'), '', null);
    $('secret-once').hidden = true;
  }

  function askRotate() {
    const dialog = $('rotate-dialog');
    if (typeof dialog.showModal === 'function') {
      dialog.showModal();
      $('rotate-cancel').focus();
    } else if (window.confirm($('rotate-dialog-text').textContent)) {
      void rotate();
    }
  }

  async function rotate() {
    const button = $('rotate');
    button.disabled = true;
    hideSecret();
    say($('rotate-status'), 'Rotating…', 'info');
    try {
      const r = await call('POST', 'webhooks/rotate-secret');
      $('new-secret').value = r.signingSecret;
      $('secret-once').hidden = false;
      renderSecretStatus({ exists: true, createdAt: r.createdAt });
      say($('rotate-status'), 'A new signing secret was created; the previous one is no longer used.', 'ok');
      $('new-secret').focus();
      $('new-secret').select();
    } catch (err) {
      say($('rotate-status'), `Not rotated: ${describe(err)}`, 'error');
    } finally {
      button.disabled = false;
    }
  }

  async function copySecret() {
    const input = $('new-secret');
    const status = $('copy-status');
    try {
      if (!navigator.clipboard || !window.isSecureContext) throw new Error('the Clipboard API is not available on this page');
      await navigator.clipboard.writeText(input.value);
      say(status, 'Copied to the clipboard.', 'ok');
    } catch (err) {
      input.focus();
      input.select();
      say(status, `Could not copy (${err && err.message ? err.message : err}): the secret is selected, press Ctrl+C.`, 'error');
    }
  }

  // ---------------------------------------------------------------- delivery log

  async function loadDeliveries() {
    const status = $('log-status');
    const limit = $('log-limit').value;
    say(status, 'Loading…', 'info');
    try {
      const data = await call('GET', `webhook-deliveries?limit=${encodeURIComponent(limit)}`);
      // Newest first (the API's order; sorted again so the page never depends on it).
      const list = data.deliveries.map((d, i) => [d, i]).sort((a, b) => (a[0].at < b[0].at ? 1 : a[0].at > b[0].at ? -1 : a[1] - b[1])).map(([d]) => d);
      renderDeliveries(list);
      say(status, `${list.length} ${list.length === 1 ? 'attempt' : 'attempts'}, newest first; updated ${new Date().toLocaleTimeString()}.`, null);
    } catch (err) {
      say(status, `Could not load the delivery log: ${describe(err)}`, 'error');
    }
  }

  function renderDeliveries(list) {
    const body = $('deliveries').tBodies[0];
    if (list.length === 0) {
      body.replaceChildren(el('tr', {}, el('td', { colSpan: 9, class: 'empty', text: 'No deliveries yet.' })));
      return;
    }
    body.replaceChildren(...list.map((d) => {
      const deliveryId = String(d.deliveryId);
      let action;
      if (d.isTest) {
        action = el('span', { class: 'hint', text: 'test (send a new test instead)' });
      } else {
        const b = el('button', { type: 'button', text: 'Resend', 'aria-label': `Resend ${deliveryId}` });
        b.addEventListener('click', () => void resend(deliveryId, b));
        action = b;
      }
      return el('tr', { 'data-delivery-id': deliveryId, 'data-outcome': String(d.outcome) },
        el('td', {}, timeEl(d.at)),
        el('td', {}, el('code', { text: String(d.event) }), d.isTest ? el('span', { class: 'badge', text: 'test' }) : null),
        el('td', { class: 'num', text: String(d.attempt) }),
        el('td', {}, el('span', { class: `outcome ${String(d.outcome)}`, text: String(d.outcome) })),
        el('td', { class: 'num', text: d.statusCode === null || d.statusCode === undefined ? '—' : String(d.statusCode) }),
        el('td', { class: 'num', text: typeof d.latencyMs === 'number' ? `${d.latencyMs} ms` : '—' }),
        el('td', { class: 'error-text', text: d.error ? String(d.error) : '' }),
        el('td', {}, timeEl(d.nextAttemptAt)),
        el('td', { class: 'nowrap' }, el('code', { class: 'id', text: deliveryId, title: d.url ? `to ${d.url}` : undefined }), ' ', action),
      );
    }));
  }

  async function resend(deliveryId, button) {
    button.disabled = true;
    say($('log-status'), 'Resending…', 'info');
    try {
      await call('POST', `webhook-deliveries/${encodeURIComponent(deliveryId)}/resend`);
      say($('log-status'), `Resent ${deliveryId}: queued for delivery; refresh to see the attempt.`, 'ok');
    } catch (err) {
      say($('log-status'), `Not resent: ${describe(err)}`, 'error');
    } finally {
      button.disabled = false;
    }
  }

  // ---------------------------------------------------------------- wiring

  function start() {
    $('key-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const key = $('api-key').value.trim();
      if (key === '') {
        say($('key-status'), 'Enter an API key first.', 'error');
        return;
      }
      void useKey(key);
    });
    $('forget-key').addEventListener('click', () => forgetKey('The key was forgotten: it is no longer stored in this browser.'));
    $('rotate').addEventListener('click', askRotate);
    $('rotate-cancel').addEventListener('click', () => $('rotate-dialog').close('cancel'));
    $('rotate-confirm').addEventListener('click', () => {
      $('rotate-dialog').close('rotate');
      void rotate();
    });
    $('copy-secret').addEventListener('click', () => void copySecret());
    $('hide-secret').addEventListener('click', hideSecret);
    $('refresh-log').addEventListener('click', () => void loadDeliveries());
    $('log-limit').addEventListener('change', () => void loadDeliveries());

    const key = getKey();
    if (key) void useKey(key);
    else say($('key-status'), 'Enter an API key of your organization (live or test mode).', 'info');
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
