/**
 * Reading the billing side of a test service's JetStream: the events on the bus, and
 * waiting until the pipeline, the billing evaluator and the billing rows inserter have
 * nothing pending.
 */
import type { Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { Kvm, type KV, type KvEntry } from '@nats-io/kv';
import { NATS_URL, drained, sleep, type Isolation } from './service.js';
import { topology } from '../../src/bus/topology.js';
import type { BusEvent as TypedBusEvent } from '../../src/bus/events.js';

/** An event as the bus carries it (src/bus/events.ts), its payload left open for the tests' own checks. */
export type BusEvent = Omit<TypedBusEvent, 'data' | 'event'> & { event: string; data: any };

/** Every event on the bus of this isolation (of one organization when given), in order. */
export async function busEvents(i: Isolation, orgId?: string): Promise<BusEvent[]> {
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    const { events } = topology(i.natsPrefix);
    const info = await jsm.streams.info(events.stream);
    const out: BusEvent[] = [];
    if (info.state.messages > 0) {
      const c = await jetstream(nc).consumers.get(events.stream);
      for await (const m of await c.fetch({ max_messages: info.state.messages, expires: 5_000 })) {
        out.push(m.json<BusEvent>());
        if (out.length === info.state.messages) break;
      }
    }
    return orgId === undefined ? out : out.filter((e) => e.organizationId === orgId);
  } finally {
    await nc.close();
  }
}

/** Waits until the pipeline, the billing evaluator and the rows inserter have nothing pending. */
export async function billed(i: Isolation, timeoutMs = 120_000): Promise<void> {
  await drained(i, timeoutMs);
  const nc = await connect({ servers: NATS_URL });
  try {
    const jsm = await jetstreamManager(nc);
    const t = topology(i.natsPrefix);
    const end = Date.now() + timeoutMs;
    for (;;) {
      // Work queues: a stream's messages are those not yet acked, in every partition at once.
      const parts = (await jsm.streams.info(t.billableParts.stream)).state.messages;
      const ri = await jsm.consumers.info(t.billingRows.stream, t.billingRows.consumer);
      if (parts + ri.num_pending + ri.num_ack_pending === 0) return;
      if (Date.now() > end) throw new Error(`billing not drained: ${parts} billable messages, ${ri.num_pending} rows pending, ${ri.num_ack_pending} unacked`);
      await sleep(100);
    }
  } finally {
    await nc.close();
  }
}

/** The billing state bucket's live entries (PUT) whose key starts with `prefix`. */
async function stateEntries(i: Isolation, prefix: string): Promise<KvEntry[]> {
  const nc = await connect({ servers: NATS_URL });
  try {
    const kv = await new Kvm(jetstream(nc)).open(topology(i.natsPrefix).buckets.billingState);
    const out: KvEntry[] = [];
    for await (const k of await kv.keys()) {
      if (!k.startsWith(prefix)) continue;
      const e = await kv.get(k);
      if (e && e.operation === 'PUT') out.push(e);
    }
    return out;
  } finally {
    await nc.close();
  }
}

/** The billing state bucket's keys with a value (not deleted) that start with `prefix`. */
export async function stateKeyNames(i: Isolation, prefix: string): Promise<string[]> {
  return (await stateEntries(i, prefix)).map((e) => e.key).sort();
}

/** The billing state bucket's entries (JSON) whose key starts with `prefix`, by key. */
export async function stateKeys(i: Isolation, prefix: string): Promise<Record<string, unknown>> {
  return Object.fromEntries((await stateEntries(i, prefix)).filter((e) => e.length > 0).map((e) => [e.key, e.json()]));
}

/**
 * A connection and a KV bucket of a unit test file's own, `TUNIT<random>_<label>` (history 1),
 * for the bus modules' tests against the real JetStream. `scratch(suffix)` names more buckets
 * of the file; every one of them is deleted, and the connection closed, at the file's end.
 */
export async function scratchBucket(t: Test, label: string): Promise<{ nc: NatsConnection; js: JetStreamClient; jsm: JetStreamManager; kv: KV; name: string; scratch: (suffix: string) => string }> {
  const nc = await connect({ servers: NATS_URL, noAsyncTraces: true } as Parameters<typeof connect>[0]);
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const made: string[] = [];
  const scratch = (suffix: string): string => {
    const name = `TUNIT${randomBytes(4).toString('hex')}_${suffix}`;
    made.push(name);
    return name;
  };
  const name = scratch(label);
  const kv = await new Kvm(js).create(name, { history: 1 });
  t.teardown(async () => {
    for (const b of made) await jsm.streams.delete(`KV_${b}`).catch(() => undefined);
    await nc.close();
  });
  return { nc, js, jsm, kv, name, scratch };
}
