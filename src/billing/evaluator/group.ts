/**
 * Evaluation of a group of billable messages of one partition, in stream order (consumer.ts
 * evaluates a partition's messages a group at a time). Pure and deterministic, like
 * `evaluate`: each message is evaluated exactly as it would be alone, from the running state
 * and period totals the messages before it in the group left, so a group gives the same rows,
 * events and final state as evaluating its messages one after another — which is what one
 * serial run gives. Messages of different organizations and modes share nothing but the order.
 */
import type { BillingConfig } from '../model.js';
import { renderRows } from './rows-body.js';
import type { Mode } from '../../shared/mode.js';
import type { BillableLine } from '../../bus/batch.js';
import { capPeriods, evaluate, lookups, type Lookups, type BillableSignal, type BillingState, type CapPeriodRef, type EvaluationOutput, type PeriodTotal } from './evaluate.js';

/** An organization and mode: `<orgId>.<mode>` (organization ids hold no dot). */
export const scopeOf = (orgId: string, mode: Mode): string => `${orgId}.${mode}`;

/** One billable message of the group. */
export interface GroupUnit {
  orgId: string;
  mode: Mode;
  signals: BillableSignal[];
  /** Epoch ms the message entered the billable stream (same on every replay). */
  evaluatedAt: number;
}

export interface GroupCapPeriodsInput {
  /** The pinned configuration of each scope (`scopeOf`) the units name. */
  configs: Record<string, BillingConfig>;
  units: GroupUnit[];
}

export interface GroupInput extends GroupCapPeriodsInput {
  /** The running state of each scope's customers (those the group names) before the group. */
  states: Record<string, BillingState>;
  /** Before the group, the total of every cap period a unit touches (`groupCapPeriods`), by period key. */
  periods: Record<string, PeriodTotal>;
}

/** One message's result: its rows as a rows message body (rows-body.ts, UTF-8; null: no rows), how many cost rows, its events. */
export interface UnitOutput {
  rows: Uint8Array | null;
  costs: number;
  events: EvaluationOutput['events'];
}

export interface GroupOutput {
  /** Per unit, in order: its rows and events. */
  units: UnitOutput[];
  /** The running state of each scope after the group. */
  states: Record<string, BillingState>;
  /** The new totals of the cap periods the group touched, by period key. */
  periods: Record<string, PeriodTotal>;
}

/** A unit as its billable message's text (the lines the pipeline wrote), parsed where it is evaluated. */
export interface UnitText extends Omit<GroupUnit, 'signals'> {
  text: string;
}

/**
 * A task for a worker thread: the configurations either as objects or as the pin's JSON text
 * (consumer.ts), and the units as their messages' text — a string crosses to the thread as one
 * copy, where a tree of objects is cloned node by node on the sending (main) thread.
 */
export type WorkerTask<T extends GroupCapPeriodsInput> = Omit<T, 'configs' | 'units'> & ({ configs: Record<string, BillingConfig> } | { pinJson: string }) & { units: UnitText[] };

/**
 * The one-task form (workers/billing.ts evaluateAsking): the worker lists the cap periods,
 * posts them on `port`, and evaluates once the main thread answered with the states and the
 * periods' totals (or gave up: `error`).
 */
export type AskingTask = WorkerTask<GroupCapPeriodsInput> & { port: import('node:worker_threads').MessagePort };
export type WorkerAnswer = Pick<GroupInput, 'states' | 'periods'> | { error: string };

/** The units of a worker task, parsed. */
export function unitsOf(task: { units: UnitText[] }): GroupUnit[] {
  return task.units.map((u) => ({ orgId: u.orgId, mode: u.mode, evaluatedAt: u.evaluatedAt, signals: parseBillable(u.text) }));
}

/**
 * The signals of a partition's billable message, each naming the customer the pipeline
 * resolved (`k`, partition.ts). A signal whose reference named no customer when it was stored
 * is not billed (it has no `k`).
 */
export function parseBillable(text: string): BillableSignal[] {
  const out: BillableSignal[] = [];
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const b = JSON.parse(line) as BillableLine;
    if (b.k === undefined) continue;
    out.push({ id: b.i, eventName: b.e, customerId: b.k, unitId: b.u, ts: b.t, data: b.d, ...(b.x !== undefined ? { exact: b.x } : {}) });
  }
  return out;
}

/** The configurations of a worker task. */
export function configsOf(task: { configs: Record<string, BillingConfig> } | { pinJson: string }): Record<string, BillingConfig> {
  if ('configs' in task) return task.configs;
  const pin = JSON.parse(task.pinJson) as { scopes: { orgId: string; mode: Mode; config: BillingConfig }[] };
  const out: Record<string, BillingConfig> = {};
  for (const s of pin.scopes) out[scopeOf(s.orgId, s.mode)] = s.config;
  return out;
}

const priced = (config: BillingConfig | undefined): config is BillingConfig => !!config && Object.keys(config.attributes).length > 0;

/** A cap period a group touches, with the scope (`scopeOf`) of its cap. */
export type ScopedCapPeriodRef = CapPeriodRef & { scope: string };

/**
 * The lookups of each scope's configuration (evaluate.ts `lookups`) for one group: built once
 * and shared by `groupCapPeriods` and `evaluateGroup` of the same configurations and units,
 * so each signal is resolved once. Never shared between groups.
 */
export type GroupLookups = Map<string, Lookups>;

/** The cap periods the group's units touch, each once, in first-touch order. */
export function groupCapPeriods(input: GroupCapPeriodsInput, lookupsOf: GroupLookups = new Map()): ScopedCapPeriodRef[] {
  const out = new Map<string, ScopedCapPeriodRef>();
  for (const u of input.units) {
    const config = input.configs[scopeOf(u.orgId, u.mode)];
    if (!priced(config) || Object.keys(config.caps).length === 0) continue;
    const scope = scopeOf(u.orgId, u.mode);
    let l = lookupsOf.get(scope);
    if (!l) lookupsOf.set(scope, (l = lookups(config)));
    for (const r of capPeriods({ orgId: u.orgId, mode: u.mode, config, signals: u.signals }, l)) if (!out.has(r.key)) out.set(r.key, { ...r, scope });
  }
  return [...out.values()];
}

export function evaluateGroup(input: GroupInput, lookupsOf: GroupLookups = new Map()): GroupOutput {
  const states: Record<string, BillingState> = { ...input.states };
  const totals: Record<string, PeriodTotal> = { ...input.periods };
  const touched: Record<string, PeriodTotal> = {};
  const units: UnitOutput[] = [];
  for (const u of input.units) {
    const scope = scopeOf(u.orgId, u.mode);
    const config = input.configs[scope];
    if (!priced(config)) {
      units.push({ rows: null, costs: 0, events: [] });
      continue;
    }
    const state = states[scope] ?? { lastSeq: 0, consumed: {}, usage: {} };
    let l = lookupsOf.get(scope);
    if (!l) lookupsOf.set(scope, (l = lookups(config)));
    const out = evaluate({ orgId: u.orgId, mode: u.mode, config, state, signals: u.signals, evaluatedAt: u.evaluatedAt, periods: totals }, l);
    states[scope] = out.state;
    Object.assign(totals, out.periods);
    Object.assign(touched, out.periods);
    units.push({ rows: renderRows(out), costs: out.costs.length, events: out.events });
  }
  return { units, states, periods: touched };
}
