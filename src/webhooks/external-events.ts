/**
 * Events of other billing components (payments, invoices, checkouts) onto the bus the
 * dispatcher reads. Two ways in:
 *   - the operator API: `POST /admin/v1/organizations/:id/events` with
 *     `{mode: "live"|"test", event, id?, data}` (OPERATOR_TOKEN), validated here;
 *   - publishing directly to JetStream subject `<NATS_PREFIX>.events.<orgId>.<mode>.<event>`
 *     with a `Nats-Msg-Id` and the body `{id, event, organizationId, livemode, occurredAt,
 *     data}` (what the billing evaluator publishes); such producers validate themselves.
 * `data` must have the event's primary key: `payment` (spec 2.5, checked field by field),
 * `invoice` or `checkout` (id, customerId, status and currency required): the checks of the
 * event list (src/bus/events.ts). The event id defaults to `<event>:<object id>`, so the same payment
 * reported twice within a day is delivered once.
 */
import { ApiError } from '../errors.js';
import type { Nats } from '../bus/connection.js';
import { busEvent, externalCheck, isEventName, publishEvent, type Emitted, type EventName } from '../bus/events.js';
import { invalidEvent as bad, isObj, type Obj } from '../bus/event-payloads.js';
import type { Mode } from '../shared/mode.js';

export interface ExternalEvent {
  id: string;
  event: EventName;
  mode: Mode;
  data: Obj;
}

export function validateExternalEvent(body: unknown): ExternalEvent {
  if (!isObj(body)) throw new ApiError('INVALID_BODY', 'the body must be a JSON object {mode, event, id?, data}');
  for (const k of Object.keys(body)) if (!['mode', 'event', 'id', 'data'].includes(k)) throw new ApiError('INVALID_BODY', `unknown field "${k}"`);
  if (body.mode !== 'live' && body.mode !== 'test') throw bad('mode', 'must be "live" or "test"');
  if (typeof body.event !== 'string' || !isEventName(body.event)) throw bad('event', 'must be one of the webhook event names');
  const check = externalCheck(body.event);
  if (!check) throw bad('event', `${body.event} is produced by the billing engine itself, not published from outside`);
  if (!isObj(body.data)) throw bad('data', 'must be an object');
  const objectId = check(body.data, body.event);
  if (body.id !== undefined && (typeof body.id !== 'string' || !/^[A-Za-z0-9._:-]{1,200}$/.test(body.id))) throw bad('id', 'letters, digits, ".", "_", ":" or "-", 1 to 200 characters');
  return { id: (body.id as string | undefined) ?? `${body.event}:${objectId}`, event: body.event, mode: body.mode, data: body.data };
}

export async function publishExternalEvent(nats: Nats, orgId: string, e: ExternalEvent, timeoutMs: number): Promise<{ duplicate: boolean }> {
  // The data was checked against the event's shape above.
  const ack = await publishEvent(nats, busEvent({ id: e.id, event: e.event, data: e.data } as Emitted, orgId, e.mode, new Date()), timeoutMs);
  return { duplicate: ack.duplicate === true };
}
