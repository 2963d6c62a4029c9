/**
 * Adversarial corpus for POST /api/v2/analytics/query (test/data/analytics-adversarial.json).
 *
 * Two organizations: the victim ingests signals full of distinctive markers (live and test),
 * the attacker a few of its own. Every corpus entry is run as the attacker:
 *   - "refused" entries must get a 4xx with an {error, code, details} body;
 *   - every entry, whatever its status: never a 500, and the raw response text holds none of
 *     the victim's markers, no file contents, no internal database prefix, no data-dir path
 *     and not the caller's own scope setting.
 * A few entries also run with the attacker's test key, which must not see its live data.
 * `{{VICTIM_ORG}}` in a query is replaced by the victim's organization id (e.g. to try a
 * SETTINGS log_comment pointing at the victim); a marker the query itself contains does not
 * count as a leak (an error may quote the caller's own text).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import t from 'tap';
import { createOrg, drained, queryRaw, sendBatch, useService, waitFor, type RawAnswer, type TestOrg } from '../helpers/service.js';

interface Entry {
  id: string;
  query: string;
  expect: 'refused' | 'scoped';
  why: string;
}

const CORPUS = JSON.parse(readFileSync(new URL('../data/analytics-adversarial.json', import.meta.url), 'utf8')) as Entry[];

const { iso, svc } = useService(t, 'analytics-adv');

const tag = randomBytes(5).toString('hex');
const V = {
  live: `vl${tag}`,
  test: `vt${tag}`,
  secret: randomBytes(16).toString('hex'),
  testSecret: randomBytes(16).toString('hex'),
};
const A = { live: `al${randomBytes(5).toString('hex')}`, test: `at${randomBytes(5).toString('hex')}` };

let victim: TestOrg;
let attacker: TestOrg;
/** Batch ids and signal-id prefixes, per (organization, mode). */
const ids = { victimLive: [] as string[], victimTest: [] as string[], attackerLive: [] as string[], attackerTest: [] as string[] };

function signalsOf(owner: 'victim' | 'attacker', n: number, from: number, m: string, secret: string): { signals: Record<string, unknown>[] } {
  return {
    signals: Array.from({ length: n }, (_, k) => k + from).map((i) => ({
      eventName: `${owner}_event_${m}_${i % 3}`,
      customer: { externalCustomerId: `${owner}-cus-${m}-${i % 4}` },
      unitId: `unit-${m}-${i % 2}`,
      idempotencyKey: `idem-${m}-${i}`,
      data: owner === 'victim' ? { victimSecret: secret, n: i, nested: { marker: `nested-${m}` } } : { note: secret, n: i },
    })),
  };
}

async function ingest(owner: 'victim' | 'attacker', key: string, n: number, m: string, secret: string, into: string[]): Promise<void> {
  // Two batches, so batch ids differ between rows.
  for (const [part, from] of [[Math.ceil(n / 2), 0], [Math.floor(n / 2), Math.ceil(n / 2)]] as const) {
    const r = await sendBatch(svc.url, key, signalsOf(owner, part, from, m, secret));
    if (r.status !== 202) throw new Error(`ingest: ${r.status} ${JSON.stringify(r.body)}`);
    const batchId = r.body.batchId as string;
    into.push(batchId, `sig_${batchId.slice(4)}_`);
  }
}

type Raw = RawAnswer;

const query = (key: string, q: string): Promise<Raw> => queryRaw(svc.url, key, q);

/** Strings that must not appear in a response to the attacker (named, for the messages). */
function forbidden(extra: Record<string, string[]> = {}): Record<string, string[]> {
  return {
    'victim org id': [victim.id],
    'victim live markers': [V.live, V.secret, ...ids.victimLive],
    'victim test markers': [V.test, V.testSecret, ...ids.victimTest],
    'file contents': ['root:x:0:0'],
    'internal database prefix': ['billing.', 'analytics.', '`analytics`'],
    'data directory': ['/tmp/', iso.dataDir],
    'scope setting': ['log_comment', `scope:${attacker.id}`],
    'printed statement (the views\' parameters)': ["(org = '", 'In query SELECT'],
    ...extra,
  };
}

/** Problems with one response; `query` is the text actually sent. */
function problems(e: Entry, q: string, r: Raw, needles: Record<string, string[]>): string[] {
  const out: string[] = [];
  if (r.status >= 500) out.push(`status ${r.status}`);
  if (e.expect === 'refused') {
    if (r.status < 400 || r.status >= 500) out.push(`expected a 4xx refusal, got ${r.status}`);
    else {
      let body: unknown;
      try {
        body = JSON.parse(r.text);
      } catch {
        body = null;
      }
      const b = body as Record<string, unknown> | null;
      if (!b || typeof b.error !== 'string' || typeof b.code !== 'string' || typeof b.details !== 'string') out.push('refusal body is not {error, code, details}');
    }
  }
  for (const [what, list] of Object.entries(needles)) {
    for (const needle of list) {
      if (needle === '' || !r.text.includes(needle)) continue;
      // The caller's own text quoted back is not a leak.
      if (q.includes(needle)) continue;
      if ((needle === 'billing.' && /billing/i.test(q)) || (needle.includes('analytics') && /analytics/i.test(q))) continue;
      out.push(`response contains ${what} (${JSON.stringify(needle)})`);
    }
  }
  return out;
}

const prepare = (e: Entry): string => e.query.replaceAll('{{VICTIM_ORG}}', victim.id);

function excerpt(text: string): string {
  return text.length > 600 ? `${text.slice(0, 600)}…` : text;
}

t.before(async () => {
  victim = await createOrg(svc.url);
  attacker = await createOrg(svc.url);
  await ingest('victim', victim.live, 20, V.live, V.secret, ids.victimLive);
  await ingest('victim', victim.test, 10, V.test, V.testSecret, ids.victimTest);
  await ingest('attacker', attacker.live, 5, A.live, `note-${A.live}`, ids.attackerLive);
  await ingest('attacker', attacker.test, 3, A.test, `note-${A.test}`, ids.attackerTest);
  await drained(iso);
});

t.test('each owner sees its own data (the corpus does not pass vacuously)', async (t) => {
  const own = async (key: string, n: number, marker: string): Promise<void> => {
    const r = await waitFor(
      () => query(key, 'SELECT count() AS n, countIf(position(external_customer_id, \'' + marker + '\') > 0) AS mine FROM fact_signal'),
      (x) => x.status === 200 && (JSON.parse(x.text) as { rows: [string, string][] }).rows[0]?.[0] === String(n),
      10_000,
    );
    t.equal(r.status, 200, `${marker}: status`);
    t.same((JSON.parse(r.text) as { rows: unknown[] }).rows, [[String(n), String(n)]], `${marker}: ${n} rows, all its own`);
  };
  await own(victim.live, 20, V.live);
  await own(victim.test, 10, V.test);
  await own(attacker.live, 5, A.live);
  await own(attacker.test, 3, A.test);
  const v = await query(victim.live, 'SELECT * FROM fact_signal');
  t.ok(v.text.includes(V.secret) && ids.victimLive.every((m) => v.text.includes(m)), 'the victim reads its markers back');
  const a = await query(attacker.live, 'SELECT * FROM fact_signal');
  t.equal(a.status, 200);
  t.notOk(a.text.includes(V.live) || a.text.includes(V.secret), 'the attacker\'s plain SELECT holds none of the victim\'s markers');
});

t.test('corpus shape', async (t) => {
  t.ok(CORPUS.length >= 170, `${CORPUS.length} entries`);
  const seen = new Set<string>();
  for (const e of CORPUS) {
    t.ok(/^[a-z0-9]+(-[a-z0-9]+)*$/.test(e.id) && !seen.has(e.id), `id ${e.id} is kebab-case and unique`);
    seen.add(e.id);
    t.ok(e.expect === 'refused' || e.expect === 'scoped', `${e.id}: expect`);
    t.ok(typeof e.query === 'string' && e.query.length > 0 && typeof e.why === 'string', `${e.id}: query and why`);
  }
});

t.test('every corpus entry, as the attacker (live key)', async (t) => {
  const needles = forbidden({ 'attacker test-mode markers': [A.test, ...ids.attackerTest] });
  for (const e of CORPUS) {
    const q = prepare(e);
    const r = await query(attacker.live, q);
    const p = problems(e, q, r, needles);
    t.ok(p.length === 0, p.length === 0 ? `${e.id}` : `${e.id}: ${p.join('; ')}`, p.length === 0 ? {} : { query: q, status: r.status, body: excerpt(r.text), why: e.why });
  }
});

t.test('a sample of the corpus, as the attacker\'s test key: no live data either', async (t) => {
  const needles = forbidden({ 'attacker live markers': [A.live, ...ids.attackerLive] });
  const sample = CORPUS.filter((e, i) => e.expect === 'scoped' || i % 10 === 0);
  t.ok(sample.length >= 20, `${sample.length} entries`);
  for (const e of sample) {
    const q = prepare(e);
    const r = await query(attacker.test, q);
    const p = problems(e, q, r, needles);
    t.ok(p.length === 0, p.length === 0 ? `${e.id} (test key)` : `${e.id} (test key): ${p.join('; ')}`, p.length === 0 ? {} : { query: q, status: r.status, body: excerpt(r.text), why: e.why });
  }
  const own = await query(attacker.test, 'SELECT * FROM fact_signal');
  t.equal(own.status, 200);
  t.ok(own.text.includes(A.test) && !own.text.includes(A.live), 'the test key reads its test rows and no live row');
});

t.test('no cross-organization oracle: a predicate on another organization\'s values changes nothing', async (t) => {
  // Same query shape, once with a value only the victim has and once with a value nobody has:
  // the answers must not differ (an error for one and not the other tells the attacker the
  // victim's value exists).
  const pairs: [string, string, string][] = [
    ['customer id equality', `victim-cus-${V.live}-0`, `victim-cus-nobody${tag}-0`],
    ['secret prefix', V.secret.slice(0, 8), `zz${V.secret.slice(2, 8)}`],
  ];
  for (const [what, hit, miss] of pairs) {
    const sql = (v: string): string =>
      what === 'customer id equality'
        ? `SELECT count() FROM fact_signal WHERE toUInt64(if(external_customer_id = '${v}', 'x', '1')) = 1`
        : `SELECT count() FROM fact_signal WHERE toUInt64(if(startsWith(toString(data.victimSecret), '${v}'), 'x', '1')) = 1`;
    const a = await query(attacker.live, sql(hit));
    const b = await query(attacker.live, sql(miss));
    t.equal(a.status, b.status, `${what}: same status for the victim's value (${a.status}) and a value nobody has (${b.status})`, { hit: excerpt(a.text), miss: excerpt(b.text) });
  }
});
