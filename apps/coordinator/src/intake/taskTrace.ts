import { newTraceparent } from '@troupe/runtime';

/** A new trace context for a task: in its parent task's trace (a new span id) when it has one, else a new trace. */
export function childTraceparent(parent: string | undefined): string {
  const traceId = parent?.match(/^00-([0-9a-f]{32})-[0-9a-f]{16}-([0-9a-f]{2})$/);
  if (!traceId) return newTraceparent();
  return `00-${traceId[1]}-${newTraceparent().split('-')[2]}-${traceId[2]}`;
}

/**
 * The trace context a checkpoint's task carries (its workflow input's); else the one its record kept from its claim
 * (a record with no snapshot yet), or a new one when it has neither.
 */
export function traceOf(snapshot: unknown, claimed?: string): string {
  const trace = (snapshot as { context?: { task?: { traceparent?: unknown } } } | undefined)?.context?.task
    ?.traceparent;
  return typeof trace === 'string' ? trace : (claimed ?? newTraceparent());
}
