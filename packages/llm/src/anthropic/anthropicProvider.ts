import type Anthropic from '@anthropic-ai/sdk';
import { promptCacheTtl } from '../promptCache.ts';
import { toModelError } from '../sdkErrors.ts';
import type {
  CacheSetting,
  FinishReason,
  ModelProvider,
  ModelRequest,
  ModelResponse,
  ToolCall,
  Usage,
} from '../types.ts';
import { toAnthropicMessages, toAnthropicTools } from './anthropicMessages.ts';
import { markCacheBreakpoints } from './cacheBreakpoints.ts';

export interface AnthropicProviderOptions {
  model: string;
  apiKey: string;
  baseURL?: string;
  timeoutMs?: number;
  /** The Messages API requires a cap on output tokens; used when the request sets none. */
  defaultMaxTokens?: number;
  /**
   * Prompt caching (a model entry's `cache:`): `auto` (the default) marks cache breakpoints on the tools, the system
   * prompt and the conversation, with the lifetime the request hints (`ModelRequest.cache`, else 5 minutes);
   * `{ ttl }` the same with that lifetime always; `off` sends the request without any marker.
   */
  cache?: CacheSetting;
}

type RawUsage = {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
  /** Of the writes, those of each lifetime (absent from `message_delta`, which repeats only the totals). */
  cache_creation?: { ephemeral_1h_input_tokens?: number | null } | null;
};

/**
 * The Messages API through the official `@anthropic-ai/sdk`. Structured output is asked for with a tool the
 * model must call (`tool_choice`); its input is the reply. The SDK's own retries are off.
 */
export class AnthropicProvider implements ModelProvider {
  readonly provider = 'anthropic';
  readonly model: string;
  readonly #options: AnthropicProviderOptions;
  /** The base URL the SDK calls (the SDK's default, or its environment variable, when no `baseURL` is given). */
  #endpoint: string | undefined;
  /** Made on the first call: the SDK takes a while to load, and validating or starting a pipeline needs none. */
  #client: Promise<Anthropic> | undefined;
  readonly #defaultMaxTokens: number;

  constructor(options: AnthropicProviderOptions) {
    this.model = options.model;
    this.#options = options;
    this.#defaultMaxTokens = options.defaultMaxTokens ?? 4_096;
  }

  #sdk(): Promise<Anthropic> {
    const options = this.#options;
    this.#client ??= import('@anthropic-ai/sdk').then(({ default: Anthropic }) => {
      const client = new Anthropic({
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
    try {
      const reply = request.stream ? await this.#streamed(request) : await this.#plain(request);
      return this.#finish(request, reply);
    } catch (error) {
      throw toModelError(error, `anthropic ${this.model}`, this.#endpoint ?? this.#options.baseURL);
    }
  }

  #body(request: ModelRequest) {
    const { system, messages } = toAnthropicMessages(request.messages);
    const output = request.responseSchema;
    const tools = [
      ...toAnthropicTools(request.tools),
      ...(output
        ? [
            {
              name: output.name,
              description: 'Give your final answer by calling this tool with it as the input.',
              input_schema: { ...output.schema, type: 'object' } as Anthropic.Messages.Tool.InputSchema,
            },
          ]
        : []),
    ];
    // With other tools the model may still use them first; `any` makes it end with a tool, ours included.
    const toolChoice = output
      ? request.tools.length === 0
        ? { tool_choice: { type: 'tool' as const, name: output.name } }
        : { tool_choice: { type: 'any' as const } }
      : {};
    const ttl = promptCacheTtl(this.#options.cache ?? 'auto', request);
    const prompt =
      ttl === undefined
        ? { tools, system, messages }
        : markCacheBreakpoints({ tools, agentTools: request.tools.length > 0, system, messages }, ttl);
    return {
      model: this.model,
      max_tokens: request.maxTokens ?? this.#defaultMaxTokens,
      messages: prompt.messages,
      ...(prompt.system === '' || prompt.system === undefined ? {} : { system: prompt.system }),
      ...(prompt.tools.length > 0 ? { tools: prompt.tools } : {}),
      ...toolChoice,
      ...(request.temperature === undefined ? {} : { temperature: request.temperature }),
    };
  }

  async #plain(request: ModelRequest): Promise<Draft> {
    const message = await (await this.#sdk()).messages.create(this.#body(request), {
      ...(request.signal ? { signal: request.signal } : {}),
    });
    const draft: Draft = {
      content: '',
      toolCalls: [],
      usage: message.usage,
      stop: message.stop_reason,
      model: message.model,
    };
    for (const block of message.content) {
      if (block.type === 'text') draft.content += block.text;
      if (block.type === 'tool_use') {
        const input = block.input;
        draft.toolCalls.push({
          id: block.id,
          name: block.name,
          arguments: typeof input === 'string' ? input : JSON.stringify(input ?? {}),
        });
      }
    }
    return draft;
  }

  async #streamed(request: ModelRequest): Promise<Draft> {
    const stream = await (await this.#sdk()).messages.create(
      { ...this.#body(request), stream: true },
      { ...(request.signal ? { signal: request.signal } : {}) },
    );
    const draft: Draft = { content: '', toolCalls: [], usage: {}, stop: null, model: this.model };
    const byBlock = new Map<number, ToolCall>();
    for await (const event of stream) {
      switch (event.type) {
        case 'message_start':
          draft.model = event.message.model || draft.model;
          draft.usage = { ...event.message.usage };
          break;
        case 'content_block_start':
          if (event.content_block.type === 'tool_use') {
            const call = { id: event.content_block.id, name: event.content_block.name, arguments: '' };
            byBlock.set(event.index, call);
            draft.toolCalls.push(call);
            request.observer?.onDelta?.({
              type: 'tool_call',
              index: event.index,
              id: call.id,
              name: call.name,
              arguments: '',
            });
          }
          break;
        case 'content_block_delta':
          if (event.delta.type === 'text_delta') {
            draft.content += event.delta.text;
            request.observer?.onDelta?.({ type: 'text', text: event.delta.text });
          } else if (event.delta.type === 'input_json_delta') {
            const call = byBlock.get(event.index);
            if (call) call.arguments += event.delta.partial_json;
            request.observer?.onDelta?.({
              type: 'tool_call',
              index: event.index,
              arguments: event.delta.partial_json,
            });
          }
          break;
        case 'message_delta':
          draft.stop = event.delta.stop_reason ?? draft.stop;
          draft.usage = { ...draft.usage, ...definedOnly(event.usage) };
          break;
      }
    }
    // A tool called with no arguments streams no input at all; valid input is re-encoded as the API's JSON
    // would be, so a streamed reply equals a plain one. Malformed input stays as sent, for the tool error.
    for (const call of draft.toolCalls)
      call.arguments = canonicalJson(call.arguments === '' ? '{}' : call.arguments);
    return draft;
  }

  /** Turns a draft into the response; a call of the structured-output tool becomes the reply text. */
  #finish(request: ModelRequest, draft: Draft): ModelResponse {
    const outputName = request.responseSchema?.name;
    const answer = outputName ? draft.toolCalls.find((c) => c.name === outputName) : undefined;
    return {
      content: answer ? answer.arguments : draft.content,
      toolCalls: answer ? [] : draft.toolCalls,
      usage: usageOf(draft.usage),
      finishReason: answer ? 'stop' : finishReasonOf(draft.stop),
      model: draft.model,
      provider: this.provider,
    };
  }
}

function canonicalJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text));
  } catch {
    return text;
  }
}

interface Draft {
  content: string;
  toolCalls: ToolCall[];
  usage: RawUsage;
  stop: string | null;
  model: string;
}

/**
 * Anthropic counts cache reads and writes apart from input; ours counts them in, with reads as `cachedTokens`,
 * writes as `cacheWriteTokens` and the 1-hour part of the writes as `cacheWrite1hTokens` (absent when 0).
 */
function usageOf(usage: RawUsage): Usage {
  const cached = usage.cache_read_input_tokens ?? 0;
  const writes = usage.cache_creation_input_tokens ?? 0;
  const writes1h = Math.min(usage.cache_creation?.ephemeral_1h_input_tokens ?? 0, writes);
  return {
    inputTokens: (usage.input_tokens ?? 0) + cached + writes,
    outputTokens: usage.output_tokens ?? 0,
    cachedTokens: cached,
    ...(writes > 0 ? { cacheWriteTokens: writes } : {}),
    ...(writes1h > 0 ? { cacheWrite1hTokens: writes1h } : {}),
  };
}

function definedOnly(usage: RawUsage): RawUsage {
  return Object.fromEntries(Object.entries(usage).filter(([, v]) => v !== null && v !== undefined));
}

const FINISH: Record<string, FinishReason> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  tool_use: 'tool_calls',
  max_tokens: 'length',
  refusal: 'content_filter',
};

const finishReasonOf = (reason: string | null): FinishReason => FINISH[reason ?? 'end_turn'] ?? 'stop';
