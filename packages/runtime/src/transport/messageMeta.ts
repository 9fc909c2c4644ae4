import { parseSubject } from '@troupe/protocol';
import type { MessageMeta } from '../logging/messageLog.ts';

/** What a subject alone says about its message. */
export function metaFromSubject(subject: string): MessageMeta {
  const parsed = parseSubject(subject);
  if (parsed === undefined) return {};
  const meta: MessageMeta = {};
  if ('taskId' in parsed) meta.taskId = parsed.taskId;
  if (parsed.type === 'event') meta.kind = parsed.kind;
  if (parsed.type === 'agent') meta.to = parsed.agent;
  if (parsed.type === 'session-summary') {
    meta.to = parsed.agent;
    meta.kind = 'session.summarize';
  }
  if (parsed.type === 'control') meta.kind = 'control';
  if (parsed.type === 'steer') meta.kind = 'steer';
  return meta;
}

const META_KEYS = ['taskId', 'from', 'to', 'kind'] as const;

/** The `taskId`, `from`, `to` and `kind` a payload carries, when they are strings. */
export function metaFromValue(value: unknown): MessageMeta {
  if (typeof value !== 'object' || value === null) return {};
  const meta: MessageMeta = {};
  for (const key of META_KEYS) {
    const field = (value as Record<string, unknown>)[key];
    if (typeof field === 'string') meta[key] = field;
  }
  return meta;
}

/** The pipeline and task a subject names, for a report of a message refused on it. */
export function idsFromSubject(subject: string): { pipeline?: string; taskId?: string } {
  const parsed = parseSubject(subject);
  const ids: { pipeline?: string; taskId?: string } = {};
  if (parsed !== undefined && 'pipeline' in parsed) ids.pipeline = parsed.pipeline;
  if (parsed !== undefined && 'taskId' in parsed) ids.taskId = parsed.taskId;
  return ids;
}
