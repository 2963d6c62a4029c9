/**
 * Every name this service keeps in JetStream, derived from NATS_PREFIX (so separate
 * deployments, and separate tests, never see each other's streams, consumers or buckets),
 * and the one way each of them is created: `ensure`.
 *
 *   stream                 subjects                          consumer      written by → read by
 *   <P>_SIGNALS            <P>.signals.<org>                 pipeline      ingress → pipeline
 *   <P>_SIGNALS_DLQ        <P>.dlq.<org>                     -             pipeline → operator
 *   <P>_BILLABLE_P         <P>.billable-p.<k>.<org>          billing-p<k>  pipeline → evaluator (partition k)
 *   <P>_BILLING_ROWS       <P>.billing-rows.<org>            billing-rows  evaluator → rows inserter
 *   <P>_EVENTS             <P>.events.<org>.<mode>.<event>   dispatcher    evaluator, operator API → dispatcher
 *   <P>_DELIVERIES         <P>.deliveries.<org>.<mode>       -             dispatcher → webhooks API
 *   <P>_CLAIMS             <P>.claims.<kind>.<org>.<mode>    -             pipeline, rows inserter (their idempotency claims and batch marks)
 *   KV buckets: <P>_orgs, <P>_billing, <P>_webhooks, <P>_billing_state, <P>_billing_members.
 *
 * The configuration of each resource (retention, limits, ack wait, ...) belongs to the stage
 * that owns it; every stage creates its resources through `ensure` (NATS_REPLICAS applied,
 * refusals turned into startup errors that say what to do).
 */
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { Kvm, type KV, type KvOptions } from '@nats-io/kv';
import type { Mode } from '../shared/mode.js';

/** A stream: its name, the wildcard it captures, and the subject of one message. */
interface StreamNames<S extends unknown[]> {
  stream: string;
  /** The stream's subject filter (`<subject prefix>.>`). */
  subjects: string;
  subject(...parts: S): string;
}

export interface Topology {
  signals: StreamNames<[orgId: string]> & { consumer: string };
  deadLetters: StreamNames<[orgId: string]>;
  /**
   * The billing partitions (src/billing/evaluator/partition.ts): subject
   * `<P>.billable-p.<k>.<org>`, one durable consumer `billing-p<k>` per partition k filtering
   * `<P>.billable-p.<k>.>`.
   */
  billableParts: StreamNames<[k: number, orgId: string]> & {
    consumerPrefix: string;
    consumer(k: number): string;
    filter(k: number): string;
  };
  billingRows: StreamNames<[orgId: string]> & { consumer: string };
  events: StreamNames<[orgId: string, mode: Mode, event: string]> & { consumer: string };
  deliveries: StreamNames<[orgId: string, mode: Mode]>;
  /** The claim logs (src/pipeline/dedupe.ts): `signals` (the pipeline's idempotency claims and batch marks) and `rows` (the billing rows inserter's marks). */
  claims: StreamNames<[kind: 'signals' | 'rows', orgId: string, mode: string]>;
  buckets: {
    orgs: string;
    /** Billing configuration documents (src/billing/config/store.ts). */
    billingConfig: string;
    /** The evaluator's running state (src/billing/evaluator/consumer.ts). */
    billingState: string;
    /** Pipeline processes evaluating billing, and which partitions each takes (src/billing/evaluator/members.ts). */
    billingMembers: string;
    webhooks: string;
  };
  /** Requests of the ingress to the pipeline processes (queue group): which signals of a batch repeat an idempotency key (src/pipeline/dedupe-lookup.ts). */
  dedupeLookup: string;
}

export function topology(prefix: string): Topology {
  const stream = <S extends unknown[]>(name: string, subject: string): StreamNames<S> => ({
    stream: `${prefix}_${name}`,
    subjects: `${prefix}.${subject}.>`,
    subject: (...parts: S) => [prefix, subject, ...parts].join('.'),
  });
  return {
    signals: { ...stream('SIGNALS', 'signals'), consumer: 'pipeline' },
    deadLetters: stream('SIGNALS_DLQ', 'dlq'),
    billableParts: {
      ...stream<[k: number, orgId: string]>('BILLABLE_P', 'billable-p'),
      consumerPrefix: 'billing-p',
      consumer: (k) => `billing-p${k}`,
      filter: (k) => `${prefix}.billable-p.${k}.>`,
    },
    billingRows: { ...stream('BILLING_ROWS', 'billing-rows'), consumer: 'billing-rows' },
    events: { ...stream('EVENTS', 'events'), consumer: 'dispatcher' },
    deliveries: stream('DELIVERIES', 'deliveries'),
    claims: stream('CLAIMS', 'claims'),
    buckets: {
      orgs: `${prefix}_orgs`,
      billingConfig: `${prefix}_billing`,
      billingState: `${prefix}_billing_state`,
      billingMembers: `${prefix}_billing_members`,
      webhooks: `${prefix}_webhooks`,
    },
    dedupeLookup: `${prefix}.dedupe.lookup`,
  };
}

type StreamConfig = Parameters<JetStreamManager['streams']['add']>[0];
type ConsumerConfig = Parameters<JetStreamManager['consumers']['add']>[1] & { durable_name: string };

/**
 * What a stage needs to exist, with its configuration:
 *  - a stream (replicas: NATS_REPLICAS); an existing one is updated to `config` (`existing:
 *    'update'`) or left as an operator may have changed it (`'keep'`); either way one with
 *    fewer replicas than NATS_REPLICAS is raised to it;
 *  - a durable consumer of `stream`, created or updated to `config` (a changed ack wait
 *    applies on restart);
 *  - a KV bucket (replicas: NATS_REPLICAS), opened or created; an existing one with fewer
 *    replicas is raised (its stream is KV_<bucket>).
 */
/** What ensure needs of a connection (bus/connection.ts's Nats is one): topology imports no connection. */
export interface JetStreamAdmin {
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly replicas: number;
}

export type Resource =
  | { stream: Partial<StreamConfig> & { name: string }; existing: 'update' | 'keep' }
  | { consumer: ConsumerConfig; of: string }
  | { bucket: string; options: Partial<KvOptions> };

export async function ensure(nats: JetStreamAdmin, r: Extract<Resource, { bucket: string }>): Promise<KV>;
export async function ensure(nats: JetStreamAdmin, r: Exclude<Resource, { bucket: string }>): Promise<void>;
export async function ensure(nats: JetStreamAdmin, r: Resource): Promise<KV | void> {
  if ('bucket' in r) return ensureBucket(nats, r.bucket, r.options);
  if ('consumer' in r) return ensureConsumer(nats, r.of, r.consumer);
  return ensureStream(nats, r.stream, r.existing);
}

async function ensureStream(nats: JetStreamAdmin, config: Partial<StreamConfig> & { name: string }, existing: 'update' | 'keep'): Promise<void> {
  const wanted = { ...config, num_replicas: nats.replicas };
  const info = async (): Promise<{ config: Record<string, unknown> } | null> => {
    try {
      return (await nats.jsm.streams.info(config.name)) as unknown as { config: Record<string, unknown> };
    } catch (err) {
      if (!isNotFound(err)) throw err;
      return null;
    }
  };
  let found = await info();
  if (!found) {
    try {
      await nats.jsm.streams.add(wanted as StreamConfig);
      return;
    } catch (e) {
      // Another process starting at the same moment created it first, perhaps with its role's
      // settings (nats-server 2.9 answers "stream name already in use with a different
      // configuration", or "subjects overlap with an existing stream"): go on with the one it
      // made, as if it had been there (updated to `config` when `existing` is 'update').
      found = await info();
      if (!found) {
        throw new Error(
          `cannot create JetStream stream ${config.name} with ${nats.replicas} replica(s) (NATS_REPLICAS=${nats.replicas}): ${(e as Error).message}. ` +
            'NATS_REPLICAS must not exceed the number of JetStream servers of the cluster (1 for a single server).',
        );
      }
    }
  }
  const have = Number(found.config.num_replicas ?? 1);
  if (existing === 'update') {
    // Never lowers the replicas of a stream an operator raised by hand.
    await raise(nats, config.name, have, { ...wanted, num_replicas: Math.max(have, nats.replicas) });
  } else if (have < nats.replicas) {
    await raise(nats, config.name, have, { ...found.config, num_replicas: nats.replicas });
  }
}

/** Updates a stream's configuration, turning a refused replica change into a startup error that says what to do. */
async function raise(nats: JetStreamAdmin, stream: string, have: number, config: Record<string, unknown>): Promise<void> {
  try {
    await nats.jsm.streams.update(stream, config as Parameters<JetStreamManager['streams']['update']>[1]);
  } catch (e) {
    if (have >= nats.replicas) throw e;
    throw new Error(
      `JetStream stream ${stream} has ${have} replica(s) but NATS_REPLICAS=${nats.replicas}, and raising them failed: ${(e as Error).message}. ` +
        `Run the service against a cluster of at least ${nats.replicas} JetStream servers, raise them by hand (nats stream edit ${stream} --replicas ${nats.replicas}), ` +
        `or set NATS_REPLICAS=${have}.`,
    );
  }
}

async function ensureConsumer(nats: JetStreamAdmin, stream: string, config: ConsumerConfig): Promise<void> {
  try {
    await nats.jsm.consumers.info(stream, config.durable_name);
  } catch (err) {
    if (!isNotFound(err)) throw err;
    await nats.jsm.consumers.add(stream, config);
    return;
  }
  await nats.jsm.consumers.update(stream, config.durable_name, config);
}

async function ensureBucket(nats: JetStreamAdmin, name: string, options: Partial<KvOptions>): Promise<KV> {
  let kv: KV;
  try {
    kv = await new Kvm(nats.js).create(name, { ...options, replicas: nats.replicas });
  } catch (e) {
    throw new Error(
      `cannot open JetStream KV bucket ${name} with ${nats.replicas} replica(s) (NATS_REPLICAS=${nats.replicas}): ${(e as Error).message}. ` +
        'NATS_REPLICAS must not exceed the number of JetStream servers of the cluster (1 for a single server).',
    );
  }
  await ensureStream(nats, { name: `KV_${name}` }, 'keep');
  return kv;
}

export function isNotFound(err: unknown): boolean {
  return err instanceof Error && /not found/i.test(err.message);
}
