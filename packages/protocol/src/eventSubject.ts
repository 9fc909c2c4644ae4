import { TroupeEvent } from './events.ts';
import { type ParseLimits, type ParseResult, parseMessage } from './parse.ts';
import { subjects } from './subjects.ts';

/** Whether an event already parsed came on its own subject (see {@link parseEvent}). */
export function onItsSubject(event: TroupeEvent, subject: string): boolean {
  return subjects.event(event.pipeline, event.taskId, event.kind) === subject;
}

/**
 * An event read from NATS, checked against the subject it came on: an event is published on
 * `troupe.events.<pipeline>.<task>.<kind>`, and the broker's permissions decide who may publish there (a worker may
 * not end a task). An event whose own pipeline, task or kind differ from its subject's would get round them (a
 * `task.completed` sent on a subject for a tool call), so it is refused as forged.
 */
export function parseEvent(
  data: Uint8Array | string,
  subject: string,
  limits?: ParseLimits,
): ParseResult<TroupeEvent> {
  const parsed = parseMessage(TroupeEvent, data, limits);
  if (!parsed.ok) return parsed;
  const own = subjects.event(parsed.value.pipeline, parsed.value.taskId, parsed.value.kind);
  if (own === subject) return parsed;
  return {
    ok: false,
    reason: `the event says it is ${parsed.value.kind} of task ${parsed.value.taskId} (${parsed.value.pipeline}), which is published on ${own}, but it came on ${subject}`,
    issues: [],
  };
}
