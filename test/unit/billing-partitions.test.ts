/**
 * src/billing/evaluator/streams.ts: the number of billing partitions is decided once for the
 * deployment, whatever starts at once. Every process must hash a customer to the same
 * partition: two partitions evaluating one customer would each write its balance and publish
 * its events (seen in CI: a process starting while another was still creating the 16 partition
 * consumers counted 7 of them, and billed over 7).
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { Nats } from '../../src/bus/connection.js';
import { loadConfig } from '../../src/config.js';
import { topology } from '../../src/bus/topology.js';
import { ensureBillingStreams, PARTITIONS_KEY, stateBucket } from '../../src/billing/evaluator/streams.js';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const OPERATOR_TOKEN = 'op_' + 'x'.repeat(40);
const admin = await connect({ servers: NATS_URL });
const jsm = await jetstreamManager(admin);
const prefixes: string[] = [];
t.teardown(async () => {
  for (const p of prefixes) {
    for await (const s of jsm.streams.list()) if (s.config.name.startsWith(`${p}_`) || s.config.name.startsWith(`KV_${p}_`)) await jsm.streams.delete(s.config.name).catch(() => undefined);
  }
  await admin.close();
});

function newPrefix(): string {
  const p = `TPART${randomBytes(4).toString('hex')}`;
  prefixes.push(p);
  return p;
}

/** A process's connection, as main.ts makes it. */
async function processFor(prefix: string): Promise<Nats> {
  return Nats.connect(loadConfig({ OPERATOR_TOKEN, NATS_URL, NATS_PREFIX: prefix }, []));
}

async function partitionConsumers(prefix: string): Promise<string[]> {
  const names: string[] = [];
  for await (const ci of jsm.consumers.list(topology(prefix).billableParts.stream)) names.push(ci.name);
  return names.sort();
}

t.test('six processes starting at once with different BILLING_PARTITIONS: one number for all, exactly its consumers', async (t) => {
  const prefix = newPrefix();
  const procs = await Promise.all(Array.from({ length: 6 }, () => processFor(prefix)));
  t.teardown(() => Promise.all(procs.map((n) => n.close())));
  const asked = [16, 4, 16, 9, 16, 4];
  const got = await Promise.all(procs.map(async (n, i) => ensureBillingStreams(n, await stateBucket(n), 2_000, asked[i]!)));
  t.equal(new Set(got).size, 1, `every process uses the same number: ${got.join(', ')}`);
  const p = got[0]!;
  t.ok(asked.includes(p), 'one of the numbers asked for');
  t.same(await partitionConsumers(prefix), Array.from({ length: p }, (_, k) => `billing-p${k}`).sort(), 'and exactly its partition consumers');
  // A later start asking for another number keeps it.
  const later = await processFor(prefix);
  t.teardown(() => later.close());
  t.equal(await ensureBillingStreams(later, await stateBucket(later), 2_000, p === 16 ? 4 : 16), p);
});

t.test('partition consumers of a version that counted them, no key: their number is kept and written down', async (t) => {
  const prefix = newPrefix();
  const first = await processFor(prefix);
  t.teardown(() => first.close());
  t.equal(await ensureBillingStreams(first, await stateBucket(first), 2_000, 5), 5);
  // The former version's deployment: the consumers are there, the key is not.
  const kv = await new Kvm(jetstream(admin)).open(topology(prefix).buckets.billingState);
  await kv.purge(PARTITIONS_KEY);
  const procs = await Promise.all(Array.from({ length: 3 }, () => processFor(prefix)));
  t.teardown(() => Promise.all(procs.map((n) => n.close())));
  t.same(await Promise.all(procs.map(async (n) => ensureBillingStreams(n, await stateBucket(n), 2_000, 16))), [5, 5, 5]);
  t.equal((await kv.get(PARTITIONS_KEY))?.string(), '5');
  t.same(await partitionConsumers(prefix), Array.from({ length: 5 }, (_, k) => `billing-p${k}`).sort());
});

t.test('a key that is not a number of partitions: a startup error naming it', async (t) => {
  const prefix = newPrefix();
  const n = await processFor(prefix);
  t.teardown(() => n.close());
  await ensureBillingStreams(n, await stateBucket(n), 2_000, 3);
  const kv = await new Kvm(jetstream(admin)).open(topology(prefix).buckets.billingState);
  await kv.put(PARTITIONS_KEY, 'many');
  await t.rejects(ensureBillingStreams(n, await stateBucket(n), 2_000, 3), /key partitions holds "many", not a number of partitions from 1 to 256/);
});
