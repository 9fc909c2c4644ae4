/** What prompt caching adds to a request body, Anthropic's breakpoints and OpenAI's fields. */
const CACHE_MARKERS = new Set(['cache_control', 'prompt_cache_key', 'prompt_cache_retention']);

// biome-ignore lint/suspicious/noExplicitAny: request bodies are whatever JSON the SDKs sent.
type Json = any;

/**
 * A request body (or any part of one) with every prompt-cache marker key taken out, at any depth: what a test
 * compares to the body sent with caching off, since the markers are all caching may add.
 *
 * @example
 * expect(withoutPromptCache(fake.requests[1].body)).toEqual(withoutPromptCache(fake.requests[0].body));
 */
export function withoutPromptCache(value: Json): Json {
  if (Array.isArray(value)) return value.map(withoutPromptCache);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([key]) => !CACHE_MARKERS.has(key))
      .map(([key, v]) => [key, withoutPromptCache(v)]),
  );
}

/**
 * An Anthropic Messages body as the model reads it: no cache markers, the system prompt as its text (caching sends
 * it as text blocks to carry a marker), every message's content as blocks.
 */
export function anthropicPromptSeen(body: Json): Json {
  const { system, messages, ...rest } = withoutPromptCache(body);
  return {
    ...rest,
    ...(system === undefined
      ? {}
      : {
          system: typeof system === 'string' ? system : system.map((b: { text: string }) => b.text).join(''),
        }),
    messages: messages.map((m: Json) => ({
      ...m,
      content: typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content,
    })),
  };
}
