import { EventData } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { may } from '../src/access.ts';
import { ApiError, EVENT_KINDS, type TokenInfo } from '../src/client.ts';
import { firstRuns, forkBody, inputText, stepsBefore } from '../src/forkEdits.ts';
import { refusalText, refusedForToken } from '../src/refusal.ts';
import { RetryKey } from '../src/retryKey.ts';
import { isSteering, steeringText, toldEntryText } from '../src/steeringMarks.ts';
import { restartChoice } from '../src/stepChoice.ts';
import { originLabel, originText } from '../src/taskFamily.ts';
import type { StepTrace, Trace } from '../src/timeline.ts';

const step = (name: string, round: number, outcome?: { ok: boolean }): StepTrace => ({
  stepId: `t-1:${name}:${round}`,
  step: name,
  agent: name,
  round,
  entries: [],
  ...(outcome
    ? {
        outcome: {
          ...outcome,
          durationMs: 1,
          usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0 },
        },
      }
    : {}),
});
const trace = (steps: StepTrace[], failure?: Trace['failure']): Trace => ({
  taskId: 't-1',
  pipeline: 'demo',
  status: failure ? 'failed' : 'cancelled',
  steps,
  ...(failure ? { failure } : {}),
  totals: {
    inputTokens: 0,
    outputTokens: 0,
    cachedTokens: 0,
    costUsd: 0,
    modelCalls: 0,
    toolCalls: 0,
    approvals: 0,
    retries: 0,
    errors: 0,
  },
});

describe('who is offered the steering controls', () => {
  const token = (scopes: TokenInfo['scopes'], pipelines?: string[]): TokenInfo => ({
    name: 'someone',
    scopes,
    ...(pipelines ? { pipelines } : {}),
  });

  it('offers pause, resume and tell (approve) and restart and fork (submit) by the scopes the gateway requires', () => {
    expect(may(token(['approve']), 'approve', 'demo')).toBe(true);
    expect(may(token(['approve']), 'submit', 'demo')).toBe(false);
    expect(may(token(['submit']), 'approve', 'demo')).toBe(false);
    expect(may(token(['submit']), 'submit', 'demo')).toBe(true);
    expect(may(token(['read']), 'approve', 'demo')).toBe(false);
    expect(may(token(['admin']), 'approve', 'demo')).toBe(true);
    // The token's pipeline list applies to both.
    expect(may(token(['admin'], ['other']), 'approve', 'demo')).toBe(false);
    expect(may(token(['submit'], ['demo']), 'submit', 'demo')).toBe(true);
  });
});

describe('a refused request, as the page shows it beside its button', () => {
  it('says what was refused, the gateway’s message and what the status means', () => {
    expect(refusalText('Pause', new ApiError(403, 'forbidden', 'the token ci lacks the approve scope'))).toBe(
      'Pause refused (403): the token ci lacks the approve scope — this token’s scopes do not allow it',
    );
    expect(refusalText('Resume', new ApiError(409, 'conflict', 'task t-1 is not paused'))).toBe(
      'Resume refused (409): task t-1 is not paused — the task’s state does not allow it now',
    );
    expect(refusalText('Tell', new ApiError(503, 'unavailable', 'no coordinator runs t-1'))).toMatch(
      /^Tell refused \(503\): no coordinator runs t-1 — nobody runs the task at the moment: try again later$/,
    );
    expect(refusalText('Fork', new ApiError(418, 'http_error', 'HTTP 418'))).toBe(
      'Fork refused (418): HTTP 418',
    );
    expect(refusalText('Restart', new TypeError('Failed to fetch'))).toBe(
      'Restart failed: the gateway did not answer (Failed to fetch)',
    );
  });

  it('reads the token’s scopes again only after a 401 or 403', () => {
    expect(refusedForToken(new ApiError(403, 'forbidden', 'no'))).toBe(true);
    expect(refusedForToken(new ApiError(401, 'unauthorized', 'no'))).toBe(true);
    expect(refusedForToken(new ApiError(409, 'conflict', 'no'))).toBe(false);
    expect(refusedForToken(new Error('down'))).toBe(false);
  });
});

describe('the restart chooser', () => {
  it('lists each step once in the order it first ran, and starts at the step the failure names', () => {
    const t = trace(
      [
        step('plan', 1, { ok: true }),
        step('write', 1, { ok: true }),
        step('review', 1, { ok: false }),
        step('write', 2, { ok: true }),
      ],
      {
        reason: 'step_failed',
        message: 'boom',
        step: 'write',
      },
    );
    expect(restartChoice(t)).toEqual({ steps: ['plan', 'write', 'review'], preset: 'write' });
  });

  it('starts at the last step that ended not ok when the failure names none', () => {
    const t = trace([step('plan', 1, { ok: true }), step('write', 1, { ok: false })], {
      reason: 'step_failed',
      message: 'boom',
    });
    expect(restartChoice(t).preset).toBe('write');
  });

  it('starts a cancelled task at the step that was at work when it was cancelled, else at its last step', () => {
    expect(restartChoice(trace([step('plan', 1, { ok: true }), step('write', 1)])).preset).toBe('write');
    expect(restartChoice(trace([step('plan', 1, { ok: true })])).preset).toBe('plan');
    expect(restartChoice(trace([]))).toEqual({ steps: [], preset: undefined });
  });
});

describe('the fork form’s body', () => {
  const original = { quarter: 'Q3' };

  it('leaves out an input equal to the original’s and outputs left blank', () => {
    expect(
      forkBody({ at: 'review', inputText: inputText(original), original, outputs: { write: '  ' } }),
    ).toEqual({
      ok: true,
      body: { at: 'review' },
    });
    expect(forkBody({ at: 'review', inputText: '', original, outputs: {} })).toEqual({
      ok: true,
      body: { at: 'review' },
    });
  });

  it('sends an edited input and the outputs typed for earlier steps', () => {
    expect(
      forkBody({
        at: 'review',
        inputText: '{"quarter": "Q4"}',
        original,
        outputs: { write: 'a shorter draft', plan: '' },
      }),
    ).toEqual({
      ok: true,
      body: { at: 'review', input: { quarter: 'Q4' }, set: { write: 'a shorter draft' } },
    });
  });

  it('refuses an input that is not JSON, or not a JSON object, before anything is sent', () => {
    const bad = forkBody({ at: 'review', inputText: '{quarter: Q4}', original, outputs: {} });
    expect(bad.ok).toBe(false);
    expect(bad.ok ? '' : bad.error).toMatch(/^The input is not JSON: /);
    for (const text of ['[1, 2]', '"Q4"', 'null', '42']) {
      expect(forkBody({ at: 'review', inputText: text, original, outputs: {} })).toEqual({
        ok: false,
        error: 'The input must be a JSON object ({ … }), as a task’s input is',
      });
    }
  });

  it('offers to replace the outputs of the steps a fork reuses only: completed before its step first started', () => {
    const ok = { ok: true };
    const steps = [
      step('plan', 1, ok),
      step('write', 1, ok),
      step('review', 1, ok),
      step('write', 2, ok),
      step('review', 2, ok),
    ];
    expect(stepsBefore(steps, 'review')).toEqual(['plan', 'write']);
    expect(stepsBefore(steps, 'plan')).toEqual([]);
    expect(stepsBefore(steps, 'nowhere')).toEqual([]);
    // A step that failed is not reused; nor is a pipeline step, whose sub-task runs again.
    const sub = { ...step('research', 1, ok), subTask: { taskId: 't-2', pipeline: 'research' } };
    expect(
      stepsBefore([step('plan', 1, { ok: false }), sub, step('write', 1, ok), step('review', 1)], 'review'),
    ).toEqual(['write']);
  });

  it('is offered on each step’s first run only, since a fork runs on from where its step first started', () => {
    const steps = [step('plan', 1), step('write', 1), step('review', 1), step('write', 2), step('review', 2)];
    expect([...firstRuns(steps)]).toEqual(['t-1:plan:1', 't-1:write:1', 't-1:review:1']);
  });
});

describe('holds, resumes and told messages in the timeline', () => {
  it('reads each as a sentence, with who and why where the event says', () => {
    const paused = {
      kind: 'paused',
      at: 'x',
      state: 'write',
      round: 1,
      by: 'ops',
      reason: 'wrong API',
    } as const;
    expect(steeringText(paused)).toBe('paused by ops at write: wrong API');
    expect(steeringText({ kind: 'paused', at: 'x', state: 'write', round: 1 })).toBe('paused at write');
    expect(
      steeringText({ kind: 'resumed', at: 'x', state: 'write', round: 1, by: 'ops', pausedMs: 42_400 }),
    ).toBe('resumed by ops at write after 42 s paused');
    expect(steeringText({ kind: 'told', at: 'x', messageId: 'm-1', text: 'use the v2 API', by: 'ops' })).toBe(
      'told m-1 by ops: use the v2 API',
    );
    expect(
      toldEntryText({
        kind: 'told',
        at: 'x',
        turn: 3,
        messages: [{ id: 'm-1', text: 'use the v2 API' }, { id: 'm-2' }],
      }),
    ).toBe('read m-1 “use the v2 API”, m-2 before turn 3');
    expect(isSteering(paused)).toBe(true);
    expect(isSteering({ kind: 'route' })).toBe(false);
  });

  it('listens for every kind of event the protocol has, the new steering ones among them', () => {
    expect([...EVENT_KINDS].sort()).toEqual(Object.keys(EventData).sort());
  });
});

describe('a task’s family', () => {
  it('names the original, the step and what a fork edited', () => {
    expect(originText({ taskId: 't-1', kind: 'restart', step: 'write' })).toEqual([
      'A restart of ',
      ' from step write',
    ]);
    expect(
      originText({
        taskId: 't-1',
        kind: 'fork',
        step: 'review',
        edited: ['input', 'steps.write.output'],
        by: 'ops',
      }),
    ).toEqual(['A fork of ', ' from step review, with input and steps.write.output edited by ops']);
    const view = { taskId: 't-2', pipeline: 'demo', goal: 'g', status: 'running' } as const;
    expect(originLabel(view)).toBe('');
    expect(
      originLabel({ ...view, origin: { taskId: 't-0123456789abcdef', kind: 'fork', step: 'review' } }),
    ).toBe('fork of …89abcdef @ review');
  });
});

describe('the idempotency key of a restart or fork', () => {
  /** Keys k1, k2, … in the order they are made; each send says the key it was sent with. */
  const keyed = () => {
    let made = 0;
    return new RetryKey(() => `k${++made}`);
  };
  const answered = (key: string) => Promise.resolve(key);
  const unanswered = () => Promise.reject(new TypeError('Failed to fetch'));

  it('is sent again with the same body after no answer came (a lost answer or a 5xx), so no second task is made', async () => {
    const retry = keyed();
    await expect(retry.send({ from: 'work' }, unanswered)).rejects.toThrow('Failed to fetch');
    await expect(
      retry.send({ from: 'work' }, () => Promise.reject(new ApiError(503, 'unavailable', 'down'))),
    ).rejects.toThrow('down');
    expect(await retry.send({ from: 'work' }, answered)).toBe('k1');
  });

  it('is new once an answer came, for a refusal (which made nothing) and for another body', async () => {
    const retry = keyed();
    expect(await retry.send({ from: 'work' }, answered)).toBe('k1');
    // A second restart asked for after the first was made is a task of its own.
    expect(await retry.send({ from: 'work' }, answered)).toBe('k2');
    await expect(
      retry.send({ at: 'review' }, () => Promise.reject(new ApiError(409, 'conflict', 'still running'))),
    ).rejects.toThrow('still running');
    expect(await retry.send({ at: 'review' }, answered)).toBe('k4');
    await expect(retry.send({ at: 'review', set: { plan: 'x' } }, unanswered)).rejects.toThrow();
    expect(await retry.send({ at: 'review', set: { plan: 'y' } }, answered)).toBe('k6');
  });

  it('makes random keys by default', async () => {
    const retry = new RetryKey();
    const first = await retry.send({}, answered);
    expect(first).toMatch(/^[0-9a-f]{32}$/);
    expect(await retry.send({}, answered)).not.toBe(first);
  });
});
