/**
 * The billing configuration documents (src/billing/model.ts) in a JetStream KV bucket
 * (`<NATS_PREFIX>_billing`, file storage, history 1), one per organization and mode under the
 * key `cfg.<orgId>.<mode>`.
 *
 * - `get` is one KV get: the document and its revision (an empty document and revision 0
 *   when there is none yet).
 * - `change` reads the document, hands a private copy to `fn` (which mutates it, or throws
 *   to refuse the change) and writes the result with compare-and-set on the revision read
 *   (`create` when there was no document). When another writer got there first the whole
 *   read → fn → write is run again on the new document, at most MAX_ATTEMPTS times. `fn` may
 *   therefore run more than once and must not have side effects beyond its copy. When `fn`
 *   throws, or the write fails, nothing changes.
 * - Changes to one document made in this process are queued one after another, so
 *   concurrent requests to one process never conflict; compare-and-set is what keeps
 *   several processes (several ingress instances) exact.
 * - A document is one KV value, so one NATS message: it must fit the server's max_payload
 *   (1 MiB by default). A change that would make it larger is refused
 *   (`BILLING_CONFIG_TOO_LARGE`) and nothing changes.
 */
import type { KV } from '@nats-io/kv';
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import { ApiError } from '../../errors.js';
import { billingLog as log } from '../../log.js';
import type { Mode } from '../../ratelimit/bucket.js';
import { emptyConfig, type BillingConfig } from '../model.js';

/** Read → fn → compare-and-set attempts before a change gives up with 409 CONFLICT. */
export const MAX_ATTEMPTS = 25;
/** Room kept in a NATS message for the subject and headers of a KV put. */
const MESSAGE_OVERHEAD_BYTES = 4 * 1024;

export interface Versioned {
  config: BillingConfig;
  /** The KV revision the document was read at; 0 when there is no document yet. */
  revision: number;
}

export interface Changed<T> extends Versioned {
  /** What `fn` returned. */
  result: T;
  /** False when `fn` left the document as it was (nothing was written). */
  written: boolean;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

export const configKey = (orgId: string, mode: Mode): string => `cfg.${orgId}.${mode}`;

function isConflict(err: unknown): boolean {
  return (
    err instanceof JetStreamApiError &&
    (err.code === JetStreamApiCodes.StreamWrongLastSequence || err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

function unavailable(err: unknown): ApiError {
  log.error('billing configuration store unavailable', { err });
  return new ApiError('BILLING_UNAVAILABLE', 'the billing configuration store (JetStream) is unreachable; nothing changed, retry later');
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export class BillingConfigStore {
  /** Largest document in bytes (UTF-8 JSON). */
  readonly maxDocumentBytes: number;
  private readonly queues = new Map<string, Promise<unknown>>();

  /**
   * @param kv the `<prefix>_billing` bucket (`Nats.billingBucket()`)
   * @param maxPayload the NATS server's max_payload (`Nats.maxPayload`)
   */
  constructor(
    private readonly kv: KV,
    maxPayload: number,
  ) {
    this.maxDocumentBytes = maxPayload - MESSAGE_OVERHEAD_BYTES;
  }

  /** The document of an organization and mode (empty, revision 0, when there is none). One KV get. */
  async get(orgId: string, mode: Mode): Promise<Versioned> {
    let e;
    try {
      e = await this.kv.get(configKey(orgId, mode));
    } catch (err) {
      throw unavailable(err);
    }
    if (!e) return { config: emptyConfig(), revision: 0 };
    if (e.operation !== 'PUT' || e.value.length === 0) return { config: emptyConfig(), revision: e.revision };
    return { config: JSON.parse(dec.decode(e.value)) as BillingConfig, revision: e.revision };
  }

  /**
   * Applies `fn` to a copy of the current document and stores the result with
   * compare-and-set (see the header). `fn` throws (an ApiError) to refuse: nothing changes.
   */
  change<T>(orgId: string, mode: Mode, fn: (cfg: BillingConfig) => T): Promise<Changed<T>> {
    const key = configKey(orgId, mode);
    const previous = this.queues.get(key) ?? Promise.resolve();
    const run = previous.then(
      () => this.attempt(orgId, mode, fn),
      () => this.attempt(orgId, mode, fn),
    );
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    this.queues.set(key, settled);
    void settled.then(() => {
      if (this.queues.get(key) === settled) this.queues.delete(key);
    });
    return run;
  }

  private async attempt<T>(orgId: string, mode: Mode, fn: (cfg: BillingConfig) => T): Promise<Changed<T>> {
    const key = configKey(orgId, mode);
    for (let attempt = 1; ; attempt++) {
      const { config: current, revision } = await this.get(orgId, mode);
      const before = JSON.stringify(current);
      const config = structuredClone(current);
      const result = fn(config);
      const after = JSON.stringify(config);
      if (after === before) return { result, config, revision, written: false };
      const bytes = enc.encode(after);
      if (bytes.length > this.maxDocumentBytes) {
        throw new ApiError(
          'BILLING_CONFIG_TOO_LARGE',
          `configuration: the change would make the ${mode} configuration ${bytes.length} bytes; at most ${this.maxDocumentBytes} bytes fit in one NATS message (max_payload); nothing changed`,
        );
      }
      try {
        const next = revision === 0 ? await this.kv.create(key, bytes) : await this.kv.update(key, bytes, revision);
        return { result, config, revision: next, written: true };
      } catch (err) {
        // `create` on an existing key fails with the same "wrong last sequence" as `update`.
        if (!isConflict(err)) throw unavailable(err);
        if (attempt >= MAX_ATTEMPTS) {
          throw new ApiError('CONFLICT', `configuration: changed concurrently ${MAX_ATTEMPTS} times in a row by other processes; nothing changed, retry`);
        }
        // Another process wrote first: back off (jittered, growing to 100 ms) and redo on its document.
        await sleep(Math.random() * Math.min(100, 2 ** attempt));
      }
    }
  }
}
