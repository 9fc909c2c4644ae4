import { describe, expect, it } from 'vitest';
import {
  AgentStepReply,
  AgentStepRequest,
  ApprovalDecision,
  ControlMessage,
  emptyUsage,
  StepExpect,
  StepHeartbeat,
  sumUsage,
  UsageTotals,
  Verdict,
} from '../src/index.ts';

const usage = { inputTokens: 120, outputTokens: 30, cachedTokens: 0, costUsd: 0.002, modelCalls: 2 };

describe('AgentStepReply', () => {
  it('accepts a successful reply, with or without a verdict', () => {
    const reply = { ok: true, stepId: 'task-1.plan.1', output: 'Plan: write hello.md', usage, turns: 2 };
    expect(AgentStepReply.parse(reply)).toEqual(reply);
    const reviewed = { ...reply, verdict: { decision: 'approve', feedback: 'fine' } };
    expect(AgentStepReply.parse(reviewed)).toEqual(reviewed);
  });

  it('accepts a failed reply with its error', () => {
    const reply = {
      ok: false,
      stepId: 'task-1.plan.1',
      error: { code: 'max_steps', message: 'out of turns' },
      usage,
      turns: 5,
    };
    expect(AgentStepReply.parse(reply)).toEqual(reply);
  });

  it('refuses a successful reply without output and a failed one without an error', () => {
    expect(AgentStepReply.safeParse({ ok: true, stepId: 's', usage, turns: 1 }).success).toBe(false);
    expect(AgentStepReply.safeParse({ ok: false, stepId: 's', usage, turns: 1 }).success).toBe(false);
  });

  it('refuses a reply whose ok is not a boolean literal', () => {
    expect(AgentStepReply.safeParse({ ok: 'true', stepId: 's', output: 'x', usage, turns: 1 }).success).toBe(
      false,
    );
  });

  it('drops an error given to a successful reply, since each branch has its own fields', () => {
    const parsed = AgentStepReply.parse({
      ok: true,
      stepId: 's',
      output: 'x',
      error: { code: 'c', message: 'm' },
      usage,
      turns: 1,
    });
    expect(parsed).not.toHaveProperty('error');
  });
});

describe('Verdict', () => {
  it('defaults feedback to an empty string', () => {
    expect(Verdict.parse({ decision: 'approve' })).toEqual({ decision: 'approve', feedback: '' });
  });

  it('keeps feedback that is given', () => {
    expect(Verdict.parse({ decision: 'reject', feedback: 'add tests' })).toEqual({
      decision: 'reject',
      feedback: 'add tests',
    });
  });

  it.each([
    ['an unknown decision', { decision: 'maybe' }],
    ['a capitalised decision', { decision: 'Approve' }],
    ['no decision', { feedback: 'ok' }],
    ['an unknown key', { decision: 'approve', score: 5 }],
    ['feedback that is not text', { decision: 'reject', feedback: null }],
  ])('refuses %s', (_label, value) => {
    expect(Verdict.safeParse(value).success).toBe(false);
  });
});

describe('AgentStepRequest', () => {
  const request = {
    stepId: 'task-1.review.2',
    taskId: 'task-1',
    pipeline: 'demo',
    agent: 'reviewer',
    step: 'review',
    round: 2,
    goal: 'write hello.md',
    context: [{ step: 'code', agent: 'coder', round: 2, output: 'done' }],
    feedback: 'add a title',
    expect: 'verdict',
  };

  it('accepts a well-formed step', () => {
    expect(AgentStepRequest.parse(request)).toEqual(request);
  });

  it.each([
    ['round 0', { round: 0 }],
    ['an unknown expectation', { expect: 'json' }],
    ['an upper-case agent', { agent: 'Reviewer' }],
    ['an empty step id', { stepId: '' }],
    ['a step id over 200 characters', { stepId: 's'.repeat(201) }],
    // A Node timer longer than 2^31 - 1 ms fires after 1 ms: the host would beat (or time out) without pause.
    ['a heartbeat past what a timer holds', { heartbeatMs: 2 ** 31 }],
    ['a heartbeat every millisecond', { heartbeatMs: 1 }],
    ['a timeout past what a timer holds', { timeoutMs: 2 ** 31 }],
  ])('refuses %s', (_label, change) => {
    expect(AgentStepRequest.safeParse({ ...request, ...change }).success).toBe(false);
  });

  it('knows the two expectations', () => {
    expect(StepExpect.options).toEqual(['text', 'verdict']);
  });
});

describe('UsageTotals', () => {
  it('sums field by field, starting from empty', () => {
    const other = { inputTokens: 1, outputTokens: 2, cachedTokens: 3, costUsd: 0.5, modelCalls: 1 };
    expect(sumUsage(emptyUsage(), usage)).toEqual(usage);
    expect(sumUsage(usage, other)).toEqual({
      inputTokens: 121,
      outputTokens: 32,
      cachedTokens: 3,
      costUsd: 0.502,
      modelCalls: 3,
    });
  });

  it('gives a fresh object each time', () => {
    const first = emptyUsage();
    first.modelCalls = 9;
    expect(emptyUsage().modelCalls).toBe(0);
  });

  it('refuses fractional token counts and negative cost', () => {
    expect(UsageTotals.safeParse({ ...usage, inputTokens: 1.5 }).success).toBe(false);
    expect(UsageTotals.safeParse({ ...usage, costUsd: -0.1 }).success).toBe(false);
  });
});

describe('control messages', () => {
  it('accepts a cancel, a pause, a resume, a tell and an approval decision, and refuses unknown keys', () => {
    expect(ControlMessage.parse({ action: 'cancel' })).toEqual({ action: 'cancel' });
    expect(ControlMessage.parse({ action: 'pause', by: 'ann' })).toEqual({ action: 'pause', by: 'ann' });
    expect(ControlMessage.parse({ action: 'resume' })).toEqual({ action: 'resume' });
    expect(ControlMessage.parse({ action: 'tell', text: ' use v2 ' })).toEqual({
      action: 'tell',
      text: 'use v2',
    });
    expect(ControlMessage.safeParse({ action: 'tell', text: '  ' }).success).toBe(false);
    // A tell's idempotency key: 1 to 100 characters.
    expect(ControlMessage.parse({ action: 'tell', text: 'x', key: 'k-1' })).toMatchObject({ key: 'k-1' });
    expect(ControlMessage.safeParse({ action: 'tell', text: 'x', key: '' }).success).toBe(false);
    expect(ControlMessage.safeParse({ action: 'tell', text: 'x', key: 'k'.repeat(101) }).success).toBe(false);
    expect(ControlMessage.safeParse({ action: 'tell' }).success).toBe(false);
    expect(ControlMessage.safeParse({ action: 'pause', until: 5 }).success).toBe(false);
    expect(ControlMessage.safeParse({ action: 'stop' }).success).toBe(false);
    expect(ControlMessage.parse({ action: 'migrate', to: 'abcd' })).toEqual({
      action: 'migrate',
      to: 'abcd',
    });
    expect(ControlMessage.parse({ action: 'migrate' })).toEqual({ action: 'migrate' });
    expect(ControlMessage.safeParse({ action: 'migrate', to: 'abc' }).success).toBe(false);
    expect(ControlMessage.safeParse({ action: 'migrate', to: 'not-hex!' }).success).toBe(false);
    expect(ApprovalDecision.parse({ decision: 'deny', by: 'ann' })).toEqual({ decision: 'deny', by: 'ann' });
    expect(ApprovalDecision.safeParse({ decision: 'allow', note: 'x' }).success).toBe(false);
  });
});

describe('StepHeartbeat', () => {
  it('takes a heartbeat with a field it does not know (from a newer host) as a heartbeat, dropping the field', () => {
    const parsed = StepHeartbeat.safeParse({
      stepId: 's1',
      heartbeat: true,
      waitingOnModel: true,
      busyWith: 'x',
    });
    expect(parsed.success && parsed.data).toEqual({ stepId: 's1', heartbeat: true, waitingOnModel: true });
  });

  it('does not take a reply for a heartbeat', () => {
    const reply = { ok: true, stepId: 's1', output: 'done', turns: 1 };
    expect(StepHeartbeat.safeParse(reply).success).toBe(false);
  });
});
