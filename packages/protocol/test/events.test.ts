import { describe, expect, it } from 'vitest';
import {
  EVENT_KINDS,
  emptyUsage,
  FINAL_EVENT_KINDS,
  InvalidMessageEvent,
  TroupeEvent,
} from '../src/index.ts';

const envelope = {
  id: 'ev-1',
  ts: '2025-01-01T00:00:00.000Z',
  pipeline: 'demo',
  taskId: 'task-1',
  traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01',
};

const completedData = {
  output: 'hello.md written',
  rounds: 1,
  usage: { ...emptyUsage(), inputTokens: 10, modelCalls: 2 },
  usageByAgent: { coder: { ...emptyUsage(), inputTokens: 10, modelCalls: 2 } },
  durationMs: 1200,
};

describe('TroupeEvent', () => {
  it('accepts a valid task.completed event', () => {
    const event = { ...envelope, kind: 'task.completed', data: completedData };
    expect(TroupeEvent.parse(event)).toEqual(event);
  });

  it('refuses step.started carrying task.completed data', () => {
    const result = TroupeEvent.safeParse({ ...envelope, kind: 'step.started', data: completedData });
    expect(result.success).toBe(false);
    const paths = result.error?.issues.map((issue) => issue.path.join('.'));
    expect(paths).toEqual(expect.arrayContaining(['data.step', 'data.agent', 'data.round', 'data.stepId']));
  });

  it('accepts step.started with its own data', () => {
    const event = {
      ...envelope,
      kind: 'step.started',
      data: { step: 'plan', agent: 'planner', round: 1, stepId: 'task-1.plan.1' },
    };
    expect(TroupeEvent.parse(event)).toEqual(event);
  });

  it('refuses an unknown kind', () => {
    expect(TroupeEvent.safeParse({ ...envelope, kind: 'task.exploded', data: {} }).success).toBe(false);
  });

  it('refuses an envelope with a bad pipeline name or task id', () => {
    const event = { ...envelope, kind: 'task.completed', data: completedData };
    expect(TroupeEvent.safeParse({ ...event, pipeline: 'Demo' }).success).toBe(false);
    expect(TroupeEvent.safeParse({ ...event, taskId: 'a.b' }).success).toBe(false);
    expect(TroupeEvent.safeParse({ ...event, id: '' }).success).toBe(false);
  });

  it('refuses negative usage in task.completed', () => {
    const data = { ...completedData, usage: { ...completedData.usage, inputTokens: -1 } };
    expect(TroupeEvent.safeParse({ ...envelope, kind: 'task.completed', data }).success).toBe(false);
  });

  it('accepts tool.progress and refuses a negative seq or a message over 1000 characters', () => {
    const data = { agent: 'executor', stepId: 'task-1.execute.1', callId: 'c1', tool: 'files.copy', seq: 0 };
    const event = {
      ...envelope,
      kind: 'tool.progress',
      data: { ...data, progress: 40, total: 100, message: 'b.txt' },
    };
    expect(TroupeEvent.parse(event)).toEqual(event);
    const accepts = (changes: Record<string, unknown>) =>
      TroupeEvent.safeParse({ ...event, data: { ...event.data, ...changes } }).success;
    expect(accepts({ seq: -1 })).toBe(false);
    expect(accepts({ message: 'x'.repeat(1001) })).toBe(false);
    expect(accepts({ progress: 'half' })).toBe(false);
  });

  it('knows every kind and which ones end a task', () => {
    // The union has one member per kind of EventData, so no kind can be published without a schema.
    const unionKinds = TroupeEvent.options.map((option) => option.shape.kind.value);
    expect([...unionKinds].sort()).toEqual([...EVENT_KINDS].sort());
    expect(EVENT_KINDS).toEqual(expect.arrayContaining(['task.accepted', 'llm.request', 'tool.result']));
    expect([...FINAL_EVENT_KINDS].sort()).toEqual(['task.cancelled', 'task.completed', 'task.failed']);
    for (const kind of FINAL_EVENT_KINDS) expect(EVENT_KINDS).toContain(kind);
  });
});

describe('InvalidMessageEvent', () => {
  it('accepts a report of a refused message', () => {
    const report = {
      id: 'ev-9',
      ts: envelope.ts,
      kind: 'message.invalid',
      subject: 'troupe.tasks.demo',
      reporter: 'coordinator',
      reason: 'payload failed validation: goal: must not be empty',
      issues: [{ path: 'goal', message: 'must not be empty' }],
      payload: '{"goal":""}',
    };
    expect(InvalidMessageEvent.parse(report)).toEqual(report);
    expect(InvalidMessageEvent.safeParse({ ...report, kind: 'task.failed' }).success).toBe(false);
  });
});
