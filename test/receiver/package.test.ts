/**
 * The receiver package without the service: envelope parsing of every event the service
 * sends (its own sample payloads), dedupe keys, the memory store's TTL and bound, the Redis
 * store on the real Redis, exact decimals, and WebhookReceiver's outcomes. Signature rules
 * themselves: test/unit/webhook-signature.test.ts; real deliveries: ./examples.test.ts.
 */
import t from 'tap';
import fc from 'fast-check';
import { Decimal } from 'decimal.js';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { samplePayload } from '../../src/bus/events.js';
import { REDIS_URL } from '../helpers/service.js';
import {
  DEFAULT_DEDUPE_TTL_MS,
  DecimalFormatError,
  MemoryDedupeStore,
  RedisDedupeStore,
  WEBHOOK_EVENTS,
  type WebhookEvent,
  WebhookReceiver,
  capDecimals,
  creditsDecimals,
  dedupeKey,
  exactDecimal,
  numberToDecimal,
  parseEnvelope,
  signatureHeader,
  toDecimal,
} from '../../packages/receiver/src/index.js';

const envelope = (event: string, data: unknown, isTest = false) => JSON.stringify({ event, timestamp: '2026-01-01T00:00:00.000Z', isTest, data });
const known = (body: string): WebhookEvent => {
  const p = parseEnvelope(body);
  if (!p.ok || !p.known) throw new Error(`not a known event: ${JSON.stringify(p)}`);
  return p.envelope;
};

t.test('every event the service sends parses as a known, typed event; keys name the business object', async (t) => {
  t.equal(WEBHOOK_EVENTS.length, 10);
  const keys = new Set<string>();
  for (const event of WEBHOOK_EVENTS) {
    const data = samplePayload(event);
    const e = known(envelope(event, data));
    t.equal(e.event, event);
    const key = dedupeKey(e);
    t.equal(JSON.parse(key)[0], event, `${event}: key starts with the event`);
    t.equal(dedupeKey(known(envelope(event, data).replace('2026-01-01T00:00:00.000Z', '2026-06-01T00:00:00.000Z'))), key, `${event}: another delivery time, same key`);
    t.not(dedupeKey(known(envelope(event, samplePayload(event)))), key, `${event}: another object (fresh sample ids), another key`);
    keys.add(key);
  }
  t.equal(keys.size, 10);

  const c = samplePayload('billing-credits-depleted');
  const ck = JSON.parse(dedupeKey(known(envelope('billing-credits-depleted', c))));
  t.same(ck, ['billing-credits-depleted', c.credits.customerId, c.credits.orderLineAttributeId, c.credits.creditsCurrencyId, c.credits.signalId]);
  t.equal(
    dedupeKey(known(envelope('billing-credits-depleted', { credits: { ...c.credits, creditsCurrencyId: String(c.credits.creditsCurrencyId).toUpperCase(), totalCredits: 7, depletedAt: 'x' } }))),
    JSON.stringify(ck),
    'the currency UUID in any case, and fields outside the identity, do not change the key',
  );
  t.not(dedupeKey(known(envelope('billing-credits-depleted', { credits: { ...c.credits, signalId: 'sig_other' } }))), JSON.stringify(ck), 'another signal is another depletion');
  t.match(JSON.parse(dedupeKey(known(envelope('billing-credits-depleted', { credits: { ...c.credits, creditsCurrencyId: null } })))), [String, String, String, null, String]);

  const cap = samplePayload('billing-credit-cap-reached') as Record<string, any>;
  const capKey = JSON.parse(dedupeKey(known(envelope('billing-credit-cap-reached', cap))));
  t.same(capKey, ['billing-credit-cap-reached', cap.customer.id, 'team', cap.breachedUnit.externalId, cap.cap.creditsCurrencyId, '2026-01-01T00:00:00Z', '2026-02-01T00:00:00Z']);
  t.not(dedupeKey(known(envelope('billing-credit-cap-reached', { ...cap, period: { start: '2026-02-01T00:00:00Z', end: '2026-03-01T00:00:00Z' } }))), JSON.stringify(capKey), 'next period: reached again');
  t.equal(dedupeKey(known(envelope('billing-credit-cap-reached', { ...cap, used: 999, usedDecimal: '999', detectedAt: 'later' }))), JSON.stringify(capKey), 'another signal reaching the same cap in the same period: same key');

  const failed = samplePayload('billing-payment-failed');
  const f1 = dedupeKey(known(envelope('billing-payment-failed', failed)));
  t.not(dedupeKey(known(envelope('billing-payment-failed', { payment: { ...failed.payment, failureDate: '2026-01-02T00:00:00Z' } }))), f1, 'a second failed attempt of one payment is another event');
  const paid = samplePayload('billing-payment-succeeded');
  t.not(dedupeKey(known(envelope('billing-payment-succeeded', { payment: { ...paid.payment, id: failed.payment.id } }))), JSON.stringify(['billing-payment-failed', failed.payment.id]), 'succeeded and failed differ by event');
  const inv = samplePayload('billing-invoice-created') as { invoice: { id: string } };
  t.not(dedupeKey(known(envelope('billing-invoice-paid', inv))), dedupeKey(known(envelope('billing-invoice-created', inv))), 'created then paid: two events of one invoice');

  // Narrowing: the compiler knows each event's data (this block would not compile otherwise).
  const e = known(envelope('billing-overage-incurred', samplePayload('billing-overage-incurred')));
  if (e.event === 'billing-overage-incurred') t.equal(e.data.overage.eventType, 'OverageUsage');
  else t.fail('narrowing');
});

t.test('parseEnvelope: unknown events returned as such, and bodies that are not envelopes refused with a reason', async (t) => {
  t.match(parseEnvelope(envelope('billing-something-new', { thing: { id: 1 } })), { ok: true, known: false, envelope: { event: 'billing-something-new', data: { thing: { id: 1 } } } });
  t.match(parseEnvelope(Buffer.from(envelope('billing-payment-succeeded', samplePayload('billing-payment-succeeded')))), { ok: true, known: true }, 'bytes as well as text');
  const bad: [string, RegExp][] = [
    ['{"event":', /not JSON/],
    ['[1]', /JSON object/],
    ['null', /JSON object/],
    [JSON.stringify({ event: '', timestamp: 'x', isTest: false, data: {} }), /event must be/],
    [JSON.stringify({ event: 'billing-invoice-paid', timestamp: 1, isTest: false, data: {} }), /timestamp/],
    [JSON.stringify({ event: 'billing-invoice-paid', timestamp: 'x', isTest: 'no', data: {} }), /isTest/],
    [JSON.stringify({ event: 'billing-invoice-paid', timestamp: 'x', isTest: false, data: [] }), /data must be an object/],
    [envelope('billing-invoice-paid', {}), /data\.invoice must be an object/],
    [envelope('billing-checkout-expired', { checkout: { id: 5 } }), /data\.checkout\.id must be a string/],
    [envelope('billing-payment-failed', { payment: { id: 'p' } }), /data\.payment\.failureDate/],
    [envelope('billing-credits-depleted', { credits: { customerId: 'c', orderLineAttributeId: 'o', signalId: 's' } }), /creditsCurrencyId must be a string or null/],
    [envelope('billing-credit-cap-reached', { ...(samplePayload('billing-credit-cap-reached') as object), usedDecimal: 5 }), /^data\.usedDecimal/],
    [envelope('billing-credit-cap-reached', { ...(samplePayload('billing-credit-cap-reached') as object), period: null }), /data\.period must be an object/],
    [envelope('billing-overage-incurred', { overage: { orderLineAttributeId: 'o', eventType: 'OverageUsage', occurredAt: 't' } }), /overage\.customerId must be a string or null/],
  ];
  for (const [body, detail] of bad) {
    const p = parseEnvelope(body);
    t.equal(p.ok, false, body.slice(0, 80));
    if (!p.ok) t.match(p.detail, detail);
  }
});

t.test('exact decimals: the *Decimal twins, and numbers without one as written', async (t) => {
  const big = '123456789012345678901234567890.000001';
  const c = samplePayload('billing-credits-depleted');
  const e = known(envelope('billing-credits-depleted', { credits: { ...c.credits, totalCredits: Number(big), totalCreditsDecimal: big } }));
  if (e.event !== 'billing-credits-depleted') throw new Error('narrowing');
  t.same(creditsDecimals(e.data.credits), { total: big, remaining: '-0.5', used: '1.5' });
  t.not(String(e.data.credits.totalCredits), big, 'the double beside it is not exact');
  const D = Decimal.clone({ precision: 100 }); // decimal.js rounds results to 20 digits unless told otherwise
  t.equal(toDecimal(creditsDecimals(e.data.credits).total, D).plus('0.000001').toFixed(), '123456789012345678901234567890.000002');
  const cap = known(envelope('billing-credit-cap-reached', samplePayload('billing-credit-cap-reached')));
  if (cap.event !== 'billing-credit-cap-reached') throw new Error('narrowing');
  t.same(capDecimals(cap.data), { capAmount: '500', used: '500.25' });
  t.throws(() => creditsDecimals({ ...e.data.credits, usedCreditsDecimal: '1e3' }), DecimalFormatError);
  for (const bad of ['', '1.', '.5', '+1', '1e3', ' 1', 'NaN', '0x10', 12]) t.throws(() => exactDecimal(bad, 'x'), DecimalFormatError, JSON.stringify(bad));
  for (const good of ['0', '-0.5', '100', '00.10']) t.equal(exactDecimal(good), good);

  t.equal(numberToDecimal(0.1), '0.1');
  t.equal(numberToDecimal(-0), '0');
  t.equal(numberToDecimal(1e21), '1000000000000000000000');
  t.equal(numberToDecimal(1.5e-7), '0.00000015');
  t.equal(numberToDecimal(-1.2345e25), '-12345000000000000000000000');
  t.equal(numberToDecimal(12_500), '12500');
  for (const bad of [Number.NaN, Infinity, -Infinity]) t.throws(() => numberToDecimal(bad), DecimalFormatError);
  fc.assert(
    fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (n) => {
      const s = numberToDecimal(n);
      // Plain notation, the same value as the JSON text the service wrote, exactly.
      return /^-?(0|[1-9]\d*)(\.\d*[1-9])?$/.test(s) && new Decimal(s).equals(new Decimal(JSON.stringify(n))) && Number(s) === (n === 0 ? 0 : n);
    }),
    { numRuns: 5000 },
  );
});

t.test('MemoryDedupeStore: first claim wins, TTL, release, bounded with the least recent evicted', async (t) => {
  let now = 1_000;
  const s = new MemoryDedupeStore({ maxEntries: 3, now: () => now });
  t.equal(s.claim('a', 100), true);
  t.equal(s.claim('a', 100), false, 'seen');
  now += 99;
  t.equal(s.claim('a', 100), false, 'still within its TTL');
  now += 1;
  t.equal(s.claim('a', 100), true, 'expired: a new claim');
  s.release('a');
  t.equal(s.claim('a', 100), true, 'released: claimed again');
  t.equal(s.claim('b', 1000), true);
  t.equal(s.claim('c', 1000), true);
  t.equal(s.claim('a', 100), false, 'a is now the most recent');
  t.equal(s.claim('d', 1000), true);
  t.equal(s.size, 3, 'bounded');
  t.equal(s.claim('b', 1000), true, 'b (least recent) was evicted');
  t.equal(s.claim('a', 100), false);
  now += 100;
  t.equal(s.claim('e', 1000), true);
  t.ok(s.size <= 3);
  t.equal(s.claim('a', 100), true, 'expired entries go first');
  t.throws(() => s.claim('x', 0), RangeError);
  t.throws(() => new MemoryDedupeStore({ maxEntries: 0 }), RangeError);
  const big = new MemoryDedupeStore({ maxEntries: 1000 });
  for (let i = 0; i < 5000; i++) big.claim(`k${i}`, 60_000);
  t.equal(big.size, 1000, 'never more than maxEntries');
  t.equal(big.claim('k4999', 60_000), false);
  t.equal(big.claim('k0', 60_000), true);
  t.equal(DEFAULT_DEDUPE_TTL_MS, 72 * 3600 * 1000);
});

t.test('RedisDedupeStore on the real Redis: atomic first claim across clients, TTL, release', async (t) => {
  const prefix = `test:receiver:${randomBytes(4).toString('hex')}:`;
  const a = new Redis(REDIS_URL);
  const b = new Redis(REDIS_URL);
  t.teardown(async () => {
    const keys = await a.keys(`${prefix}*`);
    if (keys.length) await a.del(...keys);
    a.disconnect();
    b.disconnect();
  });
  const sa = new RedisDedupeStore(a, { prefix });
  const sb = new RedisDedupeStore(b, { prefix });
  const results = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? sa : sb).claim('k1', 60_000)));
  t.equal(results.filter(Boolean).length, 1, 'twenty concurrent claims from two clients: exactly one first');
  const ttl = await a.pttl(`${prefix}k1`);
  t.ok(ttl > 59_000 && ttl <= 60_000, `expires with its TTL (${ttl} ms)`);
  await sa.release('k1');
  t.equal(await sb.claim('k1', 60_000), true, 'released: claimed again');
  t.equal(await sa.claim('k2', 50), true);
  await new Promise((r) => setTimeout(r, 120));
  t.equal(await sa.claim('k2', 50), true, 'expired in Redis');
  await t.rejects(sa.claim('k3', -1), RangeError);
});

t.test('WebhookReceiver: each outcome and its status', async (t) => {
  const secret = 'whsec_' + randomBytes(32).toString('base64url');
  const now = 1_800_000_000_000;
  const r = new WebhookReceiver({ secret, now: () => now });
  const sign = (body: string, at = now) => signatureHeader(secret, body, at);
  const depleted = envelope('billing-credits-depleted', samplePayload('billing-credits-depleted'));

  const first = await r.receive(Buffer.from(depleted), sign(depleted));
  t.match(first, { action: 'process', status: 200, event: { event: 'billing-credits-depleted' } });
  t.match(await r.receive(depleted, sign(depleted, now - 1000)), { action: 'duplicate', status: 200 }, 'the same event signed again later');
  if (first.action === 'process') await first.release();
  t.match(await r.receive(depleted, sign(depleted)), { action: 'process' }, 'released after a failure to queue: the retry is processed');

  t.match(await r.receive(depleted, undefined), { action: 'refused', status: 401, reason: 'MISSING_HEADER' });
  t.match(await r.receive(depleted, 't=1'), { action: 'refused', status: 401, reason: 'MALFORMED_HEADER' });
  t.match(await r.receive(depleted.replace('"isTest":false', '"isTest":true'), sign(depleted)), { action: 'refused', reason: 'BAD_SIGNATURE' }, 'a changed body');
  t.match(await r.receive(depleted, sign(depleted, now - 300_001)), { action: 'refused', reason: 'TIMESTAMP_OUT_OF_TOLERANCE' });
  t.match(await new WebhookReceiver({ secret: secret + 'x', now: () => now }).receive(depleted, sign(depleted)), { action: 'refused', reason: 'BAD_SIGNATURE' }, 'another secret');

  const test = envelope('billing-credits-depleted', samplePayload('billing-credits-depleted'), true);
  t.match(await r.receive(test, sign(test)), { action: 'test', status: 200 });
  t.match(await r.receive(test, sign(test)), { action: 'test' }, 'test deliveries are labelled, not deduplicated');
  const unknown = envelope('billing-refund-issued', { refund: { id: 'rf_1' } });
  t.match(await r.receive(unknown, sign(unknown)), { action: 'ignored', status: 200, event: { event: 'billing-refund-issued' } });
  const notJson = 'hello';
  t.match(await r.receive(notJson, sign(notJson)), { action: 'invalid', status: 400, detail: /not JSON/ });
  const notEnvelope = envelope('billing-payment-succeeded', {});
  t.match(await r.receive(notEnvelope, sign(notEnvelope)), { action: 'invalid', status: 400, detail: /data\.payment/ });
  t.match(await r.receive(notJson, undefined), { action: 'refused' }, 'the body is not looked at before the signature');

  t.throws(() => new WebhookReceiver({ secret: '' }), TypeError);
  t.throws(() => new WebhookReceiver({ secret, dedupeTtlMs: 0 }), RangeError);
});
