/**
 * The OpenAPI 3.1 document of the HTTP API, served at GET /openapi.json.
 * test/api/openapi.test.ts keeps it in step with the routes the service answers and with
 * the error catalogue (src/errors.ts).
 */
import { ERRORS } from './errors.js';
import { EVENT_NAMES, EXTERNAL_EVENT_NAMES } from './bus/events.js';
import { MAX_DATA_BYTES, MAX_DATA_DEPTH, MAX_SIGNALS, MAX_STRING } from './ingress/validate.js';
import { LIMIT_BOUNDS } from './shared/org-limits.js';
import { FREQUENCIES } from './billing/periods.js';
import { CREDIT_PLACES, MAX_PATH_SEGMENTS, PRICE_PLACES } from './billing/config/validate.js';
import { SUPPORTED_CODINGS } from './http/content-encoding.js';

const json = (schema: unknown, description: string) => ({ description, content: { 'application/json': { schema } } });
const error = (description: string, codes: string[]) =>
  json({ allOf: [{ $ref: '#/components/schemas/Error' }, { properties: { code: { enum: codes } } }] }, description);

const str = { type: 'string', minLength: 1, maxLength: MAX_STRING };
const nullableStr = { type: ['string', 'null'], minLength: 1, maxLength: MAX_STRING };

/** A reference object: exactly one of two keys, a string. */
const reference = (id: string, idText: string, external: string, externalText: string, description: string, nullable = false) => ({
  description,
  oneOf: [
    ...(nullable ? [{ type: 'null' }] : []),
    { type: 'object', additionalProperties: false, required: [id], properties: { [id]: { ...str, description: idText } } },
    { type: 'object', additionalProperties: false, required: [external], properties: { [external]: { ...str, description: externalText } } },
  ],
});

const signal = {
  type: 'object',
  additionalProperties: false,
  required: ['eventName', 'customer'],
  properties: {
    eventName: { ...str, description: 'What happened, e.g. "api_call".' },
    customer: reference(
      'customerId',
      "The customer's service id (cus_…); names a customer by its id only.",
      'externalCustomerId',
      "The producer's own id of the customer (its externalId); names a customer by its externalId only.",
      'The customer: exactly one of customerId or externalCustomerId. (A flat customerId outside customer is an unknown field.)',
    ),
    attribution: reference('productId', "The product's service id (prod_…).", 'externalProductId', "The product's externalId.", 'Optional (null = none): the product the usage is attributed to, exactly one of productId or externalProductId.', true),
    unitId: { ...nullableStr, description: 'Extension of this service: the customer unit by its externalId within the customer (credit caps).' },
    timestamp: {
      type: ['string', 'null'],
      format: 'date-time',
      description: 'RFC 3339 with Z or ±hh:mm, from 2000-01-01T00:00:00Z to one hour after receipt; default: time of receipt.',
    },
    idempotencyKey: { ...nullableStr, description: 'Duplicates within an organization and mode are skipped for 7 days (DEDUPE_WINDOW_DAYS).' },
    data: {
      type: ['object', 'null'],
      description: `At most ${MAX_DATA_BYTES} bytes as JSON and ${MAX_DATA_DEPTH} levels of nesting; no two keys naming the same path (dots in keys separate path segments).`,
    },
  },
};

/** A legacy v1 signal (the official client's v1 field names), mapped to the v2 shape. */
const signalV1 = {
  type: 'object',
  additionalProperties: false,
  required: ['event_name', 'customer_id'],
  description: 'Mapped to the v2 shape: event_name → eventName, customer_id → customer.externalCustomerId, agent_id → attribution.externalProductId, idempotency_key → idempotencyKey; data keeps the exact digits of its numbers.',
  properties: {
    event_name: { ...str },
    customer_id: { ...str, description: "The customer's externalId." },
    agent_id: { ...nullableStr, description: "The product's externalId." },
    timestamp: { type: ['string', 'null'], format: 'date-time' },
    idempotency_key: { ...nullableStr },
    data: { type: ['object', 'null'] },
  },
};

const signalError = {
  type: 'object',
  required: ['index', 'code', 'field', 'message'],
  properties: {
    index: { type: 'integer', minimum: 0, description: "The signal's position in the request." },
    code: { type: 'string', enum: ['INVALID_SIGNAL'] },
    field: { type: 'string', description: 'Dotted path of the field within the signal (e.g. customer.externalCustomerId; v1: the v1 name); "" for the signal itself.' },
    message: { type: 'string', description: 'The first rule the signal breaks.' },
  },
};

const limits = {
  type: 'object',
  additionalProperties: false,
  properties: {
    burst: { type: 'integer', minimum: LIMIT_BOUNDS.burst.min, maximum: LIMIT_BOUNDS.burst.max },
    refillPerSecond: { type: 'number', minimum: LIMIT_BOUNDS.refillPerSecond.min, maximum: LIMIT_BOUNDS.refillPerSecond.max },
    analyticsConcurrency: { type: 'integer', minimum: LIMIT_BOUNDS.analyticsConcurrency.min, maximum: LIMIT_BOUNDS.analyticsConcurrency.max },
  },
};

const ingestResponses = {
  202: json({ $ref: '#/components/schemas/AcceptedBatch' }, 'The batch is durable in JetStream.'),
  400: json(
    {
      allOf: [
        { $ref: '#/components/schemas/Error' },
        {
          properties: {
            code: { enum: ['INVALID_JSON', 'INVALID_BODY', 'BATCH_EMPTY', 'BATCH_TOO_LARGE', 'INVALID_SIGNAL'] },
            errors: { type: 'array', items: { $ref: '#/components/schemas/SignalError' }, description: 'INVALID_SIGNAL only: every signal was refused; all their errors.' },
          },
        },
      ],
    },
    'The request is refused whole (nothing stored, no tokens taken): not JSON, not {"signals": [...]}, 0 or more than 500 signals, or every signal refused (INVALID_SIGNAL: details is the first error as signals[i].field: message, errors lists all).',
  ),
  401: error('Missing or unknown API key.', ['UNAUTHORIZED']),
  413: error('Body larger than MAX_BODY_BYTES, as received or once decompressed (Content-Encoding).', ['PAYLOAD_TOO_LARGE']),
  429: {
    ...error('The token bucket cannot cover the N signals; nothing was ingested.', ['RATE_LIMIT_EXCEEDED']),
    headers: { 'Retry-After': { description: 'Whole seconds until the bucket can cover the request.', schema: { type: 'integer', minimum: 1 } } },
  },
  503: error('A dependency is unavailable or the service is starting; resend with the same idempotency keys.', ['QUEUE_UNAVAILABLE', 'RATE_LIMITER_UNAVAILABLE', 'SERVICE_STARTING']),
};

const analyticsCommon = {
  401: error('Missing or unknown API key.', ['UNAUTHORIZED']),
  429: error(
    'Too many analytics queries of this organization are running, or one waited the time limit + 1 s for a place in the engine while its organization\'s other queries held places (no Retry-After: retry after one completes, with backoff); or, only when ANALYTICS_RATE_LIMITED=true, the token bucket is empty (then with Retry-After).',
    ['CONCURRENCY_LIMIT_EXCEEDED', 'RATE_LIMIT_EXCEEDED'],
  ),
  500: error('The engine failed; details name the error class only.', ['INTERNAL']),
  503: error('No engine in reach of this process, or a dependency is down.', ['ANALYTICS_UNAVAILABLE', 'RATE_LIMITER_UNAVAILABLE', 'SERVICE_STARTING']),
};

const operatorErrors = { 401: error('Missing or wrong operator token.', ['UNAUTHORIZED']), 404: error('No such organization.', ['NOT_FOUND']) };
const orgId = { name: 'id', in: 'path', required: true, schema: { type: 'string', pattern: '^org_[0-9A-Za-z]{20}$' } };


// --- Billing configuration (src/billing/config) ---

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const dateTime = { type: 'string', format: 'date-time' };
const decimal = (places: number, description: string, positive = false) => ({
  type: 'string',
  pattern: `^(0|[1-9][0-9]{0,29})(\\.[0-9]{1,${places}})?$`,
  description: `${description} A decimal string (never a JSON number): ${positive ? '> 0' : '≥ 0'}, at most ${places} decimal places, no exponent, no sign; answered in canonical form ("1.50" → "1.5").`,
});
const uuidSchema = { type: 'string', format: 'uuid', description: 'A UUID; answered in lower case.' };
const externalIdSchema = { type: 'string', minLength: 1, maxLength: MAX_STRING };
const billingParams = {
  customerId: { name: 'customerId', in: 'path', required: true, description: 'The service id of the customer (cus_…).', schema: { type: 'string', pattern: '^cus_[0-9A-Za-z]{20}$' } },
  unitExternalId: { name: 'unitExternalId', in: 'path', required: true, description: "The caller's id of the unit, percent-encoded (1 to 255 characters once decoded; any characters, a slash as %2F).", schema: externalIdSchema },
  creditsCurrencyId: { name: 'creditsCurrencyId', in: 'path', required: true, schema: uuidSchema },
  poolId: { name: 'poolId', in: 'path', required: true, schema: { type: 'string', pattern: '^cp_[0-9A-Za-z]{20}$' } },
};
const billingNotFound = error('Something named does not exist in this organization and mode (details name the field).', ['NOT_FOUND']);
/** Errors of the operations that create a top-level object (nothing to look up). */
const billingCreateErrors = {
  400: error('A bad field (details start with its name); nothing changed.', ['INVALID_JSON', 'INVALID_BODY', 'INVALID_BILLING_CONFIG']),
  401: error('Missing or unknown API key.', ['UNAUTHORIZED']),
  409: error('A duplicate (details name the field), the customer\'s document would exceed one NATS message, or concurrent changes kept winning; nothing changed.', ['CONFLICT', 'BILLING_CONFIG_TOO_LARGE']),
  413: error('Body larger than 64 KiB, as received or once decompressed.', ['PAYLOAD_TOO_LARGE']),
  503: error('The configuration store (JetStream) is unreachable, or the service is starting; nothing changed.', ['BILLING_UNAVAILABLE', 'SERVICE_STARTING']),
};
const billingErrors = { ...billingCreateErrors, 404: billingNotFound };
const billingRead = { 401: billingErrors[401], 404: billingErrors[404], 503: billingErrors[503] };
const billingBody = (schema: unknown) => ({ required: true, content: { 'application/json': { schema } } });
const list = (key: string, item: string) =>
  json(
    { type: 'object', required: [key, 'nextCursor'], properties: { [key]: { type: 'array', items: ref(item) }, nextCursor: { type: ['string', 'null'], description: 'Pass as ?cursor= for the next page; null on the last page.' } } },
    'One page, in creation order.',
  );
/** `?limit` and `?cursor` of every billing configuration list. */
const pageParams = [
  { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 1000, default: 100 } },
  { name: 'cursor', in: 'query', schema: { type: 'string' }, description: 'The opaque nextCursor of the previous page; absent: the first page.' },
];
const pageError = { 400: error('A bad limit or cursor (details name it).', ['INVALID_BILLING_CONFIG']) };
/** `?limit` and `?offset` of the customers and products lists (the official client's paging). */
const offsetParams = [
  { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 1000, default: 100 } },
  { name: 'offset', in: 'query', schema: { type: 'integer', minimum: 0, default: 0 }, description: 'Position in the creation order to start after (page with offset += limit while hasMore).' },
];
const offsetError = { 400: error('A bad limit or offset (details name it).', ['INVALID_BILLING_CONFIG']) };
const offsetList = (item: string) =>
  json(
    {
      type: 'object',
      required: ['data', 'pagination'],
      properties: {
        data: { type: 'array', items: ref(item) },
        pagination: {
          type: 'object',
          required: ['limit', 'offset', 'total', 'hasMore'],
          properties: {
            limit: { type: 'integer' },
            offset: { type: 'integer' },
            total: { type: 'integer', description: 'Positions of the creation order (every one created, deleted customers included).' },
            hasMore: { type: 'boolean', description: 'offset + limit < total.' },
          },
        },
      },
    },
    'The items at positions offset+1 … offset+limit of the creation order (fewer where a customer was deleted).',
  );
const metadataSchema = { type: ['object', 'null'], description: 'Any JSON object (at most 16 KiB as JSON), or null.' };
const addressSchema = {
  type: ['object', 'null'],
  additionalProperties: false,
  properties: Object.fromEntries(['line1', 'line2', 'city', 'state', 'zipCode', 'country'].map((k) => [k, { type: 'string', maxLength: MAX_STRING }])),
};
/** The fields of a customer a create or update body may carry (`name` is required on create). */
const customerFields = {
  name: str,
  externalId: { ...externalIdSchema, description: "The caller's own id, unique within the organization and mode (also among deleted customers). Set once: an update may give one to a customer without one, never change or remove it (400)." },
  legalName: nullableStr,
  email: { type: 'string', maxLength: MAX_STRING, description: 'An e-mail address, or "" for none.' },
  phone: { type: 'string', maxLength: MAX_STRING },
  website: { type: 'string', maxLength: MAX_STRING },
  billingAddress: addressSchema,
  creationState: { enum: ['draft', 'active'], default: 'active' },
  vatNumber: nullableStr,
  metadata: metadataSchema,
  defaultCurrency: { type: 'string', pattern: '^[A-Z]{3}$', default: 'USD', description: 'Informational: prices carry their own currency (order line attributes).' },
};
const productFields = {
  name: str,
  description: { type: ['string', 'null'], maxLength: 4096 },
  active: { type: 'boolean', default: true },
  productCode: nullableStr,
  externalId: { ...externalIdSchema, description: "The caller's own id, unique among the products of the organization and mode. Set once, as a customer's." },
  metadata: metadataSchema,
};
const figure = (what: string) => ({ type: 'number', description: `${what} (the nearest double of the exact decimal).` });
const figures = {
  available: figure('total − used; negative once usage went past the pools'),
  used: figure('Credits drawn by billed signals'),
  total: figure('Credits granted plus top-ups'),
  availableDecimal: { type: 'string', description: 'available, exact.' },
  usedDecimal: { type: 'string', description: 'used, exact.' },
  totalDecimal: { type: 'string', description: 'total, exact.' },
};

const billingSchemas = {
  Customer: {
    type: 'object',
    description: "The official client's Customer. Unset text fields: email, phone, website \"\"; legalName, vatNumber, billingAddress, metadata, churnDate null.",
    properties: {
      id: { type: 'string', pattern: '^cus_[0-9A-Za-z]{20}$' },
      name: { type: 'string' },
      legalName: { type: ['string', 'null'] },
      email: { type: 'string' },
      phone: { type: 'string' },
      website: { type: 'string' },
      externalId: { type: ['string', 'null'], description: "The caller's own id, unique within the organization and mode." },
      billingAddress: addressSchema,
      creationState: { enum: ['draft', 'active'] },
      churnDate: { type: ['string', 'null'], format: 'date-time' },
      vatNumber: { type: ['string', 'null'] },
      metadata: metadataSchema,
      defaultCurrency: { type: 'string' },
      createdAt: dateTime,
      updatedAt: dateTime,
    },
  },
  Product: {
    type: 'object',
    properties: {
      id: { type: 'string', pattern: '^prod_[0-9A-Za-z]{20}$' },
      name: { type: 'string' },
      description: { type: ['string', 'null'] },
      active: { type: 'boolean' },
      productCode: { type: ['string', 'null'] },
      externalId: { type: ['string', 'null'] },
      archivedAt: { type: ['string', 'null'], format: 'date-time', description: 'When active last became false; null while active.' },
      metadata: metadataSchema,
      createdAt: dateTime,
      updatedAt: dateTime,
    },
  },
  CreditBalance: {
    type: 'object',
    description: "One credits currency of the customer's credit pools (the official client's CreditBalance).",
    properties: {
      creditsCurrencyId: uuidSchema,
      currencyName: { type: 'string', description: 'The credits currency id (credits currencies have no names here).' },
      currencyKey: { type: 'string', description: 'The credits currency id.' },
      ...figures,
      periodStart: { type: ['string', 'null'], format: 'date-time', description: "The earliest pool's creation." },
      periodEnd: { type: 'null', description: 'Pools have no periods.' },
      rolloverEndDate: { type: 'null', description: 'Pools have no rollover.' },
      recipient: { const: 'organization', description: 'The customer (no seats here).' },
      grants: {
        type: 'array',
        description: 'One per credit pool of this currency.',
        items: {
          type: 'object',
          properties: {
            ...figures,
            rolloverAmount: { type: 'null' },
            periodStart: { ...dateTime, description: "The pool's creation." },
            periodEnd: { type: 'null' },
            rolloverEndDate: { type: 'null' },
            expiresAt: { type: 'null', description: 'Pools never expire.' },
            isInRolloverWindow: { const: false },
            poolId: { type: 'string', pattern: '^cp_[0-9A-Za-z]{20}$' },
            orderLineAttributeId: { type: 'string' },
          },
        },
      },
    },
  },
  Unit: {
    type: 'object',
    properties: {
      customerId: { type: 'string' },
      externalId: { type: 'string' },
      externalType: { type: ['string', 'null'] },
      name: { type: ['string', 'null'] },
      parentExternalId: { type: ['string', 'null'], description: 'null for a root unit; the tree never has cycles.' },
      createdAt: dateTime,
      updatedAt: dateTime,
    },
  },
  Plan: { type: 'object', properties: { id: { type: 'string', pattern: '^plan_[0-9A-Za-z]{20}$' }, name: { type: 'string' }, createdAt: dateTime } },
  QuantityRule: {
    oneOf: [
      { type: 'object', additionalProperties: false, required: ['kind'], properties: { kind: { const: 'count' } }, description: 'Each signal counts 1.' },
      {
        type: 'object',
        additionalProperties: false,
        required: ['kind', 'path'],
        properties: { kind: { const: 'path' }, path: { type: 'string', minLength: 1, maxLength: MAX_STRING, description: `Dot-separated keys into the signal's data (at most ${MAX_PATH_SEGMENTS}), e.g. "usage.tokens"; the value there is the quantity.` } },
      },
    ],
  },
  OrderLineAttribute: {
    type: 'object',
    properties: {
      id: { type: 'string', pattern: '^ola_[0-9A-Za-z]{20}$' },
      customerId: { type: 'string' },
      planId: { type: 'string' },
      eventName: { type: 'string' },
      quantity: ref('QuantityRule'),
      unitPrice: decimal(PRICE_PLACES, 'Minor units (e.g. cents) per unit of quantity; fractions allowed.'),
      currency: { type: 'string', pattern: '^[A-Z]{3}$' },
      includedQuantity: { oneOf: [decimal(PRICE_PLACES, 'Overage threshold on cumulative quantity.'), { type: 'null' }] },
      creditsCurrencyId: { oneOf: [uuidSchema, { type: 'null' }] },
      creditsPerUnit: { oneOf: [decimal(CREDIT_PLACES, 'Credits consumed per unit of quantity.', true), { type: 'null' }] },
      createdAt: dateTime,
    },
  },
  CreditPool: {
    type: 'object',
    properties: {
      id: { type: 'string', pattern: '^cp_[0-9A-Za-z]{20}$' },
      customerId: { type: 'string' },
      orderLineAttributeId: { type: 'string' },
      creditsCurrencyId: { type: ['string', 'null'], description: "The attribute's credits currency." },
      granted: decimal(CREDIT_PLACES, 'Credits granted at creation.'),
      topUps: { type: 'array', items: { type: 'object', properties: { id: { type: 'string' }, credits: decimal(CREDIT_PLACES, 'Credits added.', true), at: dateTime } } },
      totalCredits: decimal(CREDIT_PLACES, 'granted plus every top-up.'),
      consumedCredits: { type: 'string', description: 'Listing only: credits drawn so far by evaluated signals (exact decimal, may have more than six places).' },
      balance: { type: 'string', description: 'Listing only: totalCredits − consumedCredits; negative once usage went past the pool.' },
      createdAt: dateTime,
    },
  },
  CreditCap: {
    type: 'object',
    properties: {
      customerId: { type: 'string' },
      unitExternalId: { type: 'string' },
      creditsCurrencyId: uuidSchema,
      amount: decimal(CREDIT_PLACES, 'Credits per period.'),
      frequency: { enum: [...FREQUENCIES] },
      effectiveFrom: { ...dateTime, description: 'RFC 3339 UTC, the anchor of the periods (answered in canonical form).' },
      updatedAt: dateTime,
    },
  },
};

const externalIdParam = { name: 'externalId', in: 'path', required: true, description: "The caller's own id, percent-encoded (1 to 255 characters once decoded).", schema: externalIdSchema };
const productIdParam = { name: 'productId', in: 'path', required: true, schema: { type: 'string', pattern: '^prod_[0-9A-Za-z]{20}$' } };
const customerOps = (parameters: object[]) => ({
  get: { summary: 'A customer', security: [{ apiKey: [] }], parameters, responses: { 200: json(ref('Customer'), 'The customer.'), 400: billingErrors[400], ...billingRead } },
  put: {
    summary: 'Update a customer: only the fields given change (null clears a nullable one)',
    security: [{ apiKey: [] }],
    parameters,
    requestBody: billingBody({ type: 'object', additionalProperties: false, properties: { ...customerFields, churnDate: { type: ['string', 'null'], format: 'date-time', description: 'RFC 3339 UTC.' } } }),
    responses: { 200: json(ref('Customer'), 'The customer as updated.'), ...billingErrors },
  },
  delete: {
    summary: 'Delete a customer',
    description: 'The customer is kept, marked deleted: reads and changes answer 404, lists skip it, its externalId stays reserved, and from then on the billing evaluator prices none of its signals (they are stored as always).',
    security: [{ apiKey: [] }],
    parameters,
    responses: { 200: json({ type: 'object', additionalProperties: false }, 'Deleted: {}.'), 400: billingErrors[400], 401: billingErrors[401], 404: billingNotFound, 409: billingErrors[409], 503: billingErrors[503] },
  },
});
const balancesOp = (parameters: object[]) => ({
  get: {
    summary: "The customer's credit balances, one per credits currency of its credit pools",
    security: [{ apiKey: [] }],
    parameters,
    responses: { 200: json({ type: 'object', required: ['data'], properties: { data: { type: 'array', items: ref('CreditBalance') } } }, 'As billing has committed them.'), 400: billingErrors[400], ...billingRead },
  },
});
const productOps = (parameters: object[]) => ({
  get: { summary: 'A product', security: [{ apiKey: [] }], parameters, responses: { 200: json(ref('Product'), 'The product.'), 400: billingErrors[400], ...billingRead } },
  put: {
    summary: 'Update a product: only the fields given change (active: false sets archivedAt)',
    security: [{ apiKey: [] }],
    parameters,
    requestBody: billingBody({ type: 'object', additionalProperties: false, properties: productFields }),
    responses: { 200: json(ref('Product'), 'The product as updated.'), ...billingErrors },
  },
});

const billingPaths = {
  '/api/v2/customers': {
    post: {
      summary: 'Create a customer',
      description: 'Signals name their customer by kind: `customer.customerId` is the service id (cus_…), `customer.externalCustomerId` the externalId; each is looked up as that kind only, so an externalId may have any form.',
      security: [{ apiKey: [] }],
      requestBody: billingBody({ type: 'object', additionalProperties: false, required: ['name'], properties: customerFields }),
      responses: { 201: json(ref('Customer'), 'Created.'), ...billingCreateErrors },
    },
    get: { summary: 'The customers (deleted ones skipped)', security: [{ apiKey: [] }], parameters: offsetParams, responses: { ...offsetError, 200: offsetList('Customer'), 401: billingErrors[401], 503: billingErrors[503] } },
  },
  '/api/v2/customers/{customerId}': customerOps([billingParams.customerId]),
  '/api/v2/customers/external/{externalId}': customerOps([externalIdParam]),
  '/api/v2/customers/{customerId}/credits/balances': balancesOp([billingParams.customerId]),
  '/api/v2/customers/external/{externalId}/credits/balances': balancesOp([externalIdParam]),
  '/api/v2/products': {
    post: {
      summary: 'Create a product',
      description: "Signals' attribution names a product by its id (productId) or its externalId (externalProductId).",
      security: [{ apiKey: [] }],
      requestBody: billingBody({ type: 'object', additionalProperties: false, required: ['name'], properties: productFields }),
      responses: { 201: json(ref('Product'), 'Created.'), ...billingCreateErrors },
    },
    get: { summary: 'The products', security: [{ apiKey: [] }], parameters: offsetParams, responses: { ...offsetError, 200: offsetList('Product'), 401: billingErrors[401], 503: billingErrors[503] } },
  },
  '/api/v2/products/{productId}': productOps([productIdParam]),
  '/api/v2/products/external/{externalId}': productOps([externalIdParam]),
  '/api/v2/customers/{customerId}/units': {
    get: { summary: "The customer's units (the tree as parentExternalId links)", security: [{ apiKey: [] }], parameters: [billingParams.customerId, ...pageParams], responses: { ...pageError, 200: list('units', 'Unit'), ...billingRead } },
  },
  '/api/v2/customers/{customerId}/units/{unitExternalId}': {
    put: {
      summary: 'Create or replace a unit',
      description: 'PUT replaces the unit: an absent field becomes null (an absent parentExternalId makes it a root). The parent must exist under the same customer (404); a parent that is the unit itself or lies beneath it is a cycle (400). Signals name a unit by its externalId (unitId).',
      security: [{ apiKey: [] }],
      parameters: [billingParams.customerId, billingParams.unitExternalId],
      requestBody: { required: false, content: { 'application/json': { schema: { type: 'object', additionalProperties: false, properties: { externalType: externalIdSchema, name: externalIdSchema, parentExternalId: externalIdSchema } } } } },
      responses: { 200: json(ref('Unit'), 'Replaced (or unchanged).'), 201: json(ref('Unit'), 'Created.'), ...billingErrors },
    },
    get: { summary: 'A unit', security: [{ apiKey: [] }], parameters: [billingParams.customerId, billingParams.unitExternalId], responses: { 200: json(ref('Unit'), 'The unit.'), ...billingRead } },
  },
  '/api/v2/plans': {
    post: {
      summary: 'Create a plan',
      security: [{ apiKey: [] }],
      requestBody: billingBody({ type: 'object', additionalProperties: false, required: ['name'], properties: { name: externalIdSchema } }),
      responses: { 201: json(ref('Plan'), 'Created.'), ...billingCreateErrors },
    },
    get: { summary: 'The plans', security: [{ apiKey: [] }], parameters: pageParams, responses: { ...pageError, 200: list('plans', 'Plan'), 401: billingErrors[401], 503: billingErrors[503] } },
  },
  '/api/v2/customers/{customerId}/order-line-attributes': {
    post: {
      summary: "Price one event name for the customer under a plan",
      description: 'At most one attribute per customer and eventName (409). creditsCurrencyId and creditsPerUnit come together: with them the attribute is credit-priced.',
      security: [{ apiKey: [] }],
      parameters: [billingParams.customerId],
      requestBody: billingBody({
        type: 'object',
        additionalProperties: false,
        required: ['planId', 'eventName', 'unitPrice', 'currency'],
        properties: {
          planId: { type: 'string' },
          eventName: externalIdSchema,
          quantity: { ...ref('QuantityRule'), description: 'Default {"kind":"count"}.' },
          unitPrice: decimal(PRICE_PLACES, 'Minor units per unit of quantity.'),
          currency: { type: 'string', pattern: '^[A-Z]{3}$' },
          includedQuantity: { oneOf: [decimal(PRICE_PLACES, 'Overage threshold.'), { type: 'null' }] },
          creditsCurrencyId: { oneOf: [uuidSchema, { type: 'null' }] },
          creditsPerUnit: { oneOf: [decimal(CREDIT_PLACES, 'Credits per unit of quantity.', true), { type: 'null' }] },
        },
      }),
      responses: { 201: json(ref('OrderLineAttribute'), 'Created.'), ...billingErrors },
    },
    get: { summary: "The customer's order line attributes", security: [{ apiKey: [] }], parameters: [billingParams.customerId, ...pageParams], responses: { ...pageError, 200: list('orderLineAttributes', 'OrderLineAttribute'), ...billingRead } },
  },
  '/api/v2/customers/{customerId}/credit-pools': {
    post: {
      summary: 'Grant credits for a credit-priced order line attribute of the customer',
      description: 'One pool per customer and attribute (409); the attribute must be credit-priced (400); the pool takes its credits currency.',
      security: [{ apiKey: [] }],
      parameters: [billingParams.customerId],
      requestBody: billingBody({ type: 'object', additionalProperties: false, required: ['orderLineAttributeId', 'credits'], properties: { orderLineAttributeId: { type: 'string' }, credits: decimal(CREDIT_PLACES, 'Credits granted.') } }),
      responses: { 201: json(ref('CreditPool'), 'Created.'), ...billingErrors },
    },
    get: { summary: "The customer's credit pools", security: [{ apiKey: [] }], parameters: [billingParams.customerId, ...pageParams], responses: { ...pageError, 200: list('creditPools', 'CreditPool'), ...billingRead } },
  },
  '/api/v2/customers/{customerId}/credit-pools/{poolId}/top-ups': {
    post: {
      summary: 'Add credits to a pool',
      security: [{ apiKey: [] }],
      parameters: [billingParams.customerId, billingParams.poolId],
      requestBody: billingBody({ type: 'object', additionalProperties: false, required: ['credits'], properties: { credits: decimal(CREDIT_PLACES, 'Credits added.', true) } }),
      responses: { 201: json(ref('CreditPool'), 'The pool with the top-up.'), ...billingErrors },
    },
  },
  '/api/v2/customers/{customerId}/units/{unitExternalId}/credit-caps/{creditsCurrencyId}': {
    put: {
      summary: 'Set the credit cap of a unit for a credits currency',
      description: 'A cap has no id: it is addressed by unit and credits currency. Advisory: spend is never blocked; billing-credit-cap-reached fires once per cap and period when the spend of the unit and everything beneath it reaches amount.',
      security: [{ apiKey: [] }],
      parameters: [billingParams.customerId, billingParams.unitExternalId, billingParams.creditsCurrencyId],
      requestBody: billingBody({
        type: 'object',
        additionalProperties: false,
        required: ['amount', 'frequency', 'effectiveFrom'],
        properties: {
          amount: decimal(CREDIT_PLACES, 'Credits per period.'),
          frequency: { enum: [...FREQUENCIES] },
          effectiveFrom: { ...dateTime, description: 'RFC 3339 in UTC (Z or +00:00), at most millisecond precision.' },
        },
      }),
      responses: { 200: json(ref('CreditCap'), 'Replaced (or unchanged).'), 201: json(ref('CreditCap'), 'Created.'), ...billingErrors },
    },
    get: {
      summary: 'The credit cap of a unit for a credits currency',
      security: [{ apiKey: [] }],
      parameters: [billingParams.customerId, billingParams.unitExternalId, billingParams.creditsCurrencyId],
      responses: { 200: json(ref('CreditCap'), 'The cap.'), 400: error('Bad credits currency id.', ['INVALID_BILLING_CONFIG']), ...billingRead },
    },
    delete: {
      summary: 'Remove the credit cap of a unit for a credits currency',
      security: [{ apiKey: [] }],
      parameters: [billingParams.customerId, billingParams.unitExternalId, billingParams.creditsCurrencyId],
      responses: { 204: { description: 'Removed.' }, 400: error('Bad credits currency id.', ['INVALID_BILLING_CONFIG']), ...billingRead, 409: billingErrors[409] },
    },
  },
  '/api/v2/customers/{customerId}/credit-caps': {
    get: { summary: "The customer's credit caps", security: [{ apiKey: [] }], parameters: [billingParams.customerId, ...pageParams], responses: { ...pageError, 200: list('creditCaps', 'CreditCap'), ...billingRead } },
  },
};


const webhookEventParam = { name: 'event', in: 'path', required: true, schema: { type: 'string', enum: [...EVENT_NAMES] } };
/** The official client's `Webhook` (its seven fields, required), then the service's own. */
const webhookSchema = {
  type: 'object',
  required: ['id', 'name', 'description', 'enabled', 'url', 'lastSentAt', 'lastStatus'],
  properties: {
    id: { type: 'string', pattern: '^wh_[A-Za-z0-9_-]{22}$', description: 'Stable per organization, mode and event (an HMAC under a key derived from WEBHOOK_ENCRYPTION_KEY); reveals nothing of them.' },
    name: { type: 'string', enum: [...EVENT_NAMES], description: 'The event name (spec 6).' },
    description: { type: 'string', description: 'When the event fires.' },
    enabled: { type: 'boolean' },
    url: { type: ['string', 'null'], description: 'null: not configured.' },
    lastSentAt: { type: ['string', 'null'], format: 'date-time', description: 'Start of the newest delivery attempt of this event in the delivery log (test deliveries included); null: none in the log.' },
    lastStatus: { type: ['string', 'null'], enum: ['success', 'failed', null], description: 'Outcome of that attempt: success (the receiver answered 2xx) or failed.' },
    updatedAt: { type: ['string', 'null'], format: 'date-time', description: 'Extra: the last change of url or enabled.' },
    lastDelivery: {
      type: ['object', 'null'],
      description: 'Extra: the attempt lastSentAt and lastStatus describe.',
      properties: { deliveryId: { type: 'string' }, attempt: { type: 'integer' }, isTest: { type: 'boolean' }, statusCode: { type: ['integer', 'null'] } },
    },
  },
};
const webhookView = ref('Webhook');
const webhookCommon = {
  401: error('Missing or unknown API key.', ['UNAUTHORIZED']),
  503: error('WEBHOOK_ENCRYPTION_KEY is not set on this service, or the service is starting.', ['WEBHOOKS_UNAVAILABLE', 'SERVICE_STARTING']),
};
const outboundLimited = error(
  'Two URL checks or test deliveries of this organization and mode are already running in this process (no Retry-After: retry when one has answered); nothing changed.',
  ['CONCURRENCY_LIMIT_EXCEEDED'],
);
const deliveryRecord = {
  type: 'object',
  properties: {
    deliveryId: { type: 'string' }, attempt: { type: 'integer' }, event: { type: 'string' }, eventId: { type: 'string' }, eventSeq: { type: ['integer', 'null'] },
    isTest: { type: 'boolean' }, at: { type: 'string', format: 'date-time' }, url: { type: ['string', 'null'] }, statusCode: { type: ['integer', 'null'] },
    latencyMs: { type: ['number', 'null'] }, outcome: { type: 'string', enum: ['delivered', 'failed', 'not-delivered'] }, error: { type: ['string', 'null'] },
    nextAttemptAt: { type: ['string', 'null'], format: 'date-time' },
  },
};
const WEBHOOK_PATHS = {
  '/admin/v1/organizations/{id}/events': {
    post: {
      summary: 'Publish an event of another billing component (payment, invoice, checkout) for delivery to the organization’s webhook',
      security: [{ operator: [] }],
      parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }],
      requestBody: { required: true, content: { 'application/json': { schema: { type: 'object', additionalProperties: false, required: ['mode', 'event', 'data'], properties: { mode: { enum: ['live', 'test'] }, event: { enum: [...EXTERNAL_EVENT_NAMES] }, id: { type: 'string', description: 'Event id (default <event>:<object id>); the same id within a day is delivered once.' }, data: { type: 'object', description: '{payment} (spec 2.5), {invoice} or {checkout} (README).' } } } } } },
      responses: {
        202: json({ type: 'object', properties: { id: { type: 'string' }, event: { type: 'string' }, duplicate: { type: 'boolean' } } }, 'On the bus.'),
        400: error('Bad body or payload field (named).', ['INVALID_JSON', 'INVALID_BODY', 'INVALID_EVENT']),
        401: error('Missing or wrong operator token.', ['UNAUTHORIZED']),
        404: error('No such organization.', ['NOT_FOUND']),
        503: error('JetStream unreachable.', ['QUEUE_UNAVAILABLE', 'SERVICE_STARTING']),
      },
    },
  },
  '/api/v2/webhooks': {
    get: { summary: 'The ten webhook events with their URL, switch and last delivery; whether a signing secret exists', security: [{ apiKey: [] }], responses: { 200: json({ type: 'object', required: ['data'], properties: { data: { type: 'array', items: webhookView }, signingSecret: { type: 'object', description: 'Extra: whether a signing secret exists (it is never shown again).', properties: { exists: { type: 'boolean' }, createdAt: { type: ['string', 'null'] } } } } }, 'The webhooks, in the order of spec 6.'), ...webhookCommon } },
  },
  '/api/v2/webhooks/rotate-secret': {
    post: { summary: 'A new signing secret, returned this once (also how an organization gets its first one); the old one stops being used on the next delivery', security: [{ apiKey: [] }], responses: { 201: json({ type: 'object', properties: { signingSecret: { type: 'string', pattern: '^whsec_[A-Za-z0-9_-]{43}$' }, createdAt: { type: 'string' } } }, 'The secret: store it now.'), ...webhookCommon } },
  },
  '/api/v2/webhooks/{event}': {
    patch: {
      summary: 'Configure the webhook of one event',
      security: [{ apiKey: [] }],
      parameters: [webhookEventParam],
      requestBody: { required: true, content: { 'application/json': { schema: { type: 'object', additionalProperties: false, properties: { url: { type: ['string', 'null'], description: 'Absolute HTTPS URL resolving only to public addresses (unless the operator allowed plain HTTP or networks); null clears it while the webhook is disabled.' }, enabled: { type: 'boolean', description: 'true only with a URL (set before or in the same request).' } } } } } },
      responses: {
        200: json(webhookView, 'The updated webhook.'),
        400: error('Bad body, URL or enabled.', ['INVALID_JSON', 'INVALID_BODY', 'INVALID_WEBHOOK']),
        404: error('Unknown event name.', ['NOT_FOUND']),
        409: error('The change would leave the webhook enabled without a URL (enabling it with none, or clearing the URL while it is enabled); nothing changed.', ['WEBHOOK_NOT_READY']),
        429: outboundLimited,
        ...webhookCommon,
      },
    },
  },
  '/api/v2/webhooks/{event}/test': {
    post: {
      summary: 'Send a synthetic event (isTest: true) to the configured URL now; answers the outcome of the attempt',
      security: [{ apiKey: [] }],
      parameters: [webhookEventParam],
      requestBody: { required: false, content: { 'application/json': { schema: { type: 'object', maxProperties: 0 } } } },
      responses: {
        200: json({
          type: 'object',
          required: ['success'],
          properties: {
            success: { type: 'boolean', description: 'The receiver answered 2xx.' },
            deliveryId: { type: 'string' }, event: { type: 'string' }, delivered: { type: 'boolean', description: 'The same as success.' }, statusCode: { type: ['integer', 'null'] }, latencyMs: { type: 'number' }, error: { type: ['string', 'null'] },
          },
        }, 'The attempt was made: success says whether the receiver accepted it (a refused or unanswered delivery is a 200 with success false).'),
        400: error('The body is not {}.', ['INVALID_JSON', 'INVALID_BODY']),
        404: error('Unknown event name.', ['NOT_FOUND']),
        409: error('No URL, disabled, or no signing secret yet: nothing was sent.', ['WEBHOOK_NOT_READY']),
        429: outboundLimited,
        ...webhookCommon,
      },
    },
  },
  '/api/v2/webhook-deliveries': {
    get: { summary: 'The delivery log (attempts, and events not delivered), newest first', security: [{ apiKey: [] }], parameters: [{ name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 1000, default: 100 } }], responses: { 200: json({ type: 'object', properties: { deliveries: { type: 'array', items: deliveryRecord } } }, 'The log.'), 400: error('Bad limit.', ['INVALID_WEBHOOK']), ...webhookCommon } },
  },
  '/api/v2/webhook-deliveries/{deliveryId}/resend': {
    post: { summary: 'Deliver the event of a logged delivery again (a new delivery, signed with the current secret)', security: [{ apiKey: [] }], parameters: [{ name: 'deliveryId', in: 'path', required: true, schema: { type: 'string' } }], responses: { 202: json({ type: 'object', properties: { resent: { type: 'string' }, event: { type: 'string' } } }, 'Queued for delivery.'), 400: error('A test delivery cannot be resent.', ['INVALID_WEBHOOK']), 404: error('No such delivery, or its event is no longer kept.', ['NOT_FOUND']), ...webhookCommon } },
  },
};

const DOCUMENT = {
  openapi: '3.1.0',
  info: { title: 'usage-billing', version: '2.0.0', description: 'Usage signals, rate limits and the operator API. See README.md. Every path also answers with one trailing slash (the official client calls collections as `/webhooks/`).' },
  components: {
    securitySchemes: {
      apiKey: { type: 'http', scheme: 'bearer', description: 'sk_live_… or sk_test_…' },
      operator: { type: 'http', scheme: 'bearer', description: 'OPERATOR_TOKEN' },
      metrics: { type: 'http', scheme: 'bearer', description: 'METRICS_TOKEN (only when set; otherwise GET /metrics is open)' },
    },
    schemas: {
      Error: {
        type: 'object',
        required: ['error', 'code', 'details'],
        properties: { error: { type: 'string' }, code: { type: 'string', enum: Object.keys(ERRORS) }, details: { type: 'string' } },
      },
      Signal: signal,
      SignalV1: signalV1,
      SignalError: signalError,
      AcceptedBatch: {
        type: 'object',
        required: ['ingested', 'duplicates', 'failed', 'errors', 'batchId'],
        description: 'ingested + duplicates + failed = the number of signals sent.',
        properties: {
          ingested: { type: 'integer', description: 'Valid signals that are not duplicates.' },
          duplicates: {
            type: 'integer',
            description:
              'Valid signals skipped as repeats of an earlier idempotencyKey of the organization and mode: exact for repeats inside the request (the first occurrence is ingested) and for keys whose earlier signal was already committed (claimed in the dedupe claim log) when the request arrived. When no pipeline process answers the ingress in time (or none was listening during the last second), only repeats inside the request are counted. Storage is exactly once either way.',
          },
          failed: { type: 'integer', description: 'Refused signals, each in errors: nothing of them is stored, billed or claimed.' },
          errors: { type: 'array', items: { $ref: '#/components/schemas/SignalError' } },
          batchId: { type: 'string', description: 'Signal i of the batch (i: its index in the request) has the id sig_<batchId without "bat_">_<i>.' },
        },
      },
      Limits: limits,
      Webhook: webhookSchema,
      ...billingSchemas,
      Organization: {
        type: 'object',
        properties: {
          id: { type: 'string' },
          name: { type: ['string', 'null'] },
          createdAt: { type: 'string', format: 'date-time' },
          updatedAt: { type: 'string', format: 'date-time' },
          limits: limits,
        },
      },
    },
  },
  paths: {
    ...WEBHOOK_PATHS,
    ...billingPaths,
    '/api/v2/analytics/query': {
      post: {
        summary: 'Experimental: run one read-only SELECT (or WITH … SELECT) over the analytics views, scoped to the caller',
        description:
          'Outside the v2 compatibility guarantee. Only the views of GET /api/v2/analytics/schema can be read; results are cut at 10,000 rows and at 16 MiB (16,777,216 bytes) of row JSON, at the last whole row (meta.truncated, meta.truncatedBy, meta.limit); 64-bit and wider integers and decimals are JSON strings (exact); NaN and ±Inf are null; execution is limited to 30 s (408).',
        security: [{ apiKey: [] }],
        requestBody: {
          required: true,
          content: { 'application/json': { schema: { type: 'object', additionalProperties: false, required: ['query'], properties: { query: { type: 'string', minLength: 1, maxLength: 20_480 } } } } },
        },
        responses: {
          200: json(
            {
              type: 'object',
              required: ['columns', 'rows', 'meta'],
              properties: {
                columns: { type: 'array', items: { type: 'object', required: ['name', 'type'], properties: { name: { type: 'string' }, type: { type: 'string', description: 'ClickHouse type name' } } } },
                rows: { type: 'array', maxItems: 10_000, items: { type: 'array' } },
                meta: {
                  type: 'object',
                  required: ['truncated', 'rowCount'],
                  properties: {
                    truncated: { type: 'boolean', description: 'The result was cut: more than 10,000 rows existed, or its rows took more than 16 MiB of JSON; the rows before the cut are returned.' },
                    truncatedBy: { type: 'string', enum: ['rows', 'bytes'], description: 'Only when truncated: which limit cut the result.' },
                    limit: { type: 'integer', description: 'Only when truncated: the limit that cut it (10000 rows, or 16777216 bytes).' },
                    rowCount: { type: 'integer' },
                    elapsedMs: { type: 'number', description: "The engine's execution time." },
                  },
                },
              },
            },
            'The result.',
          ),
          400: error('The body or the query is refused: not one statement, not a SELECT, a SETTINGS/FORMAT/INTO OUTFILE clause, a syntax error or a construct outside the analytics language, an unknown column or function (details name the position, at line:column), or the engine refused it while running (details carry its reason).', [
            'INVALID_JSON', 'INVALID_BODY', 'INVALID_QUERY', 'MULTIPLE_STATEMENTS', 'NOT_A_SELECT', 'CLAUSE_NOT_ALLOWED', 'QUERY_FAILED',
          ]),
          403: error('The query names something outside the analytics views: another table or database, system tables, a table function.', ['FORBIDDEN']),
          408: error('The query ran past the execution time limit (30 s, counted from when it has its place in the engine) and was stopped, or another query of the same organization did and the engine work they shared was ended, or it found no place in the engine within the time limit + 1 s while other organizations held every place.', ['QUERY_TIMEOUT']),
          413: error('Body larger than 256 KiB, as received or once decompressed.', ['PAYLOAD_TOO_LARGE']),
          ...analyticsCommon,
        },
      },
    },
    '/api/v2/analytics/schema': {
      get: {
        summary: 'The analytics views and their columns, with types and descriptions',
        security: [{ apiKey: [] }],
        responses: {
          200: json({ type: 'object', properties: { views: { type: 'array', items: { type: 'object', properties: { name: { type: 'string' }, description: { type: 'string' }, columns: { type: 'array', items: { type: 'object', properties: { name: { type: 'string' }, type: { type: 'string' }, description: { type: 'string' } } } } } } } } }, 'The views.'),
          401: analyticsCommon[401],
          503: analyticsCommon[503],
        },
      },
    },
    '/api/v2/analytics/signals/metadata': {
      get: {
        summary: "The JSON paths seen in the caller's fact_signal.data, with their types and how often",
        security: [{ apiKey: [] }],
        responses: {
          200: json({ type: 'object', properties: { paths: { type: 'array', items: { type: 'object', properties: { path: { type: 'string' }, type: { type: 'string' }, signals: { type: 'integer', description: 'Signals carrying the path with this type.' }, lastSeenAt: { type: 'string', format: 'date-time' } } } } } }, 'The paths, ordered by path.'),
          408: error('Listing ran past the execution time limit, or found no place in the engine within the time limit + 1 s.', ['QUERY_TIMEOUT']),
          ...analyticsCommon,
        },
      },
    },
    '/api/v2/signals/bulk': {
      post: {
        summary: 'Ingest a batch of signals',
        security: [{ apiKey: [] }],
        requestBody: {
          required: true,
          content: { 'application/json': { schema: { type: 'object', additionalProperties: false, required: ['signals'], properties: { signals: { type: 'array', minItems: 1, maxItems: MAX_SIGNALS, items: { $ref: '#/components/schemas/Signal' } } } } } },
        },
        responses: ingestResponses,
      },
    },
    '/api/v1/usage': {
      post: {
        summary: 'Legacy: one signal or an array of signals in the v1 field names (or the v2 shape), mapped to the v2 shape (same bucket, pipeline and answer)',
        deprecated: true,
        security: [{ apiKey: [] }],
        requestBody: {
          required: true,
          content: {
            'application/json': {
              schema: {
                oneOf: [
                  { $ref: '#/components/schemas/SignalV1' },
                  { $ref: '#/components/schemas/Signal' },
                  { type: 'array', minItems: 1, maxItems: MAX_SIGNALS, items: { oneOf: [{ $ref: '#/components/schemas/SignalV1' }, { $ref: '#/components/schemas/Signal' }] } },
                ],
              },
            },
          },
        },
        responses: ingestResponses,
      },
    },
    '/admin/v1/organizations': {
      post: {
        summary: 'Create an organization; its API keys are shown only here',
        security: [{ operator: [] }],
        requestBody: { required: false, content: { 'application/json': { schema: { type: 'object', additionalProperties: false, properties: { name: { type: 'string', minLength: 1, maxLength: 255 } } } } } },
        responses: {
          201: json({ allOf: [{ $ref: '#/components/schemas/Organization' }, { properties: { apiKeys: { type: 'object', properties: { live: { type: 'string' }, test: { type: 'string' } } } } }] }, 'Created.'),
          400: error('Bad body.', ['INVALID_JSON', 'INVALID_BODY']),
          401: operatorErrors[401],
        },
      },
    },
    '/admin/v1/organizations/{id}': {
      get: {
        summary: 'An organization (never its keys)',
        security: [{ operator: [] }],
        parameters: [orgId],
        responses: { 200: json({ $ref: '#/components/schemas/Organization' }, 'The organization.'), ...operatorErrors },
      },
    },
    '/admin/v1/organizations/{id}/limits': {
      patch: {
        summary: 'Change rate and concurrency limits (any subset)',
        security: [{ operator: [] }],
        parameters: [orgId],
        requestBody: { required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/Limits' } } } },
        responses: {
          200: json({ $ref: '#/components/schemas/Organization' }, 'The updated organization.'),
          400: error('A bad limit; nothing changed.', ['INVALID_JSON', 'INVALID_LIMITS']),
          ...operatorErrors,
        },
      },
    },
    '/admin/v1/organizations/{id}/stats': {
      get: {
        summary: 'Signals stored for the organization (processes that own the store)',
        security: [{ operator: [] }],
        parameters: [orgId],
        responses: {
          200: json({ type: 'object', properties: { signals: { type: 'object', properties: { live: { type: 'integer' }, test: { type: 'integer' } } } } }, 'Row counts.'),
          401: operatorErrors[401],
          404: error('The id is not shaped like an organization id (a well-formed unknown id counts zero).', ['NOT_FOUND']),
          503: error('The store is unreachable.', ['STORE_UNAVAILABLE']),
        },
      },
    },
    '/healthz': { get: { summary: 'The process is up', responses: { 200: json({ type: 'object' }, 'Up.') } } },
    '/readyz': {
      get: {
        summary: 'Every dependency of this role answers',
        responses: {
          200: json({ type: 'object' }, 'Ready.'),
          503: json({ type: 'object', properties: { status: { const: 'unavailable' }, down: { type: 'array', items: { type: 'string' } }, checks: { type: 'object' } } }, 'Names what is down.'),
        },
      },
    },
    '/metrics': {
      get: {
        summary: 'Prometheus metrics of this process (every role); open unless METRICS_TOKEN is set',
        security: [{}, { metrics: [] }],
        responses: {
          200: { description: 'Prometheus text exposition format 0.0.4.', content: { 'text/plain': { schema: { type: 'string' } } } },
          401: error('METRICS_TOKEN is set and the request does not carry it.', ['UNAUTHORIZED']),
        },
      },
    },
    '/openapi.json': { get: { summary: 'This document', responses: { 200: json({ type: 'object' }, 'OpenAPI 3.1.') } } },
  },
} as const;

/**
 * Every operation with a path parameter can answer 400 INVALID_PATH (a malformed
 * percent-escape, refused by the HTTP layer before the handler runs): added here once rather
 * than written into each operation.
 */
function withInvalidPath<T>(doc: T): T {
  const copy = JSON.parse(JSON.stringify(doc)) as { paths: Record<string, Record<string, { responses: Record<string, any> }>> };
  for (const [path, ops] of Object.entries(copy.paths)) {
    if (!path.includes('{')) continue;
    for (const op of Object.values(ops)) {
      const existing = op.responses['400'];
      const codes: string[] | undefined = existing?.content?.['application/json']?.schema?.allOf?.[1]?.properties?.code?.enum;
      if (codes) codes.push('INVALID_PATH');
      else op.responses['400'] = error('A path parameter is not valid percent-encoded UTF-8 (details name it).', ['INVALID_PATH']);
    }
  }
  return copy as T;
}

/**
 * Every operation that reads a body (POST, PUT, PATCH) takes it compressed too
 * (src/http/content-encoding.ts): 400 INVALID_CONTENT_ENCODING for data that does not
 * decompress, 415 UNSUPPORTED_CONTENT_ENCODING for another coding; added here once.
 */
function withContentEncoding<T>(doc: T): T {
  const copy = JSON.parse(JSON.stringify(doc)) as { paths: Record<string, Record<string, { responses: Record<string, any>; parameters?: unknown[] }>> };
  const accepted = SUPPORTED_CODINGS.join(', ');
  for (const ops of Object.values(copy.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      if (!['post', 'put', 'patch'].includes(method)) continue;
      op.parameters = [
        ...(op.parameters ?? []),
        {
          name: 'Content-Encoding',
          in: 'header',
          required: false,
          description: `The body's coding: ${accepted} (this server's runtime decides whether zstd is among them). The body limit applies to the bytes received and again to the decompressed body.`,
          schema: { type: 'string' },
        },
      ];
      const existing = op.responses['400'];
      const codes: string[] | undefined = existing?.content?.['application/json']?.schema?.allOf?.[1]?.properties?.code?.enum;
      if (codes) codes.push('INVALID_CONTENT_ENCODING');
      else op.responses['400'] = error('The body does not decompress with its Content-Encoding (details name the problem).', ['INVALID_CONTENT_ENCODING']);
      op.responses['415'] = {
        ...error('Content-Encoding names a coding this server does not take (details name it); resend uncompressed. Nothing changed.', ['UNSUPPORTED_CONTENT_ENCODING']),
        headers: { 'Accept-Encoding': { description: `The codings accepted: ${accepted}.`, schema: { type: 'string' } } },
      };
      const large = op.responses['413'];
      if (!large) op.responses['413'] = error('Body over the limit, as received or once decompressed.', ['PAYLOAD_TOO_LARGE']);
    }
  }
  return copy as T;
}

export const OPENAPI = withContentEncoding(withInvalidPath(DOCUMENT));
