/**
 * What the failure drills (bench/drills/*.ts) share: posting a batch and recording its answer,
 * splitting the answers by round, counting what was stored against what was acknowledged, and
 * keeping the logs when a problem was found. Each drill keeps its own faults, limits and figures.
 */
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { http } from '../lib/api.js';
import { sleep } from '../lib/report.js';

/** One request to the ingress and what it answered (`code`: the error code of a non-202, or why the fetch failed). */
export interface PostAnswer {
  start: number;
  end: number;
  status: number;
  code: string | null;
}

/** What every drill's round report holds (the rest is the drill's own). */
export interface FaultRound {
  round: number;
  /** When the round's fault was injected. */
  killedAt: number;
  /** The round's answers other than 202 (those `roundAnswers` calls bad). */
  unavailable: number;
  /** From the kill to the end of the round's last non-202 answer (0 when there was none). */
  unavailableWindowMs: number;
}

/** POSTs `body` to /api/v2/signals/bulk; never throws (a failed fetch is status 0 with its message as code). */
export async function postSignals(url: string, liveKey: string, body: string): Promise<PostAnswer> {
  const start = Date.now();
  let status = 0;
  let code: string | null = null;
  try {
    const res = await fetch(`${url}/api/v2/signals/bulk`, { method: 'POST', headers: { authorization: `Bearer ${liveKey}`, 'content-type': 'application/json' }, body });
    status = res.status;
    const text = await res.text();
    if (status !== 202) code = (JSON.parse(text) as { code?: string }).code ?? null;
  } catch (err) {
    code = `fetch failed: ${(err as Error).message}`;
  }
  return { start, end: Date.now(), status, code };
}

/**
 * The answers of round `i`: each answer belongs to the round whose kill came last before it was
 * answered (a request sent just before a kill may be answered 503 after it). `bad`: its non-202s
 * sent no later than `badUntil` (the end of the round's fault); `lastBadEnd`: when the last of
 * them ended (0 when there was none); `unavailableWindowMs`: from the kill to then (0 when none).
 */
export function roundAnswers<A extends PostAnswer>(answers: A[], rounds: Pick<FaultRound, 'killedAt'>[], i: number, badUntil: number): { mine: A[]; bad: A[]; lastBadEnd: number; unavailableWindowMs: number } {
  const killedAt = rounds[i]!.killedAt;
  const next = rounds[i + 1]?.killedAt ?? Infinity;
  const mine = answers.filter((a) => a.end >= killedAt && a.end < next);
  const bad = mine.filter((a) => a.status !== 202 && a.start <= badUntil);
  const lastBadEnd = bad.reduce((m, a) => Math.max(m, a.end), 0);
  return { mine, bad, lastBadEnd, unavailableWindowMs: bad.length === 0 ? 0 : lastBadEnd - killedAt };
}

/** The distinct "status code" pairs of `answers`, joined with '; '. */
export function answerKinds(answers: PostAnswer[]): string {
  return [...new Set(answers.map((a) => `${a.status} ${a.code}`))].join('; ');
}

/**
 * Polls the organization's admin stats until the live signal count reaches `acked` (or 60 s
 * passed) and compares: lost and duplicated signals are added to `problems`.
 */
export async function countStored(url: string, orgId: string, operatorToken: string, acked: number, problems: string[]): Promise<{ stored: number; lost: number; duplicated: number }> {
  let stored = -1;
  const end = Date.now() + 60_000;
  for (;;) {
    const st = await http<{ signals: { live: number } }>(`${url}/admin/v1/organizations/${orgId}/stats`, 'GET', operatorToken);
    if (st.status !== 200) throw new Error(`stats: ${st.status} ${JSON.stringify(st.body)}`);
    stored = st.body.signals.live;
    if (stored >= acked || Date.now() > end) break;
    await sleep(250);
  }
  const lost = Math.max(0, acked - stored);
  const duplicated = Math.max(0, stored - acked);
  if (lost > 0) problems.push(`${lost} acknowledged signal(s) not stored`);
  if (duplicated > 0) problems.push(`${duplicated} signal(s) stored more than once`);
  return { stored, lost, duplicated };
}

/** The `logs` figure of a drill that found no problem. */
export const NO_LOGS = 'written only when a problem was found';

/**
 * Writes a drill's logs to the temporary directory: the service output (`<drill>-service-<ms>.log`),
 * every answer (`.answers`) and the engines' output (`.<engine.ext>`). Returns the `logs` figure naming them.
 */
export function keepLogs(drill: string, serviceOutput: string, answerLines: string[], engine: { ext: string; text: string; what: string }): string {
  const file = path.join(tmpdir(), `${drill}-service-${Date.now()}.log`);
  writeFileSync(file, serviceOutput);
  writeFileSync(`${file}.${engine.ext}`, engine.text);
  writeFileSync(`${file}.answers`, answerLines.join('\n'));
  return `${file} (service output), ${file}.answers (every answer), ${file}.${engine.ext} (${engine.what})`;
}
