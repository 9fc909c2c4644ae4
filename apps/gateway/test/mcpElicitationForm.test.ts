import { describe, expect, it } from 'vitest';
import { elicitationForm } from '../src/mcp/elicitationForm.ts';

describe('elicitationForm: a human step answer schema as an MCP elicitation form', () => {
  it('keeps flat fields: text, a choice, numbers, yes/no, with what a form can carry of their constraints', () => {
    expect(
      elicitationForm({
        type: 'object',
        properties: {
          ship: { type: 'boolean', title: 'Ship it?', default: true },
          channel: { enum: ['stable', 'beta'], description: 'where' },
          note: { type: 'string', maxLength: 200, pattern: '^[a-z]+$', format: 'email' },
          count: { type: 'integer', minimum: 1, maximum: 5 },
        },
        required: ['ship', 'missing'],
      }),
    ).toEqual({
      type: 'object',
      properties: {
        ship: { type: 'boolean', title: 'Ship it?', default: true },
        channel: { type: 'string', description: 'where', enum: ['stable', 'beta'] },
        note: { type: 'string', maxLength: 200, format: 'email' },
        count: { type: 'integer', minimum: 1, maximum: 5 },
      },
      required: ['ship'],
    });
  });

  it('gives none for what a form cannot show, so the question is asked as text', () => {
    expect(elicitationForm(undefined)).toBeUndefined();
    expect(elicitationForm({ type: 'string' })).toBeUndefined();
    expect(elicitationForm({ type: 'object', properties: {} })).toBeUndefined();
    expect(
      elicitationForm({
        type: 'object',
        properties: { items: { type: 'array', items: { type: 'string' } } },
      }),
    ).toBeUndefined();
    expect(elicitationForm({ type: 'object', properties: { nested: { type: 'object' } } })).toBeUndefined();
    expect(elicitationForm({ type: 'object', properties: { level: { enum: [1, 2] } } })).toBeUndefined();
  });
});
