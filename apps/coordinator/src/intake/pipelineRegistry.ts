import type { PipelineRegistration } from '@troupe/protocol';
import { finalOutputSchema } from '../config/finalOutput.ts';
import { flowGraph } from '../config/flowGraph.ts';
import { type PipelineConfig, sessionSummarizer } from '../config/pipelineSchema.ts';

/** What a coordinator that loaded `config` at `version` registers of it in the KV bucket `pipelines`. */
export function registrationOf(
  config: PipelineConfig,
  host: string,
  now: Date,
  version?: string,
): PipelineRegistration {
  const summarizer = sessionSummarizer(config);
  const output = finalOutputSchema(config);
  return {
    name: config.name,
    ...(config.description === undefined ? {} : { description: config.description }),
    agents: Object.keys(config.agents),
    steps: config.flow.map((s) => s.id),
    graph: flowGraph(config),
    ...(summarizer === undefined ? {} : { summarizer }),
    ...(config.input === undefined ? {} : { input: config.input }),
    ...(output === undefined ? {} : { output }),
    host,
    registeredAt: now.toISOString(),
    ...(version === undefined ? {} : { version }),
  };
}
