/**
 * The engine host streams analytics output (src/store/engine-host/stream.ts), spoken to with
 * the official @clickhouse/client as the service does, with ONE analytics session, so that a
 * statement that still holds it shows in whether the next one is served:
 * - a JSONCompact output made of many blocks arrives as one document, the same as the
 *   writer lane's whole output of the same statement;
 * - a reader that stops taking a large output leaves the host holding about a block of it,
 *   not all of it (the host's resident memory), and the statement shows in the CPU ledger;
 * - a reader that goes away has its statement cancelled: the engine no longer lists it, and
 *   the lane's session serves the next statement;
 * - a statement that fails before 1 MiB of output answers with its error (code and name), a
 *   timeout as TIMEOUT_EXCEEDED; one that fails after its answer began breaks it off (the
 *   reader gets an error, never a body that ends); the session's next answer is clean.
 * Runs the compiled host (dist/), like engine-host.test.ts.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import type { Readable } from 'node:stream';
import { ClickHouseError, type ClickHouseClient } from '@clickhouse/client';
import { rejection } from '../helpers/rejection.js';
import { engineHost } from '../helpers/engine-host.js';

const { sup, client: open } = engineHost(t, 'engine-host-stream', { analyticsSessions: 1, writerSessions: 1 });
const client = (url: string, username: string, password: string, database?: string): ClickHouseClient => open(url, username, password, database, { request_timeout: 120_000 });

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function waitFor<T>(fn: () => Promise<T>, done: (v: T) => boolean, timeoutMs: number): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (done(v) || Date.now() > until) return v;
    await sleep(100);
  }
}

const g = await sup.start();
const writer = client(g.url, 'writer', g.writerPassword);
const reader = client(g.url, 'analytics', g.analyticsPassword, 'an');

/** The host's resident memory, bytes. */
const hostRss = (): number => Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${g.pid}/status`, 'utf8'))![1]) * 1024;

/** Statements of this tag the engine runs now (read through the writer lane). */
async function listed(tag: string): Promise<number> {
  const rs = await writer.query({ query: `SELECT count() AS n FROM system.processes WHERE Settings['log_comment'] = {tag:String}`, query_params: { tag }, format: 'JSONEachRow' });
  return Number((await rs.json<{ n: string }>())[0]!.n);
}

/** Starts an analytics statement and reads its body until `bytes` have come, then stops reading (the stream is paused, not closed). */
async function readSome(sql: string, tag: string, bytes: number): Promise<{ stream: Readable; got: number; status?: number }> {
  const r = await reader.exec({ query: `${sql}\nFORMAT JSONCompact`, clickhouse_settings: { max_execution_time: 600, log_comment: tag } });
  const stream = r.stream as Readable;
  let got = 0;
  await new Promise<void>((resolve, reject) => {
    const onData = (c: Buffer): void => {
      got += c.length;
      if (got >= bytes) {
        stream.pause();
        stream.off('data', onData);
        resolve();
      }
    };
    stream.on('data', onData);
    stream.once('error', reject);
    stream.once('end', () => reject(new Error(`the output ended after ${got} bytes`)));
  });
  stream.on('error', () => undefined);
  return { stream, got };
}

t.test('a JSONCompact output of many blocks arrives as one document, the same as the whole output', async (t) => {
  const sql = "SELECT number AS n, toString(number) AS s, [number, 1] AS a FROM numbers(300000) WHERE number % 7 != 3";
  const streamed = (await (await reader.query({ query: sql, format: 'JSONCompact' })).json()) as { meta: unknown; data: unknown[][]; rows: number; statistics: { elapsed: number } };
  const whole = (await (await writer.query({ query: sql, format: 'JSONCompact' })).json()) as typeof streamed;
  t.same(streamed.meta, whole.meta, 'the columns');
  t.equal(streamed.rows, whole.rows, `${whole.rows} rows`);
  t.equal(streamed.data.length, whole.data.length);
  t.same(streamed.data, whole.data, 'the rows, in order');
  t.ok(typeof streamed.statistics.elapsed === 'number' && streamed.statistics.elapsed > 0, `elapsed ${streamed.statistics.elapsed} s`);
  const none = (await (await reader.query({ query: 'SELECT number FROM numbers(10) WHERE number > 100', format: 'JSONCompact' })).json()) as typeof streamed;
  t.same([none.data, none.rows], [[], 0], 'no rows');
  t.same(await (await reader.query({ query: 'SELECT number FROM numbers(200000)', format: 'TabSeparated' })).text(), `${Array.from({ length: 200000 }, (_, i) => i).join('\n')}\n`, 'a row format: the blocks follow each other');
  const bound = (await (await reader.query({ query: 'SELECT {x:String} AS v, {n:UInt64} + 1 AS m', query_params: { x: "a'b\\c", n: 41 }, format: 'JSONCompact' })).json()) as typeof streamed;
  t.same(bound.data, [["a'b\\c", '42']], 'bound parameters, set on the session before the stream');
  const later = await reader.query({ query: 'SELECT {x:String} AS v', format: 'JSONEachRow' }).then((r) => r.json(), (e: unknown) => e);
  t.ok(later instanceof ClickHouseError || (Array.isArray(later) && (later[0] as { v: string }).v === ''), 'and emptied after it');
});

t.test('a reader that stops taking a large output: the host holds about a block of it, and the CPU ledger lists the statement', async (t) => {
  const before = hostRss();
  // ~600 MB of JSONCompact: what the host would hold were it made whole before the answer.
  const { stream, got } = await readSome("SELECT number, toString(number), 'some text to make the rows longer' FROM numbers(12000000)", 'stmt:slow-reader', 8 * 1024 * 1024);
  // Time for the host to make more output, were it not waiting for the reader.
  await sleep(3_000);
  const grown = hostRss() - before;
  t.comment(`read ${got} bytes and paused: the host's RSS grew ${Math.round(grown / 1048576)} MB`);
  t.ok(grown < 200 * 1024 * 1024, `the host's RSS grew ${Math.round(grown / 1048576)} MB (bound 200 MB; the whole output is ~600 MB)`);
  t.equal(await listed('stmt:slow-reader'), 1, 'the statement is still running: paused, not ended');
  const cpu = await fetch(`${g.url}/cpu`, { headers: { authorization: `Basic ${Buffer.from(`analytics:${g.analyticsPassword}`).toString('base64')}` } });
  const ledger = (await cpu.json()) as { statements: { tag: string; ended?: boolean }[] };
  t.ok(ledger.statements.some((s) => s.tag === 'stmt:slow-reader' && !s.ended), `the CPU ledger lists it as running: ${JSON.stringify(ledger.statements)}`);
  stream.destroy();
  t.equal(await waitFor(() => listed('stmt:slow-reader'), (n) => n === 0, 30_000), 0, 'gone once the reader went away');
});

t.test('a reader that goes away has its statement cancelled, and the session serves the next statement', async (t) => {
  // Far more output than anyone reads (tens of GB), and a long time limit: only a cancel ends it soon.
  const { stream } = await readSome('SELECT number, toString(number) FROM numbers(1000000000000)', 'stmt:gone-reader', 4 * 1024 * 1024);
  t.equal(await listed('stmt:gone-reader'), 1, 'running while it is read');
  stream.destroy();
  t.equal(await waitFor(() => listed('stmt:gone-reader'), (n) => n === 0, 30_000), 0, 'the engine no longer lists it');
  // One analytics session: this runs only once the cancelled statement let go of it.
  t.same(await (await reader.query({ query: 'SELECT 42 AS x', format: 'JSONEachRow' })).json(), [{ x: 42 }], 'the next statement is served');
});

t.test('failures: before 1 MiB of output an error answer with its code; after, an answer broken off', async (t) => {
  const early = await rejection(reader.query({ query: 'SELECT number, throwIf(number = 20000) FROM numbers(1000000) SETTINGS max_block_size = 1000', format: 'JSONCompact' }).then((r) => r.text()), ClickHouseError);
  t.equal(early.type, 'FUNCTION_THROW_IF_VALUE_IS_NON_ZERO', 'failed after some blocks, within 1 MiB: the engine error');
  t.equal(early.code, '395');
  const timeout = await rejection(
    reader.query({ query: 'SELECT count() FROM numbers(100000000000) WHERE sipHash64(number) = 0', format: 'JSONCompact', clickhouse_settings: { max_execution_time: 1 } }).then((r) => r.text()),
    ClickHouseError,
  );
  t.equal(timeout.type, 'TIMEOUT_EXCEEDED', 'a time limit before any output');
  t.equal(timeout.code, '159');
  // Fails at row 3,000,000: tens of MB of output were sent by then.
  const r = await reader.exec({ query: 'SELECT number, toString(number), throwIf(number = 3000000) FROM numbers(10000000) FORMAT JSONCompact' });
  t.equal(r.http_status_code, 200, 'the answer began');
  let got = 0;
  const end = await new Promise<string>((resolve) => {
    r.stream.on('data', (c: Buffer) => (got += c.length));
    r.stream.once('end', () => resolve('end'));
    r.stream.once('error', (e: Error) => resolve(`error: ${e.message}`));
  });
  t.match(end, /^error/, `broken off after ${got} bytes (${end}), not ended`);
  t.same(await (await reader.query({ query: 'SELECT 43 AS x', format: 'JSONEachRow' })).json(), [{ x: 43 }], 'the session\'s next answer is clean');
});
