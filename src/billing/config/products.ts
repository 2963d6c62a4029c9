/**
 * Products, as the official client speaks them (organization API key, per organization and
 * mode; routes relative to `/api/v2`):
 *
 *   POST /products                          {name, description?, active?, productCode?, externalId?, metadata?} → 201 product
 *   GET  /products                          ?limit&offset → 200 {data, pagination: {limit, offset, total, hasMore}}
 *   GET  /products/:productId, /products/external/:externalId                                → 200 product
 *   PUT  /products/:productId, /products/external/:externalId   (any of the create fields)   → 200 product
 *
 * A product is `{id: "prod_…", name, description, active, productCode, externalId, archivedAt,
 * metadata, createdAt, updatedAt}`; `archivedAt` is when `active` last became false (null
 * while active). Signals' `attribution` names a product by `productId` or `externalProductId`.
 * Stored in the billing KV bucket (store.ts: `prod.`, `pxid.`, positions `ord.…products.<n>`).
 * A PUT changes the fields it has (null clears a nullable one); an externalId can be given to a
 * product without one (claimed first: 409 CONFLICT when another product has it), never changed
 * or removed once set (validate.ts settableOnce).
 */
import { ApiError } from '../../errors.js';
import { pathParams, type Method, type Reply, type Request, type Route } from '../../http/route.js';
import { randomToken } from '../../orgs/keys.js';
import type { Principal } from '../../orgs/registry.js';
import type { BillingConfigStore, ProductDoc } from './store.js';
import { offsetPage, pagination } from './paging.js';
import { bad, boolean, metadata, optionalText, readObject, required, settableOnce, text } from './validate.js';

const BODY_LIMIT = 64 * 1024;
export const PRODUCT_ID = /^prod_[0-9A-Za-z]{20}$/;
/** Longest product description. */
export const MAX_DESCRIPTION = 4096;
const FIELDS = ['name', 'description', 'active', 'productCode', 'externalId', 'metadata'] as const;

export const productView = ({ seq: _seq, ...p }: ProductDoc) => p;

const notFound = (field: string, what: string): ApiError => new ApiError('NOT_FOUND', `${field}: ${what}`);
const conflict = (externalId: string) => (owner: string): ApiError => new ApiError('CONFLICT', `externalId: product ${owner} already has the externalId ${JSON.stringify(externalId)}`);

function description(v: unknown): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw bad('description', `must be a string or null, got ${Array.isArray(v) ? 'array' : typeof v}`);
  if (v.length > MAX_DESCRIPTION) throw bad('description', `must be at most ${MAX_DESCRIPTION} characters, got ${v.length}`);
  if (!v.isWellFormed()) throw bad('description', 'must be well-formed Unicode (no lone surrogates)');
  return v;
}

export class ProductsApi {
  constructor(private readonly store: BillingConfigStore) {}

  routes(): Route<Principal>[] {
    const r = (method: Method, path: string, fn: (req: Request<Principal>, p: (name: string) => string, who: Principal) => Promise<Reply>): Route<Principal> => {
      const param = pathParams(path);
      const body = method === 'post' || method === 'put' ? { bodyLimit: BODY_LIMIT } : {};
      return { method, path, auth: 'api-key', ...body, handler: (req) => fn(req, (name) => param(req, name), req.principal!) };
    };
    return [
      r('post', '/products', (req, _p, who) => this.create(req, who)),
      r('get', '/products', async (req, _p, who) => {
        const page = offsetPage(req.query);
        const got = await this.store.list<ProductDoc>(who.org.id, who.mode, 'products', page.offset, page.limit, { window: true });
        return { status: 200, body: { data: got.items.map(productView), pagination: pagination(page, got.total) } };
      }),
      r('get', '/products/external/:externalId', async (_req, p, who) => ({ status: 200, body: productView(await this.byExternalId(who, p('externalId'))) })),
      r('put', '/products/external/:externalId', async (req, p, who) => this.update(req, who, (await this.byExternalId(who, p('externalId'))).id)),
      r('get', '/products/:productId', async (_req, p, who) => ({ status: 200, body: productView(await this.byId(who, p('productId'))) })),
      r('put', '/products/:productId', (req, p, who) => this.update(req, who, p('productId'))),
    ];
  }

  private async byId(who: Principal, id: string): Promise<ProductDoc> {
    const found = await this.store.getProduct(who.org.id, who.mode, id);
    if (!found) throw notFound('productId', `no product ${JSON.stringify(id)} (use the service id prod_…, or /products/external/{externalId})`);
    return found.doc;
  }

  private async byExternalId(who: Principal, externalId: string): Promise<ProductDoc> {
    const found = await this.store.productByExternalId(who.org.id, who.mode, text(externalId, 'externalId'));
    if (!found) throw notFound('externalId', `no product has the externalId ${JSON.stringify(externalId)}`);
    return found.doc;
  }

  private async create(req: Request, who: Principal): Promise<Reply> {
    const body = readObject(req, FIELDS, true);
    const name = text(required(body, 'name'), 'name');
    const desc = description(body.description);
    const active = body.active === undefined || body.active === null ? true : boolean(body.active, 'active');
    const productCode = optionalText(body.productCode, 'productCode');
    const externalId = optionalText(body.externalId, 'externalId');
    const meta = metadata(body.metadata, 'metadata');
    const now = new Date().toISOString();
    const product: Omit<ProductDoc, 'seq'> = {
      id: `prod_${randomToken(20)}`,
      name,
      description: desc,
      active,
      productCode,
      externalId,
      archivedAt: active ? null : now,
      metadata: meta,
      createdAt: now,
      updatedAt: now,
    };
    const doc = await this.store.createProduct(who.org.id, who.mode, product, conflict(externalId ?? ''));
    return { status: 201, body: productView(doc) };
  }

  private async update(req: Request, who: Principal, id: string): Promise<Reply> {
    const body = readObject(req, FIELDS, true);
    const has = (k: (typeof FIELDS)[number]): boolean => body[k] !== undefined;
    const name = has('name') ? text(body.name, 'name') : undefined;
    const desc = has('description') ? description(body.description) : undefined;
    const active = has('active') ? boolean(body.active, 'active') : undefined;
    const productCode = has('productCode') ? optionalText(body.productCode, 'productCode') : undefined;
    const externalId = has('externalId') ? optionalText(body.externalId, 'externalId') : undefined;
    const meta = has('metadata') ? metadata(body.metadata, 'metadata') : undefined;
    const now = new Date().toISOString();
    const missing = () => notFound('productId', `no product ${JSON.stringify(id)}`);
    // Checked again inside the change; first here, so that a refused move claims nothing.
    if (externalId !== undefined) settableOnce((await this.byId(who, id)).externalId, externalId, 'product');
    const doc = await this.store.changeProduct(who.org.id, who.mode, id, externalId, missing, conflict(externalId ?? ''), (d) => {
      if (externalId !== undefined) settableOnce(d.externalId, externalId, 'product');
      const before = JSON.stringify(d);
      if (name !== undefined) d.name = name;
      if (desc !== undefined) d.description = desc;
      if (active !== undefined && active !== d.active) {
        d.active = active;
        d.archivedAt = active ? null : now;
      }
      if (productCode !== undefined) d.productCode = productCode;
      if (externalId !== undefined) d.externalId = externalId;
      if (meta !== undefined) d.metadata = meta;
      if (JSON.stringify(d) !== before) d.updatedAt = now;
      return d;
    });
    return { status: 200, body: productView(doc) };
  }
}
