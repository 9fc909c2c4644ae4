import type { PipelineConfig, StepConfig } from './pipelineSchema.ts';

/**
 * What a condition that only reads a step's output (`steps.plan.output.risky`, `!steps["plan"].output.risky`) gives,
 * as the JSON Schema its step declares says (an agent's `output`, a human step's `answer`), when that is known. CEL
 * types the whole `steps` map as dynamic, so without this a `when` reading a string passes the loader and fails the
 * task with `condition_failed` at run time. Undefined when the expression is anything else, or the schema does not say.
 */
export function declaredOutputType(
  expression: string,
  config: PipelineConfig,
  steps: ReadonlyMap<string, StepConfig>,
): { read: string; type: string } | undefined {
  const match = expression
    .trim()
    .match(
      /^!?\s*steps\s*(?:\.\s*([a-z0-9_]+)|\[\s*["']([^"']+)["']\s*\])\s*\.\s*output((?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*)$/,
    );
  if (!match) return undefined;
  const id = (match[1] ?? match[2]) as string;
  const keys = (match[3] ?? '')
    .split('.')
    .map((key) => key.trim())
    .filter((key) => key !== '');
  let schema = outputSchemaOf(steps.get(id), config);
  for (const key of keys) {
    const properties = schema?.properties as Record<string, Record<string, unknown>> | undefined;
    schema = properties?.[key];
  }
  const type = schema?.type;
  if (typeof type !== 'string') return undefined;
  return { read: `steps.${id}.output${keys.map((key) => `.${key}`).join('')}`, type };
}

/** The JSON Schema a step's output matches, when its step declares one Troupe holds it to. */
function outputSchemaOf(
  step: StepConfig | undefined,
  config: PipelineConfig,
): Record<string, unknown> | undefined {
  if (step?.kind === 'human') return step.answer;
  if (step?.kind !== 'agent') return undefined;
  const agent = config.agents[step.agent];
  // An agent of another system answers as it will: its `output` is not a promise Troupe can keep.
  if (!agent || agent.a2a !== undefined) return undefined;
  return agent.output;
}
