/** A JSON Schema object, as given to a model for a tool's arguments or a structured reply. */
export type JsonSchema = Record<string, unknown>;

/** A tool the model may call, as the model sees it. */
export interface ToolDefinition {
  name: string;
  description: string;
  /** JSON Schema of the tool's arguments (an object schema). */
  parameters: JsonSchema;
}

/** One tool call the model asked for. `arguments` is the raw JSON text the model produced. */
export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}

/** The normalized conversation: the same shape for every provider. */
export type ChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string }
  | { role: 'assistant'; content: string; toolCalls?: ToolCall[] }
  | { role: 'tool'; toolCallId: string; name: string; content: string; isError?: boolean };

/** Token counts of one model call. */
export interface Usage {
  inputTokens: number;
  outputTokens: number;
  /** Input tokens read from the provider's prompt cache (a subset of inputTokens). */
  cachedTokens: number;
  /**
   * Input tokens written to the provider's prompt cache by this call (a subset of inputTokens, apart from
   * `cachedTokens`); Anthropic bills them above the plain input price. Absent means 0.
   */
  cacheWriteTokens?: number | undefined;
  /** Of `cacheWriteTokens`, those written with the 1-hour lifetime (billed higher than the 5-minute one). */
  cacheWrite1hTokens?: number | undefined;
}

/** How long a cached prompt prefix lives: the provider's 5-minute default, or 1 hour. */
export type CacheTtl = '5m' | '1h';

/**
 * A model entry's prompt caching (`models.<name>.cache`): `auto` (the default) marks and keys the cacheable
 * prefix where the provider supports it, with the lifetime the runtime suggests per request (`ModelRequest.cache`);
 * `off` sends no cache markers or keys at all; `{ ttl }` is `auto` with that lifetime on every request.
 */
export type CacheSetting = 'auto' | 'off' | { ttl: CacheTtl };

export type FinishReason = 'stop' | 'tool_calls' | 'length' | 'content_filter' | 'error';

/** Who is asking: lets a provider keep per-conversation state (the scripted one does) and label logs. */
export interface CallContext {
  taskId: string;
  pipeline: string;
  agent: string;
  stepId: string;
  /**
   * Which of the agent's model calls in this task this is, from 0, when the runtime knows it: the same call
   * made again by a resumed step has the same number. The scripted provider plays the reply at this position.
   */
  call?: number;
  /**
   * Why the call is made: `summary` when it condenses the older turns of a conversation grown past the agent's
   * context budget (its reply replaces them); absent for a turn of the conversation itself.
   */
  purpose?: 'summary';
}

/** One request to a model. */
export interface ModelRequest {
  messages: ChatMessage[];
  tools: ToolDefinition[];
  /** Ask the model for a JSON reply matching this schema, where the provider supports it natively. */
  responseSchema?: { name: string; schema: JsonSchema };
  temperature?: number;
  maxTokens?: number;
  context: CallContext;
  signal?: AbortSignal;
  /** Stream the reply; deltas go to `observer.onDelta`. The final response is the same as without streaming. */
  stream?: boolean;
  /**
   * The runtime's hint for prompt caching: `ttl: '1h'` when the conversation may wait longer than 5 minutes before
   * its next call (a step that can wait on a person, or one allowed to outlast 5 minutes). A provider whose entry
   * says `cache: off` ignores it; one with `{ ttl }` uses its own.
   */
  cache?: { ttl?: CacheTtl };
  observer?: ModelObserver;
}

/** A piece of a streamed reply: text, or part of a tool call's arguments. */
export type ModelDelta =
  | { type: 'text'; text: string }
  | { type: 'tool_call'; index: number; id?: string; name?: string; arguments: string };

/** What happened on the way to a reply: retries, fallbacks, streamed deltas. */
export interface RetryInfo {
  provider: string;
  model: string;
  /** The attempt that failed, from 1. */
  attempt: number;
  code: string;
  message: string;
  /** How long until the next attempt. */
  delayMs: number;
}

export interface FallbackInfo {
  from: string;
  to: string;
  code: string;
  message: string;
}

export interface ModelObserver {
  onDelta?(delta: ModelDelta): void;
  onRetry?(info: RetryInfo): void;
  onFallback?(info: FallbackInfo): void;
}

/** The model's reply, normalized. */
export interface ModelResponse {
  content: string;
  toolCalls: ToolCall[];
  usage: Usage;
  finishReason: FinishReason;
  /** The model that answered, as the provider names it. */
  model: string;
  /** The provider that answered (differs from the caller's when a fallback answered). */
  provider?: string;
}

/** One interface over every model vendor. A provider never retries on its own; the caller owns retries. */
export interface ModelProvider {
  /** Provider kind, e.g. `scripted`, `openai`. */
  readonly provider: string;
  /** The model this instance calls, e.g. `gpt-5-mini`. */
  readonly model: string;
  complete(request: ModelRequest): Promise<ModelResponse>;
}

export const zeroUsage = (): Usage => ({ inputTokens: 0, outputTokens: 0, cachedTokens: 0 });

export const addUsage = (a: Usage, b: Usage): Usage => {
  const sum: Usage = {
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    cachedTokens: a.cachedTokens + b.cachedTokens,
  };
  const writes = (a.cacheWriteTokens ?? 0) + (b.cacheWriteTokens ?? 0);
  const writes1h = (a.cacheWrite1hTokens ?? 0) + (b.cacheWrite1hTokens ?? 0);
  if (writes > 0) sum.cacheWriteTokens = writes;
  if (writes1h > 0) sum.cacheWrite1hTokens = writes1h;
  return sum;
};
