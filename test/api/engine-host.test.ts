/**
 * The engine host (src/store/engine-host) spoken to with the official @clickhouse/client,
 * as the service does: the subset of ClickHouse's HTTP interface it serves, its two users,
 * the read-only analytics lane, lanes that do not wait for each other, clean output after a
 * failed statement, and a kill followed by a new generation over the same data.
 * Runs the compiled host (dist/), like the other API tests run the compiled service.
 */
import t from 'tap';
import { ClickHouseError, type ClickHouseClient } from '@clickhouse/client';
import { Readable } from 'node:stream';
import { rejection } from '../helpers/rejection.js';
import { engineHost } from '../helpers/engine-host.js';

const { sup, client: open } = engineHost(t, 'engine-host', { analyticsSessions: 2, writerSessions: 1 });
const client = (url: string, username: string, password: string, database?: string): ClickHouseClient => open(url, username, password, database);

const failure = (p: Promise<unknown>): Promise<ClickHouseError> => rejection(p, ClickHouseError);

const g1 = await sup.start();
const writer = client(g1.url, 'writer', g1.writerPassword);
const reader = client(g1.url, 'analytics', g1.analyticsPassword, 'an');

t.test('schema, inserts and bound parameters through the writer', async (t) => {
  await writer.command({ query: 'CREATE DATABASE IF NOT EXISTS b' });
  await writer.command({ query: 'CREATE TABLE IF NOT EXISTS b.t (k String, v UInt64) ENGINE = MergeTree ORDER BY k' });
  await writer.command({ query: 'CREATE VIEW IF NOT EXISTS an.v AS SELECT k, v FROM b.t' });
  const odd = "a'b\\c\td\ne\u00e9";
  await writer.insert({ table: 'b.t', values: [{ k: odd, v: 1 }, { k: 'x', v: 2 }], format: 'JSONEachRow' });
  const rs = await writer.query({ query: 'SELECT k, v FROM b.t WHERE k = {k:String} OR k IN {ks:Array(String)} ORDER BY v', query_params: { k: odd, ks: ['x', "q'"] }, format: 'JSONEachRow' });
  t.same(await rs.json(), [{ k: odd, v: '1' }, { k: 'x', v: '2' }], 'parameters arrive exactly (quotes, backslashes, tabs, newlines, unicode)');
  const later = await writer.query({ query: 'SELECT {k:String} AS k', format: 'JSONEachRow' }).then((r) => r.json(), (e: unknown) => e);
  t.ok(later instanceof ClickHouseError || (Array.isArray(later) && later.length === 1 && (later[0] as { k: string }).k === ''), 'a later statement on the session does not read the earlier request’s parameter');
  t.equal((await writer.ping()).success, true);
});

t.test('insert data with an empty line is refused whole: what follows it never runs as SQL', async (t) => {
  await writer.command({ query: 'CREATE TABLE IF NOT EXISTS b.victim (k String) ENGINE = Memory' });
  const before = await (await writer.query({ query: 'SELECT count() AS n FROM b.t', format: 'JSONEachRow' })).json();
  for (const [query, body] of [
    ['INSERT INTO b.t FORMAT JSONEachRow', '{"k":"smuggled","v":9}\n\nDROP TABLE b.victim\n'],
    ['INSERT INTO b.t (k, v) FORMAT JSONCompactEachRow', '["smuggled",9]\n\nDROP TABLE b.victim\n'],
    ['INSERT INTO b.t FORMAT JSONEachRow', '\nDROP TABLE b.victim\n'],
  ] as const) {
    const e = await failure(writer.exec({ query, values: Readable.from([Buffer.from(body)]) }).then((r) => r.stream.resume()));
    t.equal(e.type, 'INCORRECT_DATA', `${JSON.stringify(body)}: refused`);
  }
  t.same(await (await writer.query({ query: "SELECT count() AS n FROM system.tables WHERE database = 'b' AND name = 'victim'", format: 'JSONEachRow' })).json(), [{ n: '1' }], 'the table is still there');
  t.same(await (await writer.query({ query: 'SELECT count() AS n FROM b.t', format: 'JSONEachRow' })).json(), before, 'and no row went in');
});

t.test('the analytics user reads its database and cannot write anything', async (t) => {
  const rs = await reader.query({ query: 'SELECT count() AS n, currentDatabase() AS db FROM v', format: 'JSONEachRow', clickhouse_settings: { max_execution_time: 5, readonly: '1' } });
  t.same(await rs.json(), [{ n: '2', db: 'an' }]);
  t.equal((await failure(reader.insert({ table: 'b.t', values: [{ k: 'z', v: 3 }], format: 'JSONEachRow' }))).type, 'READONLY', 'no inserts');
  t.equal((await failure(reader.command({ query: 'DROP TABLE b.t' }))).type, 'READONLY', 'no DDL');
  await failure(reader.query({ query: 'SELECT 1; DROP TABLE b.t', format: 'JSONEachRow' }));
  const n = await (await writer.query({ query: 'SELECT count() AS n FROM b.t', format: 'JSONEachRow' })).json();
  t.same(n, [{ n: '2' }], 'a second statement in the text could not drop the table');
  const other = client(g1.url, 'analytics', g1.analyticsPassword, 'b');
  t.equal((await failure(other.query({ query: 'SELECT 1', format: 'JSONEachRow' }))).type, 'ACCESS_DENIED', 'only its own database');
});

t.test('wrong credentials, unknown settings', async (t) => {
  t.equal((await failure(client(g1.url, 'writer', 'nope').query({ query: 'SELECT 1' }))).type, 'AUTHENTICATION_FAILED');
  t.equal((await failure(client(g1.url, 'default', '').query({ query: 'SELECT 1' }))).type, 'AUTHENTICATION_FAILED');
  t.equal((await failure(reader.query({ query: 'SELECT 1', clickhouse_settings: { max_threads: 1 } }))).type, 'UNKNOWN_SETTING');
});

t.test('a failed statement leaves nothing in the next answer', async (t) => {
  const e = await failure(writer.query({ query: 'SELECT number, throwIf(number = 100000) FROM numbers(200000) SETTINGS max_block_size = 1000', format: 'TabSeparated' }));
  t.equal(e.type, 'FUNCTION_THROW_IF_VALUE_IS_NON_ZERO');
  t.equal(await (await writer.query({ query: 'SELECT 42', format: 'TabSeparated' })).text(), '42\n');
});

t.test("a statement whose analysis takes seconds holds up nothing but its own session", async (t) => {
  // Folding its constant expression (a sort of 8,000,000 elements made in the statement) is the
  // engine's analysis, done in the thread that starts the statement: seconds of it.
  const fold = `SELECT length(arraySort(x -> hex(sipHash64(x)), arrayEnumerate(arrayConcat(${Array(8).fill('arrayFlatten(arrayWithConstant(1000, range(1000)))').join(', ')})))) AS n`;
  await writer.command({ query: 'CREATE TABLE IF NOT EXISTS b.side (k String) ENGINE = Memory' });
  let foldDone = false;
  const folding = reader
    .query({ query: fold, format: 'JSONCompact', clickhouse_settings: { log_comment: 'stmt:fold' } })
    .then((r) => r.json<{ data: unknown[][] }>())
    .finally(() => (foldDone = true));
  // Observed: the host's CPU ledger answers while it runs, and lists it.
  for (;;) {
    const res = await fetch(`${g1.url}/cpu`, { headers: { authorization: `Basic ${Buffer.from(`analytics:${g1.analyticsPassword}`).toString('base64')}` } });
    const { statements } = (await res.json()) as { statements: { tag: string; ended?: boolean }[] };
    if (foldDone || statements.some((x) => x.tag === 'stmt:fold' && !x.ended)) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  t.notOk(foldDone, 'the ledger answered, and listed the statement, before it ended');
  await writer.insert({ table: 'b.side', values: [{ k: 'beside' }], format: 'JSONEachRow' });
  t.same(await (await reader.query({ query: 'SELECT 42 AS x', format: 'JSONEachRow' })).json(), [{ x: 42 }], 'another analytics statement');
  t.notOk(foldDone, 'the insert and the other statement finished while it was still being analysed');
  t.same((await folding).data, [['8000000']]);
});

t.test('a long analytics statement does not hold up the writer lane', async (t) => {
  let longDone = false;
  const long = reader
    .query({ query: 'SELECT count() FROM numbers(100000000000) WHERE sipHash64(number) = 0', format: 'JSONEachRow', clickhouse_settings: { max_execution_time: 20 } })
    .then((r) => r.text())
    .catch(() => undefined)
    .finally(() => (longDone = true));
  // Observed: the long statement runs (the engine lists it).
  for (;;) {
    const rs = await writer.query({ query: "SELECT count() AS n FROM system.processes WHERE query LIKE '%sipHash64(number) = 0%' AND query NOT LIKE '%system.processes%'", format: 'JSONEachRow' });
    if ((await rs.json<{ n: string }>())[0]!.n !== '0') break;
  }
  await writer.insert({ table: 'b.t', values: [{ k: 'during', v: 3 }], format: 'JSONEachRow' });
  const n = await (await writer.query({ query: 'SELECT count() AS n FROM b.t', format: 'JSONEachRow' })).json();
  t.same(n, [{ n: '3' }]);
  t.notOk(longDone, 'the insert and the read finished while the analytics statement still ran');
  t.ok(sup.kill(g1.n, 'test'), 'the supervisor kills the host');
  await long;
  await g1.exited;
  t.ok(longDone, 'the statement ended with its process');
});

t.test('a new generation serves the same data', async (t) => {
  const g2 = await sup.current(30_000);
  t.ok(g2.n > g1.n);
  t.not(g2.pid, g1.pid);
  t.not(g2.writerPassword, g1.writerPassword, 'new passwords for each launch');
  t.equal((await failure(client(g2.url, 'writer', g1.writerPassword).query({ query: 'SELECT 1' }))).type, 'AUTHENTICATION_FAILED', 'the old password is refused');
  const w2 = client(g2.url, 'writer', g2.writerPassword);
  t.same(await (await w2.query({ query: 'SELECT count() AS n FROM b.t', format: 'JSONEachRow' })).json(), [{ n: '3' }]);
  const r2 = client(g2.url, 'analytics', g2.analyticsPassword, 'an');
  t.same(await (await r2.query({ query: 'SELECT count() AS n FROM v', format: 'JSONEachRow' })).json(), [{ n: '3' }]);
});
