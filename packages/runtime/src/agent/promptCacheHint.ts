import type { ModelRequest } from '@troupe/llm';
import type { AgentStepRequest } from '@troupe/protocol';
import type { AgentDefinition } from './agentDefinition.ts';

/** How long a provider keeps a cached prompt prefix unless asked for longer: a quieter conversation is written again. */
const DEFAULT_LIFETIME_MS = 5 * 60_000;

/**
 * The lifetime a step's model calls ask the provider to keep their prompt cached (`ModelRequest.cache`): one hour
 * when the step can wait on a person (the agent has `ask_human`, or a permission rule that says `ask`, and there is
 * someone to ask) for 5 minutes or more — neither its timeout nor the person's is shorter — so a step that resumes
 * after the answer reads its prefix instead of writing it again. Otherwise none: the provider's 5 minutes outlast
 * the gap between a step's calls, and a 1-hour write costs more (Anthropic: 2× input instead of 1.25×).
 *
 * A step's own timeout alone does not ask for the hour: the default (600 s) would ask it of every step, though a
 * step's calls follow each other within seconds unless something waits on a person.
 */
export function promptCacheHint(
  agent: AgentDefinition,
  request: Pick<AgentStepRequest, 'timeoutMs'>,
  canAskPeople: boolean,
): ModelRequest['cache'] {
  const asksPeople = agent.tools.includes('ask_human') || agent.rules.some((rule) => rule.decision === 'ask');
  if (!canAskPeople || !asksPeople) return undefined;
  const longestWait = Math.min(
    request.timeoutMs ?? Number.POSITIVE_INFINITY,
    agent.approvalTimeoutMs ?? Number.POSITIVE_INFINITY,
  );
  return longestWait >= DEFAULT_LIFETIME_MS ? { ttl: '1h' } : undefined;
}
