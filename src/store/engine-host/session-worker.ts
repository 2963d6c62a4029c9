/**
 * One analytics session of the engine host, in a worker thread of its own (remote-session.ts is
 * the host's side). chdb analyses a streamed statement in the thread that starts it, and
 * folding its constant expressions there can take seconds (a sort of a few million elements
 * made in the statement itself took 1.6 s): started on the host's event loop, that would stall
 * every other organization's answers, the CPU ledger and the inserts for as long. Here it
 * stalls only this session's thread.
 *
 * Messages from the host, one operation at a time in order of arrival:
 *   {op: 'query', id, sql, format}    the statement run whole: {id, result: {bytes, rowsRead, bytesRead, elapsed}}
 *   {op: 'stream', id, sql, format}   the statement streamed: {id, block: {bytes, numRows}} for
 *                                     each block, the next one fetched only after {op: 'more', id};
 *                                     {id, end: true} after the last; {op: 'cancel', id} ends it
 *   {op: 'close'}                     closes the session; the thread ends
 * and {id, error: {message, clickhouseCode?}} when an operation fails. The bytes are copied out
 * of the engine's memory and their buffer transferred.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { readlinkSync } from 'node:fs';
import { Session } from 'chdb';

interface Start {
  dir: string;
  /** Statements run once when the session is opened (its database, read-only mode). */
  setup: string[];
}

type Op =
  | { op: 'query'; id: number; sql: string; format: string }
  | { op: 'stream'; id: number; sql: string; format: string }
  | { op: 'more'; id: number }
  | { op: 'cancel'; id: number }
  | { op: 'close' };

const port = parentPort!;
const start = workerData as Start;
const session = new Session(start.dir);

function failure(err: unknown): { message: string; clickhouseCode?: number } {
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { clickhouseCode?: unknown } | null)?.clickhouseCode;
  return typeof code === 'number' ? { message, clickhouseCode: code } : { message };
}

function copy(b: Uint8Array): ArrayBuffer {
  const out = new Uint8Array(b.byteLength);
  out.set(b);
  return out.buffer;
}

/** Waiting streams: the next 'more' or 'cancel' for a stream's id. */
const waiting = new Map<number, (go: boolean) => void>();
/** Streams cancelled while no step of theirs was waiting (before they began, or while a block was fetched). */
const cancelled = new Set<number>();
/** The id of the last operation done with (operations run one at a time, in the order of their ids). */
let lastDone = 0;

async function stream(id: number, sql: string, format: string): Promise<void> {
  if (cancelled.delete(id)) return;
  const it = session.queryStream(sql, { format })[Symbol.asyncIterator]();
  try {
    for (;;) {
      const r = await it.next();
      if (cancelled.delete(id)) return;
      if (r.done) {
        port.postMessage({ id, end: true });
        return;
      }
      const bytes = copy(r.value.raw());
      port.postMessage({ id, block: { bytes, numRows: r.value.numRows } }, [bytes]);
      const go = await new Promise<boolean>((resolve) => waiting.set(id, resolve));
      if (!go) return;
    }
  } finally {
    waiting.delete(id);
    await it.return?.();
  }
}

async function run(m: Op): Promise<void> {
  if (m.op === 'query') {
    const r = await session.queryAsync(m.sql, { format: m.format });
    const bytes = copy(r.bytes());
    port.postMessage({ id: m.id, result: { bytes, rowsRead: r.rowsRead, bytesRead: r.bytesRead, elapsed: r.elapsed } }, [bytes]);
  } else if (m.op === 'stream') {
    await stream(m.id, m.sql, m.format);
  }
}

let chain: Promise<void> = (async () => {
  for (const sql of start.setup) await session.queryAsync(sql, { format: 'TSVRaw' });
  // This thread's id (/proc/thread-self is <pid>/task/<tid>): the host may lower it like the engine's threads (aging.ts).
  let tid: number | null = null;
  try {
    tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
  } catch {
    // Not Linux: no thread ids to lower.
  }
  port.postMessage({ ready: true, tid });
})().catch((err: unknown) => port.postMessage({ failed: failure(err) }));

port.on('message', (m: Op) => {
  // A running stream's steps do not wait behind it.
  if (m.op === 'more' || m.op === 'cancel') {
    const w = waiting.get(m.id);
    if (w) w(m.op === 'more');
    // A stream not begun or between blocks; one already done with (the host left it after its end) is forgotten.
    else if (m.op === 'cancel' && m.id > lastDone) cancelled.add(m.id);
    return;
  }
  if (m.op === 'close') {
    void chain.finally(() => {
      session.close();
      port.close();
    });
    return;
  }
  chain = chain.then(() =>
    run(m)
      .catch((err: unknown) => port.postMessage({ id: m.id, error: failure(err) }))
      .finally(() => {
        lastDone = m.id;
        cancelled.delete(m.id);
      }),
  );
});
