import { StreamResponse, Task, TaskState } from '@a2a-js/sdk';
import type { EventData, EventKind, TroupeEvent } from '@troupe/protocol';
import { EventFactory } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { ASKED_KEY, streamResponseOf, TaskFold } from '../src/a2a/taskMapping.ts';

const factory = new EventFactory({ now: () => Date.UTC(2026, 0, 1) });
const scope = { pipeline: 'demo', taskId: 't1', traceparent: '' };
let seq = 0;
const make = <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>): TroupeEvent =>
  ({ ...factory.make(kind, scope, data), id: `e${++seq}` }) as TroupeEvent;
const ref = { taskId: 't1', contextId: 's-1' };
const usage = { inputTokens: 1, outputTokens: 1, cachedTokens: 0, costUsd: 0, modelCalls: 1 };
const step = { step: 'code', agent: 'coder', round: 1, stepId: 't1.code.1' };

/** Each update as it goes on the wire: the SDK's own JSON form, so a mapping the SDK would not send fails here. */
const wire = (updates: StreamResponse[]) =>
  updates.map((u) => StreamResponse.toJSON(u) as Record<string, never>);
const stateOf = (update: StreamResponse) =>
  update.payload?.$case === 'statusUpdate' ? update.payload.value.status?.state : undefined;

describe('TaskFold: a Troupe task as an A2A task', () => {
  it('goes SUBMITTED, WORKING with the agent named, then COMPLETED with the output as an artifact', () => {
    const fold = new TaskFold(ref);
    const accepted = fold.apply(make('task.accepted', { goal: 'write a haiku', input: { topic: 'sea' } }));
    expect(accepted.map(stateOf)).toEqual([TaskState.TASK_STATE_SUBMITTED]);
    const started = fold.apply(make('step.started', step));
    expect(wire(started)[0]).toMatchObject({
      statusUpdate: {
        taskId: 't1',
        contextId: 's-1',
        status: {
          state: 'TASK_STATE_WORKING',
          message: { role: 'ROLE_AGENT', parts: [{ text: 'agent coder is working on step code' }] },
        },
      },
    });
    expect(
      fold.apply(make('llm.delta', { agent: 'coder', stepId: 't1.code.1', turn: 1, seq: 0, text: 'x' })),
    ).toEqual([]);
    const done = fold.apply(
      make('task.completed', {
        output: '{"haiku":"waves"}',
        rounds: 1,
        usage,
        usageByAgent: {},
        durationMs: 5,
      }),
    );
    expect(done.map((u) => u.payload?.$case)).toEqual(['artifactUpdate', 'statusUpdate']);
    const task = Task.toJSON(fold.task()) as Record<string, never>;
    expect(task).toMatchObject({
      id: 't1',
      status: { state: 'TASK_STATE_COMPLETED' },
      artifacts: [{ name: 'output', parts: [{ text: '{"haiku":"waves"}' }, { data: { haiku: 'waves' } }] }],
      history: [{ role: 'ROLE_USER', parts: [{ text: 'write a haiku' }, { data: { topic: 'sea' } }] }],
    });
    // Nothing reopens an ended task.
    expect(fold.apply(make('step.started', step))).toEqual([]);
  });

  it('names the join a hand-off after a parallel or foreach step comes from, not an agent', () => {
    const fold = new TaskFold(ref);
    fold.apply(make('task.accepted', { goal: 'build it' }));
    const handed = fold.apply({
      ...make('agent.handoff', { step: 'wrap', round: 1, reason: 'next', join: 'each' }),
      from: 'each',
      to: 'wrapper',
    } as TroupeEvent);
    expect(wire(handed)[0]).toMatchObject({
      statusUpdate: {
        status: {
          message: { parts: [{ text: 'the join of step each hands step wrap over to agent wrapper' }] },
        },
      },
    });
  });

  it('stays INPUT_REQUIRED while any request is pending, with what is asked and the answer’s schema', () => {
    const fold = new TaskFold(ref);
    fold.apply(make('task.accepted', { goal: 'deploy' }));
    const approval = {
      agent: 'coder',
      stepId: 't1.code.1',
      callId: 'c1',
      tool: 'run_command',
      arguments: '{"command":"deploy"}',
      reason: 'run_command is ask',
      expiresAt: '2026-01-01T00:05:00Z',
    };
    fold.apply(make('approval.requested', { ...approval, approvalId: 'a1' }));
    fold.apply(
      make('human.asked', { agent: 'coder', stepId: 't1.code.1', questionId: 'q1', question: 'Why?' }),
    );
    const after = fold.apply(
      make('approval.decided', { agent: 'coder', stepId: 't1.code.1', approvalId: 'a1', decision: 'allow' }),
    );
    expect(after.map(stateOf)).toEqual([TaskState.TASK_STATE_INPUT_REQUIRED]);
    const status = wire(after)[0] as unknown as {
      statusUpdate: { status: { message: { parts: unknown[] } } };
    };
    expect(status.statusUpdate.status.message.parts[1]).toMatchObject({
      data: {
        requests: [{ kind: 'question', requestId: 'q1', prompt: 'Why?', answerSchema: { type: 'string' } }],
      },
      metadata: { [ASKED_KEY]: true },
    });
    const answered = fold.apply(
      make('human.answered', { agent: 'coder', stepId: 't1.code.1', questionId: 'q1', answer: 'because' }),
    );
    expect(answered.map(stateOf)).toEqual([TaskState.TASK_STATE_WORKING]);
    expect(fold.pending).toEqual([]);
  });

  it('maps a failure to FAILED with its reason, a cancel to CANCELED, and one event alone without the task', () => {
    const failed = streamResponseOf(
      make('task.failed', { reason: 'step_timeout', message: 'coder took too long', usage, durationMs: 1 }),
      ref,
    );
    expect(wire(failed)[0]).toMatchObject({
      statusUpdate: {
        status: {
          state: 'TASK_STATE_FAILED',
          message: {
            parts: [
              { text: 'failed (step_timeout): coder took too long' },
              { data: { reason: 'step_timeout' } },
            ],
          },
        },
      },
    });
    expect(streamResponseOf(make('task.cancelled', { usage }), ref).map(stateOf)).toEqual([
      TaskState.TASK_STATE_CANCELED,
    ]);
    const fold = new TaskFold(ref);
    expect(streamResponseOf(fold.task())[0]?.payload?.$case).toBe('task');
  });
});
