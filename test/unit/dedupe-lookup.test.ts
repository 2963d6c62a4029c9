/**
 * The dedupe lookup against a real claim log (JetStream): IdempotencyClaims.lookup answers who
 * holds each claim as of the log after the call started — claims appended by another instance
 * included, whether the asking instance's index was read before (read beside the rounds) or
 * not yet (read in its turn) — and claims nothing; DedupeLookups.repeats turns a lookup body
 * into the repeats the ingress counts (inside the request, or held by another batch's signal).
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { IdempotencyClaims, type ClaimLog } from '../../src/pipeline/dedupe.js';
import { DedupeLookups } from '../../src/pipeline/dedupe-lookup.js';
import { lookupBody } from '../../src/bus/dedupe-lookup.js';
import { dedupeKey } from '../../workers/rows.js';
import type { Nats } from '../../src/bus/connection.js';
import type { BatchMeta } from '../../src/bus/batch.js';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const P = `TLOOK${randomBytes(4).toString('hex')}`;
const nc = await connect({ servers: NATS_URL });
const jsm = await jetstreamManager(nc);
const stream = `${P}_CLAIMS`;
await jsm.streams.add({ name: stream, subjects: [`${P}.claims.>`], storage: StorageType.File });
const log: ClaimLog = { nc, apiPrefix: '$JS.API', stream, subject: (scope) => `${P}.claims.${scope}` };
t.teardown(async () => {
  await jsm.streams.delete(stream).catch(() => undefined);
  await nc.close();
});

const ORG = 'org_LOOKLOOKLOOKLOOKLOOK';
const meta = (batchId: string): BatchMeta => ({ orgId: ORG, mode: 'live', receivedAtMs: 0, batchId });
const claimOf = (k: string): string => k.split('.').slice(2).join('.');
const enc = (keys: (string | null)[]): Buffer => lookupBody(keys.map((k) => (k === null ? null : Buffer.from(JSON.stringify(k)))));

t.test('lookup: claims of another instance found, before and after the index was read; nothing claimed', async (t) => {
  const writer = new IdempotencyClaims(log);
  const reader = new IdempotencyClaims(log);
  const k = (text: string) => dedupeKey(meta('bat_x'), text);
  // The reader's index not read yet: answered in its turn.
  t.same(await reader.lookup(ORG, 'live', [claimOf(k('a'))], ['sig_1_0']), ['none']);
  await writer.claim([k('a'), k('b')], ['sig_old_0', 'sig_old_1']);
  // Read beside the rounds: the writer's append is after what the reader's index holds.
  t.same(await reader.lookup(ORG, 'live', [claimOf(k('a')), claimOf(k('b')), claimOf(k('c'))], ['sig_new_0', 'sig_old_1', 'sig_new_2']), ['other', 'same', 'none']);
  t.same(await reader.lookup(ORG, 'test', [claimOf(k('a'))], ['sig_new_0']), ['none'], 'another mode is another scope');
  // Nothing was claimed by the lookups: c is free for the writer, and the reader's own claims still decide alike.
  t.same(await writer.claim([k('c')], ['sig_w_0']), [true]);
  t.same(await reader.claim([k('a'), k('c'), k('d')], ['sig_r_0', 'sig_r_1', 'sig_r_2']), [false, false, true]);
});

t.test('DedupeLookups.repeats: inside the request, and keys held by a signal of another batch', async (t) => {
  const claims = new IdempotencyClaims(log);
  const lookups = new DedupeLookups({} as Nats, claims);
  const earlier = 'bat_0000earlier00000000000';
  const batch = 'bat_0000thisbatch000000000';
  await claims.claim([dedupeKey(meta(earlier), 'x'), dedupeKey(meta(earlier), 'y')], [`sig_${earlier.slice(4)}_0`, `sig_${earlier.slice(4)}_1`]);
  // This batch's own signal 4 claimed z already (the pipeline took the batch up first): not a repeat.
  await claims.claim([dedupeKey(meta(batch), 'z')], [`sig_${batch.slice(4)}_4`]);
  const body = enc(['x', 'new', 'new', null, 'z', 'y', 'x', 'é"\\']);
  t.same(await lookups.repeats(ORG, 'live', batch, body), [0, 2, 5, 6]);
  t.same(await lookups.repeats(ORG, 'live', batch, enc([null, null])), [], 'no keys: nothing to ask');
});
