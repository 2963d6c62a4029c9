/**
 * The engine host: a child process of the service that owns the embedded engine (chdb) and
 * its data directory, and serves it to the service over the subset of ClickHouse's HTTP
 * interface that @clickhouse/client uses (protocol.ts). It exists so that the engine's work
 * can be stopped: chdb cannot be told to stop a statement, but a process can be ended. The
 * service's supervisor (supervisor.ts) starts it, restarts it when it dies, and kills it when
 * an analytics statement runs past its deadline.
 *
 * Analytics output is streamed (stream.ts): written to the answer block by block as the
 * engine makes it, at the pace the connection takes it, and cancelled when the connection
 * closes early; other statements' output is made whole, then sent.
 *
 * It listens on 127.0.0.1 only, on a port the system picks, and answers only two users whose
 * passwords are made for each launch by the supervisor and handed over the IPC channel:
 *   writer     the writer lane: schema, pipeline inserts, existing-id reads, counts
 *   analytics  the analytics lane: ANALYTICS_ENGINE_SESSIONS read-only sessions (readonly = 2
 *              for the session's life, current database = the analytics views' database)
 * The lanes have their own sessions, so analytics statements never hold up an insert and a
 * busy analytics lane never holds up the writer; each analytics session runs in a worker thread
 * of its own (remote-session.ts), so that a statement whose analysis takes long (chdb folds
 * constant expressions in the thread that starts a stream) holds up nothing on this one. One
 * more session, of the host's own, samples the CPU time each running analytics statement has
 * used (cpu.ts), which the analytics user
 * reads at GET /cpu (JSON: {"statements": [{"tag": <log_comment>, "cpuMs": n}, …]}, with
 * `"ended": true` on those that ended lately, and `"aged": true` on those whose threads it
 * has lowered for running long, aging.ts). It is the embedded engine's host, not a
 * ClickHouse server: nothing else should ever connect to it.
 *
 * It ends itself when the service goes away (the IPC channel closes), so a killed service
 * never leaves an engine holding the data directory's lock.
 */
import { mkdirSync } from 'node:fs';
import http from 'node:http';
import { timingSafeEqual } from 'node:crypto';
import { Session } from 'chdb';
import { Lane } from './lane.js';
import { RemoteSession, type WholeResult } from './remote-session.js';
import { BrokenOff, NotStreamed, streamAnswer, streamed } from './stream.js';
import { CpuLedger, PROCESSES_SQL, SAMPLE_MS, ownThreads, parseProcesses, threadTicks } from './cpu.js';
import { ThreadAging, isLowered, loweredThreads, probe, processNice } from './aging.js';
import { emptyLineAt, emptyLineError } from '../insert-data.js';
import { HostError, basicAuth, errorCode, insertTarget, paramReset, type InsertTarget, paramStatements, parseRequest, settingsClause } from './protocol.js';
import type { EngineHostFault } from '../../config.js';

export interface HostStart {
  type: 'start';
  dir: string;
  analyticsDatabase: string;
  analyticsSessions: number;
  writerSessions: number;
  writerPassword: string;
  analyticsPassword: string;
  port: number;
  /** Test-only fault (ENGINE_HOST_FAULT, see LOSE_INSERT_DELAY_MS); given to the first generation only. */
  fault: EngineHostFault | null;
}

/**
 * ENGINE_HOST_FAULT=lose-insert (tests only): the first insert into a `signals` table drops
 * the connection without an answer — what a reset socket or a client's timeout looks like
 * to the service — and is run anyway this long afterwards, as an engine still working on a
 * statement its client gave up on would. The host logs `engine host fault: insert answer
 * lost` (warn) when it drops the connection and `engine host fault: lost insert ran` after
 * running it. The service must not check what is stored before that insert has ended
 * (src/store/hosted/index.ts ends the host instead).
 */
export const LOSE_INSERT_DELAY_MS = 6_000;

/**
 * ENGINE_HOST_FAULT=slow-insert (tests only): the first insert into a `signals` table waits
 * this long before it runs and answers as usual: a slow engine. The host logs `engine host
 * fault: insert held` (warn) when the wait starts and `engine host fault: held insert ran`
 * when it has answered. The pipeline must keep its batches from being handed to another
 * process meanwhile (src/pipeline/consumer.ts marks them in progress).
 */
export const SLOW_INSERT_MS = 8_000;

export type HostMessage = { type: 'listening'; port: number } | { type: 'failed'; message: string };

const MAX_BODY = 512 * 1024 * 1024;

/** The test-only fault acts once per host. */
let faultFired = false;

function say(level: string, msg: string, fields: Record<string, unknown> = {}): void {
  process.stderr.write(`${JSON.stringify({ t: new Date().toISOString(), level, msg, pid: process.pid, component: 'engine-host', ...fields })}\n`);
}

function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

interface Lanes {
  writer: Lane<Session>;
  /** Each analytics session in a worker thread of its own: a statement's analysis never runs on the host's event loop. */
  analytics: Lane<RemoteSession>;
  /** The host's own session: reads system.processes for the CPU ledger. */
  monitor: Session;
  cpu: CpuLedger;
  /** Lowers the threads of statements that have run long (aging.ts); null when their priority could not be put back. */
  aging: ThreadAging | null;
}

async function open(cfg: HostStart): Promise<Lanes> {
  mkdirSync(cfg.dir, { recursive: true });
  const writers = Array.from({ length: cfg.writerSessions }, () => new Session(cfg.dir));
  await writers[0]!.queryAsync(`CREATE DATABASE IF NOT EXISTS ${cfg.analyticsDatabase}`);
  const readers = await Promise.all(Array.from({ length: cfg.analyticsSessions }, () => RemoteSession.open(cfg.dir, [`USE ${cfg.analyticsDatabase}`, 'SET readonly = 2'])));
  const monitor = new Session(cfg.dir);
  await monitor.queryAsync('SET readonly = 2');
  // A session's thread that ends leaves the lane a session short for good: the host ends, and
  // the supervisor starts the next one.
  for (const r of readers)
    r.onLost = (err) => {
      say('error', 'engine host lost an analytics session', { err: err.message });
      process.exit(1);
    };
  const nice = processNice(new Set(readers.flatMap((r) => (r.tid === null ? [] : [r.tid]))));
  const aging = probe(nice) ? new ThreadAging(nice) : null;
  if (!aging) say('warn', "engine host cannot put a thread's CPU priority back (CAP_SYS_NICE): statements that run long keep their threads' priority");
  return { writer: new Lane('writer', writers), analytics: new Lane('analytics', readers), monitor, cpu: new CpuLedger(), aging };
}

/**
 * Samples the running analytics statements' threads every SAMPLE_MS while any runs (one
 * sample at a time: under load a sample may take longer than the period).
 */
function sampleCpu(lanes: Lanes): void {
  let sampling = false;
  setInterval(() => {
    if (sampling) return;
    if (lanes.analytics.busy === 0) {
      lanes.cpu.idle();
      lanes.aging?.clear();
      return;
    }
    sampling = true;
    lanes.monitor
      .queryAsync(PROCESSES_SQL, { format: 'JSONCompact' })
      .then((out) => {
        lanes.cpu.record(parseProcesses(out.text()), threadTicks, ownThreads());
        lanes.aging?.update(loweredThreads(lanes.cpu.threadUse()));
      })
      .catch((err: unknown) => say('warn', 'engine host could not sample the statements\' CPU time', { err: err instanceof Error ? err.message : String(err) }))
      .finally(() => {
        sampling = false;
      });
  }, SAMPLE_MS).unref();
}

function readBody(req: http.IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    req.on('data', (c: Buffer) => {
      n += c.length;
      if (n > MAX_BODY) {
        reject(new HostError(413, 131, 'TOO_LARGE_STRING_SIZE', 'Request body too large'));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

async function handle(cfg: HostStart, lanes: Lanes, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://host');
  if (url.pathname === '/ping') {
    res.writeHead(200, { 'Content-Type': 'text/plain; charset=UTF-8' }).end('Ok.\n');
    return;
  }
  if (url.pathname !== '/' && url.pathname !== '/cpu') throw new HostError(404, 0, 'UNKNOWN_EXCEPTION', `There is no handler for ${url.pathname}`);
  const who = basicAuth(req.headers.authorization);
  const role =
    who?.user === 'writer' && sameSecret(who.password, cfg.writerPassword) ? 'writer'
    : who?.user === 'analytics' && sameSecret(who.password, cfg.analyticsPassword) ? 'analytics'
    : null;
  if (!role) throw new HostError(401, 516, 'AUTHENTICATION_FAILED', 'Authentication failed: password is incorrect, or there is no user with such name');
  if (url.pathname === '/cpu') {
    if (role !== 'analytics') throw new HostError(403, 497, 'ACCESS_DENIED', 'The CPU ledger is the analytics user\'s');
    // The threads' time up to now; which threads each statement has is as of the last sample.
    lanes.cpu.refresh(threadTicks);
    res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ statements: lanes.cpu.report(lanes.aging ? isLowered : undefined) }));
    return;
  }
  const body = await readBody(req);
  const r = parseRequest(url.searchParams, body);
  const expectDb = role === 'analytics' ? cfg.analyticsDatabase : 'default';
  if (r.database !== null && r.database !== expectDb) throw new HostError(403, 497, 'ACCESS_DENIED', `The ${role} user works in database ${expectDb} only`);
  const headers = { 'X-ClickHouse-Query-Id': r.queryId, 'X-ClickHouse-Format': r.format, 'Content-Type': 'text/plain; charset=UTF-8' };
  if (r.insertData) {
    if (role !== 'writer') throw new HostError(403, 164, 'READONLY', 'Cannot execute query in readonly mode');
    const target = insertTarget(r.sql);
    const data = r.insertData;
    const blank = emptyLineAt(data);
    if (blank >= 0) throw new HostError(400, 117, 'INCORRECT_DATA', emptyLineError(blank).replace(/^Code: 117\. DB::Exception: /, '').replace(/ \(INCORRECT_DATA\)$/, ''));
    if (cfg.fault === 'lose-insert' && !faultFired && target.table.endsWith('.signals')) {
      faultFired = true;
      say('warn', 'engine host fault: insert answer lost', { table: target.table, delayMs: LOSE_INSERT_DELAY_MS });
      req.socket.destroy();
      await new Promise((resolve) => setTimeout(resolve, LOSE_INSERT_DELAY_MS));
      const s = await lanes.writer.run((session) => session.insert({ table: target.table, values: data, ...shape(target), settings: Object.fromEntries(r.settings) }));
      say('warn', 'engine host fault: lost insert ran', { table: target.table, rows: s.rowsWritten });
      return;
    }
    const slow = cfg.fault === 'slow-insert' && !faultFired && target.table.endsWith('.signals');
    if (slow) {
      faultFired = true;
      say('warn', 'engine host fault: insert held', { table: target.table, delayMs: SLOW_INSERT_MS });
      await new Promise((resolve) => setTimeout(resolve, SLOW_INSERT_MS));
    }
    const s = await lanes.writer.run((session) =>
      session.insert({ table: target.table, values: data, ...shape(target), settings: Object.fromEntries(r.settings) }),
    );
    res.writeHead(200, { ...headers, 'X-ClickHouse-Summary': JSON.stringify({ written_rows: String(s.rowsWritten), written_bytes: String(s.bytesWritten) }) }).end();
    if (slow) say('warn', 'engine host fault: held insert ran', { table: target.table, rows: s.rowsWritten });
    return;
  }
  const text = `${paramStatements(r.params)}${r.sql}${settingsClause(r.settings)}`;
  const lane = role === 'writer' ? lanes.writer : lanes.analytics;
  // The first statement after none ran: what the engine's threads did meanwhile is no statement's.
  if (lane === lanes.analytics && lane.busy === 0) lanes.cpu.baseline(ownThreads(), threadTicks);
  if (lane === lanes.analytics && streamed(r.format)) {
    // Passed on as the engine makes it (stream.ts); the session stays the statement's until the
    // stream has ended or was cancelled. chdb's streaming takes one statement: the bound
    // parameters are set on the session first.
    const set = paramStatements(r.params).replace(/;\s*$/, '');
    const whole = await lane.run(async (session) => {
      if (set) await session.queryAsync(set, { format: 'TSVRaw' });
      const statement = `${r.sql}${settingsClause(r.settings)}`;
      try {
        await streamAnswer(session, statement, r.format, res, headers);
        return null;
      } catch (err) {
        if (!(err instanceof NotStreamed)) throw err;
        return session.queryAsync(statement, { format: r.format });
      }
    }, paramReset(r.params));
    if (whole) answerWhole(res, headers, whole);
    return;
  }
  answerWhole(res, headers, await lane.run((session) => session.queryAsync(text, { format: r.format }), paramReset(r.params)));
}

/** A statement's output made whole, with the engine's figures. */
function answerWhole(res: http.ServerResponse, headers: Record<string, string>, out: WholeResult): void {
  const bytes = out.bytes();
  res
    .writeHead(200, { ...headers, 'X-ClickHouse-Summary': JSON.stringify({ read_rows: String(out.rowsRead), read_bytes: String(out.bytesRead), elapsed_ns: String(Math.round(out.elapsed * 1e9)) }) })
    .end(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
}

/** The format (and column list) of an insert, as chdb's raw insert takes them. */
function shape(target: InsertTarget): { format: 'JSONEachRow' } | { format: 'JSONCompactEachRow'; columns: string[] } {
  return target.format === 'JSONEachRow' ? { format: target.format } : { format: target.format, columns: target.columns };
}

function fail(res: http.ServerResponse, err: unknown): void {
  const e =
    err instanceof HostError ? err
    : (() => {
        const message = err instanceof Error ? err.message : String(err);
        const { code, name } = errorCode(err);
        const h = new HostError(500, code, name, message);
        // chdb's engine errors already read "Code: N. DB::Exception: … (NAME)": keep them as they are.
        if (/^Code: \d+\./.test(message)) h.text = () => `${message.trimEnd()}\n`;
        return h;
      })();
  // Broken off after its answer began: stream.ts ends the connection once what was written reached it.
  if (err instanceof BrokenOff) {
    say('warn', 'engine host broke an analytics answer off: the statement failed after the answer began', { code: errorCode(err.cause).code });
    return;
  }
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(e.status, { 'X-ClickHouse-Exception-Code': String(e.code), 'Content-Type': 'text/plain; charset=UTF-8' }).end(e.text());
}

async function main(cfg: HostStart): Promise<void> {
  const lanes = await open(cfg);
  // Bound parameters travel in the URL (up to 20,480 characters of query text, percent-encoded).
  const server = http.createServer({ maxHeaderSize: 1024 * 1024 }, (req, res) => {
    handle(cfg, lanes, req, res).catch((err: unknown) => fail(res, err));
  });
  server.keepAliveTimeout = 60_000;
  sampleCpu(lanes);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(cfg.port, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as { port: number }).port;
  say('info', 'engine host serving', { port, analyticsSessions: cfg.analyticsSessions, writerSessions: cfg.writerSessions });
  process.send!({ type: 'listening', port } satisfies HostMessage);
  process.once('SIGTERM', () => {
    server.close();
    for (const l of [lanes.writer, lanes.analytics]) for (const s of l.sessions) s.close();
    lanes.monitor.close();
    process.exit(0);
  });
}

process.title = 'billing-engine-host';
// The service went away: end at once, so the data directory is free for its successor.
process.on('disconnect', () => process.kill(process.pid, 'SIGKILL'));
process.once('message', (m: HostStart) => {
  if (m?.type !== 'start') return;
  main(m).catch((err: unknown) => {
    const message = err instanceof Error ? err.message : String(err);
    say('error', 'engine host could not start', { err: message });
    process.send!({ type: 'failed', message } satisfies HostMessage, () => process.exit(1));
  });
});
