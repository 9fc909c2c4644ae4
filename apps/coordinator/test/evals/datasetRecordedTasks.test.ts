import type { WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { tasksToRecord } from '../../src/evals/recordedCases.ts';

const ZERO = { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 };

function record(
  taskId: string,
  pipeline: string,
  status: WorkflowRecord['status'],
  day: number,
): WorkflowRecord {
  const at = `2026-12-0${day}T10:00:00.000Z`;
  return {
    taskId,
    pipeline,
    streamSequence: day,
    status,
    state: status,
    goal: taskId,
    round: 1,
    usage: ZERO,
    createdAt: at,
    updatedAt: at,
  } as WorkflowRecord;
}

const records = [
  record('a1', 'notes', 'completed', 1),
  record('a2', 'notes', 'failed', 2),
  record('a3', 'notes', 'completed', 3),
  record('a4', 'notes', 'running', 4),
  record('b1', 'other', 'completed', 5),
  record('a5', 'notes', 'cancelled', 6),
];
const ids = (chosen: ReturnType<typeof tasksToRecord>) => chosen.map((c) => c.taskId);

describe('the tasks a dataset is made from', () => {
  it("takes the pipeline's ended tasks, newest first, never one still running", () => {
    expect(ids(tasksToRecord(records, { pipeline: 'notes' }))).toEqual(['a5', 'a3', 'a2', 'a1']);
  });

  it('takes only those of a status, created since a time, up to a limit', () => {
    expect(ids(tasksToRecord(records, { pipeline: 'notes', status: 'completed' }))).toEqual(['a3', 'a1']);
    expect(
      ids(tasksToRecord(records, { pipeline: 'notes', since: new Date('2026-12-02T10:00:00Z') })),
    ).toEqual(['a5', 'a3', 'a2']);
    expect(ids(tasksToRecord(records, { pipeline: 'notes', limit: 2 }))).toEqual(['a5', 'a3']);
  });

  it('takes the tasks named in their order, once each, and says why it skips one', () => {
    expect(
      tasksToRecord(records, { pipeline: 'notes', taskIds: ['a2', 'a4', 'b1', 'gone', 'a2', 'a1'] }).map(
        (c) =>
          'why' in c ? c : { taskId: c.taskId, pipeline: c.pipeline, recorded: c.record !== undefined },
      ),
    ).toEqual([
      { taskId: 'a2', pipeline: 'notes', recorded: true },
      { taskId: 'a4', why: 'it is still running' },
      { taskId: 'b1', why: 'it ran on pipeline other, not notes' },
      // KV `workflows` may have forgotten a task whose events are still kept: it is read under the pipeline given.
      { taskId: 'gone', pipeline: 'notes', recorded: false },
      { taskId: 'a1', pipeline: 'notes', recorded: true },
    ]);
    // Without a pipeline, each task's own; one nobody knows cannot be found.
    expect(tasksToRecord(records, { taskIds: ['b1', 'gone'] })).toEqual([
      { taskId: 'b1', pipeline: 'other', record: records[4] },
      { taskId: 'gone', why: 'no task of this id is known on this server' },
    ]);
  });
});
