/**
 * Idempotency claims (src/pipeline/dedupe.ts) against a real claim log in JetStream.
 * The test makes its own streams (`TUNIT<random>_CLAIMS`, …) and deletes them at the end.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';
import { IdempotencyClaims, type ClaimLog } from '../../src/pipeline/dedupe.js';
import rows, { dedupeKey } from '../../workers/rows.js';
import type { BatchMeta } from '../../src/bus/batch.js';

const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const P = `TUNIT${randomBytes(4).toString('hex')}`;
const nc = await connect({ servers: NATS_URL });
const js = jetstream(nc);
const jsm = await jetstreamManager(nc);
const WEEK = 7 * 24 * 3600 * 1000;
const made: string[] = [];
/** A claim log stream of its own (max age `windowMs`), and the options of an instance on it (the window's end looked for every `refreshMs`). */
async function logOf(name: string, windowMs = WEEK, refreshMs?: number): Promise<ClaimLog> {
  const stream = `${P}_${name}`;
  await jsm.streams.add({ name: stream, subjects: [`${P}.${name}.>`], storage: StorageType.File, max_age: windowMs * 1_000_000 });
  made.push(stream);
  return { nc, apiPrefix: '$JS.API', stream, subject: (scope) => `${P}.${name}.${scope}`, ...(refreshMs !== undefined ? { refreshMs } : {}) };
}
const log = await logOf('CLAIMS');
const claims = new IdempotencyClaims(log);
t.teardown(async () => {
  for (const s of made) await jsm.streams.delete(s).catch(() => undefined);
  await nc.close();
});

const ORG = 'org_TESTTESTTESTTESTTEST';
let n = 0;
/** A fresh key of the shape the pipeline uses: <org>.<mode>.<hash>. */
const key = (org = ORG, mode: 'live' | 'test' = 'live'): string => dedupeKey({ orgId: org, mode, receivedAtMs: 0, batchId: 'bat_x' }, `k${n++}-${randomBytes(4).toString('hex')}`);
/** Every claim line the log holds for an organization and mode, in order: [claim, owner]. */
async function logged(l: ClaimLog, scope = `${ORG}.live`): Promise<[string, string][]> {
  const out: [string, string][] = [];
  for (let seq = 1; ; ) {
    // (The client's type for this request lacks next_by_subj; the server takes it.)
    const m = await jsm.streams.getMessage(l.stream, { seq, next_by_subj: l.subject(scope) } as unknown as { seq: number });
    if (!m) return out;
    for (const line of m.string().split('\n')) if (line) out.push(line.split(' ') as [string, string]);
    seq = m.seq + 1;
  }
}
const claimOf = (k: string): string => k.split('.').slice(2).join('.');
/** The owner the log names for a key (the last claim of it). */
const owner = async (k: string): Promise<string | null> => (await logged(log, k.split('.').slice(0, 2).join('.'))).filter(([c]) => c === claimOf(k)).at(-1)?.[1] ?? null;

t.test('first claim keeps; another signal then drops; the owner keeps again', async (t) => {
  const k = key();
  t.same(await claims.claim([k], ['sig_a_0']), [true], 'first claim keeps');
  t.equal(await owner(k), 'sig_a_0', 'the claim names its signal');
  t.same(await claims.claim([k], ['sig_b_0']), [false], 'another signal with the same key drops');
  t.equal(await owner(k), 'sig_a_0', 'the claim is unchanged');
  t.same(await claims.claim([k], ['sig_a_0']), [true], 're-claim by the same signal keeps (redelivery after a crash)');
  t.same(await claims.claim([k], ['sig_b_0']), [false], 'still dropped for the other');
  t.same(await claims.claimAll([k], ['sig_a_0']), { keep: [true], reclaimed: true }, 'a key already held by the same signal is reported as reclaimed (rows may be stored already)');
  t.same(await claims.claimAll([k], ['sig_b_0']), { keep: [false], reclaimed: false }, 'a key held by another signal is not');
  t.same(await claims.claimAll([`${k}-new`, null], ['sig_c_0', 'sig_c_1']), { keep: [true, true], reclaimed: false }, 'a fresh claim is not');
});

t.test('a new instance (a restart) reads the log: earlier claims hold, their own signals reclaim them', async (t) => {
  const [a, b] = [key(), key()];
  t.same(await claims.claim([a, b], ['sig_r1_0', 'sig_r1_1']), [true, true]);
  const restarted = new IdempotencyClaims(log);
  t.same(await restarted.claimAll([a, b, key()], ['sig_r1_0', 'sig_r2_1', 'sig_r2_2']), { keep: [true, false, true], reclaimed: true }, 'a: its own signal; b: held by another; the third fresh');
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
    { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: `${u}-1` },
    { eventName: 'e', customer: { externalCustomerId: 'c' } },
    { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: `${u}-1` },
    { eventName: 'e', customer: { externalCustomerId: 'c' }, idempotencyKey: `${u}-2 with spaces.and*wildcards>` },
  ];
  const r = rows({ body: new TextEncoder().encode(JSON.stringify({ signals })), meta });
  t.same(await claims.claim(r.claimKeys, r.ids), [true, true, false, true]);
  // the same idempotency keys in the live mode of the same org are separate
  const live = rows({ body: new TextEncoder().encode(JSON.stringify({ signals })), meta: { ...meta, mode: 'live', batchId: `${meta.batchId}L` } });
  t.same(await claims.claim(live.claimKeys, live.ids), [true, true, false, true], 'other mode: not duplicates');
  // and a second batch in the same org and mode is all duplicates (keyless kept)
  const again = rows({ body: new TextEncoder().encode(JSON.stringify({ signals })), meta: { ...meta, batchId: `${meta.batchId}2` } });
  t.same(await claims.claim(again.claimKeys, again.ids), [false, true, false, false]);
  t.same(
    (await logged(log, `${meta.orgId}.test`)).map(([c]) => c),
    [claimOf(r.claimKeys[0]!), claimOf(r.claimKeys[3]!)],
    'the log holds each key of the test mode once (and nothing for the repeats)',
  );
});

t.test('one call with keys of several organizations and modes: each claimed in its own log subject', async (t) => {
  const [a, b, c] = [key('org_SPANASPANASPANASPANA'), key('org_SPANBSPANBSPANBSPANB'), key('org_SPANASPANASPANASPANA', 'test')];
  t.same(await claims.claim([a, b, c, a], ['sig_sp_0', 'sig_sp_1', 'sig_sp_2', 'sig_sp_3']), [true, true, true, false]);
  t.same(await claims.claim([c, b, a], ['sig_sq_0', 'sig_sq_1', 'sig_sq_2']), [false, false, false], 'each held, in its own scope');
  t.same((await logged(log, 'org_SPANBSPANBSPANBSPANB.live')).map(([cl, o]) => [cl, o]), [[claimOf(b), 'sig_sp_1']]);
  t.same((await logged(log, 'org_SPANASPANASPANASPANA.test')).map(([cl, o]) => [cl, o]), [[claimOf(c), 'sig_sp_2']]);
});

t.test('an organization with a long log is read back through a consumer, not a request per message', async (t) => {
  const org = 'org_LONGLOGLONGLOGLONGLO';
  const writer = new IdempotencyClaims(log);
  const keys: string[] = [];
  for (let b = 0; b < 300; b++) {
    const k = key(org);
    keys.push(k);
    t.equal((await writer.claim([k], [`sig_ll${b}_0`]))[0], true);
  }
  const gets: string[] = [];
  const sub = nc.subscribe(`$JS.API.STREAM.MSG.GET.${log.stream}`, { callback: (_e, m) => void gets.push(m.subject) });
  t.teardown(() => sub.unsubscribe());
  await nc.flush();
  const reader = new IdempotencyClaims(log);
  const r = await reader.claimAll([keys[0]!, keys[299]!, keys[150]!, key(org)], ['sig_ll0_0', 'sig_other_1', 'sig_other_2', 'sig_new_3']);
  t.same(r, { keep: [true, false, false, true], reclaimed: true }, 'every one of the 300 messages read: the first and the last claims, one in the middle');
  await nc.flush();
  t.ok(gets.length <= 4, `${gets.length} message requests for 300 messages`);
});

t.test('20 concurrent claims of one key in one instance: exactly one keeps, in one round after the first', async (t) => {
  const k = key('org_ROUNDROUNDROUNDROUND');
  const ids = Array.from({ length: 20 }, (_, i) => `sig_c${i}_0`);
  const results = await Promise.all(ids.map((id) => claims.claim([k], [id])));
  const winners = ids.filter((_, i) => results[i]![0]);
  t.equal(winners.length, 1, 'exactly one keeps');
  t.equal(winners[0], 'sig_c0_0', 'the first asked');
  t.equal(await owner(k), winners[0], 'and it is the one the claim names');
  const again = await Promise.all(ids.map((id) => claims.claim([k], [id])));
  t.same(again, results, 'repeating the claims gives the same answers');
});

t.test('concurrent batches of one organization share appends (group commit)', async (t) => {
  const org = 'org_GROUPGROUPGROUPGROUP';
  const c = new IdempotencyClaims(log);
  const batches = Array.from({ length: 30 }, (_, b) => Array.from({ length: 50 }, () => key(org)));
  const results = await Promise.all(batches.map((keys, b) => c.claimBatch(keys, keys.map((_, i) => `sig_gc${b}_${i}`), { orgId: org, mode: 'live', batchId: `bat_gc${b}` })));
  t.ok(results.every((r) => r.first && r.claims.keep.every(Boolean)), 'every fresh key kept, every batch taken the first time');
  const info = await jsm.streams.info(log.stream, { subjects_filter: log.subject(`${org}.live`) });
  const messages = info.state.subjects?.[log.subject(`${org}.live`)] ?? 0;
  t.ok(messages >= 1 && messages < 30, `fewer appends than batches (${messages} for 30)`);
  const lines = await logged(log, `${org}.live`);
  t.equal(lines.length, 30 * 50 + 30, 'each key and each mark logged once');
});

t.test('20 concurrent claims over several shared keys from separate instances (as separate processes)', async (t) => {
  const keys = [key(), key(), key()];
  // each call claims all three keys (in a different order) with its own signal ids
  const calls = Array.from({ length: 20 }, (_, c) => {
    const order = [keys[c % 3]!, keys[(c + 1) % 3]!, keys[(c + 2) % 3]!];
    return { order, ids: order.map((_, i) => `sig_m${c}_${i}`) };
  });
  const instances = calls.map(() => new IdempotencyClaims(log));
  const results = await Promise.all(calls.map(({ order, ids }, c) => instances[c]!.claim(order, ids)));
  for (const k of keys) {
    let winners = 0;
    calls.forEach(({ order }, c) => order.forEach((kk, i) => (winners += kk === k && results[c]![i] ? 1 : 0)));
    t.equal(winners, 1, 'exactly one signal keeps each key');
  }
  // Every instance, whatever it read, agrees afterwards on each key's owner.
  const owners = await Promise.all(keys.map(owner));
  for (const [c, inst] of instances.entries()) {
    const again = await inst.claim(calls[c]!.order, calls[c]!.ids);
    t.same(again, results[c], `instance ${c} answers the same again`);
    calls[c]!.order.forEach((k, i) => t.equal(again[i], owners[keys.indexOf(k)] === calls[c]!.ids[i]));
  }
});

t.test('an instance behind the log: its append is refused, it reads what it missed and decides again', async (t) => {
  const a = new IdempotencyClaims(log);
  const b = new IdempotencyClaims(log);
  const [k1, k2] = [key('org_STALESTALESTALESTALE'), key('org_STALESTALESTALESTALE')];
  t.same(await a.claim([k1], ['sig_sa_0']), [true], 'a claims k1 (and reads the log)');
  t.same(await b.claim([k2], ['sig_sb_0']), [true], 'b claims k2 after it');
  t.same(await a.claim([k2, key('org_STALESTALESTALESTALE')], ['sig_sa_1', 'sig_sa_2']), [false, true], 'a, behind, learns that b holds k2; its fresh key is claimed');
});

t.test('a claim counts for the window, then the key is free again', async (t) => {
  const short = await logOf('SHORT', 1_000, 100);
  const c = new IdempotencyClaims(short);
  const k = key('org_WINDOWWINDOWWINDOWWI');
  t.same(await c.claim([k], ['sig_w1_0']), [true]);
  t.same(await c.claim([k], ['sig_w2_0']), [false], 'within the window: a duplicate');
  await new Promise((r) => setTimeout(r, 1_600));
  // JetStream removed the claim (max age) and the instance forgets it: the next append
  // expects a sequence the subject no longer has, is refused, and is made again.
  t.same(await c.claim([k], ['sig_w2_0']), [true], 'after the window: a new signal');
  t.same(await new IdempotencyClaims(short).claim([k], ['sig_w3_0']), [false], 'and it holds the key for everyone');
});

t.test('the log recreated (its sequences start again): an instance behind it reads it from the start, never keeps a key twice', async (t) => {
  const l = await logOf('RESET');
  const a = new IdempotencyClaims(l);
  const org = 'org_RESETRESETRESETRESET';
  for (let i = 0; i < 5; i++) t.same(await a.claim([key(org)], [`sig_ra${i}_0`]), [true]);
  await jsm.streams.delete(l.stream);
  await jsm.streams.add({ name: l.stream, subjects: [`${P}.RESET.>`], storage: StorageType.File });
  const k = key(org);
  const b = new IdempotencyClaims(l);
  t.same(await b.claim([k, key(org)], ['sig_rb_0', 'sig_rb_1']), [true, true], 'b claims k in the new log (sequences 1)');
  t.same(await a.claim([k], ['sig_ra9_0']), [false], 'a, which had read up to sequence 5 of the old log, finds k held');
  t.same(await a.claim([key(org)], ['sig_ra10_0']), [true], 'and claims in the new log');
});

t.test('the log recreated while an instance holds claims of the one it replaced: found by its creation time, read again', async (t) => {
  const l = await logOf('RECREATE');
  const org = 'org_RECRTRECRTRECRTRECR';
  const recreate = async (): Promise<void> => {
    await jsm.streams.delete(l.stream);
    await jsm.streams.add({ name: l.stream, subjects: [`${P}.RECREATE.>`], storage: StorageType.File });
  };
  // The replaced stream's first sequence is past 1 (its early messages removed), as a window does.
  for (let i = 0; i < 20; i++) await js.publish(`${P}.RECREATE.other.live`, 'x');
  await jsm.streams.purge(l.stream);
  const p = new IdempotencyClaims(l);
  t.same(await p.claim([key(org), key(org)], ['sig_p1_0', 'sig_p1_1']), [true, true], 'p claims (sequence 21), its index knows first sequence 21');
  await recreate();
  const k = key(org);
  const q = new IdempotencyClaims(l);
  t.same(await q.claim([k, key(org)], ['sig_q_0', 'sig_q_1']), [true, true], 'q claims k in the new log (sequence 1)');
  t.same(await p.claim([k], ['sig_p2_0']), [false], 'p: its append refused, it finds the log recreated, reads it again and finds k held');

  // The new log's subject as far as p's last sequence: the append would be accepted; the
  // creation time (asked every refreshMs, here every round) tells.
  const l2 = { ...l, refreshMs: 0 };
  const a = new IdempotencyClaims(l2);
  t.same(await a.claim([key(org)], ['sig_a1_0']), [true], 'a: its last sequence is 1');
  await recreate();
  const k2 = key(org);
  const b = new IdempotencyClaims(l2);
  t.same(await b.claim([k2], ['sig_b_0']), [true], 'b claims k2 at sequence 1 of the new log');
  t.same(await b.claim([key(org)], ['sig_b_1']), [true], 'and another key at sequence 2: the subject\'s last sequence is a\'s again');
  t.same(await a.claim([k2], ['sig_a2_0']), [false], 'a finds the log recreated before it appends (its append would have been accepted)');
});

t.test('rounds stay under max_payload', async (t) => {
  const stream = `${P}_SMALL`;
  await jsm.streams.add({ name: stream, subjects: [`${P}.SMALL.>`], storage: StorageType.File, max_msg_size: 12_000 });
  made.push(stream);
  const c = new IdempotencyClaims({ ...log, stream, subject: (scope) => `${P}.SMALL.${scope}`, maxPayload: 24_000 });
  const org = 'org_SMALLSMALLSMALLSMALL';
  const batches = Array.from({ length: 12 }, () => Array.from({ length: 40 }, () => key(org)));
  const results = await Promise.all(batches.map((keys, b) => c.claim(keys, keys.map((_, i) => `sig_sm${b}_${i}`))));
  t.ok(results.every((r) => r.every(Boolean)), 'every batch claimed (no append refused for its size)');
  const info = await jsm.streams.info(stream, { subjects_filter: `${P}.SMALL.${org}.live` });
  t.ok((info.state.subjects?.[`${P}.SMALL.${org}.live`] ?? 0) >= 4, 'in several rounds');
});

t.test('beyond maxClaims, organizations not in use are dropped and read again from the log when next seen', async (t) => {
  const gets: string[] = [];
  const sub = nc.subscribe(`$JS.API.STREAM.MSG.GET.${log.stream}`, { callback: (_e, m) => void gets.push(m.subject) });
  t.teardown(() => sub.unsubscribe());
  const [orgA, orgB] = ['org_EVICTAEVICTAEVICTAE', 'org_EVICTBEVICTBEVICTBE'];
  const keysA = Array.from({ length: 80 }, () => key(orgA));
  const keysB = Array.from({ length: 80 }, () => key(orgB));
  // In use (the default): both kept however many claims.
  const kept = new IdempotencyClaims({ ...log, maxClaims: 100 });
  t.same(await kept.claim(keysA, keysA.map((_, i) => `sig_ea_${i}`)), keysA.map(() => true));
  t.same(await kept.claim(keysB, keysB.map((_, i) => `sig_eb_${i}`)), keysB.map(() => true));
  await nc.flush();
  let before = gets.length;
  t.same(await kept.claim([keysA[0]!], ['sig_ex_0']), [false]);
  await nc.flush();
  t.equal(gets.length, before, 'organization A answered from memory');
  // Not in use (inUseMs 0): A is dropped when B's round ends, then read again.
  const dropping = new IdempotencyClaims({ ...log, maxClaims: 100, inUseMs: 0 });
  t.same(await dropping.claim([keysA[1]!], ['sig_ex_1']), [false], 'A read from the log');
  t.same(await dropping.claim([keysB[1]!], ['sig_ex_2']), [false], 'B read from the log; A (160 claims in all) dropped');
  await nc.flush();
  before = gets.length;
  t.same(await dropping.claimAll([keysA[2]!, keysA[3]!], ['sig_ea_2', 'sig_ey_3']), { keep: [true, false], reclaimed: true }, 'A read again: its claims hold, its own signal reclaims');
  await nc.flush();
  t.ok(gets.length > before, 'by reading its log again');
});

t.test('keys that are not <orgId>.<mode>.<claim> reject (never "already claimed")', async (t) => {
  await t.rejects(claims.claim(['bad key with spaces'], ['sig_x_0']), /not <orgId>\.<mode>\.<claim>/);
  await t.rejects(claims.claim(['org.live.'], ['sig_x_1']), /is not a claim/);
  await t.rejects(claims.claim(['org.live.a b'], ['sig_x_2']), /is not a claim/);
  await t.rejects(claims.claim([key()], ['two words']), /cannot own a claim/);
});

t.test('takeBatch: true the first time a batch is taken up, false ever after', async (t) => {
  const batchId = `bat_${randomBytes(8).toString('hex')}`;
  t.equal(await claims.takeBatch(ORG, 'live', batchId), true, 'first take');
  t.equal(await claims.takeBatch(ORG, 'live', batchId), false, 'taken before (a repeat delivery, flagged or not)');
  t.equal(await claims.takeBatch(ORG, 'test', batchId), true, 'the other mode is its own data set');
  t.equal(await claims.takeBatch('org_OTHEROTHEROTHEROTHER', 'live', batchId), true, 'another organization is its own data set');
  t.same((await logged(log)).filter(([c]) => c === `batch_${batchId}`), [[`batch_${batchId}`, batchId]], 'the mark names the batch, once');
  t.equal(await new IdempotencyClaims(log).takeBatch(ORG, 'live', batchId), false, 'also for another instance');
  t.equal(await claims.takeBatch(ORG, 'live', `rows-${batchId}.p3`), true, 'a billing rows message id (dots) is a mark too');
});

t.test('claimBatch: the claims and the batch mark in one round', async (t) => {
  const batchId = `bat_${randomBytes(8).toString('hex')}`;
  const meta = { orgId: ORG, mode: 'live', batchId };
  const [a, b] = [key(), key()];
  t.same(await claims.claim([b], ['sig_other_0']), [true], 'b is held by another signal beforehand');
  t.same(await claims.claimBatch([a, null, b, a], ['sig_g_0', 'sig_g_1', 'sig_g_2', 'sig_g_3'], meta), { claims: { keep: [true, true, false, false], reclaimed: false }, first: true }, 'first delivery');
  t.same(await claims.claimBatch([a, null, b, a], ['sig_g_0', 'sig_g_1', 'sig_g_2', 'sig_g_3'], meta), { claims: { keep: [true, true, false, false], reclaimed: true }, first: false }, 'a repeat: same decisions, mark taken before, own key reclaimed');
  t.same(await claims.claimBatch([null], ['sig_h_0'], { ...meta, batchId: `${batchId}h` }), { claims: { keep: [true], reclaimed: false }, first: true }, 'a keyless batch still takes its mark');
});

t.test('a log without its stream: the claim rejects, nothing is kept or dropped', async (t) => {
  const missing = new IdempotencyClaims({ ...log, stream: `${P}_MISSING`, subject: (scope) => `${P}.missing.${scope}`, timeoutMs: 2_000 });
  await t.rejects(missing.claimBatch([key()], ['sig_n_0'], null), /not found|503|no responders/i);
  await t.rejects(missing.takeBatch(ORG, 'live', 'bat_x'), /not found|503|no responders/i);
});

t.test('no answer within the timeout: the claim rejects; a late answer is ignored', async (t) => {
  // An API prefix JetStream does not answer on; this subscription takes the requests and holds them.
  const silentApi = `${P}.SILENT.API`;
  const held: { respond(data: Uint8Array): boolean }[] = [];
  const sub = nc.subscribe(`${silentApi}.>`, { callback: (_err, m) => void held.push(m) });
  t.teardown(() => sub.unsubscribe());
  await nc.flush();
  const c = new IdempotencyClaims({ ...log, apiPrefix: silentApi, timeoutMs: 300 });
  await t.rejects(c.claimBatch([key(), key()], ['sig_s_0', 'sig_s_1'], null), /no answer from JetStream within 300 ms/);
  t.equal(held.length, 1, 'the log was asked (its state) and nothing appended');
  for (const m of held) m.respond(new TextEncoder().encode('{"message":{"seq":1,"data":"","time":"2026-01-01T00:00:00Z"}}'));
  await nc.flush();
  // The same connection's claims still work after the late answers.
  t.same(await claims.claim([key()], ['sig_s_2']), [true]);
});
