import type { AgentStepReply, AgentStepRequest } from '@troupe/protocol';
import type { Logger } from '../logging/index.ts';
import type { HostedAgent } from './remoteAgent.ts';
import { failedReply } from './stepReply.ts';

/** Which versions of its pipeline's agents a host can run. */
export interface AgentVersions {
  pipeline: string;
  /** The hash of the pipeline version the host's own agents come from. */
  version?: string | undefined;
  /** An agent as another version defines it; see `AgentHostOptions.agentOf`. */
  agentOf?: ((version: string, agent: string) => Promise<HostedAgent | string | undefined>) | undefined;
  logger: Logger;
}

/** Whether a step is of the host's own version (or of none), so the host's own agent runs it as given. */
export const isOwnVersion = (request: AgentStepRequest, versions: AgentVersions): boolean =>
  request.version === undefined || request.version === versions.version;

/**
 * The agent a step of agent `name` runs: the host's own (`own`) for a step of its version (or of none), else as the
 * step's version defines it; a reply saying why when there is none (`version_unavailable`), or when that version
 * cannot be read now (`journal_unavailable`, so the workflow sends the step again).
 */
export async function agentForStep(
  own: HostedAgent | undefined,
  name: string,
  request: AgentStepRequest,
  versions: AgentVersions,
): Promise<HostedAgent | AgentStepReply> {
  const { pipeline, agentOf, logger } = versions;
  const version = request.version;
  if (own && isOwnVersion(request, versions)) return own;
  const short = version?.slice(0, 12);
  const unavailable = (why: string) => failedReply(request.stepId, 'version_unavailable', why);
  if (version === undefined)
    return unavailable(`agent ${name} of pipeline ${pipeline} is served here only for older versions`);
  if (!agentOf)
    return unavailable(`this host runs only its own version of pipeline ${pipeline}, not ${short}`);
  try {
    const defined = await agentOf(version, name);
    if (typeof defined === 'string') return unavailable(defined);
    return (
      defined ?? unavailable(`version ${short} of pipeline ${pipeline} is not stored or has no agent ${name}`)
    );
  } catch (error) {
    logger.error({ err: error, version, agent: name }, `cannot load agent ${name} of version ${short}`);
    return failedReply(
      request.stepId,
      'journal_unavailable',
      `cannot load agent ${name} of version ${short} of pipeline ${pipeline}: ${(error as Error).message}`,
    );
  }
}
