import type OpenAI from 'openai';
import { ModelError } from '../errors.ts';
import { promptCacheTtl } from '../promptCache.ts';
import { safeEndpoint, toModelError } from '../sdkErrors.ts';
import type {
  CacheSetting,
  FinishReason,
  ModelProvider,
  ModelRequest,
  ModelResponse,
  ToolCall,
  Usage,
} from '../types.ts';
import { toOpenAIMessages, toOpenAITools } from './openaiMessages.ts';
import { promptCacheKey } from './promptCacheKey.ts';

export interface OpenAIProviderOptions {
  /** `openai`, or `openai-compatible` for Ollama, vLLM, llama.cpp, LiteLLM and the like. */
  provider?: 'openai' | 'openai-compatible';
  model: string;
  apiKey: string;
  baseURL?: string;
  /** Per-call timeout in milliseconds. */
  timeoutMs?: number;
  /**
   * Prompt caching (a model entry's `cache:`): `auto` (the default) sends a `prompt_cache_key` per pipeline agent;
   * `{ ttl: '1h' }` also asks `openai` for 24-hour retention (`prompt_cache_retention: '24h'`); `off` sends
   * neither. A server that refuses these fields by name (a strict compatible server) is asked again without
   * them, and this provider sends them no more.
   */
  cache?: CacheSetting;
  /** Told once, when a server refused the prompt-cache fields; `process.emitWarning` if not given. */
  onWarning?: (message: string) => void;
}

/** What prompt caching adds to a request body. */
type CacheFields = { prompt_cache_key?: string; prompt_cache_retention?: '24h' };

const CACHE_FIELDS = ['prompt_cache_key', 'prompt_cache_retention'] as const;

/** The statuses a server refuses a field it does not know with: 400, or 422 from FastAPI-style validation. */
const REFUSAL_STATUSES = new Set([400, 422]);

/**
 * Chat Completions through the official `openai` SDK. The SDK's own retries are off: the caller's retry
 * policy decides, so every retry is seen and reported.
 */
export class OpenAIProvider implements ModelProvider {
  readonly provider: 'openai' | 'openai-compatible';
  readonly model: string;
  readonly #options: OpenAIProviderOptions;
  /** The base URL the SDK calls (the SDK's default, or its environment variable, when no `baseURL` is given). */
  #endpoint: string | undefined;
  /** Made on the first call: the SDK takes a while to load, and validating or starting a pipeline needs none. */
  #client: Promise<OpenAI> | undefined;
  /** Set once the server refused the prompt-cache fields: later requests carry none. */
  #cacheFieldsRefused = false;

  constructor(options: OpenAIProviderOptions) {
    this.provider = options.provider ?? 'openai';
    this.model = options.model;
    this.#options = options;
  }

  #sdk(): Promise<OpenAI> {
    const options = this.#options;
    this.#client ??= import('openai').then(({ default: OpenAI }) => {
      const client = new OpenAI({
        apiKey: options.apiKey,
        maxRetries: 0,
        timeout: options.timeoutMs ?? 120_000,
        ...(options.baseURL === undefined ? {} : { baseURL: options.baseURL }),
      });
      this.#endpoint = client.baseURL;
      return client;
    });
    return this.#client;
  }

  async complete(request: ModelRequest): Promise<ModelResponse> {
    const label = `${this.provider} ${this.model}`;
    try {
      return await this.#sendCaching(request, label);
    } catch (error) {
      throw toModelError(error, label, this.#endpoint ?? this.#options.baseURL);
    }
  }

  /** Sends with the prompt-cache fields; a server that refuses them gets the request again without them. */
  async #sendCaching(request: ModelRequest, label: string): Promise<ModelResponse> {
    const cache = this.#cacheFields(request);
    try {
      return await this.#send(request, cache);
    } catch (error) {
      if (Object.keys(cache).length === 0 || !this.#refusesCacheFields(error)) throw error;
      this.#giveUpCacheFields(label, error);
      return this.#send(request, {});
    }
  }

  #send(request: ModelRequest, cache: CacheFields): Promise<ModelResponse> {
    return request.stream ? this.#streamed(request, cache) : this.#plain(request, cache);
  }

  /**
   * A key per pipeline agent, so its calls land where its prefix is cached; 24-hour retention only when the
   * entry asks for an hour itself (OpenAI then keeps the prompt's cache up to a day, and not every model takes it).
   */
  #cacheFields(request: ModelRequest): CacheFields {
    const setting = this.#options.cache ?? 'auto';
    if (this.#cacheFieldsRefused || promptCacheTtl(setting, request) === undefined) return {};
    const key = promptCacheKey(request.context);
    const retention = this.provider === 'openai' && typeof setting === 'object' && setting.ttl === '1h';
    return retention ? { prompt_cache_key: key, prompt_cache_retention: '24h' } : { prompt_cache_key: key };
  }

  /**
   * Whether a failed call was refused for a prompt-cache field: a 400 (or 422) whose error names one, in its
   * message (vLLM: `prompt_cache_key\n  Extra inputs are not permitted`) or its `param`.
   */
  #refusesCacheFields(error: unknown): boolean {
    const failure = error as { status?: unknown; message?: unknown; error?: unknown } | null;
    if (typeof failure?.status !== 'number' || !REFUSAL_STATUSES.has(failure.status)) return false;
    const text = `${String(failure.message)} ${JSON.stringify(failure.error ?? null)}`;
    return CACHE_FIELDS.some((field) => text.includes(field));
  }

  #giveUpCacheFields(label: string, error: unknown): void {
    if (this.#cacheFieldsRefused) return;
    this.#cacheFieldsRefused = true;
    const at = this.#endpoint === undefined ? '' : ` at ${safeEndpoint(this.#endpoint)}`;
    const status = (error as { status?: number }).status;
    const message =
      `${label}: the server${at} refused the prompt-cache fields (HTTP ${status}); its calls are sent without ` +
      "them from now on. Set `cache: off` on the model's entry to not send them at all.";
    if (this.#options.onWarning) this.#options.onWarning(message);
    else process.emitWarning(message, { code: 'TROUPE_PROMPT_CACHE_REFUSED' });
  }

  #body(request: ModelRequest, cache: CacheFields) {
    return {
      model: this.model,
      messages: toOpenAIMessages(request.messages),
      ...(request.tools.length > 0 ? { tools: toOpenAITools(request.tools) } : {}),
      ...(request.temperature === undefined ? {} : { temperature: request.temperature }),
      // Compatible servers mostly know only the older name.
      ...(request.maxTokens === undefined
        ? {}
        : this.provider === 'openai'
          ? { max_completion_tokens: request.maxTokens }
          : { max_tokens: request.maxTokens }),
      ...(request.responseSchema
        ? {
            response_format: {
              type: 'json_schema' as const,
              json_schema: {
                name: request.responseSchema.name,
                schema: request.responseSchema.schema,
                strict: false,
              },
            },
          }
        : {}),
      ...cache,
    };
  }

  async #plain(request: ModelRequest, cache: CacheFields): Promise<ModelResponse> {
    const completion = await (await this.#sdk()).chat.completions.create(this.#body(request, cache), {
      ...(request.signal ? { signal: request.signal } : {}),
    });
    const choice = completion.choices[0];
    if (!choice)
      throw new ModelError('invalid_response', `${this.provider} ${this.model}: reply has no choices`, {
        retryable: true,
      });
    const toolCalls = (choice.message.tool_calls ?? []).flatMap((call): ToolCall[] =>
      call.type === 'function'
        ? [{ id: call.id, name: call.function.name, arguments: call.function.arguments }]
        : [],
    );
    return {
      content: choice.message.content ?? '',
      toolCalls,
      usage: usageOf(completion.usage),
      finishReason: finishReasonOf(choice.finish_reason),
      model: completion.model || this.model,
      provider: this.provider,
    };
  }

  async #streamed(request: ModelRequest, cache: CacheFields): Promise<ModelResponse> {
    const stream = await (await this.#sdk()).chat.completions.create(
      { ...this.#body(request, cache), stream: true, stream_options: { include_usage: true } },
      { ...(request.signal ? { signal: request.signal } : {}) },
    );
    let content = '';
    let model = this.model;
    let finish: string | null = null;
    let usage: Usage = { inputTokens: 0, outputTokens: 0, cachedTokens: 0 };
    const calls: { id: string; name: string; arguments: string }[] = [];
    for await (const chunk of stream) {
      model = chunk.model || model;
      if (chunk.usage) usage = usageOf(chunk.usage);
      const choice = chunk.choices[0];
      if (!choice) continue;
      finish = choice.finish_reason ?? finish;
      const text = choice.delta.content;
      if (text) {
        content += text;
        request.observer?.onDelta?.({ type: 'text', text });
      }
      for (const part of choice.delta.tool_calls ?? []) {
        const call = calls[part.index] ?? { id: '', name: '', arguments: '' };
        calls[part.index] = call;
        if (part.id) call.id = part.id;
        if (part.function?.name) call.name += part.function.name;
        if (part.function?.arguments) call.arguments += part.function.arguments;
        request.observer?.onDelta?.({
          type: 'tool_call',
          index: part.index,
          ...(part.id ? { id: part.id } : {}),
          ...(part.function?.name ? { name: part.function.name } : {}),
          arguments: part.function?.arguments ?? '',
        });
      }
    }
    return {
      content,
      toolCalls: calls.filter((c) => c !== undefined),
      usage,
      finishReason: finishReasonOf(finish),
      model,
      provider: this.provider,
    };
  }
}

function usageOf(usage: OpenAI.Completions.CompletionUsage | undefined | null): Usage {
  return {
    inputTokens: usage?.prompt_tokens ?? 0,
    outputTokens: usage?.completion_tokens ?? 0,
    cachedTokens: usage?.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

const FINISH: Record<string, FinishReason> = {
  stop: 'stop',
  tool_calls: 'tool_calls',
  function_call: 'tool_calls',
  length: 'length',
  content_filter: 'content_filter',
};

const finishReasonOf = (reason: string | null): FinishReason => FINISH[reason ?? 'stop'] ?? 'stop';
