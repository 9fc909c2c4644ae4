import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { pipelineJsonSchema } from '../src/config/pipelineJsonSchema.ts';

const committed = join(import.meta.dirname, '..', '..', '..', 'docs', 'schema', 'pipeline.schema.json');

describe('the published pipeline JSON Schema', () => {
  it('is the one generated from the loader’s schema (run `npm run schema` after changing it)', () => {
    expect(JSON.parse(readFileSync(committed, 'utf8'))).toEqual(pipelineJsonSchema());
  });

  it('refuses unknown keys but admits x-* keys, like the loader', () => {
    const schema = pipelineJsonSchema() as {
      additionalProperties: unknown;
      patternProperties: Record<string, unknown>;
      properties: {
        agents: { additionalProperties: { additionalProperties: unknown; patternProperties: object } };
      };
    };
    expect(schema.additionalProperties).toBe(false);
    expect(Object.keys(schema.patternProperties)).toEqual(['^x-']);
    const agent = schema.properties.agents.additionalProperties;
    expect(agent.additionalProperties).toBe(false);
    expect(Object.keys(agent.patternProperties)).toEqual(['^x-']);
  });

  it('requires what the loader requires', () => {
    const schema = pipelineJsonSchema() as { required: string[] };
    expect(schema.required.sort()).toEqual(['agents', 'flow', 'name', 'version']);
  });
});
