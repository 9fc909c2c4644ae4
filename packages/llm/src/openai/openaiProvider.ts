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
   * neither. A server that refuses them (a strict compatible server: a 400 or 422 that names one, or names no
   * field at all) is asked once more without them, and when that answers this provider sends them no more.
   */
  cache?: CacheSetting;
  /** Told once, when a server refused the prompt-cache fields; `process.emitWarning` if not given. */
  onWarning?: (message: string) => void;
}

/** What prompt caching adds to a request body. */
type CacheFields = { prompt_cache_key?: string; prompt_cache_retention?: '24h' };

type CacheField = keyof CacheFields;

const CACHE_FIELDS: readonly CacheField[] = ['prompt_cache_key', 'prompt_cache_retention'];

/** What a failed call's first retry leaves out: the cache fields it blames, and whether it named them. */
interface Suspects {
  fields: CacheField[];
  named: boolean;
}

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
  /** The prompt-cache fields a server refused (and took the request without): later requests leave them out. */
  readonly #refusedFields = new Set<CacheField>();

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

  /**
   * Sends with the prompt-cache fields. A refusal that may be of them (see {@link suspectsOf}) gets the request once
   * more without them; only when that one answers are they given up for good. When it fails too, a refusal that
   * named nothing fails with its own error if the retry failed with the same status (the fields were not the
   * problem), else with the retry's.
   */
  async #sendCaching(request: ModelRequest, label: string): Promise<ModelResponse> {
    const cache = this.#cacheFields(request);
    try {
      return await this.#send(request, cache);
    } catch (error) {
      const suspects = suspectsOf(error, cache);
      if (suspects.fields.length === 0) throw error;
      const without = { ...cache };
      for (const field of suspects.fields) delete without[field];
      let response: ModelResponse;
      try {
        response = await this.#send(request, without);
      } catch (retryError) {
        throw !suspects.named && statusOf(retryError) === statusOf(error) ? error : retryError;
      }
      this.#giveUpCacheFields(label, error, suspects);
      return response;
    }
  }

  #send(request: ModelRequest, cache: CacheFields): Promise<ModelResponse> {
    return request.stream ? this.#streamed(request, cache) : this.#plain(request, cache);
  }

  /**
   * A key per pipeline agent, so its calls land where its prefix is cached; 24-hour retention only when the
   * entry asks for an hour itself (OpenAI then keeps the prompt's cache up to a day, and not every model takes it).
   * A field the server refused is left out.
   */
  #cacheFields(request: ModelRequest): CacheFields {
    const setting = this.#options.cache ?? 'auto';
    if (promptCacheTtl(setting, request) === undefined) return {};
    const fields: CacheFields = {};
    if (!this.#refusedFields.has('prompt_cache_key'))
      fields.prompt_cache_key = promptCacheKey(request.context);
    const retention = this.provider === 'openai' && typeof setting === 'object' && setting.ttl === '1h';
    if (retention && !this.#refusedFields.has('prompt_cache_retention'))
      fields.prompt_cache_retention = '24h';
    return fields;
  }

  #giveUpCacheFields(label: string, error: unknown, suspects: Suspects): void {
    const fields = suspects.fields.filter((field) => !this.#refusedFields.has(field));
    if (fields.length === 0) return;
    for (const field of fields) this.#refusedFields.add(field);
    const at = this.#endpoint === undefined ? '' : ` at ${safeEndpoint(this.#endpoint)}`;
    const named = `the prompt-cache field${fields.length === 1 ? '' : 's'} ${fields.join(' and ')}`;
    const what = suspects.named
      ? `refused ${named} (HTTP ${statusOf(error)})`
      : `refused a request with ${named} (HTTP ${statusOf(error)}, naming no field) and took the request without ${fields.length === 1 ? 'it' : 'them'}`;
    const fix = fields.includes('prompt_cache_key')
      ? "Set `cache: off` on the model's entry to not send them at all."
      : "Leave `ttl: 1h` out of the model's `cache:` to not ask for 24-hour retention.";
    const message =
      `${label}: the server${at} ${what}; its calls are sent without ` +
      `${fields.length === 1 ? 'it' : 'them'} from now on. ${fix}`;
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

function statusOf(error: unknown): unknown {
  return (error as { status?: unknown } | null)?.status;
}

/**
 * The statuses a server refuses a field it does not know with: 400, or 422 from FastAPI-style validation (whose
 * body, `{ detail: [...] }`, the SDK does not read: it reports `422 status code (no body)`, as it does vLLM's
 * before 0.10, `{ object: 'error', message }`).
 */
const REFUSAL_STATUSES = new Set([400, 422]);

/**
 * Which of the cache fields sent a failed call may have been refused for. A 400 or 422 that names some of them
 * (in its message, as vLLM's `prompt_cache_key\n  Extra inputs are not permitted`, or its `param`): those. One
 * that names another parameter (`param`): none. One that names nothing, often because the SDK could not read its
 * body: all of them.
 */
function suspectsOf(error: unknown, sent: CacheFields): Suspects {
  const failure = error as { status?: unknown; message?: unknown; error?: unknown; param?: unknown } | null;
  const fields = CACHE_FIELDS.filter((field) => sent[field] !== undefined);
  if (fields.length === 0 || typeof failure?.status !== 'number' || !REFUSAL_STATUSES.has(failure.status)) {
    return { fields: [], named: false };
  }
  const text = `${String(failure.message)} ${JSON.stringify(failure.error ?? null)}`;
  const named = fields.filter((field) => text.includes(field));
  if (named.length > 0) return { fields: named, named: true };
  const otherParam = typeof failure.param === 'string' && failure.param !== '';
  return { fields: otherParam ? [] : fields, named: false };
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
