import { openWorkflowStore, readValues, type WorkflowStore, workflowStoreIfAny } from '@troupe/client';
import type { WorkflowRecord } from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime';
import { explain } from './server.ts';

export { readValues, type WorkflowStore };

/** KV `workflows`; a server no coordinator has used has none, which is said plainly. */
export function openWorkflows(bus: JetStreamBus): Promise<WorkflowStore> {
  return openWorkflowStore(bus).catch(explain);
}

/** KV `workflows`, or undefined when no coordinator has run on the server. */
export function workflowsIfAny(bus: JetStreamBus): Promise<WorkflowStore | undefined> {
  return workflowStoreIfAny(bus).catch(explain);
}

/** A task's record in KV `workflows`; undefined when it has none, or no coordinator has run on the server. */
export async function workflowRecord(bus: JetStreamBus, taskId: string): Promise<WorkflowRecord | undefined> {
  return (await (await workflowsIfAny(bus))?.get(taskId))?.value;
}

/**
 * A task's state as a person reads it: its record's status, or `paused` for a running task a person holds (its record
 * says `running` still: it has not ended, and resumes where it was held).
 */
export const shownStatus = (record: WorkflowRecord): string =>
  record.status === 'running' && record.paused ? 'paused' : record.status;

/** How long a task ran: to its final event (or last update) once it has ended, else so far. */
export function taskDuration(record: WorkflowRecord, now: number): { ms: number; finished: boolean } {
  const start = Date.parse(record.createdAt);
  if (record.status === 'running') return { ms: Math.max(0, now - start), finished: false };
  // Records written before `final` was kept end at their last update.
  const end = Date.parse(record.final?.ts ?? '') || Date.parse(record.updatedAt);
  return { ms: Math.max(0, end - start), finished: true };
}
