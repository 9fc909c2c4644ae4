import type { PipelineRegistration } from '@troupe/protocol';

/**
 * A pipeline as an MCP tool: its name is the pipeline's (`[a-z0-9-]+`, within MCP's tool-name rules: 1-128 of
 * letters, digits, `_`, `-`, `.`); its input is the task's goal and the input the pipeline declares (any object when
 * it declares none); its output schema is the one the pipeline's output matches, when it says.
 */
export interface PipelineToolShape {
  name: string;
  title: string;
  description: string;
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
}

export function pipelineToolShape(pipeline: PipelineRegistration): PipelineToolShape {
  const declared = pipeline.input;
  const needsInput = Array.isArray(declared?.required) && declared.required.length > 0;
  return {
    name: pipeline.name,
    title: pipeline.name,
    description: [
      pipeline.description ?? `Runs the Troupe pipeline ${pipeline.name}.`,
      `Runs it as one task (steps: ${pipeline.steps.join(', ')}) and answers with the task's output.`,
      'A long task can be started with troupe_start and read with troupe_get instead.',
    ].join(' '),
    inputSchema: {
      type: 'object',
      properties: {
        goal: { type: 'string', minLength: 1, description: 'What the task should achieve.' },
        input: declared
          ? nestedAt(declared, '#/properties/input')
          : { type: 'object', description: 'Structured input handed to every step (any object).' },
      },
      required: needsInput ? ['goal', 'input'] : ['goal'],
      additionalProperties: false,
    },
    ...(pipeline.output?.type === 'object' ? { outputSchema: pipeline.output } : {}),
  };
}

/** Keywords whose values are data, not schemas: a `$ref` key inside them is not a reference. */
const DATA_KEYWORDS = new Set(['const', 'enum', 'default', 'examples']);

/**
 * The pipeline's input schema placed at `at` in the tool's: its own references (`#/$defs/…`), which pointed into it
 * as a root, are made to point where it now is, or no JSON Schema validator could resolve them. One with an `$id`
 * is a resource of its own, whose references resolve within it already.
 */
function nestedAt(schema: Record<string, unknown>, at: string): Record<string, unknown> {
  if (typeof schema.$id === 'string') return schema;
  const move = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(move);
    if (value === null || typeof value !== 'object') return value;
    return Object.fromEntries(
      Object.entries(value).map(([key, v]) => {
        if (key === '$ref' && typeof v === 'string' && (v === '#' || v.startsWith('#/')))
          return [key, `${at}${v.slice(1)}`];
        return [key, DATA_KEYWORDS.has(key) ? v : move(v)];
      }),
    );
  };
  return move(schema) as Record<string, unknown>;
}
