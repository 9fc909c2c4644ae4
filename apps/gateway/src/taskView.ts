import type { QueuedTask, TaskListStatus, TaskView, TroupeEvent, WorkflowRecord } from '@troupe/protocol';

// A task as the gateway shows it (GET /v1/tasks/:id, lists, sessions, the WebSocket): from its record, or from its
// queued mark before a coordinator claims it.

/** A task's view, from its record: the result once it has ended. */
export function viewOf(record: WorkflowRecord): TaskView {
  return {
    taskId: record.taskId,
    pipeline: record.pipeline,
    goal: record.goal,
    ...(record.metadata ? { metadata: record.metadata } : {}),
    status: record.status,
    state: record.state,
    ...(record.version === undefined ? {} : { version: record.version }),
    round: record.round,
    usage: record.usage,
    createdAt: record.createdAt,
    updatedAt: record.updatedAt,
    ...(record.activity && record.status === 'running' ? { activity: record.activity } : {}),
    ...(record.paused && record.status === 'running' ? { paused: record.paused } : {}),
    ...(record.origin ? { origin: record.origin } : {}),
    ...(record.final ? resultOf(record.final) : {}),
    links: linksOf(record.taskId),
  };
}

/**
 * Whether a task's view is listed under `status`: its own status, or `paused` for a running task a person holds (a
 * paused task is still `running`, and listed under it too, as `troupe runs --state` does).
 */
export function hasStatus(view: Pick<TaskView, 'status' | 'paused'>, status: TaskListStatus): boolean {
  if (status === 'paused') return view.status === 'running' && view.paused !== undefined;
  return view.status === status;
}

/** A task queued in `TASKS` that no coordinator has claimed yet, from its mark. */
export function queuedViewOf(mark: QueuedTask): TaskView {
  return {
    taskId: mark.taskId,
    pipeline: mark.pipeline,
    goal: mark.goal,
    ...(mark.metadata ? { metadata: mark.metadata } : {}),
    status: 'submitted',
    createdAt: mark.submittedAt,
    updatedAt: mark.cancel?.at ?? mark.submittedAt,
    links: linksOf(mark.taskId),
  };
}

/** Whether a task found is still queued: a mark, which has no status of its own. */
export const isQueued = (found: WorkflowRecord | QueuedTask): found is QueuedTask => !('status' in found);

function resultOf(final: TroupeEvent): Pick<TaskView, 'output' | 'outputRef' | 'failure'> {
  if (final.kind === 'task.completed') {
    const { output, outputRef } = final.data;
    return { output, ...(outputRef ? { outputRef } : {}) };
  }
  if (final.kind === 'task.failed')
    return { failure: { reason: final.data.reason, message: final.data.message } };
  return {};
}

export const linksOf = (taskId: string) => ({
  self: `/v1/tasks/${taskId}`,
  events: `/v1/tasks/${taskId}/events`,
});
