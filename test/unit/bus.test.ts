/**
 * src/bus: the topology (every name derived from the prefix, as its header documents) and
 * the one event list (names in the spec's order, the events published from outside, each
 * sample accepted by its own external check, refusals naming the field).
 */
import t from 'tap';
import { topology } from '../../src/bus/topology.js';
import { EVENT_NAMES, EXTERNAL_EVENT_NAMES, externalCheck, isEventName, samplePayload, busEvent } from '../../src/bus/events.js';
import { WEBHOOK_EVENTS } from '../../packages/receiver/src/events.js';
import { ApiError } from '../../src/errors.js';

t.test('topology: streams, subjects, consumers and buckets from the prefix', async (t) => {
  const n = topology('P1');
  t.same(
    [n.signals, n.deadLetters, n.billableParts, n.billingRows, n.events, n.deliveries, n.claims].map((s) => [s.stream, s.subjects]),
    [
      ['P1_SIGNALS', 'P1.signals.>'],
      ['P1_SIGNALS_DLQ', 'P1.dlq.>'],
      ['P1_BILLABLE_P', 'P1.billable-p.>'],
      ['P1_BILLING_ROWS', 'P1.billing-rows.>'],
      ['P1_EVENTS', 'P1.events.>'],
      ['P1_DELIVERIES', 'P1.deliveries.>'],
      ['P1_CLAIMS', 'P1.claims.>'],
    ],
  );
  t.same([n.signals.consumer, n.billingRows.consumer, n.events.consumer], ['pipeline', 'billing-rows', 'dispatcher']);
  t.equal(n.signals.subject('org_1'), 'P1.signals.org_1');
  t.equal(n.deadLetters.subject('org_1'), 'P1.dlq.org_1');
  t.equal(n.billableParts.subject(3, 'org_1'), 'P1.billable-p.3.org_1');
  t.equal(n.billingRows.subject('org_1'), 'P1.billing-rows.org_1');
  t.equal(n.events.subject('org_1', 'test', 'billing-invoice-paid'), 'P1.events.org_1.test.billing-invoice-paid');
  t.equal(n.deliveries.subject('org_1', 'live'), 'P1.deliveries.org_1.live');
  t.equal(n.claims.subject('signals', 'org_1', 'live'), 'P1.claims.signals.org_1.live');
  t.same(n.buckets, { orgs: 'P1_orgs', billingConfig: 'P1_billing', billingState: 'P1_billing_state', billingMembers: 'P1_billing_members', webhooks: 'P1_webhooks' });
  t.not(topology('P2').events.stream, n.events.stream, 'another prefix, other names');
});

t.test('event list: the ten events of spec 6 in order; seven published from outside', async (t) => {
  t.same(EVENT_NAMES, [...WEBHOOK_EVENTS], 'the receiver package names the same events in the same order');
  t.same(EXTERNAL_EVENT_NAMES, WEBHOOK_EVENTS.slice(0, 7));
  t.ok(isEventName('billing-credits-depleted'));
  t.notOk(isEventName('billing-unknown'));
  t.notOk(isEventName('toString'), 'no inherited property is an event name');
  for (const e of ['billing-credits-depleted', 'billing-overage-incurred', 'billing-credit-cap-reached'] as const) t.equal(externalCheck(e), null, `${e}: only the billing engine produces it`);
});

t.test('each external event accepts its own sample and returns its object id', async (t) => {
  for (const e of EXTERNAL_EVENT_NAMES) {
    const data = samplePayload(e) as unknown as Record<string, { id: string }>;
    const key = Object.keys(data)[0]!;
    t.equal(externalCheck(e)!(data, e), data[key]!.id, e);
  }
});

t.test('external checks refuse, naming the field', async (t) => {
  const refusal = (f: () => unknown): string => {
    try {
      f();
    } catch (err) {
      if (err instanceof ApiError) return err.message;
      throw err;
    }
    return 'accepted';
  };
  const paid = samplePayload('billing-payment-succeeded');
  const check = externalCheck('billing-payment-succeeded')!;
  t.match(refusal(() => check({ ...paid, invoice: {} }, 'billing-payment-succeeded')), /^INVALID_EVENT: data\.invoice: the data of billing-payment-succeeded is \{payment\}/);
  t.match(refusal(() => check({ payment: { ...paid.payment, status: 'failed' } }, 'billing-payment-succeeded')), /^INVALID_EVENT: data\.payment\.status: must be "posted"/);
  t.match(refusal(() => check({ payment: { ...paid.payment, extra: 1 } }, 'billing-payment-succeeded')), /^INVALID_EVENT: data\.payment\.extra: is not a field of a payment/);
  const inv = samplePayload('billing-invoice-created');
  t.match(refusal(() => externalCheck('billing-invoice-created')!({ invoice: { ...inv.invoice, currency: 'usd' } }, 'billing-invoice-created')), /^INVALID_EVENT: data\.invoice\.currency: must be a three-letter currency code/);
});

t.test('bus envelope: fields in order, livemode from the mode, time from the caller', async (t) => {
  const data = samplePayload('billing-invoice-paid');
  const e = busEvent({ id: 'ev_1', event: 'billing-invoice-paid', data }, 'org_1', 'test', new Date(Date.UTC(2026, 0, 2, 3, 4, 5)));
  t.same(Object.keys(e), ['id', 'event', 'organizationId', 'livemode', 'occurredAt', 'data']);
  t.same(e, { id: 'ev_1', event: 'billing-invoice-paid', organizationId: 'org_1', livemode: false, occurredAt: '2026-01-02T03:04:05.000Z', data });
});
