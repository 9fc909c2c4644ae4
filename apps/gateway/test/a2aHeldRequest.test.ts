import { StreamResponse, TaskState } from '@a2a-js/sdk';
import type { EventData, EventKind, TroupeEvent } from '@troupe/protocol';
import { EventFactory } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { ASKED_KEY, TaskFold } from '../src/a2a/taskMapping.ts';

const factory = new EventFactory({ now: () => Date.UTC(2026, 0, 1) });
const scope = { pipeline: 'demo', taskId: 't1', traceparent: '' };
let seq = 0;
const make = <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>): TroupeEvent =>
  ({ ...factory.make(kind, scope, data), id: `e${++seq}` }) as TroupeEvent;
const ref = { taskId: 't1', contextId: 's-1' };

/** The requests an update's INPUT_REQUIRED status lists, as they go on the wire. */
const askedIn = (updates: StreamResponse[]) => {
  const [update] = updates.map((u) => StreamResponse.toJSON(u) as unknown);
  const status = (update as { statusUpdate: { status: { state: string; message: { parts: unknown[] } } } })
    .statusUpdate.status;
  expect(status.state).toBe('TASK_STATE_INPUT_REQUIRED');
  const part = status.message.parts.find(
    (p) => (p as { metadata?: Record<string, unknown> }).metadata?.[ASKED_KEY] === true,
  ) as { data: { requests: Record<string, unknown>[] } };
  return part.data.requests;
};

describe('TaskFold: an approval held while its task is paused', () => {
  it('is listed held with no expiry while paused (its expiry as asked has passed by the resume), and not held once resumed', () => {
    const fold = new TaskFold(ref);
    fold.apply(make('task.accepted', { goal: 'deploy' }));
    fold.apply(
      make('approval.requested', {
        agent: 'coder',
        stepId: 't1.code.1',
        callId: 'c1',
        tool: 'run_command',
        arguments: '{"command":"deploy"}',
        reason: 'run_command is ask',
        approvalId: 'a1',
        expiresAt: '2026-01-01T00:05:00Z',
      }),
    );
    fold.apply(
      make('human.asked', { agent: 'coder', stepId: 't1.code.1', questionId: 'q1', question: 'Why?' }),
    );

    const paused = askedIn(fold.apply(make('task.paused', { state: 'code', round: 1, by: 'ann' })));
    expect(paused.map((r) => [r.requestId, r.held, r.expiresAt])).toEqual([
      ['a1', true, undefined],
      ['q1', true, undefined],
    ]);
    // Still waited on: an answer while paused is taken.
    expect(fold.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);

    // A redelivery (the coordinator restarted) of a task still paused lets nothing go.
    const redelivered = askedIn(
      fold.apply(make('task.resumed', { state: 'code', round: 1, deliveries: 2, after: 'redelivery' })),
    );
    expect(redelivered.map((r) => r.held)).toEqual([true, true]);

    const resumed = askedIn(
      fold.apply(
        make('task.resumed', { state: 'code', round: 1, deliveries: 2, after: 'pause', pausedMs: 600_000 }),
      ),
    );
    // The new expiry is its record's (GET /v1/approvals), set by its asker; the one asked with is not stated again.
    expect(resumed.map((r) => [r.requestId, r.held, r.expiresAt])).toEqual([
      ['a1', undefined, undefined],
      ['q1', undefined, undefined],
    ]);
  });

  it('keeps the expiry as asked while its task is not paused', () => {
    const fold = new TaskFold(ref);
    fold.apply(make('task.accepted', { goal: 'deploy' }));
    const asked = askedIn(
      fold.apply(
        make('approval.requested', {
          agent: 'coder',
          stepId: 't1.code.1',
          callId: 'c1',
          tool: 'run_command',
          arguments: '{}',
          reason: 'run_command is ask',
          approvalId: 'a1',
          expiresAt: '2026-01-01T00:05:00Z',
        }),
      ),
    );
    expect(asked[0]).toMatchObject({ requestId: 'a1', expiresAt: '2026-01-01T00:05:00Z' });
    expect(asked[0]).not.toHaveProperty('held');
  });
});
