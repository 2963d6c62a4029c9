/**
 * Organizations and their API keys, kept durably in a JetStream KV bucket (file storage):
 *   org.<orgId>        → OrgRecord (JSON)
 *   key.<sha256(key)>  → { orgId, mode }   (API keys are never stored in clear)
 * Every process keeps an in-memory copy fed by a KV watch, so authentication on the hot
 * path is a map lookup; a miss (a key created a moment ago elsewhere) falls back to a get.
 */
import type { KV } from '@nats-io/kv';
import { StorageType } from '@nats-io/jetstream';
import type { Nats } from '../bus/connection.js';
import { ensure } from '../bus/topology.js';
import type { Mode } from '../shared/mode.js';
import { API_KEY_PATTERN, hashApiKey, newApiKey, newOrgId } from './keys.js';
import { orgsLog as log } from '../log.js';

export interface Limits {
  burst: number;
  refillPerSecond: number;
  analyticsConcurrency: number;
}

export interface OrgRecord {
  id: string;
  name: string | null;
  createdAt: string;
  updatedAt: string;
  limits: Limits;
}

interface KeyRecord {
  orgId: string;
  mode: Mode;
}

export interface Principal {
  org: OrgRecord;
  mode: Mode;
}

const enc = new TextEncoder();
const encode = (v: unknown): Uint8Array => enc.encode(JSON.stringify(v));

/** The organizations bucket: on disk, the latest 5 revisions of each record. */
export function orgBucket(nats: Nats): Promise<KV> {
  return ensure(nats, { bucket: nats.topology.buckets.orgs, options: { history: 5, storage: StorageType.File } });
}

export class OrgRegistry {
  private readonly orgs = new Map<string, OrgRecord>();
  private readonly keys = new Map<string, KeyRecord>();

  constructor(
    private readonly kv: KV,
    private readonly defaults: Limits,
  ) {}

  /**
   * Loads every record and keeps following changes made by any process. Ready when the
   * watcher has delivered the last value of every key: it flags the entry that completes
   * the initial load (and every later one) with isUpdate.
   */
  async start(): Promise<void> {
    const watcher = await this.kv.watch({ key: '>' });
    let resolveReady!: () => void;
    const ready = new Promise<void>((r) => (resolveReady = r));
    if ((await this.kv.status()).values === 0) resolveReady();
    void (async () => {
      for await (const e of watcher) {
        try {
          this.apply(e.key, e.operation === 'PUT' ? e.json<unknown>() : null);
        } catch (err) {
          log.error('bad record in organization bucket', { key: e.key, err });
        }
        if (e.isUpdate) resolveReady();
      }
    })();
    // A safety net only: a miss is also looked up on demand (authenticate).
    await Promise.race([ready, new Promise((r) => setTimeout(r, 5_000).unref())]);
  }

  private apply(key: string, value: unknown): void {
    if (key.startsWith('org.')) {
      const id = key.slice(4);
      if (value === null) this.orgs.delete(id);
      else this.orgs.set(id, value as OrgRecord);
    } else if (key.startsWith('key.')) {
      const h = key.slice(4);
      if (value === null) this.keys.delete(h);
      else this.keys.set(h, value as KeyRecord);
    }
  }

  async create(name: string | null): Promise<{ org: OrgRecord; apiKeys: Record<Mode, string> }> {
    const now = new Date().toISOString();
    const org: OrgRecord = { id: newOrgId(), name, createdAt: now, updatedAt: now, limits: { ...this.defaults } };
    const apiKeys = { live: newApiKey('live'), test: newApiKey('test') };
    // The organization first: a crash before the keys are written leaves an organization
    // nobody can use, never a key that points nowhere.
    await this.kv.create(`org.${org.id}`, encode(org));
    for (const mode of ['live', 'test'] as const) {
      await this.kv.create(`key.${hashApiKey(apiKeys[mode])}`, encode({ orgId: org.id, mode } satisfies KeyRecord));
    }
    this.apply(`org.${org.id}`, org);
    return { org, apiKeys };
  }

  async get(id: string): Promise<OrgRecord | null> {
    const e = await this.kv.get(`org.${id}`);
    if (!e || e.operation !== 'PUT') return null;
    const org = e.json<OrgRecord>();
    this.apply(`org.${id}`, org);
    return org;
  }

  /** Compare-and-set update of the limits, retried when another writer got there first. */
  async updateLimits(id: string, patch: Partial<Limits>): Promise<OrgRecord | null> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const e = await this.kv.get(`org.${id}`);
      if (!e || e.operation !== 'PUT') return null;
      const cur = e.json<OrgRecord>();
      const next: OrgRecord = { ...cur, limits: { ...cur.limits, ...patch }, updatedAt: new Date().toISOString() };
      try {
        await this.kv.update(`org.${id}`, encode(next), e.revision);
        this.apply(`org.${id}`, next);
        return next;
      } catch (err) {
        if (attempt === 4) throw err;
      }
    }
    return null;
  }

  /** Resolves a bearer token to its organization and mode, or null. */
  async authenticate(apiKey: string): Promise<Principal | null> {
    if (!API_KEY_PATTERN.test(apiKey)) return null;
    const h = hashApiKey(apiKey);
    let k = this.keys.get(h);
    if (!k) {
      const e = await this.kv.get(`key.${h}`);
      if (!e || e.operation !== 'PUT') return null;
      k = e.json<KeyRecord>();
      this.apply(`key.${h}`, k);
    }
    const org = this.orgs.get(k.orgId) ?? (await this.get(k.orgId));
    return org ? { org, mode: k.mode } : null;
  }
}
