/**
 * Large analytics results through the real HTTP API (src/analytics/result-body.ts): a result
 * past the byte cap is passed on while the engine's output is read, at the pace the client
 * reads it.
 *
 * - a result at the byte cap is flagged `truncatedBy: "bytes"`, and its body is valid JSON of
 *   whole rows, the first ones, within the cap; the same keep-alive connection serves the next
 *   request (the chunked body ends properly);
 * - clients that stop reading do not make the service hold their results: its own figure
 *   (usage_analytics_result_held_bytes) stays within a bound per result, and so does its
 *   resident memory; none of them waits for another's connection to the engine; read
 *   afterwards, each result is whole;
 * - a client that goes away mid-result frees the statement's slot: the organization's next
 *   statement, with a concurrency of 1, is served;
 * - a client that has not taken its result by the deadline, and one whose result broke off
 *   (the engine host was killed while it was being read), get a connection ended without the
 *   body's end, never a short body that parses; both are logged;
 * - the SDK's analyticsQuery gets the exact shape from a streamed answer.
 */
import t, { type Test } from 'tap';
import net from 'node:net';
import { readFileSync, readdirSync } from 'node:fs';
import { SignalClient } from '../../packages/sdk/src/index.js';
import { createOrg, embeddedOnly, http, logLines, serverStore, sleep, useService, waitFor } from '../helpers/service.js';
import { CLIENT_GONE } from '../../src/http/wrap.js';

// Long enough for twelve paused results of 16 MiB to be read afterwards on a machine running
// another test file, before their deadline ends them.
const TIMEOUT_MS = 15_000;
/** How long the paused clients' answers may take to begin: with the 3 s after, less than the 10 s after which uWS closes a connection that takes nothing. */
const BEGIN_MS = 6_000;
const CAP = 16 * 1024 * 1024;
/**
 * Clients that stop reading at once, all of one organization: more than the engine client's
 * default pool of 10 connections. Server mode's test front runs four statements at a time
 * (its analytics sessions): as many as that there, so that the last begins well before the
 * first one's deadline.
 */
const PAUSED = serverStore() ? 4 : 12;
// Twice as many sessions, so that one organization holds PAUSED places.
const { svc } = useService(t, 'analytics-results', { ANALYTICS_TIMEOUT_MS: String(TIMEOUT_MS), ANALYTICS_ENGINE_SESSIONS: String(2 * PAUSED) });

/** 10,000 rows of ~2 KB (the row number, and two strings of 1,000 characters): ~20 MB of JSON, past the cap. */
const BIG = "SELECT number AS n, arrayWithConstant(2, leftPad(toString(number), 1000, 'x')) AS s FROM numbers(10000)";
const row = (n: number): [string, string[]] => [String(n), Array(2).fill(String(n).padStart(1000, 'x')) as string[]];

/** An HTTP/1.1 exchange on a socket of its own, read as the test says: paused, resumed, dropped. */
class RawClient {
  readonly sock: net.Socket;
  status = 0;
  headers = '';
  /** The body, de-chunked. */
  private readonly body: Buffer[] = [];
  bodyBytes = 0;
  /** The body's end was received (the terminating chunk, or the Content-Length's bytes). */
  complete = false;
  private pending: Buffer = Buffer.alloc(0);
  private inHead = true;
  private chunked = false;
  private length = -1;
  private left = -1;
  readonly closed: Promise<void>;
  private gotHead!: () => void;
  readonly head: Promise<void>;
  private gotBytes: { n: number; resolve: () => void } | null = null;

  /** Stop reading as soon as the body's first bytes are in. */
  pauseEarly = false;
  /** What was wrong with the chunked framing, where (a chunk's data not followed by CRLF, a size line that is not hex). */
  readonly framing: string[] = [];

  constructor(port: number, key: string, query: string, keepAlive = false) {
    this.head = new Promise((r) => (this.gotHead = r));
    this.sock = net.connect(port, '127.0.0.1');
    this.closed = new Promise((r) => this.sock.on('close', () => r()));
    this.sock.on('error', () => undefined);
    this.sock.on('data', (b: Buffer) => this.data(b));
    this.send(key, query, keepAlive);
  }

  send(key: string, query: string, keepAlive: boolean): void {
    const body = JSON.stringify({ query });
    this.sock.write(
      `POST /api/v2/analytics/query HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${keepAlive ? '' : 'Connection: close\r\n'}\r\n${body}`,
    );
  }

  /** Resolves once `n` bytes of body have arrived (or the connection closed). */
  bytes(n: number): Promise<void> {
    if (this.bodyBytes >= n || this.sock.destroyed) return Promise.resolve();
    return new Promise((resolve) => {
      this.gotBytes = { n, resolve };
      void this.closed.then(resolve);
    });
  }

  text(): string {
    return Buffer.concat(this.body).toString('utf8');
  }

  /** Resolves when the body is complete or the connection closed. */
  async end(): Promise<void> {
    while (!this.complete && !this.sock.destroyed) await Promise.race([this.closed, sleep(20)]);
  }

  /** Ready for another exchange on the same connection. */
  reset(): void {
    this.body.length = 0;
    this.bodyBytes = 0;
    this.complete = false;
    this.inHead = true;
    this.left = -1;
  }

  private data(b: Buffer): void {
    this.pending = this.pending.length > 0 ? Buffer.concat([this.pending, b]) : b;
    if (this.inHead) {
      const at = this.pending.indexOf('\r\n\r\n');
      if (at < 0) return;
      this.headers = this.pending.subarray(0, at).toString('latin1');
      this.status = Number(/^HTTP\/1\.1 (\d+)/.exec(this.headers)?.[1] ?? 0);
      const cl = /\r\ncontent-length: *(\d+)/i.exec(this.headers);
      this.length = cl ? Number(cl[1]) : -1;
      this.chunked = /\r\ntransfer-encoding: *chunked/i.test(this.headers);
      this.pending = this.pending.subarray(at + 4);
      this.inHead = false;
      this.gotHead();
    }
    if (!this.chunked) {
      this.take(this.pending);
      this.pending = Buffer.alloc(0);
      if (this.bodyBytes >= this.length) this.complete = true;
      return;
    }
    for (;;) {
      if (this.left > 0) {
        const n = Math.min(this.left, this.pending.length);
        if (n === 0) return;
        this.take(this.pending.subarray(0, n));
        this.pending = this.pending.subarray(n);
        this.left -= n;
        if (this.left === 0) this.left = -2;
      } else if (this.left === -2) {
        if (this.pending.length < 2) return;
        if (this.pending[0] !== 0x0d || this.pending[1] !== 0x0a) this.framing.push(`no CRLF after a chunk's data at body byte ${this.bodyBytes}: ${JSON.stringify(this.pending.subarray(0, 16).toString('latin1'))}`);
        this.pending = this.pending.subarray(2);
        this.left = -1;
      } else {
        const eol = this.pending.indexOf('\r\n');
        if (eol < 0) return;
        const sizeLine = this.pending.subarray(0, eol).toString('latin1');
        if (!/^[0-9a-f]+$/i.test(sizeLine)) this.framing.push(`a chunk size line that is not one at body byte ${this.bodyBytes}: ${JSON.stringify(sizeLine.slice(0, 40))}`);
        const size = parseInt(sizeLine, 16);
        this.pending = this.pending.subarray(eol + 2);
        if (size === 0) {
          // The trailer's empty line.
          this.pending = this.pending.subarray(2);
          this.complete = true;
          return;
        }
        this.left = size;
      }
    }
  }

  private take(b: Buffer): void {
    if (b.length === 0) return;
    this.body.push(Buffer.from(b));
    this.bodyBytes += b.length;
    if (this.pauseEarly) {
      this.pauseEarly = false;
      this.sock.pause();
    }
    if (this.gotBytes && this.bodyBytes >= this.gotBytes.n) {
      const g = this.gotBytes;
      this.gotBytes = null;
      g.resolve();
    }
  }
}

type Body = { columns: { name: string; type: string }[]; rows: [string, string[]][]; meta: Record<string, unknown> };

/** The checks of a result of BIG cut at the byte cap. */
function checkCapped(t: Test, text: string): void {
  let body: Body;
  try {
    body = JSON.parse(text) as Body;
  } catch (err) {
    // Where it broke, and what is there, so that a failure seen once says what the bytes were.
    const at = Number(/position (\d+)/.exec(String(err))?.[1] ?? -1);
    t.fail(`the body parses (${text.length} characters): ${String(err)}; around it: ${JSON.stringify(text.slice(Math.max(0, at - 300), at + 300))}`);
    return;
  }
  t.same(body.columns, [{ name: 'n', type: 'UInt64' }, { name: 's', type: 'Array(String)' }], 'columns');
  t.same(body.meta, { truncated: true, truncatedBy: 'bytes', limit: CAP, rowCount: body.rows.length, elapsedMs: body.meta.elapsedMs }, `flagged: ${JSON.stringify(body.meta)}`);
  t.ok(body.rows.length > 7_000 && body.rows.length < 10_000, `${body.rows.length} rows`);
  t.ok(
    body.rows.every((r, i) => r[0] === String(i) && r[1].length === 2 && r[1][0] === row(i)[1][0] && r[1][1] === row(i)[1][1]),
    'the first rows, each whole',
  );
  // The rows as the engine lays them out take at most the cap; the next one would not fit.
  const rows = text.slice(text.indexOf('"rows":[') + 8, text.lastIndexOf('],"meta"'));
  const last = rows.slice(rows.lastIndexOf('\n') + 1);
  t.ok(Buffer.byteLength(rows) <= CAP, `the rows take ${Buffer.byteLength(rows)} bytes (cap ${CAP})`);
  t.ok(Buffer.byteLength(rows) + 2 + Buffer.byteLength(last) > CAP, 'and another row of the same size would not fit');
}

/** Resident memory of a process, bytes. */
function rss(pid: number): number {
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
}

async function heldBytes(): Promise<number | null> {
  const text = (await http(svc.url, 'GET', '/metrics')).body as unknown as string;
  const m = /^usage_analytics_result_held_bytes (\S+)$/m.exec(String(text));
  return m ? Number(m[1]) : null;
}

t.test('a result at the byte cap is flagged, its body valid JSON of whole rows; the connection serves the next request', async (t) => {
  const org = await createOrg(svc.url);
  const c = new RawClient(svc.port, org.live, BIG, true);
  await c.head;
  await c.end();
  t.equal(c.status, 200);
  t.ok(c.complete, 'the body ended properly');
  checkCapped(t, c.text());
  // The same connection: the chunked body ended where it says.
  c.reset();
  c.send(org.live, 'SELECT 42 AS x', true);
  await c.end();
  t.same(JSON.parse(c.text()).rows, [[42]], 'the next request on the keep-alive connection');
  c.sock.destroy();
});

t.test('clients that stop reading do not make the service hold their results', async (t) => {
  const org = await createOrg(svc.url, { analyticsConcurrency: PAUSED });
  const pid = svc.proc!.pid!;
  // Warm: the service's memory after one such result.
  const warm = new RawClient(svc.port, org.live, BIG);
  await warm.end();
  t.ok(warm.complete);
  await sleep(500);
  const before = rss(pid);
  const clients = Array.from({ length: PAUSED }, () => {
    const c = new RawClient(svc.port, org.live, BIG);
    // Each stops reading once its answer's first bytes are in.
    c.pauseEarly = true;
    return c;
  });
  // Every one gets its answer's start while the others hold theirs (each result being read
  // holds its connection to the engine: none waits for another's).
  const started = await Promise.race([Promise.all(clients.map((c) => c.bytes(1))).then(() => true), sleep(BEGIN_MS).then(() => false)]);
  t.ok(started, `all ${PAUSED} answers began (${clients.filter((c) => c.bodyBytes > 0).length} within ${BEGIN_MS} ms)`);
  // Long enough for the sockets' buffers to fill; less than the 10 s after which uWS closes a
  // connection that takes nothing.
  await sleep(3_000);
  const held = await heldBytes();
  const grown = rss(pid) - before;
  t.comment(`${PAUSED} paused clients: the service holds ${held} bytes of results by its own figure; its RSS grew ${Math.round(grown / 1048576)} MB`);
  t.not(held, null, 'the service reports the result bytes it holds');
  t.ok(held !== null && held <= PAUSED * 512 * 1024, `at most 512 KiB per paused result (${held} bytes for ${PAUSED})`);
  t.ok(grown < 64 * 1024 * 1024, `the service's RSS grew ${Math.round(grown / 1048576)} MB with ${PAUSED} paused results of 16 MiB (bound 64 MB)`);
  for (const c of clients) {
    // One that had not begun yet would otherwise stop at its first bytes, never reading its end.
    c.pauseEarly = false;
    c.sock.resume();
  }
  await Promise.all(clients.map((c) => c.end()));
  for (const c of clients) {
    t.equal(c.status, 200);
    t.ok(c.complete, 'read afterwards, the body ends properly');
    t.same(c.framing, [], 'its chunked framing is whole: each chunk as long as its size line says');
    checkCapped(t, c.text());
  }
  t.equal(await heldBytes(), 0, 'nothing is held once they are read');
});

t.test('a client that goes away mid-result frees the statement\'s slot', async (t) => {
  const org = await createOrg(svc.url, { analyticsConcurrency: 1 });
  const c = new RawClient(svc.port, org.live, BIG);
  await c.bytes(1024 * 1024);
  t.equal(c.status, 200);
  c.sock.pause();
  t.equal((await http(svc.url, 'POST', '/api/v2/analytics/query', { token: org.live, body: { query: 'SELECT 1 AS x' } })).status, 429, 'the slot is held while the result is read');
  c.sock.destroy();
  // Its release reaches Redis shortly after the connection's end reaches the service: well
  // before the statement's deadline, when it would be freed anyway.
  const r = await waitFor(
    () => http(svc.url, 'POST', '/api/v2/analytics/query', { token: org.live, body: { query: 'SELECT 42 AS x' } }),
    (x) => x.status !== 429,
    TIMEOUT_MS / 2,
  );
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.same(r.body.rows, [[42]]);
  await waitFor(heldBytes, (n) => n === 0, 5_000);
});

t.test('a client that has not taken its result by the deadline gets a connection ended without the body\'s end', async (t) => {
  const org = await createOrg(svc.url, { analyticsConcurrency: 1 });
  // Ended by the result's deadline, or by uWS for a client that took nothing for 10 s, whichever
  // comes first (uWS counts from the request; on a loaded machine the engine place, where the
  // deadline starts, can come more than 1.5 s later): either way logged, once.
  const late = (): number =>
    logLines(svc, 'answer ended before its body was complete').filter((l) => String(l.reason).includes('deadline') || l.reason === CLIENT_GONE).length;
  const before = late();
  const c = new RawClient(svc.port, org.live, BIG);
  await c.bytes(1);
  c.sock.pause();
  const ended = await waitFor(async () => late() - before, (n) => n > 0, TIMEOUT_MS + 5_000);
  t.equal(ended, 1, 'ended at the deadline (or by the idle close before it), and logged');
  c.sock.resume();
  await c.end();
  t.equal(c.status, 200, 'the status line was out');
  t.notOk(c.complete, 'the body has no end');
  t.throws(() => JSON.parse(c.text()), 'what arrived does not parse');
  const r = await waitFor(
    () => http(svc.url, 'POST', '/api/v2/analytics/query', { token: org.live, body: { query: 'SELECT 42 AS x' } }),
    (x) => x.status !== 429,
    5_000,
  );
  t.same(r.body.rows, [[42]], 'the slot is free');
});

/** The engine host: the service's child process of that title. */
function engineHostPid(pid: number): number {
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    for (const c of readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)) {
      if (readFileSync(`/proc/${c}/cmdline`, 'utf8').includes('engine-host')) return Number(c);
    }
  }
  throw new Error('no engine host');
}

t.test('a result that breaks off (its engine host killed while it is read) ends the connection without the body\'s end', embeddedOnly('the embedded engine\'s host is killed'), async (t) => {
  const org = await createOrg(svc.url);
  const c = new RawClient(svc.port, org.live, BIG);
  await c.bytes(1);
  c.sock.pause();
  // The host holds the rest of the output (one block of 10,000 rows, which the engine made whole): the service reads it as the client does.
  await sleep(1_500);
  process.kill(engineHostPid(svc.proc!.pid!), 'SIGKILL');
  await sleep(500);
  c.sock.resume();
  await c.end();
  t.equal(c.status, 200);
  t.notOk(c.complete, 'the body has no end');
  t.ok(c.bodyBytes < CAP, `${c.bodyBytes} bytes arrived`);
  t.throws(() => JSON.parse(c.text()), 'what arrived does not parse');
  t.ok(logLines(svc, 'answer ended before its body was complete').length > 0, 'logged');
  // The host is back for the next statement.
  const r = await waitFor(
    () => http(svc.url, 'POST', '/api/v2/analytics/query', { token: org.live, body: { query: 'SELECT 42 AS x' } }),
    (x) => x.status === 200,
    20_000,
  );
  t.same(r.body.rows, [[42]]);
});

t.test("the SDK's analyticsQuery gets the exact shape from a streamed answer", async (t) => {
  const org = await createOrg(svc.url);
  const client = new SignalClient({ baseUrl: svc.url, apiKey: org.live });
  t.teardown(() => client.close());
  const r = await client.analyticsQuery(BIG);
  t.same(r.columns, [{ name: 'n', type: 'UInt64' }, { name: 's', type: 'Array(String)' }]);
  t.same(Object.keys(r).sort(), ['columns', 'meta', 'rows']);
  t.same(r.meta, { truncated: true, truncatedBy: 'bytes', limit: CAP, rowCount: r.rows.length, elapsedMs: r.meta.elapsedMs });
  t.equal(r.rows[0]![0], 0n, 'UInt64 as BigInt');
  t.equal(r.rows.at(-1)![0], BigInt(r.rows.length - 1));
  const small = await client.analyticsQuery('SELECT toUInt64(7) AS n');
  t.same(small.rows, [[7n]]);
  t.same(small.meta, { truncated: false, rowCount: 1, elapsedMs: small.meta.elapsedMs });
});
