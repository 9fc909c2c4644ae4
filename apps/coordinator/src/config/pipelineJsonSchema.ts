import { z } from 'zod';
import { PipelineConfig } from './pipelineSchema.ts';

type JsonObject = Record<string, unknown>;

/**
 * The JSON Schema of a pipeline file, for editors (`# yaml-language-server: $schema=…`). Objects that accept
 * only their own keys plus `x-*` say so with `patternProperties`, as the loader does.
 */
export function pipelineJsonSchema(): JsonObject {
  const schema = z.toJSONSchema(PipelineConfig, { io: 'input', unrepresentable: 'any' }) as JsonObject;
  return {
    ...(tighten(schema) as JsonObject),
    $id: 'https://troupe.dev/schema/pipeline.schema.json',
    title: 'Troupe pipeline',
    description: 'A Troupe pipeline file: models, agents and the flow between them.',
  };
}

/** Loose objects (the ones that take `x-*` keys) become strict ones with an `x-` escape hatch. */
function tighten(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(tighten);
  if (typeof node !== 'object' || node === null) return node;
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(node)) out[key] = tighten(value);
  const loose =
    out.type === 'object' && isEmptyObject(out.additionalProperties) && out.properties !== undefined;
  if (loose) {
    out.patternProperties = { '^x-': {} };
    out.additionalProperties = false;
  }
  return out;
}

const isEmptyObject = (value: unknown): boolean =>
  typeof value === 'object' && value !== null && !Array.isArray(value) && Object.keys(value).length === 0;
