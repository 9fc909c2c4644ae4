import { type Part, Role, type Task, TaskState } from '@a2a-js/sdk';
import type { AgentStepRequest } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { holdsMessage, readParts, stepMessage, taskOutput } from '../src/a2a/a2aParts.ts';

const part = (content: Part['content'], filename = ''): Part => ({
  content,
  metadata: undefined,
  filename,
  mediaType: '',
});

const request: AgentStepRequest = {
  stepId: 't1.check.2',
  taskId: 't1',
  pipeline: 'p',
  agent: 'reviewer',
  step: 'check',
  round: 2,
  goal: 'Ship the note',
  input: { audience: 'ops' },
  context: [{ step: 'draft', agent: 'writer', round: 2, output: 'the draft' }],
  feedback: 'shorter',
  expect: 'verdict',
};

function task(parts: Part[][], said?: string): Task {
  return {
    id: 'a',
    contextId: 'c',
    status: {
      state: TaskState.TASK_STATE_COMPLETED,
      message: said
        ? {
            messageId: 'm',
            contextId: 'c',
            taskId: 'a',
            role: Role.ROLE_AGENT,
            parts: [part({ $case: 'text', value: said })],
            metadata: undefined,
            extensions: [],
            referenceTaskIds: [],
          }
        : undefined,
      timestamp: undefined,
    },
    artifacts: parts.map((p, i) => ({
      artifactId: `r${i}`,
      name: '',
      description: '',
      parts: p,
      metadata: undefined,
      extensions: [],
    })),
    history: [],
    metadata: undefined,
  };
}

describe('the message a step sends its remote agent', () => {
  it('holds what a local agent is given, as text and as data, with the step’s ids', () => {
    const message = stepMessage(request, { messageId: 'troupe-t1.check.2', contextId: 'troupe-x' });
    expect(message).toMatchObject({
      messageId: 'troupe-t1.check.2',
      contextId: 'troupe-x',
      role: Role.ROLE_USER,
    });
    const [text, data] = message.parts.map((p) => p.content);
    expect(text?.$case).toBe('text');
    const said = text?.$case === 'text' ? text.value : '';
    for (const piece of ['# Task\nShip the note', '"audience": "ops"', 'the draft', 'shorter', '"decision"'])
      expect(said).toContain(piece);
    expect(data).toEqual({
      $case: 'data',
      value: {
        goal: 'Ship the note',
        input: { audience: 'ops' },
        context: [{ step: 'draft', agent: 'writer', round: 2, output: 'the draft' }],
        feedback: 'shorter',
        expect: 'verdict',
        step: 'check',
        round: 2,
      },
    });
  });

  it('asks no verdict of a step that wants text', () => {
    const message = stepMessage({ ...request, expect: 'text' }, { messageId: 'm', contextId: 'c' });
    const text = message.parts[0]?.content;
    expect(text?.$case === 'text' && text.value).not.toContain('"decision"');
  });
});

describe('what a remote task gives back', () => {
  it('joins every artifact’s text in order, and takes the first data part as structured output', () => {
    const out = taskOutput(
      task([
        [part({ $case: 'text', value: 'one' }), part({ $case: 'data', value: { n: 1 } })],
        [part({ $case: 'text', value: 'two' }), part({ $case: 'data', value: { n: 2 } })],
      ]),
    );
    expect(out).toEqual({ output: 'one\n\ntwo', structured: { n: 1 } });
  });

  it('gives a data part as the output when there is no text', () => {
    expect(taskOutput(task([[part({ $case: 'data', value: { ok: true } })]]))).toEqual({
      output: '{"ok":true}',
      structured: { ok: true },
    });
  });

  it('takes the status message of a task without artifacts', () => {
    expect(taskOutput(task([], 'done, nothing to show'))).toEqual({ output: 'done, nothing to show' });
  });

  it('names files rather than reading them', () => {
    const { text } = readParts([
      part({ $case: 'url', value: 'https://x/report.pdf' }, 'report.pdf'),
      part({ $case: 'raw', value: Buffer.from('abc') }, 'blob.bin'),
    ]);
    expect(text).toBe('[report.pdf](https://x/report.pdf)\n\n[blob.bin: 3 bytes not shown]');
  });

  it('tells whether a task’s history holds a message', () => {
    const withHistory = {
      ...task([]),
      history: [{ ...stepMessage(request, { messageId: 'm1', contextId: 'c' }) }],
    };
    expect(holdsMessage(withHistory, 'm1')).toBe(true);
    expect(holdsMessage(withHistory, 'm2')).toBe(false);
  });
});
