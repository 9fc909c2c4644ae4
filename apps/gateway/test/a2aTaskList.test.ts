import { TaskState } from '@a2a-js/sdk';
import type { WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { pageOfTasks, pageSizeOf } from '../src/a2a/taskList.ts';

const usage = { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 };
const record = (taskId: string, updatedAt: string, extra: Partial<WorkflowRecord> = {}): WorkflowRecord => ({
  taskId,
  pipeline: 'demo',
  streamSequence: 1,
  status: 'completed',
  state: 'completed',
  goal: 'g',
  round: 1,
  usage,
  createdAt: '2026-01-01T00:00:00Z',
  updatedAt,
  ...extra,
});

const records = [
  record('a', '2026-01-01T00:00:01Z', { metadata: { session: 's1' } }),
  record('b', '2026-01-01T00:00:03Z', { metadata: { session: 's1' } }),
  record('c', '2026-01-01T00:00:02Z', { pipeline: 'other' }),
  record('d', '2026-01-01T00:00:03Z', {
    status: 'running',
    activity: { kind: 'person', step: 'work', agent: 'x', request: { kind: 'approval', id: 'r' }, since: '' },
  }),
  record('e', '2026-01-01T00:00:04Z', { status: 'running' }),
];
const everyPipeline = { visible: () => true, pageSize: 50 };

describe('pageOfTasks: ListTasks over the task records', () => {
  it('orders by the last change, newest first, then by id, and pages with a token', () => {
    const first = pageOfTasks(records, { ...everyPipeline, pageSize: 2 });
    expect(first.page.map((r) => r.taskId)).toEqual(['e', 'b']);
    expect(first.totalSize).toBe(5);
    const second = pageOfTasks(records, { ...everyPipeline, pageSize: 2, pageToken: first.nextPageToken });
    expect(second.page.map((r) => r.taskId)).toEqual(['d', 'c']);
    const last = pageOfTasks(records, { ...everyPipeline, pageSize: 2, pageToken: second.nextPageToken });
    expect(last.page.map((r) => r.taskId)).toEqual(['a']);
    expect(last.nextPageToken).toBe('');
  });

  it('filters by what the caller may see, context, state and time', () => {
    const ids = (query: Partial<Parameters<typeof pageOfTasks>[1]>) =>
      pageOfTasks(records, { ...everyPipeline, ...query }).page.map((r) => r.taskId);
    expect(ids({ visible: (p) => p === 'other' })).toEqual(['c']);
    expect(ids({ contextId: 's1' })).toEqual(['b', 'a']);
    // A task with no session is its own context.
    expect(ids({ contextId: 'c' })).toEqual(['c']);
    expect(ids({ state: TaskState.TASK_STATE_INPUT_REQUIRED })).toEqual(['d']);
    expect(ids({ state: TaskState.TASK_STATE_WORKING })).toEqual(['e']);
    expect(ids({ state: TaskState.TASK_STATE_SUBMITTED })).toEqual(['e']);
    expect(ids({ after: '2026-01-01T00:00:02Z' })).toEqual(['e', 'b', 'd']);
  });

  it('refuses a page token it did not give, and a page size outside 1 to 100', () => {
    expect(() => pageOfTasks(records, { ...everyPipeline, pageToken: 'garbage' })).toThrow(/pageToken/);
    expect(pageSizeOf(undefined)).toBe(50);
    expect(pageSizeOf(100)).toBe(100);
    expect(() => pageSizeOf(101)).toThrow(/pageSize: 101/);
    expect(() => pageSizeOf(-1)).toThrow(/pageSize/);
  });
});
