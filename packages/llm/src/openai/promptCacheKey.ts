import { createHash } from 'node:crypto';
import type { CallContext } from '../types.ts';

/** OpenAI refuses a longer `prompt_cache_key` (400 string_above_max_length). */
export const MAX_PROMPT_CACHE_KEY_LENGTH = 64;

/**
 * The `prompt_cache_key` of a pipeline's agent, `troupe:<pipeline>:<agent>`: every call of one agent (the same
 * instructions and tools at the front of the prompt) is routed to where that prefix is cached. A key that would be
 * too long is a hash of the same two names, so it is as stable and as distinct.
 *
 * @example
 * promptCacheKey({ pipeline: 'demo', agent: 'coder' }); // 'troupe:demo:coder'
 */
export function promptCacheKey(context: Pick<CallContext, 'pipeline' | 'agent'>): string {
  const key = `troupe:${context.pipeline}:${context.agent}`;
  if (key.length <= MAX_PROMPT_CACHE_KEY_LENGTH) return key;
  const digest = createHash('sha256').update(`${context.pipeline}\n${context.agent}`).digest('hex');
  return `troupe:${digest.slice(0, 32)}`;
}
