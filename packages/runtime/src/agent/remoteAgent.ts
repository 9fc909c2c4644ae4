import type { AgentStepRequest } from '@troupe/protocol';
import type { AgentDefinition } from './agentDefinition.ts';
import type { AgentStep, StepDeps } from './agentStep.ts';

/**
 * An agent that lives in another system (an A2A agent, say): the host hands it each step in place of running an
 * agent actor, and it answers with the same reply a local agent gives. Heartbeats, resends joining the run under way
 * and the stop on the task's end come from the host, as for a local agent.
 */
export interface RemoteAgent {
  name: string;
  /** Where the agent lives (its card's URL), for messages and logs. */
  endpoint: string;
  /** Starts one step; its reply never rejects. */
  startStep(request: AgentStepRequest, deps: StepDeps): AgentStep;
}

/** What an agent host serves: agents it runs itself, and agents it calls elsewhere. */
export type HostedAgent = AgentDefinition | RemoteAgent;

export const isRemoteAgent = (agent: HostedAgent): agent is RemoteAgent => 'startStep' in agent;
