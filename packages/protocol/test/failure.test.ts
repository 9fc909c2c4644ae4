import { describe, expect, it } from 'vitest';
import {
  AgentStepReply,
  emptyUsage,
  isRetryable,
  isStepErrorCode,
  StepErrorCode,
  TaskFailureReason,
  TroupeEvent,
  taskFailureReason,
} from '../src/index.ts';

/**
 * What each code means for the workflow: whether the step is sent again, and the task's failure reason when the
 * code comes in a reply and when the request for the step fails with it. The `Record` type makes a new code fail
 * to compile here until its row is written.
 */
const EXPECTED: Record<StepErrorCode, { retry: boolean; reply: TaskFailureReason; call: TaskFailureReason }> =
  {
    failed: { retry: false, reply: 'step_failed', call: 'transport' },
    max_steps: { retry: false, reply: 'step_failed', call: 'transport' },
    empty_reply: { retry: false, reply: 'step_failed', call: 'transport' },
    invalid_output: { retry: false, reply: 'invalid_output', call: 'transport' },
    compaction_failed: { retry: false, reply: 'step_failed', call: 'transport' },
    tool_runner_failed: { retry: false, reply: 'step_failed', call: 'transport' },
    journal_unavailable: { retry: true, reply: 'step_failed', call: 'transport' },
    budget_exceeded: { retry: false, reply: 'budget_exceeded', call: 'transport' },
    step_timeout: { retry: false, reply: 'step_timeout', call: 'step_timeout' },
    approval_timeout: { retry: false, reply: 'approval_timeout', call: 'approval_timeout' },
    aborted: { retry: false, reply: 'step_failed', call: 'transport' },
    agent_crashed: { retry: false, reply: 'step_failed', call: 'transport' },
    misrouted: { retry: false, reply: 'step_failed', call: 'transport' },
    unknown_tool: { retry: false, reply: 'step_failed', call: 'transport' },
    worker_stopped: { retry: true, reply: 'step_failed', call: 'transport' },
    paused: { retry: true, reply: 'step_failed', call: 'transport' },
    rate_limited: { retry: false, reply: 'step_failed', call: 'transport' },
    server_error: { retry: false, reply: 'step_failed', call: 'transport' },
    // A model request that timed out fails the step; the request for the step timing out is the step's timeout.
    timeout: { retry: false, reply: 'step_failed', call: 'step_timeout' },
    connection: { retry: false, reply: 'step_failed', call: 'transport' },
    bad_request: { retry: false, reply: 'step_failed', call: 'transport' },
    auth: { retry: false, reply: 'step_failed', call: 'transport' },
    not_found: { retry: false, reply: 'step_failed', call: 'transport' },
    invalid_response: { retry: false, reply: 'step_failed', call: 'transport' },
    config: { retry: false, reply: 'step_failed', call: 'transport' },
    script_exhausted: { retry: false, reply: 'step_failed', call: 'transport' },
    scripted_failure: { retry: false, reply: 'step_failed', call: 'transport' },
    model_failed: { retry: false, reply: 'step_failed', call: 'transport' },
    version_unavailable: { retry: false, reply: 'step_failed', call: 'transport' },
    workspace_too_large: { retry: false, reply: 'step_failed', call: 'transport' },
    no_responders: { retry: true, reply: 'step_failed', call: 'no_worker' },
    stalled: { retry: true, reply: 'step_failed', call: 'transport' },
  };

const codes = StepErrorCode.options;

describe('StepErrorCode', () => {
  it('has a row above for every code, and no row for a code it lacks', () => {
    expect([...codes].sort()).toEqual(Object.keys(EXPECTED).sort());
  });

  it('knows its codes and nothing else', () => {
    expect(isStepErrorCode('worker_stopped')).toBe(true);
    expect(isStepErrorCode('quota_exhausted')).toBe(false);
    expect(isStepErrorCode(undefined)).toBe(false);
    expect(isStepErrorCode(42)).toBe(false);
  });
});

describe('isRetryable', () => {
  it.each(codes)('%s', (code) => {
    expect(isRetryable(code)).toBe(EXPECTED[code].retry);
  });

  it('sends a step again only when the journal was lost, the worker stopped or went silent, the task was paused, or nobody serves it', () => {
    expect(codes.filter(isRetryable).sort()).toEqual([
      'journal_unavailable',
      'no_responders',
      'paused',
      'stalled',
      'worker_stopped',
    ]);
  });
});

describe('taskFailureReason', () => {
  it.each(codes)('of a reply with %s', (code) => {
    expect(taskFailureReason(code, 'reply')).toBe(EXPECTED[code].reply);
  });

  it.each(codes)('of a step call that failed with %s', (code) => {
    expect(taskFailureReason(code, 'call')).toBe(EXPECTED[code].call);
  });

  it('reads a code as a reply when not told where it came from', () => {
    expect(taskFailureReason('no_responders')).toBe('step_failed');
    expect(taskFailureReason('budget_exceeded')).toBe('budget_exceeded');
  });

  it('names a step call that failed with no code it knows a transport failure', () => {
    expect(taskFailureReason(undefined, 'call')).toBe('transport');
  });

  it('gives only reasons a task can fail with', () => {
    for (const code of codes) {
      expect(TaskFailureReason.safeParse(taskFailureReason(code, 'reply')).success).toBe(true);
      expect(TaskFailureReason.safeParse(taskFailureReason(code, 'call')).success).toBe(true);
    }
  });
});

describe('TaskFailureReason', () => {
  it('holds the reasons of the workflow and of the pipeline runner, and no other', () => {
    expect([...TaskFailureReason.options].sort()).toEqual([
      'approval_timeout',
      'budget_exceeded',
      'checkpoint_failed',
      'condition_failed',
      'internal',
      'invalid_output',
      'max_deliveries',
      'max_rounds',
      'no_worker',
      'refused',
      'step_failed',
      'step_timeout',
      'transport',
      'unresumable',
    ]);
  });
});

const usage = { ...emptyUsage(), inputTokens: 12, modelCalls: 1 };
const failedReply = (code: string) => ({
  ok: false,
  stepId: 'task-1.plan.1',
  error: { code, message: 'the quota for this month is spent' },
  usage,
  turns: 1,
});

describe('a step reply whose code this version does not know', () => {
  it('is read as failed, keeping its message and naming the code, with the rest of the reply', () => {
    const reply = AgentStepReply.parse(failedReply('quota_exhausted'));
    expect(reply).toEqual({
      ok: false,
      stepId: 'task-1.plan.1',
      error: {
        code: 'failed',
        message: 'the quota for this month is spent (error code quota_exhausted, unknown to this version)',
      },
      usage,
      turns: 1,
    });
  });

  it('fails its task step_failed and is not sent again', () => {
    const reply = AgentStepReply.parse(failedReply('worker_draining'));
    if (reply.ok) throw new Error('expected a failed reply');
    expect(isRetryable(reply.error.code)).toBe(false);
    expect(taskFailureReason(reply.error.code)).toBe('step_failed');
  });

  it('leaves a known code and its message as they are', () => {
    expect(AgentStepReply.parse(failedReply('worker_stopped'))).toEqual(failedReply('worker_stopped'));
  });

  it('still refuses an error whose code is not text', () => {
    const reply = { ...failedReply('x'), error: { code: 7, message: 'm' } };
    expect(AgentStepReply.safeParse(reply).success).toBe(false);
  });
});

const envelope = {
  id: 'ev-1',
  ts: '2025-01-01T00:00:00.000Z',
  pipeline: 'demo',
  taskId: 'task-1',
  traceparent: '00-0123456789abcdef0123456789abcdef-0123456789abcdef-01',
};

describe('events', () => {
  it('read an unknown code in step.completed as failed, as a reply is', () => {
    const event = TroupeEvent.parse({
      ...envelope,
      kind: 'step.completed',
      data: {
        step: 'plan',
        agent: 'planner',
        round: 1,
        stepId: 'task-1.plan.1',
        ok: false,
        output: '',
        error: { code: 'quota_exhausted', message: 'spent' },
        usage,
        turns: 1,
        durationMs: 5,
      },
    });
    expect(event.kind === 'step.completed' && event.data.error).toEqual({
      code: 'failed',
      message: 'spent (error code quota_exhausted, unknown to this version)',
    });
  });

  it('take task.failed only with a reason a task can fail with', () => {
    const failed = (reason: string) => ({
      ...envelope,
      kind: 'task.failed',
      data: { reason, message: 'm', usage, durationMs: 5 },
    });
    expect(TroupeEvent.safeParse(failed('no_worker')).success).toBe(true);
    expect(TroupeEvent.safeParse(failed('failed')).success).toBe(false);
  });
});
