import { fromJsonSchema } from '@modelcontextprotocol/server';
import type { PipelineRegistration } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import { pipelineToolShape } from '../src/mcp/pipelineToolShape.ts';

const registration = (input: Record<string, unknown>): PipelineRegistration =>
  ({
    name: 'shaped',
    agents: ['worker'],
    steps: ['work'],
    input,
    host: 'test',
    registeredAt: new Date(0).toISOString(),
  }) as PipelineRegistration;

describe('pipelineToolShape: a pipeline as an MCP tool', () => {
  it("keeps an input schema's own references working once it sits under properties.input", async () => {
    const input = {
      type: 'object',
      properties: {
        lang: { $ref: '#/$defs/lang' },
        list: { type: 'array', items: { $ref: '#/$defs/lang' } },
      },
      $defs: { lang: { enum: ['en', 'fr'] } },
      default: { lang: { $ref: '#/not/a/reference' } },
    };
    const shape = pipelineToolShape(registration(input));
    expect(shape.inputSchema).toMatchObject({
      properties: {
        input: {
          properties: { lang: { $ref: '#/properties/input/$defs/lang' } },
          default: { lang: { $ref: '#/not/a/reference' } },
        },
      },
    });
    // The SDK compiles the tool's schema: references that do not resolve would throw here.
    const schema = fromJsonSchema(shape.inputSchema as never);
    const check = (value: unknown) => schema['~standard'].validate(value);
    expect(await check({ goal: 'g', input: { lang: 'fr', list: ['en'] } })).not.toHaveProperty('issues');
    expect(await check({ goal: 'g', input: { lang: 'de' } })).toHaveProperty('issues');
  });
});
