import { registerSecret } from '@troupe/runtime';
import type { Env } from './modelFactory.ts';
import { isRemoteAgentConfig, type PipelineConfig } from './pipelineSchema.ts';

/** A remote (A2A) agent as a host calls it: its card, its token read from the environment, its limits in ms. */
export interface RemoteAgentSettings {
  name: string;
  card: string;
  /** The bearer token, resolved; absent when the agent takes none. */
  token?: string;
  requestTimeoutMs: number;
  maxAttempts: number;
  retryDelayMs: number;
  pollIntervalMs: number;
  /** How long a person has to answer what the remote agent asks. */
  answerTimeoutMs: number;
}

/**
 * The pipeline's remote agents, each token read from `env` now, as API keys are: a `${VAR}` that is not set is a
 * problem at the agent's `a2a.auth` (unless `requireKeys` is off, for `troupe validate --no-keys`).
 */
export function remoteAgentSettings(
  config: PipelineConfig,
  env: Env,
  requireKeys: boolean,
): { agents: Map<string, RemoteAgentSettings>; problems: { path: PropertyKey[]; message: string }[] } {
  const agents = new Map<string, RemoteAgentSettings>();
  const problems: { path: PropertyKey[]; message: string }[] = [];
  for (const [name, agent] of Object.entries(config.agents)) {
    if (!isRemoteAgentConfig(agent)) continue;
    const { a2a } = agent;
    let token: string | undefined;
    if (a2a.auth !== undefined) {
      const variable = a2a.auth.slice(2, -1);
      // Set but empty counts as not set, as for API keys: it would go as a bare "Bearer" and be refused.
      token = env[variable] || undefined;
      if (token === undefined && requireKeys) {
        problems.push({
          path: ['agents', name, 'a2a', 'auth'],
          message: `agent ${name} sends the token in \${${variable}}, which is not set (or empty) in this environment`,
        });
      }
      // A token is never logged or published.
      registerSecret(token);
    }
    agents.set(name, {
      name,
      card: a2a.card,
      ...(token === undefined ? {} : { token }),
      requestTimeoutMs: a2a.timeout * 1_000,
      maxAttempts: a2a.maxAttempts,
      retryDelayMs: a2a.retryDelay * 1_000,
      pollIntervalMs: a2a.pollInterval * 1_000,
      answerTimeoutMs: (agent.approvalTimeout ?? config.defaults.approvalTimeout) * 1_000,
    });
  }
  return { agents, problems };
}
