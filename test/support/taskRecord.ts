import type { WorkflowRecord } from '@troupe/protocol';

/**
 * A task's record in KV `workflows` as a coordinator writes it for a task running at its first step, with `extra`
 * over it: what a test seeds the bucket with to steer a task no real coordinator runs.
 */
export function runningRecord(
  taskId: string,
  pipeline: string,
  extra: Partial<WorkflowRecord> = {},
): WorkflowRecord {
  const now = new Date().toISOString();
  return {
    taskId,
    pipeline,
    streamSequence: 1,
    status: 'running',
    state: 'plan',
    goal: 'g',
    round: 1,
    usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
    createdAt: now,
    updatedAt: now,
    ...extra,
  };
}
