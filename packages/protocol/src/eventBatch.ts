import { z } from 'zod';
import { onItsSubject, parseEvent } from './eventSubject.ts';
import { type EventKind, TroupeEvent } from './events.ts';
import { type ParseLimits, type ParseResult, parseMessage } from './parse.ts';
import { parseSubject } from './subjects.ts';

/**
 * The last token of a batch's subject, `troupe.events.<pipeline>.<taskId>.batch`: under the task's own events, so a
 * filter on one task's (or one pipeline's, or every task's) events still takes it in. Not an event kind (those are
 * dotted), so no kind's subject is a batch's.
 */
export const EVENT_BATCH_TOKEN = 'batch';

/**
 * Several events of one task in one message, in the order they happened: what a publisher sends instead of one message
 * per event when batching is on. `batch` is its `Nats-Msg-Id`, made from the events it holds, so the same batch sent
 * again is stored once; each event keeps its own id, which readers de-duplicate on (a resumed run may group the same
 * facts differently).
 */
export const EventBatch = z.object({
  batch: z.string().min(1),
  events: z.array(TroupeEvent).min(1),
});
export type EventBatch = z.infer<typeof EventBatch>;

/**
 * Kinds never sent in a batch: those other processes follow by their own subject (a task's end, pause and tell; an
 * approval or a question waiting on a person; a task's online score, which the gateway reads from `EVENTS` by its
 * subject), and those the broker lets only a coordinator publish (`task.*`). A batch holding one is refused as forged.
 */
const UNBATCHED_FAMILIES = new Set(['task', 'approval', 'human', 'eval']);

/** Whether an event of `kind` may travel in a batch. */
export function isBatchable(kind: EventKind | string): boolean {
  return !UNBATCHED_FAMILIES.has(kind.split('.')[0] as string);
}

/**
 * The events a message on a task's events subject holds, each checked against the subject: one event on its own
 * subject (see `parseEvent`), or a batch on `troupe.events.<pipeline>.<taskId>.batch` whose every event is of that
 * pipeline and task and of a kind that may be batched. A batch with one event that is not is refused whole, as
 * forged: the broker checked who may publish the batch's subject, not the events inside.
 *
 * @example
 * const parsed = eventsOf(msg.data, msg.subject);
 * if (parsed.ok) for (const event of parsed.value) show(event);
 */
export function eventsOf(
  data: Uint8Array | string,
  subject: string,
  limits?: ParseLimits,
): ParseResult<TroupeEvent[]> {
  const place = parseSubject(subject);
  if (place?.type !== 'event' || place.kind !== EVENT_BATCH_TOKEN) {
    const one = parseEvent(data, subject, limits);
    return one.ok ? { ok: true, value: [one.value] } : one;
  }
  const parsed = parseMessage(EventBatch, data, limits);
  return parsed.ok ? eventsIn(parsed.value, subject) : parsed;
}

/** What a subscription to a task's events validates against: one event, or a batch of them. */
export const EventMessage = z.union([EventBatch, TroupeEvent]);
export type EventMessage = z.infer<typeof EventMessage>;

/**
 * The events of a message already validated as an {@link EventMessage}, checked against its subject as
 * {@link eventsOf} checks them: for a subscriber whose bus validates the payload (and reports one that fails).
 */
export function eventsIn(message: EventMessage, subject: string): ParseResult<TroupeEvent[]> {
  if (!('batch' in message)) {
    return onItsSubject(message, subject)
      ? { ok: true, value: [message] }
      : {
          ok: false,
          reason: `the ${message.kind} event ${message.id} came on ${subject}, not its own subject`,
          issues: [],
        };
  }
  const place = parseSubject(subject);
  if (place?.type !== 'event' || place.kind !== EVENT_BATCH_TOKEN) {
    return {
      ok: false,
      reason: `the batch ${message.batch} came on ${subject}, not a batch subject`,
      issues: [],
    };
  }
  for (const event of message.events) {
    const why =
      event.pipeline !== place.pipeline || event.taskId !== place.taskId
        ? `holds event ${event.id} of task ${event.taskId} (${event.pipeline})`
        : !isBatchable(event.kind)
          ? `holds a ${event.kind} event (${event.id}), which is never batched`
          : undefined;
    if (why !== undefined) {
      return { ok: false, reason: `the batch ${message.batch} on ${subject} ${why}`, issues: [] };
    }
  }
  return { ok: true, value: message.events };
}
