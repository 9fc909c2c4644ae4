import type { Logger } from './logger.ts';

/** What a log line says about a message besides its subject. */
export type MessageMeta = { taskId?: string; from?: string; to?: string; kind?: string };

/** The fields of the one log line written for each message sent (`out`) or received (`in`). */
export type MessageLogFields = { dir: 'in' | 'out'; subject: string } & MessageMeta;

const ARROWS = { in: '←', out: '→' } as const;

/** Builds the fields of a message's log line, leaving out what is unknown. */
export function messageLogFields(
  dir: 'in' | 'out',
  subject: string,
  meta: MessageMeta = {},
): MessageLogFields {
  const fields: MessageLogFields = { dir, subject };
  if (meta.taskId !== undefined) fields.taskId = meta.taskId;
  if (meta.from !== undefined) fields.from = meta.from;
  if (meta.to !== undefined) fields.to = meta.to;
  if (meta.kind !== undefined) fields.kind = meta.kind;
  return fields;
}

/** The message of a message's log line: `→ troupe.events.demo.t1.task.accepted`, `← troupe.tasks.demo`. */
export function messageLogLine(dir: 'in' | 'out', subject: string): string {
  return `${ARROWS[dir]} ${subject}`;
}

/** Writes the one log line for a message sent or received. */
export function logMessage(
  logger: Logger,
  level: MessageLogLevel,
  dir: 'in' | 'out',
  subject: string,
  meta?: MessageMeta,
): void {
  if (!logger.isLevelEnabled(level)) return;
  logger[level](messageLogFields(dir, subject, meta), messageLogLine(dir, subject));
}

/** Levels a message line may be written at; busy deployments turn it down to `debug`. */
export type MessageLogLevel = 'info' | 'debug' | 'trace';

export interface RefusalDetails {
  meta?: MessageMeta;
  /** The line's message; by default `← <subject> refused: <reason>`. */
  message?: string;
  /** More fields for the line, such as the schema's issues. */
  fields?: Record<string, unknown>;
}

/**
 * Writes the one log line for a message refused on arrival (not valid, or for nobody here): a warning with the
 * message's fields and the `reason`, in place of its `in` line.
 */
export function logRefusedMessage(
  logger: Logger,
  subject: string,
  reason: string,
  details: RefusalDetails = {},
): void {
  logger.warn(
    { ...messageLogFields('in', subject, details.meta), reason, ...details.fields },
    details.message ?? `${ARROWS.in} ${subject} refused: ${reason}`,
  );
}

/**
 * Replies whose label is not the request's reversed: an agent step is asked for by the workflow, whoever handed
 * the work on (the request's `from`), so its reply goes back to the workflow.
 */
const REPLY_LABELS: Partial<Record<string, { kind: string; to: string }>> = {
  'agent.step': { kind: 'agent.reply', to: 'workflow' },
};

/**
 * What the log line of a reply says, from what its request's said: from the responder (the request's `to`, else
 * `responder`) back to the requester, with the kind `<request kind>.reply` (`agent.reply` for an agent step).
 *
 * @example
 * replyMeta({ taskId: 't1', from: 'user', to: 'coordinator', kind: 'cancel' });
 * // { taskId: 't1', from: 'coordinator', to: 'user', kind: 'cancel.reply' }
 */
export function replyMeta(request: MessageMeta, responder?: string): MessageMeta {
  const label = request.kind === undefined ? undefined : REPLY_LABELS[request.kind];
  const meta: MessageMeta = {};
  if (request.taskId !== undefined) meta.taskId = request.taskId;
  const from = request.to ?? responder;
  if (from !== undefined) meta.from = from;
  const to = label?.to ?? request.from;
  if (to !== undefined) meta.to = to;
  meta.kind = label?.kind ?? (request.kind === undefined ? 'reply' : `${request.kind}.reply`);
  return meta;
}
