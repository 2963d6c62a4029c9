/**
 * Synthetic payloads for test deliveries (spec 4.4, 6 note 6): the exact shapes of the real
 * events (2.5–2.8), with test-prefixed identifiers (`pay_test_`, `cus_test_`, `cu_test_`,
 * `ola_test_`, `plan_test_`, `inv_test_`, `chk_test_`) and fixed example values.
 *
 * The spec does not show `invoice` and `checkout` objects; this service defines them:
 *   invoice  {id, number, customerId, customerName, status: "open" | "paid", currency,
 *            subtotal, total, amountDue, amountPaid (minor units, integers), periodStart,
 *            periodEnd, issuedAt, dueAt, paidAt (null until paid),
 *            lines: [{orderLineAttributeId, planId, description, quantity, unitPrice, amount}]}
 *   checkout {id, customerId, customerName, status: "open" | "complete" | "expired", currency,
 *            amount (minor units), url, createdAt, expiresAt, completedAt, expiredAt,
 *            paymentId (set when complete)}
 */
import { randomBytes } from 'node:crypto';
import type { WebhookEvent } from './event-names.js';

const id = (prefix: string): string => `${prefix}${randomBytes(9).toString('base64url')}`;

export function samplePayload(event: WebhookEvent, now = new Date()): Record<string, unknown> {
  const at = now.toISOString().replace(/\.\d{3}Z$/, 'Z');
  const customerId = id('cus_test_');
  const customerName = 'Test Customer';
  const invoice = (paid: boolean) => ({
    id: id('inv_test_'),
    number: 'TEST-0001',
    customerId,
    customerName,
    status: paid ? 'paid' : 'open',
    currency: 'USD',
    subtotal: 12_500,
    total: 12_500,
    amountDue: paid ? 0 : 12_500,
    amountPaid: paid ? 12_500 : 0,
    periodStart: '2026-01-01T00:00:00Z',
    periodEnd: '2026-02-01T00:00:00Z',
    issuedAt: at,
    dueAt: '2026-02-15T00:00:00Z',
    paidAt: paid ? at : null,
    lines: [{ orderLineAttributeId: id('ola_test_'), planId: id('plan_test_'), description: 'API calls', quantity: '10000', unitPrice: '1.25', amount: 12_500 }],
  });
  const checkout = (status: 'open' | 'complete' | 'expired') => ({
    id: id('chk_test_'),
    customerId,
    customerName,
    status,
    currency: 'USD',
    amount: 5_000,
    url: 'https://checkout.example.com/test',
    createdAt: at,
    expiresAt: '2026-12-31T00:00:00Z',
    completedAt: status === 'complete' ? at : null,
    expiredAt: status === 'expired' ? at : null,
    paymentId: status === 'complete' ? id('pay_test_') : null,
  });
  switch (event) {
    case 'billing-invoice-created':
      return { invoice: invoice(false) };
    case 'billing-invoice-paid':
      return { invoice: invoice(true) };
    case 'billing-checkout-created':
      return { checkout: checkout('open') };
    case 'billing-checkout-completed':
      return { checkout: checkout('complete') };
    case 'billing-checkout-expired':
      return { checkout: checkout('expired') };
    case 'billing-payment-succeeded':
      return { payment: { id: id('pay_test_'), invoiceId: id('inv_test_'), invoiceNumber: 'TEST-0001', customerId, customerName, amount: 12_500, currency: 'USD', status: 'posted', paymentDate: at, paymentType: 'card', externalPaymentId: null } };
    case 'billing-payment-failed':
      return { payment: { id: id('pay_test_'), invoiceId: null, invoiceNumber: null, customerId, customerName, amount: 12_500, currency: 'USD', status: 'failed', failureReason: 'Card declined (test)', failureDate: at, paymentType: 'card', externalPaymentId: null } };
    case 'billing-credits-depleted':
      return { credits: { customerId, customerName, orderLineAttributeId: id('ola_test_'), creditsCurrencyId: '00000000-0000-4000-8000-000000000000', totalCredits: 100, remainingCredits: -0.5, usedCredits: 1.5, totalCreditsDecimal: '100', remainingCreditsDecimal: '-0.5', usedCreditsDecimal: '1.5', eventName: 'api_call', signalId: id('sig_test_'), depletedAt: at } };
    case 'billing-overage-incurred':
      return { overage: { customerId, customerName, planId: id('plan_test_'), planName: 'Test Plan', orderLineAttributeId: id('ola_test_'), eventType: 'OverageUsage', threshold: 1000, currentUsage: 1001, occurredAt: at } };
    case 'billing-credit-cap-reached':
      return {
        customer: { id: customerId, externalId: 'test-customer' },
        cap: { creditsCurrencyId: '00000000-0000-4000-8000-000000000000', amount: 500, amountDecimal: '500', frequency: 'MONTHLY', effectiveFrom: '2026-01-01T00:00:00Z' },
        breachedUnit: { externalId: id('cu_test_'), externalType: 'team' },
        used: 500.25,
        usedDecimal: '500.25',
        period: { start: '2026-01-01T00:00:00Z', end: '2026-02-01T00:00:00Z' },
        detectedAt: at,
      };
  }
}
