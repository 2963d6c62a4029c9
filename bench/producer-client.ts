/**
 * What the benches' load generator costs, and what it makes the ingress spend: the same
 * 500-signal batches (bench/lib/signals.ts, half keyed) POSTed to a ROLE=ingress service with
 * `fetch` and with the keep-alive node:http client the producers use (bench/lib/post.ts),
 * alternately, --rounds rounds of --batches batches each, --in-flight at a time. Prints, per
 * client and round, the producer's CPU per request (its body rendering included) and the
 * service's. The producers share the machine's cores with the service they measure: what
 * they spend is taken from it.
 *
 *   node dist/bench/producer-client.js [--batches N (1500)] [--in-flight N (4)] [--rounds N (2)]
 */
import { readFileSync } from 'node:fs';
import { Args } from './lib/args.js';
import { Poster } from './lib/post.js';
import { BatchTemplate } from './lib/signals.js';
import { OPERATOR_TOKEN, createUnlimitedOrg } from './lib/api.js';
import { appendHistory, hostInfo, printHeader, round } from './lib/report.js';
import { cleanup, isolation, onInterrupt, startBenchService, type BenchService } from '../harness/service.js';

const args = new Args('node dist/bench/producer-client.js [options]', {
  batches: { help: 'batches per client and round (default 1500)' },
  'in-flight': { help: 'requests in flight (default 4, as the pipeline bench)' },
  rounds: { help: 'rounds of both clients (default 2)' },
});
const BATCHES = args.num('batches', 1_500, 10, 1_000_000);
const IN_FLIGHT = args.num('in-flight', 4, 1, 256);
const ROUNDS = args.num('rounds', 2, 1, 20);

/** CPU ticks (1/100 s) a process has used. */
function ticks(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

async function main(): Promise<void> {
  printHeader('producer client: CPU per 500-signal POST, fetch against keep-alive node:http', hostInfo(), { batches: BATCHES, inFlight: IN_FLIGHT, rounds: ROUNDS });
  const iso = isolation('producer-client', 'bench');
  let svc: BenchService | null = null;
  onInterrupt(async () => {
    await svc?.child.stop(5_000);
    await cleanup(iso);
  });
  try {
    svc = await startBenchService({ role: 'ingress', operatorToken: OPERATOR_TOKEN, iso, env: { STREAM_MAX_BYTES: String(4 * 1024 ** 3) } });
    const pid = svc.child.pid!;
    const org = await createUnlimitedOrg(svc.url, OPERATOR_TOKEN);
    const template = new BatchTemplate({ baseTimeMs: Date.now(), keyed: (i) => i % 2 === 0 });
    const headers = { authorization: `Bearer ${org.liveKey}`, 'content-type': 'application/json' };
    const url = `${svc.url}/api/v2/signals/bulk`;
    const poster = new Poster(svc.url, IN_FLIGHT);
    const clients: Record<string, (body: string) => Promise<number>> = {
      fetch: async (body) => {
        const r = await fetch(url, { method: 'POST', headers, body, signal: AbortSignal.timeout(30_000) });
        await r.text();
        return r.status;
      },
      'node:http': async (body) => (await poster.post('/api/v2/signals/bulk', headers, body)).status,
    };
    const results: { client: string; round: number; clientUs: number; serviceUs: number; perSec: number }[] = [];
    let tag = 0;
    for (let r = 1; r <= ROUNDS; r++) {
      for (const [client, post] of Object.entries(clients)) {
        const run = ++tag;
        let next = 0;
        const t0 = ticks(pid);
        const c0 = process.cpuUsage();
        const w0 = performance.now();
        await Promise.all(
          Array.from({ length: IN_FLIGHT }, async () => {
            while (next < BATCHES) {
              const n = next++;
              const status = await post(template.render((i) => `pc${run}-${n}-${i}`));
              if (status !== 202) throw new Error(`${client}: answered ${status}`);
            }
          }),
        );
        const seconds = (performance.now() - w0) / 1000;
        const c = process.cpuUsage(c0);
        const row = { client, round: r, clientUs: round((c.user + c.system) / BATCHES, 0), serviceUs: round(((ticks(pid) - t0) * 10_000) / BATCHES, 0), perSec: round(BATCHES / seconds, 0) };
        results.push(row);
        console.log(`  round ${r} ${client.padEnd(9)} producer ${String(row.clientUs).padStart(5)} µs CPU/request   service ${String(row.serviceUs).padStart(5)} µs CPU/request   ${row.perSec} requests/s`);
      }
    }
    poster.close();
    appendHistory({ bench: 'producer-client', at: new Date().toISOString(), host: hostInfo(), params: { batches: BATCHES, inFlight: IN_FLIGHT, rounds: ROUNDS }, results });
  } finally {
    await svc?.child.stop();
    await cleanup(iso);
  }
}

await main();
