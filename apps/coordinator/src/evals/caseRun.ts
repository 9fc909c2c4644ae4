import { type EvalCase, type EventOf, FINAL_EVENT_KINDS, type TroupeEvent } from '@troupe/protocol';
import { EvalsError } from './evalsError.ts';
import type { CaseRun } from './evalTypes.ts';

type FinalEvent = EventOf<'task.completed'> | EventOf<'task.failed'> | EventOf<'task.cancelled'>;

const STATUS = {
  'task.completed': 'completed',
  'task.failed': 'failed',
  'task.cancelled': 'cancelled',
} as const;

/**
 * What a case's run gave, read from its events: how its task ended, its output, usage and duration, all from the
 * task's final event. The run's task is the one accepted without a parent (a `pipeline` step's sub-tasks, and any
 * other task's events, are left out); an event seen twice (the same id) counts once. `options.output` is the whole
 * output where the final event kept only its preview. Throws an `EvalsError` (`run_not_ended`) when the task has no
 * final event: it did not end.
 *
 * @example
 * const run = caseRunOf(evalCase, replay.events, { output: replay.output });
 */
export function caseRunOf(
  evalCase: EvalCase,
  events: readonly TroupeEvent[],
  options: { output?: string } = {},
): CaseRun {
  const taskId = taskOf(events);
  if (taskId === undefined)
    throw new EvalsError('run_not_ended', `case ${evalCase.id}: the run has no events`);
  const own = ownEvents(events, taskId);
  const final = own.find((event): event is FinalEvent => FINAL_EVENT_KINDS.includes(event.kind));
  if (!final) {
    throw new EvalsError(
      'run_not_ended',
      `case ${evalCase.id}: task ${taskId} has no final event (task.completed, task.failed or task.cancelled): it did not end`,
    );
  }
  const status = STATUS[final.kind];
  const output = final.kind === 'task.completed' ? (options.output ?? final.data.output) : undefined;
  return {
    case: evalCase,
    taskId,
    events: own,
    status,
    output,
    usage: final.data.usage,
    durationMs: durationOf(final, own),
  };
}

/** The task a run is about: the one accepted with no parent, else the first event's. */
function taskOf(events: readonly TroupeEvent[]): string | undefined {
  const root = events.find((event) => event.kind === 'task.accepted' && event.data.parent === undefined);
  return root?.taskId ?? events[0]?.taskId;
}

function ownEvents(events: readonly TroupeEvent[], taskId: string): TroupeEvent[] {
  const seen = new Set<string>();
  return events.filter((event) => {
    if (event.taskId !== taskId || seen.has(event.id)) return false;
    seen.add(event.id);
    return true;
  });
}

/** The final event's duration; a cancellation says none, so it is the time from acceptance to the cancel. */
function durationOf(final: FinalEvent, events: readonly TroupeEvent[]): number {
  if (final.kind !== 'task.cancelled') return final.data.durationMs;
  const accepted = events.find((event) => event.kind === 'task.accepted');
  if (!accepted) return 0;
  return Math.max(0, Date.parse(final.ts) - Date.parse(accepted.ts));
}
