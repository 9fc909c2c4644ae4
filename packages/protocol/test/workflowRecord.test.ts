import { describe, expect, it } from 'vitest';
import { emptyUsage } from '../src/usage.ts';
import { WorkflowRecord } from '../src/workflowRecord.ts';

const record = {
  taskId: 'task-1',
  pipeline: 'demo',
  streamSequence: 7,
  status: 'running',
  state: 'plan',
  goal: 'g',
  round: 1,
  usage: emptyUsage(),
  createdAt: '2026-01-01T00:00:00.000Z',
  updatedAt: '2026-01-01T00:00:00.000Z',
};

describe('WorkflowRecord', () => {
  it('reads the lease of a record written before it was named so (as `runner`)', () => {
    const parsed = WorkflowRecord.parse({ ...record, runner: 'token-1' });
    expect(parsed.lease).toBe('token-1');
    expect(parsed).not.toHaveProperty('runner');
  });

  it('keeps the lease of a record that has one', () => {
    expect(WorkflowRecord.parse({ ...record, lease: 'token-2' }).lease).toBe('token-2');
  });
});
