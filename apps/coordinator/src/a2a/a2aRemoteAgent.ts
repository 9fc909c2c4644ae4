import type { RemoteAgent } from '@troupe/runtime';
import type { RemoteAgentSettings } from '../config/remoteAgents.ts';
import { startRemoteStep } from './remoteStep.ts';

/** A pipeline's A2A agent, as its host serves it: each step a durable call to the agent (see {@link startRemoteStep}). */
export function a2aRemoteAgent(
  settings: RemoteAgentSettings,
  options: { fetch?: typeof fetch } = {},
): RemoteAgent {
  return {
    name: settings.name,
    endpoint: settings.card,
    startStep: (request, deps) => startRemoteStep(settings, request, deps, options),
  };
}
