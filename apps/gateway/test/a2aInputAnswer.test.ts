import { type Message, type Part, Role } from '@a2a-js/sdk';
import { RequestMalformedError } from '@a2a-js/sdk/errors';
import type { HumanRequest } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { decisionOf } from '../src/a2a/inputAnswer.ts';

const part = (content: Part['content']): Part => ({
  content,
  metadata: undefined,
  filename: '',
  mediaType: '',
});
const text = (value: string) => part({ $case: 'text', value });
const data = (value: unknown) => part({ $case: 'data', value });
const message = (parts: Part[], metadata?: Record<string, unknown>): Message => ({
  messageId: 'm1',
  contextId: '',
  taskId: 't1',
  role: Role.ROLE_USER,
  parts,
  metadata,
  extensions: [],
  referenceTaskIds: [],
});
const request = (id: string, kind: HumanRequest['kind']): HumanRequest => ({
  id,
  kind,
  taskId: 't1',
  pipeline: 'demo',
  agent: 'executor',
  stepId: 't1.work.1',
  prompt: kind === 'approval' ? 'write release/v1.md?' : 'Which colour?',
  status: 'pending',
  requestedAt: '2026-01-01T00:00:00Z',
  expiresAt: '2026-01-01T00:05:00Z',
});
const approval = request('a1', 'approval');
const question = request('q1', 'question');

describe('decisionOf: a client’s message as the answer to what its task asks', () => {
  it('reads an approval from text or from a data part', () => {
    expect(decisionOf(message([text('approve')]), [approval])).toEqual({
      requestId: 'a1',
      body: { decision: 'allow' },
    });
    expect(decisionOf(message([text('Deny: the path is wrong')]), [approval])).toEqual({
      requestId: 'a1',
      body: { decision: 'deny', reason: 'the path is wrong' },
    });
    expect(decisionOf(message([data({ decision: 'allow', reason: 'fine' })]), [approval])).toEqual({
      requestId: 'a1',
      body: { decision: 'allow', reason: 'fine' },
    });
  });

  it('refuses a deny without its reason, and a decision it cannot read, saying how to answer', () => {
    expect(() => decisionOf(message([data({ decision: 'deny' })]), [approval])).toThrow(
      /a deny needs a reason/,
    );
    expect(() => decisionOf(message([text('maybe later')]), [approval])).toThrow(RequestMalformedError);
    expect(() => decisionOf(message([data({ decision: 'perhaps' })]), [approval])).toThrow(
      /"perhaps" is neither approve nor deny/,
    );
  });

  it('reads an answer from text, or a data part’s answer as it is (text) or as JSON', () => {
    expect(decisionOf(message([text('blue')]), [question]).body).toEqual({ answer: 'blue' });
    expect(decisionOf(message([data({ answer: { ship: true } })]), [question]).body).toEqual({
      answer: '{"ship":true}',
    });
    expect(() => decisionOf(message([data({ other: 1 })]), [question])).toThrow(/send it as text/);
  });

  it('needs requestId to pick one of several pending requests, in the data part or the metadata', () => {
    expect(() => decisionOf(message([text('approve')]), [approval, question])).toThrow(
      /2 requests are pending.*a1 \(approval.*q1 \(question/,
    );
    expect(decisionOf(message([data({ requestId: 'q1', answer: 'red' })]), [approval, question])).toEqual({
      requestId: 'q1',
      body: { answer: 'red' },
    });
    expect(decisionOf(message([text('approve')], { requestId: 'a1' }), [approval, question]).requestId).toBe(
      'a1',
    );
    expect(() => decisionOf(message([text('approve')], { requestId: 'zz' }), [approval])).toThrow(
      /request zz is not pending/,
    );
  });
});
