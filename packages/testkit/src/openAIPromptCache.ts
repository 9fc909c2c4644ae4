import { estimateTokens, type FakeInputUsage } from './fakeModelServer.ts';

/** Prompts shorter than this are never cached; a hit covers at least this many tokens. */
export const MIN_CACHED_TOKENS = 1024;
/** Past the minimum, a hit grows in steps of this many tokens. */
export const CACHE_STEP_TOKENS = 128;
/** In-memory retention: OpenAI clears a prefix after 5 to 10 minutes unused; the fake keeps it the 10. */
const IN_MEMORY_MS = 10 * 60_000;
/** `prompt_cache_retention: '24h'` keeps a prefix up to a day. */
const EXTENDED_MS = 24 * 60 * 60_000;
/** Prompts kept per cache key and model; the oldest goes first. */
const PROMPTS_KEPT = 256;

interface StoredPrompt {
  text: string;
  expiresAt: number;
}

/**
 * The automatic prompt cache of a fake OpenAI server: a prompt of 1,024 tokens or more is kept, and a later prompt
 * for the same model and `prompt_cache_key` (or none) reads the longest prefix it shares with one kept, counted in
 * 128-token steps from 1,024 up, as `prompt_tokens_details.cached_tokens`. There is no write surcharge, so nothing
 * reports writes. A prompt lives 10 minutes from its last use (24 hours with `prompt_cache_retention: '24h'`).
 */
export class OpenAIPromptCache {
  readonly #byKey = new Map<string, StoredPrompt[]>();
  readonly #now: () => number;

  constructor(now: () => number) {
    this.#now = now;
  }

  /** Reads and keeps the request's prompt; `inputTokens` is the whole prompt (OpenAI's `prompt_tokens`). */
  account(body: OpenAIBody): FakeInputUsage {
    const inputTokens = estimateTokens(body);
    const usage = { inputTokens, cachedTokens: 0, cacheWriteTokens: 0, cacheWrite1hTokens: 0 };
    if (inputTokens < MIN_CACHED_TOKENS) return usage;

    const now = this.#now();
    const key = `${String(body.model)}\n${typeof body.prompt_cache_key === 'string' ? body.prompt_cache_key : ''}`;
    const kept = (this.#byKey.get(key) ?? []).filter((prompt) => prompt.expiresAt > now);
    const text = promptText(body);
    let best: StoredPrompt | undefined;
    let shared = 0;
    for (const prompt of kept) {
      const length = commonPrefixLength(prompt.text, text);
      if (length > shared) [best, shared] = [prompt, length];
    }
    const retention = body.prompt_cache_retention === '24h' ? EXTENDED_MS : IN_MEMORY_MS;
    if (best) best.expiresAt = Math.max(best.expiresAt, now + retention);

    // A kept prompt that this one extends is replaced by it, so a conversation keeps one entry as it grows.
    const others = kept.filter((prompt) => !text.startsWith(prompt.text));
    others.push({ text, expiresAt: now + retention });
    this.#byKey.set(key, others.slice(-PROMPTS_KEPT));

    usage.cachedTokens = Math.min(inputTokens, steppedTokens(Math.floor(shared / 4)));
    return usage;
  }
}

/** The parts of a Chat Completions body that make the prompt. */
export interface OpenAIBody {
  model?: unknown;
  messages?: unknown;
  tools?: unknown;
  response_format?: unknown;
  prompt_cache_key?: unknown;
  prompt_cache_retention?: unknown;
}

/**
 * The prompt as the model reads it, in order: tool definitions, the response schema, then one line per message,
 * so the prompt of a conversation's next turn starts with this turn's.
 */
function promptText(body: OpenAIBody): string {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  const head = [JSON.stringify(body.tools ?? []), JSON.stringify(body.response_format ?? null)];
  return [...head, ...messages.map((message) => JSON.stringify(message))].join('\n');
}

/** 0 below the minimum, else the minimum plus whole steps. */
function steppedTokens(tokens: number): number {
  if (tokens < MIN_CACHED_TOKENS) return 0;
  return MIN_CACHED_TOKENS + Math.floor((tokens - MIN_CACHED_TOKENS) / CACHE_STEP_TOKENS) * CACHE_STEP_TOKENS;
}

function commonPrefixLength(a: string, b: string): number {
  const end = Math.min(a.length, b.length);
  let i = 0;
  while (i < end && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}
