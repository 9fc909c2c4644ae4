import type { AgentDefinition } from '@troupe/runtime';
import type { LoadedPipeline } from './loadPipeline.ts';

/** Turns a loaded pipeline's agents into what the runtime runs. */
export function agentDefinitions(pipeline: LoadedPipeline, only?: readonly string[]): AgentDefinition[] {
  const { config, models } = pipeline;
  return Object.entries(config.agents)
    .filter(([name]) => only === undefined || only.includes(name))
    .map(([name, agent]) => {
      const modelName = agent.model ?? config.defaults.model ?? '';
      const model = models.get(modelName);
      // loadPipeline has checked every reference, so a miss here is a bug, not bad input.
      if (!model) throw new Error(`agent ${name}: model "${modelName}" was not built`);
      return {
        name,
        instructions: agent.instructions,
        model,
        tools: agent.tools,
        rules: agent.permissions.map(({ paths, ...rule }) => (paths ? { ...rule, paths } : rule)),
        maxTurns: agent.maxTurns ?? config.defaults.maxTurns,
        ...(agent.temperature === undefined ? {} : { temperature: agent.temperature }),
        ...(agent.maxTokens === undefined ? {} : { maxTokens: agent.maxTokens }),
      };
    });
}
