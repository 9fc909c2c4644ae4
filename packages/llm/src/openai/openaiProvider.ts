import type OpenAI from 'openai';
import { ModelError } from '../errors.ts';
import { toModelError } from '../sdkErrors.ts';
import type { FinishReason, ModelProvider, ModelRequest, ModelResponse, ToolCall, Usage } from '../types.ts';
import { toOpenAIMessages, toOpenAITools } from './openaiMessages.ts';

export interface OpenAIProviderOptions {
  /** `openai`, or `openai-compatible` for Ollama, vLLM, llama.cpp, LiteLLM and the like. */
  provider?: 'openai' | 'openai-compatible';
  model: string;
  apiKey: string;
  baseURL?: string;
  /** Per-call timeout in milliseconds. */
  timeoutMs?: number;
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
      return request.stream ? await this.#streamed(request) : await this.#plain(request);
    } catch (error) {
      throw toModelError(error, label, this.#endpoint ?? this.#options.baseURL);
    }
  }

  #body(request: ModelRequest) {
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
    };
  }

  async #plain(request: ModelRequest): Promise<ModelResponse> {
    const completion = await (await this.#sdk()).chat.completions.create(this.#body(request), {
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

  async #streamed(request: ModelRequest): Promise<ModelResponse> {
    const stream = await (await this.#sdk()).chat.completions.create(
      { ...this.#body(request), stream: true, stream_options: { include_usage: true } },
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
