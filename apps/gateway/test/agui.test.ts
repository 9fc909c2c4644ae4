import { EventSchemas } from '@ag-ui/core/schemas';
import type { EventData, EventKind, TroupeEvent } from '@troupe/protocol';
import { EventFactory } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { AgUiMapper } from '../src/agui.ts';

const factory = new EventFactory({ now: () => Date.UTC(2026, 0, 1) });
const scope = { pipeline: 'demo', taskId: 't1', traceparent: '' };
let seq = 0;
const make = <K extends EventKind>(kind: K, data: z.input<(typeof EventData)[K]>): TroupeEvent =>
  // Distinct ids, as the stream would carry (deltas and retries of one turn differ by seq and attempt).
  ({ ...factory.make(kind, scope, data), id: `e${++seq}` }) as TroupeEvent;
const ref = { agent: 'coder', stepId: 't1.code.1' };
const model = { provider: 'openai', model: 'gpt-x' };

/** The AG-UI events of a flow, each checked against the official schemas, as `TYPE:id`. */
function mapped(events: TroupeEvent[]): string[] {
  const mapper = new AgUiMapper('t1');
  return events.flatMap((e) =>
    mapper.map(e).map((a) => {
      const parsed = EventSchemas.parse(a) as { type: string; messageId?: string; stepName?: string };
      return `${parsed.type}${parsed.messageId ? `:${parsed.messageId}` : parsed.stepName ? `:${parsed.stepName}` : ''}`;
    }),
  );
}

describe('AgUiMapper', () => {
  it('ends the streamed text of a failed attempt, and streams the retry as a message of its own', () => {
    expect(
      mapped([
        make('task.accepted', { goal: 'g' }),
        make('step.started', { step: 'code', agent: 'coder', round: 1, stepId: 't1.code.1' }),
        make('llm.delta', { ...ref, turn: 1, seq: 1, text: 'Half a th' }),
        make('llm.retry', {
          ...ref,
          turn: 1,
          ...model,
          attempt: 1,
          code: 'server_error',
          message: '500',
          delayMs: 10,
        }),
        make('llm.delta', { ...ref, turn: 1, seq: 2, text: 'A whole thought.' }),
        make('llm.response', {
          ...ref,
          turn: 1,
          ...model,
          usage: { inputTokens: 1, outputTokens: 1, cachedTokens: 0 },
          costUsd: 0,
          finishReason: 'stop',
          content: 'A whole thought.',
          toolCalls: [],
          durationMs: 1,
        }),
      ]),
    ).toEqual([
      'RUN_STARTED',
      'STEP_STARTED:code',
      'TEXT_MESSAGE_START:t1.code.1.1',
      'TEXT_MESSAGE_CONTENT:t1.code.1.1',
      'TEXT_MESSAGE_END:t1.code.1.1',
      'CUSTOM',
      'TEXT_MESSAGE_START:t1.code.1.1.2',
      'TEXT_MESSAGE_CONTENT:t1.code.1.1.2',
      'TEXT_MESSAGE_END:t1.code.1.1.2',
    ]);
  });

  it('closes the message and the step a cancel cut short before the run finishes', () => {
    expect(
      mapped([
        make('task.accepted', { goal: 'g' }),
        make('step.started', { step: 'code', agent: 'coder', round: 1, stepId: 't1.code.1' }),
        make('llm.delta', { ...ref, turn: 1, seq: 1, text: 'Thinking' }),
        make('task.cancelled', {
          usage: { inputTokens: 0, outputTokens: 0, cachedTokens: 0, costUsd: 0, modelCalls: 0 },
        }),
      ]),
    ).toEqual([
      'RUN_STARTED',
      'STEP_STARTED:code',
      'TEXT_MESSAGE_START:t1.code.1.1',
      'TEXT_MESSAGE_CONTENT:t1.code.1.1',
      'TEXT_MESSAGE_END:t1.code.1.1',
      'STEP_FINISHED:code',
      'RUN_FINISHED',
    ]);
  });

  it('ends a streamed message on a model error, before saying so', () => {
    expect(
      mapped([
        make('step.started', { step: 'code', agent: 'coder', round: 1, stepId: 't1.code.1' }),
        make('llm.delta', { ...ref, turn: 1, seq: 1, text: 'Part' }),
        make('llm.error', { ...ref, turn: 1, ...model, code: 'timeout', message: 'timed out' }),
      ]),
    ).toEqual([
      'RUN_STARTED',
      'STEP_STARTED:code',
      'TEXT_MESSAGE_START:t1.code.1.1',
      'TEXT_MESSAGE_CONTENT:t1.code.1.1',
      'TEXT_MESSAGE_END:t1.code.1.1',
      'CUSTOM',
    ]);
  });

  it('starts the run first, once, when events come before task.accepted or the stream resumes past it', () => {
    const summary = {
      session: 's',
      agent: 'historian',
      turns: 2,
      folded: 2,
      summary: 'so far',
      ...model,
      usage: { inputTokens: 10, outputTokens: 5, cachedTokens: 0 },
      costUsd: 0,
      durationMs: 3,
    };
    expect(
      mapped([
        make('session.compacted', summary),
        make('task.accepted', { goal: 'g' }),
        make('step.started', { step: 'code', agent: 'coder', round: 1, stepId: 't1.code.1' }),
      ]),
    ).toEqual(['RUN_STARTED', 'CUSTOM', 'STEP_STARTED:code']);
    expect(
      mapped([make('step.started', { step: 'code', agent: 'coder', round: 1, stepId: 't1.code.1' })]),
    ).toEqual(['RUN_STARTED', 'STEP_STARTED:code']);
    expect(mapped([make('task.accepted', { goal: 'g' })])).toEqual(['RUN_STARTED']);
  });
});
