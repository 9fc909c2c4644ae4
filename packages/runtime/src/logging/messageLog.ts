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
  logger[level](messageLogFields(dir, subject, meta), messageLogLine(dir, subject));
}

/** Levels a message line may be written at; busy deployments turn it down to `debug`. */
export type MessageLogLevel = 'info' | 'debug' | 'trace';
