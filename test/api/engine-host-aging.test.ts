/**
 * The engine host lowers the threads of an analytics statement that has used a second of CPU time,
 * further as it uses more (src/store/engine-host/aging.ts), and puts them back once it ends: observed in the host's
 * ledger (GET /cpu marks the statement `aged`) and in the threads' nice values
 * (/proc/<host>/task/<tid>/stat). Runs the compiled host (dist/), as root (CAP_SYS_NICE), as
 * the suite does.
 */
import t from 'tap';
import { engineHost } from '../helpers/engine-host.js';
import { threadsOf } from '../helpers/threads.js';
import { AGED_AT_CPU_MS, AGED_NICE } from '../../src/store/engine-host/aging.js';

const SESSIONS = 3;
const { sup, client: open } = engineHost(t, 'engine-host-aging', { analyticsSessions: SESSIONS, writerSessions: 1 });
const g = await sup.start();
const reader = open(g.url, 'analytics', g.analyticsPassword, 'an');

/** The host's ledger as the service reads it. */
async function ledger(): Promise<{ tag: string; cpuMs: number; aged?: boolean; ended?: boolean }[]> {
  const res = await fetch(`${g.url}/cpu`, { headers: { authorization: `Basic ${Buffer.from(`analytics:${g.analyticsPassword}`).toString('base64')}` } });
  return ((await res.json()) as { statements: { tag: string; cpuMs: number; aged?: boolean; ended?: boolean }[] }).statements;
}

/** The threads of the host and their nice values. */
const engineThreads = (): { tid: number; name: string; nice: number }[] => threadsOf(g.pid);

async function until<T>(what: string, read: () => Promise<T> | T, done: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v)) return v;
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms (last: ${JSON.stringify(v)})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

t.test("a statement that runs long has its threads lowered, and put back when it ends", async (t) => {
  const before = engineThreads();
  t.ok(before.every((x) => x.nice < AGED_NICE), 'no thread is lowered before');
  // Many blocks of work, ended by the engine's own time limit.
  const long = reader
    .query({ query: 'SELECT count() FROM numbers(100000000000) WHERE sipHash64(number) = 0', format: 'JSONEachRow', clickhouse_settings: { max_execution_time: 6, log_comment: 'stmt:long' } })
    .then((r) => r.text())
    .then(
      () => 'answered',
      (err: unknown) => String(err),
    );
  const first = await until('the ledger lists it', ledger, (l) => l.some((x) => x.tag === 'stmt:long' && !x.ended));
  const early = first.find((x) => x.tag === 'stmt:long')!;
  t.ok(early.aged !== true || early.cpuMs >= AGED_AT_CPU_MS, `not aged below ${AGED_AT_CPU_MS} ms of CPU time (${early.cpuMs} ms at the first read)`);
  const aged = await until('the ledger marks it aged', ledger, (l) => l.some((x) => x.tag === 'stmt:long' && x.aged === true));
  const at = aged.find((x) => x.tag === 'stmt:long')!.cpuMs;
  t.ok(at >= AGED_AT_CPU_MS, `aged once it has used ${AGED_AT_CPU_MS} ms of CPU time (${at} ms)`);
  const lowered = await until('its threads are lowered', engineThreads, (ts) => ts.some((x) => x.nice === AGED_NICE));
  t.comment(`lowered: ${lowered.filter((x) => x.nice === AGED_NICE).map((x) => `${x.tid} ${x.name}`).join(', ')}`);
  const low = lowered.filter((x) => x.nice === AGED_NICE);
  // Threads named as the process: its event loop, the libuv pool (which also runs inserts: never
  // lowered) and the analytics sessions' threads (where the engine analyses what they start).
  const named = (x: { name: string }): boolean => x.name === 'node' || x.name.startsWith('billing-engine') || x.name.startsWith('libuv');
  t.ok(low.some((x) => !named(x)), "the engine's own threads working for it");
  t.notOk(low.some((x) => x.tid === g.pid), "never the host's event loop");
  t.ok(low.filter(named).length <= SESSIONS, `of the threads named as the process, at most the analytics sessions' (${low.filter(named).length})`);
  // Least attained service: lowered further as it goes on using CPU time.
  const further = await until('lowered further once it has used more', engineThreads, (ts) => ts.some((x) => x.nice > AGED_NICE && x.nice < 19));
  const used = (await ledger()).find((x) => x.tag === 'stmt:long')?.cpuMs ?? 0;
  t.ok(used >= 2 * AGED_AT_CPU_MS, `lowered below ${AGED_NICE} only past ${2 * AGED_AT_CPU_MS} ms of CPU time (${used} ms; nice ${[...new Set(further.map((x) => x.nice))].sort((a, b) => a - b).join(', ')})`);
  // A statement started meanwhile is young: not marked.
  const small = reader.query({ query: 'SELECT sum(number) AS s FROM numbers(1000)', format: 'JSONEachRow', clickhouse_settings: { log_comment: 'stmt:small' } }).then((r) => r.json());
  t.same(await small, [{ s: '499500' }], 'another statement runs beside it');
  t.match(await long, /TIMEOUT_EXCEEDED|Timeout exceeded/, 'the long statement ended at its time limit');
  await until('every thread is put back once nothing runs', engineThreads, (ts) => ts.every((x) => x.nice < AGED_NICE));
  t.pass('no thread is left lowered');
});
