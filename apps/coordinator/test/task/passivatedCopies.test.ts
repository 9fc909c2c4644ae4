import { WorkflowRecord } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { PassivatedCopies } from '../../src/task/passivatedCopies.ts';

/** What a task waiting in its step keeps, as a passivated task's tree and writer hold it. */
const kept = (taskId: string) => ({
  snapshot: {
    status: 'active',
    value: 'think',
    context: { task: { taskId, goal: `the goal of ${taskId}` }, round: 1 },
    children: { '0.think': { snapshot: { value: { calling: 'sent' } }, src: 'runStep' } },
  },
  record: WorkflowRecord.parse({
    taskId,
    pipeline: 'parked',
    streamSequence: 1,
    status: 'running',
    state: 'think',
    goal: `the goal of ${taskId}`,
    round: 1,
    usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
    createdAt: '2026-01-01T00:00:00.000Z',
    updatedAt: '2026-01-01T00:00:00.000Z',
    lease: 'lease-1',
    progress: 0,
  }),
  unwritten: true,
});

describe("passivated tasks' compact copies", () => {
  it('gives back what each task kept, the first copy and those made with its shape alike', () => {
    const copies = new PassivatedCopies();
    const first = copies.pack(kept('task-1'));
    const second = copies.pack(kept('task-2'));
    expect(copies.unpack(second)).toEqual(kept('task-2'));
    expect(copies.unpack(first)).toEqual(kept('task-1'));
    // Much smaller than the JSON it holds: what the copies say alike costs next to nothing.
    expect(second.length).toBeLessThan(JSON.stringify(kept('task-2')).length / 2);
  });

  it('refuses a corrupt copy, or one that holds no workflow snapshot, rather than restore a task from it', () => {
    const copies = new PassivatedCopies();
    copies.pack(kept('task-1'));
    const packed = copies.pack(kept('task-2'));
    const at = Math.floor(packed.length / 2);
    const flipped = String.fromCharCode(packed.charCodeAt(at) ^ 0x20);
    expect(() => copies.unpack(`${packed.slice(0, at)}${flipped}${packed.slice(at + 1)}`)).toThrow();
    expect(() => copies.unpack(packed.slice(0, -4))).toThrow();
    const noSnapshot = copies.pack({ ...kept('task-3'), snapshot: undefined });
    expect(() => copies.unpack(noSnapshot)).toThrow('the copy holds no workflow snapshot');
    // Read by another runner's copies (another dictionary): refused too.
    expect(() => new PassivatedCopies().unpack(packed)).toThrow();
  });
});
