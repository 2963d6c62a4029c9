/**
 * Idempotency claims (src/pipeline/dedupe.ts) against the real JetStream KV.
 * The test makes its own bucket `TUNIT<random>_dedupe` and deletes its stream at the end.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import { IdempotencyClaims } from '../../src/pipeline/dedupe.js';
import rows, { dedupeKey } from '../../workers/rows.js';
import type { BatchMeta } from '../../src/bus/batch.js';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const name = `TUNIT${randomBytes(4).toString('hex')}_dedupe`;
const nc = await connect({ servers: NATS_URL });
const js = jetstream(nc);
const jsm = await jetstreamManager(nc);
const kv: KV = await new Kvm(js).create(name, { history: 1 });
const claims = new IdempotencyClaims(kv, nc, name);
t.teardown(async () => {
  await jsm.streams.delete(`KV_${name}`).catch(() => undefined);
  await nc.close();
});

let n = 0;
/** A fresh key of the shape the pipeline uses: <org>.<mode>.<hash>. */
const key = (): string => dedupeKey({ orgId: 'org_TESTTESTTESTTESTTEST', mode: 'live', receivedAtMs: 0, batchId: 'bat_x' }, `k${n++}-${randomBytes(4).toString('hex')}`);
const owner = async (k: string): Promise<string | null> => (await kv.get(k))?.string() ?? null;

t.test('first claim keeps; another signal then drops; the owner keeps again', async (t) => {
  const k = key();
  t.same(await claims.claim([k], ['sig_a_0']), [true], 'first claim keeps');
  t.equal(await owner(k), 'sig_a_0', 'the claim names its signal');
  t.same(await claims.claim([k], ['sig_b_0']), [false], 'another signal with the same key drops');
  t.equal(await owner(k), 'sig_a_0', 'the claim is unchanged');
  t.same(await claims.claim([k], ['sig_a_0']), [true], 're-claim by the same signal keeps (redelivery after a crash)');
  t.same(await claims.claim([k], ['sig_a_0']), [true], 'and again');
  t.same(await claims.claim([k], ['sig_b_0']), [false], 'still dropped for the other');
  t.same(await claims.claimAll([k], ['sig_a_0']), { keep: [true], reclaimed: true }, 'a key already held by the same signal is reported as reclaimed (rows may be stored already)');
  t.same(await claims.claimAll([k], ['sig_b_0']), { keep: [false], reclaimed: false }, 'a key held by another signal is not');
  t.same(await claims.claimAll([`${k}-new`, null], ['sig_c_0', 'sig_c_1']), { keep: [true, true], reclaimed: false }, 'a fresh claim is not');
});

t.test('null keys are always kept', async (t) => {
  t.same(await claims.claim([null, null, null], ['s0', 's1', 's2']), [true, true, true]);
  t.same(await claims.claim([], []), [], 'an empty batch');
});

t.test('duplicates within one call: the first occurrence wins', async (t) => {
  const a = key();
  const b = key();
  const ids = ['sig_q_0', 'sig_q_1', 'sig_q_2', 'sig_q_3', 'sig_q_4', 'sig_q_5'];
  t.same(await claims.claim([a, b, a, null, b, null], ids), [true, true, false, true, false, true]);
  t.equal(await owner(a), 'sig_q_0');
  t.equal(await owner(b), 'sig_q_1');
  // redelivery of the same batch gives the same answer
  t.same(await claims.claim([a, b, a, null, b, null], ids), [true, true, false, true, false, true], 'redelivery: same decisions');
  // a later batch with the same keys drops them all
  t.same(await claims.claim([a, a, b], ['sig_r_0', 'sig_r_1', 'sig_r_2']), [false, false, false]);
});

t.test('a mixed batch from the rows worker', async (t) => {
  const meta: BatchMeta = { orgId: 'org_MIXEDMIXEDMIXEDMIXE', mode: 'test', receivedAtMs: Date.now(), batchId: `bat_${randomBytes(6).toString('hex')}` };
  const u = randomBytes(4).toString('hex');
  const signals = [
    { eventName: 'e', customerId: 'c', idempotencyKey: `${u}-1` },
    { eventName: 'e', customerId: 'c' },
    { eventName: 'e', customerId: 'c', idempotencyKey: `${u}-1` },
    { eventName: 'e', customerId: 'c', idempotencyKey: `${u}-2 with spaces.and*wildcards>` },
  ];
  const r = rows({ body: new TextEncoder().encode(JSON.stringify({ signals })), meta });
  t.same(await claims.claim(r.claimKeys, r.ids), [true, true, false, true]);
  // the same idempotency keys in the live mode of the same org are separate
  const live = rows({ body: new TextEncoder().encode(JSON.stringify({ signals })), meta: { ...meta, mode: 'live', batchId: `${meta.batchId}L` } });
  t.same(await claims.claim(live.claimKeys, live.ids), [true, true, false, true], 'other mode: not duplicates');
  // and a second batch in the same org and mode is all duplicates (keyless kept)
  const again = rows({ body: new TextEncoder().encode(JSON.stringify({ signals })), meta: { ...meta, batchId: `${meta.batchId}2` } });
  t.same(await claims.claim(again.claimKeys, again.ids), [false, true, false, false]);
});

t.test('20 concurrent claims of one key: exactly one keeps', async (t) => {
  const k = key();
  const ids = Array.from({ length: 20 }, (_, i) => `sig_c${i}_0`);
  const results = await Promise.all(ids.map((id) => claims.claim([k], [id])));
  const winners = ids.filter((_, i) => results[i]![0]);
  t.equal(winners.length, 1, 'exactly one keeps');
  t.equal(await owner(k), winners[0], 'and it is the one the claim names');
  // every retry of every call agrees
  const again = await Promise.all(ids.map((id) => claims.claim([k], [id])));
  t.same(again, results, 'repeating the claims gives the same answers');
});

t.test('20 concurrent claims over several shared keys from separate clients', async (t) => {
  const keys = [key(), key(), key()];
  // each call claims all three keys (in a different order) with its own signal ids
  const calls = Array.from({ length: 20 }, (_, c) => {
    const order = [keys[c % 3]!, keys[(c + 1) % 3]!, keys[(c + 2) % 3]!];
    return { order, ids: order.map((_, i) => `sig_m${c}_${i}`) };
  });
  const results = await Promise.all(calls.map(({ order, ids }) => new IdempotencyClaims(kv, nc, name).claim(order, ids)));
  for (const k of keys) {
    let winners = 0;
    calls.forEach(({ order }, c) => order.forEach((kk, i) => (winners += kk === k && results[c]![i] ? 1 : 0)));
    t.equal(winners, 1, 'exactly one signal keeps each key');
  }
});

t.test('a removed claim can be claimed again', async (t) => {
  const k = key();
  t.same(await claims.claim([k], ['sig_d_0']), [true]);
  await kv.delete(k);
  t.same(await claims.claim([k], ['sig_e_0']), [true], 'after a delete, a new claim keeps');
  t.equal(await owner(k), 'sig_e_0');
  t.same(await claims.claim([k], ['sig_d_0']), [false], 'the old owner no longer owns it');
  await kv.purge(k);
  t.same(await claims.claim([k], ['sig_f_0']), [true], 'after a purge, a new claim keeps');
});

t.test('a KV error is not mistaken for "already claimed"', async (t) => {
  // an invalid KV key makes kv.create fail with another error: the claim must reject,
  // never silently keep or drop the signal
  await t.rejects(claims.claim(['bad key with spaces'], ['sig_x_0']));
  await t.rejects(claims.claim(['org.live.'], ['sig_x_1']));
});

t.test('takeBatch: true the first time a batch is taken up, false ever after', async (t) => {
  const batchId = `bat_${randomBytes(8).toString('hex')}`;
  t.equal(await claims.takeBatch('org_TESTTESTTESTTESTTEST', 'live', batchId), true, 'first take');
  t.equal(await claims.takeBatch('org_TESTTESTTESTTESTTEST', 'live', batchId), false, 'taken before (a repeat delivery, flagged or not)');
  t.equal(await claims.takeBatch('org_TESTTESTTESTTESTTEST', 'test', batchId), true, 'the other mode is its own data set');
  t.equal(await claims.takeBatch('org_OTHEROTHEROTHEROTHER', 'live', batchId), true, 'another organization is its own data set');
  t.equal((await kv.get(`org_TESTTESTTESTTESTTEST.live.batch_${batchId}`))?.string(), batchId, 'the mark names the batch');
  await kv.delete(`org_TESTTESTTESTTESTTEST.live.batch_${batchId}`);
  t.equal(await claims.takeBatch('org_TESTTESTTESTTESTTEST', 'live', batchId), false, 'a mark an operator deleted still counts as taken (the row check runs)');
});

t.test('claimBatch: the claims and the batch mark in one round', async (t) => {
  const batchId = `bat_${randomBytes(8).toString('hex')}`;
  const meta = { orgId: 'org_TESTTESTTESTTESTTEST', mode: 'live', batchId };
  const [a, b] = [key(), key()];
  t.same(await claims.claim([b], ['sig_other_0']), [true], 'b is held by another signal beforehand');
  t.same(await claims.claimBatch([a, null, b, a], ['sig_g_0', 'sig_g_1', 'sig_g_2', 'sig_g_3'], meta), { claims: { keep: [true, true, false, false], reclaimed: false }, first: true }, 'first delivery');
  t.same(await claims.claimBatch([a, null, b, a], ['sig_g_0', 'sig_g_1', 'sig_g_2', 'sig_g_3'], meta), { claims: { keep: [true, true, false, false], reclaimed: true }, first: false }, 'a repeat: same decisions, mark taken before, own key reclaimed');
  t.same(await claims.claimBatch([null], ['sig_h_0'], { ...meta, batchId: `${batchId}h` }), { claims: { keep: [true], reclaimed: false }, first: true }, 'a keyless batch still takes its mark');
});

t.test('a bucket without its stream: the claim rejects (no responders), nothing is kept or dropped', async (t) => {
  const missing = new IdempotencyClaims(kv, nc, `TUNIT${randomBytes(4).toString('hex')}_missing`, 2_000);
  await t.rejects(missing.claimBatch([key()], ['sig_n_0'], null), /503|no responders/i);
  await t.rejects(missing.takeBatch('org_TESTTESTTESTTESTTEST', 'live', 'bat_x'), /503|no responders/i);
});

t.test('no answer within the timeout: the claim rejects; a late answer is ignored', async (t) => {
  const silent = `TUNIT${randomBytes(4).toString('hex')}_silent`;
  const held: { respond(data: Uint8Array): boolean }[] = [];
  const sub = nc.subscribe(`$KV.${silent}.>`, { callback: (_err, m) => void held.push(m) });
  t.teardown(() => sub.unsubscribe());
  const c = new IdempotencyClaims(kv, nc, silent, 300);
  await t.rejects(c.claimBatch([key(), key()], ['sig_s_0', 'sig_s_1'], null), /no answer from JetStream within 300 ms/);
  t.equal(held.length, 2, 'both claims were sent');
  for (const m of held) m.respond(new TextEncoder().encode('{"stream":"x","seq":1}'));
  await nc.flush();
  // The same connection's claims still work after the late answers.
  t.same(await claims.claim([key()], ['sig_s_2']), [true]);
});
