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
        input: declared ?? {
          type: 'object',
          description: 'Structured input handed to every step (any object).',
        },
      },
      required: needsInput ? ['goal', 'input'] : ['goal'],
      additionalProperties: false,
    },
    ...(pipeline.output?.type === 'object' ? { outputSchema: pipeline.output } : {}),
  };
}
