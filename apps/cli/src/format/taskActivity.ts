import type { HumanRequest, StepActivity, WorkflowRecord } from '@troupe/protocol';
import { formatDuration } from './duration.ts';

type PersonRequest = { kind: 'approval' | 'question'; id: string };

/**
 * Why a running task is not moving, one line each: what its record says the step is doing, and the requests of
 * the task still waiting for a person (which older coordinators do not record as activity). Nothing for a task
 * that has ended.
 */
export function describeActivity(
  record: WorkflowRecord,
  pending: readonly HumanRequest[],
  now: number,
): string[] {
  if (record.status !== 'running') return [];
  const activity = record.activity;
  const lines = [
    ...(record.paused ? [pausedLine(record.taskId, record.paused, now)] : []),
    ...(activity ? [activityLine(activity, now)] : []),
  ];
  const shown = activity?.kind === 'person' ? activity.request.id : undefined;
  for (const request of pending) {
    if (request.taskId === record.taskId && request.status === 'pending' && request.id !== shown) {
      lines.push(personLine(request));
    }
  }
  return lines;
}

function activityLine(activity: StepActivity, now: number): string {
  switch (activity.kind) {
    case 'person':
      return personLine(activity.request);
    case 'worker':
      return `waiting for a worker that serves agent ${activity.agent} (start one: troupe worker <pipeline.yaml>)`;
    case 'agent':
      return `agent ${activity.agent} working on step ${activity.step}${forHowLong(activity.since, now)}`;
    case 'model':
      return `agent ${activity.agent} waiting on its model in step ${activity.step}${forHowLong(activity.since, now)}`;
  }
}

function pausedLine(taskId: string, paused: NonNullable<WorkflowRecord['paused']>, now: number): string {
  const by = paused.by ? ` by ${paused.by}` : '';
  const why = paused.reason ? `: ${paused.reason.replace(/\s+/g, ' ').slice(0, 120)}` : '';
  return `paused${by}${forHowLong(paused.since, now)}${why} (troupe resume ${taskId} lets it go on)`;
}

function forHowLong(since: string, now: number): string {
  const at = Date.parse(since);
  return Number.isNaN(at) ? '' : ` (for ${formatDuration(now - at)})`;
}

function personLine(request: PersonRequest): string {
  const how =
    request.kind === 'approval'
      ? `troupe approve ${request.id} / troupe deny ${request.id} "<reason>"`
      : `troupe answer ${request.id} "…"`;
  return `waiting for a person: ${request.kind} ${request.id} (${how})`;
}
