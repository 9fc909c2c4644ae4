import type { AgentDefinition, HostedAgent } from '@troupe/runtime';
import { a2aRemoteAgent } from '../a2a/a2aRemoteAgent.ts';
import type { LoadedPipeline } from './loadPipeline.ts';
import { resolveModelRef } from './modelFactory.ts';
import { isRemoteAgentConfig } from './pipelineSchema.ts';

/** Every agent a host serves for a loaded pipeline: those it runs, and those it calls in other systems (A2A). */
export function hostedAgents(pipeline: LoadedPipeline, only?: readonly string[]): HostedAgent[] {
  const local = agentDefinitions(pipeline, only);
  const remote = [...pipeline.remoteAgents.values()]
    .filter(({ name }) => only === undefined || only.includes(name))
    .map((settings) => a2aRemoteAgent(settings));
  return [...local, ...remote];
}

/** Turns a loaded pipeline's local agents into what the runtime runs (remote ones are {@link hostedAgents}'). */
export function agentDefinitions(pipeline: LoadedPipeline, only?: readonly string[]): AgentDefinition[] {
  const { config, agentModels } = pipeline;
  return Object.entries(config.agents)
    .filter(([name, agent]) => (only === undefined || only.includes(name)) && !isRemoteAgentConfig(agent))
    .map(([name, agent]) => {
      const model = agentModels.get(name);
      // loadPipeline has built every agent's model or refused the file, so a miss here is a bug, not bad input.
      if (!model) throw new Error(`agent ${name}: its model was not built`);
      const entry = resolveModelRef(config, agent.model ?? config.defaults.model ?? '');
      const remote = entry && entry.provider !== 'scripted' ? entry : undefined;
      const temperature = agent.temperature ?? remote?.temperature;
      const maxTokens = agent.maxTokens ?? remote?.maxTokens;
      return {
        name,
        // The schema requires instructions of every agent that is not remote.
        instructions: agent.instructions ?? '',
        model,
        tools: agent.tools,
        rules: agent.permissions.map(({ tool, decision, paths, commands, hosts, network }) => ({
          tool,
          decision,
          ...(paths ? { paths } : {}),
          ...(commands ? { commands } : {}),
          ...(hosts ? { hosts } : {}),
          ...(network === undefined ? {} : { network }),
        })),
        approvalTimeoutMs: (agent.approvalTimeout ?? config.defaults.approvalTimeout) * 1_000,
        maxTurns: agent.maxTurns ?? config.defaults.maxTurns,
        ...(temperature === undefined ? {} : { temperature }),
        ...(maxTokens === undefined ? {} : { maxTokens }),
        ...(agent.stream ? { stream: true } : {}),
        ...(agent.memory?.longTerm ? { longTermMemory: true } : {}),
        ...(agent.contextTokens === undefined ? {} : { contextTokens: agent.contextTokens }),
        ...(agent.output ? { outputSchema: { name: `${name}_output`, schema: agent.output } } : {}),
      };
    });
}
