import { TaskListQuery, type TaskView } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { hasStatus } from '../src/taskView.ts';

const view = (
  status: TaskView['status'],
  paused?: TaskView['paused'],
): Pick<TaskView, 'status' | 'paused'> => ({
  status,
  ...(paused ? { paused } : {}),
});

describe("the task list's status filter", () => {
  const held = view('running', { since: '2026-01-01T00:00:00.000Z', by: 'ana' });

  it('lists under paused only the running tasks a person holds', () => {
    expect(hasStatus(held, 'paused')).toBe(true);
    expect(hasStatus(view('running'), 'paused')).toBe(false);
    // An ended task's record may keep the pause it ended under; it is not held any more.
    expect(hasStatus(view('cancelled', { since: '2026-01-01T00:00:00.000Z' }), 'paused')).toBe(false);
  });

  it('lists a paused task under running too, since it has not ended, as troupe runs --state running does', () => {
    expect(hasStatus(held, 'running')).toBe(true);
    expect(hasStatus(view('running'), 'running')).toBe(true);
    expect(hasStatus(view('submitted'), 'running')).toBe(false);
  });

  it('takes paused as a status of ?status=, and refuses one it does not know, naming those it does', () => {
    expect(TaskListQuery.parse({ status: 'paused' })).toMatchObject({ status: 'paused' });
    const refused = TaskListQuery.safeParse({ status: 'held' });
    expect(refused.success).toBe(false);
    expect(JSON.stringify(refused.error?.issues)).toContain('paused');
  });
});
