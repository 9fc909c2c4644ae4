import type { PipelineConfig, StepConfig } from './pipelineSchema.ts';

/**
 * The JSON Schema every completed task's output matches, when the pipeline can promise one: its flow always ends
 * with the same agent step (the last, which no condition skips, no failure passes over and no jump to `end` goes
 * around) and that agent declares an object `output` schema. Clients rely on it (an MCP tool's `outputSchema`), so
 * any doubt gives none.
 */
export function finalOutputSchema(config: PipelineConfig): Record<string, unknown> | undefined {
  const last = config.flow.at(-1);
  if (last?.kind !== 'agent' || last.when !== undefined || last.onError !== undefined) return undefined;
  if (config.flow.some(mayEndEarly)) return undefined;
  const agent = config.agents[last.agent];
  // An agent of another system answers as it will: its `output` is not a promise Troupe can keep.
  if (!agent || ('a2a' in agent && agent.a2a !== undefined)) return undefined;
  const schema = agent.output;
  return schema?.type === 'object' ? schema : undefined;
}

/** Whether a top-level step may end the flow before its last step. */
function mayEndEarly(step: StepConfig): boolean {
  const targets: unknown[] = [step.next];
  if ('onError' in step) targets.push(step.onError);
  if (step.kind === 'human') targets.push(step.onTimeout);
  if (step.kind === 'route')
    targets.push(...Object.values(step.cases ?? {}), step.default, ...Object.keys(step.targets ?? {}));
  return targets.includes('end');
}
