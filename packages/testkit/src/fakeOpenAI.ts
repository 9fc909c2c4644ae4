import {
  bearerToken,
  type FakeErrorReply,
  type FakeExchange,
  type FakeMessageReply,
  type FakeModelServer,
  type FakeProtocol,
  type FakeRefusal,
  type FakeReply,
  type FakeUsage,
  finishReasonOf,
  openEventStream,
  type RecordedRequest,
  splitText,
  startFakeModelServer,
  uncachedInput,
  usageOf,
  writeEvent,
  writeJson,
} from './fakeModelServer.ts';
import { type OpenAIBody, OpenAIPromptCache } from './openAIPromptCache.ts';

export interface FakeOpenAIOptions {
  /** Replies to serve first; more can be added with `enqueue`. */
  replies?: FakeReply[];
  /** The model every response reports; by default the request's model is echoed. */
  model?: string;
  /** When set, a request whose bearer token differs gets 401 `invalid_api_key` (and consumes no reply). */
  requireApiKey?: string;
  /**
   * Top-level body fields this server does not know, e.g. `['prompt_cache_key']`. A request carrying any of them gets
   * 400 naming each one, as a compatible server that forbids extra fields (vLLM's pydantic models) answers, and
   * consumes no reply.
   */
  rejectUnknownFields?: string[];
  /**
   * The body that refusal comes in: `vllm` (the default) as vLLM 0.10 and later, `{ error: { message, … } }`, 400;
   * `vllm-legacy` as vLLM before 0.10, `{ object: 'error', message, … }` with no `error` key, 400; `fastapi` as a
   * FastAPI server's validation, `{ detail: [{ loc: ['body', field], msg, … }] }`, 422. The `openai` SDK finds no
   * `error` in the last two and reports only the status (`400 status code (no body)`).
   */
  refusalShape?: RefusalShape;
  /**
   * Whether prompts are cached automatically, as OpenAI does (default true): a prompt of 1,024 tokens or more reads
   * the prefix it shares with an earlier one of the same model and `prompt_cache_key`, in `cached_tokens`. False
   * plays a server without a prompt cache (`cached_tokens` always 0).
   */
  promptCache?: boolean;
  /** The clock cached prompts expire on, in ms (default `Date.now`). */
  now?: () => number;
}

/** How a strict compatible server words its refusal of unknown fields; see `FakeOpenAIOptions.refusalShape`. */
export type RefusalShape = 'vllm' | 'vllm-legacy' | 'fastapi';

/** pydantic's validation message for fields it does not know, one entry per field, as vLLM sends it. */
function pydanticMessage(request: RecordedRequest, found: readonly string[]): string {
  const lines = found.flatMap((field) => {
    const value = request.body[field];
    return [
      field,
      `  Extra inputs are not permitted [type=extra_forbidden, input_value=${pythonRepr(value)}, input_type=${pythonType(value)}]`,
    ];
  });
  const count = `${found.length} validation error${found.length === 1 ? '' : 's'} for ChatCompletionRequest`;
  return [count, ...lines].join('\n');
}

const REFUSALS: Record<RefusalShape, (request: RecordedRequest, found: readonly string[]) => FakeRefusal> = {
  vllm: (request, found) => ({
    status: 400,
    body: {
      error: { message: pydanticMessage(request, found), type: 'BadRequestError', param: null, code: 400 },
    },
  }),
  'vllm-legacy': (request, found) => ({
    status: 400,
    body: {
      object: 'error',
      message: pydanticMessage(request, found),
      type: 'BadRequestError',
      param: null,
      code: 400,
    },
  }),
  fastapi: (request, found) => ({
    status: 422,
    body: {
      detail: found.map((field) => ({
        type: 'extra_forbidden',
        loc: ['body', field],
        msg: 'Extra inputs are not permitted',
        input: request.body[field],
      })),
    },
  }),
};

/**
 * The refusal a strict compatible server sends for fields it does not know (`prompt_cache_key\n  Extra inputs are
 * not permitted [type=extra_forbidden, …]` in vLLM's words), in the body `shape` its version or framework uses.
 */
function unknownFieldsRefusal(
  request: RecordedRequest,
  unknown: readonly string[],
  shape: RefusalShape,
): FakeRefusal | undefined {
  const found = unknown.filter((field) => Object.hasOwn(request.body, field));
  return found.length === 0 ? undefined : REFUSALS[shape](request, found);
}

function pythonRepr(value: unknown): string {
  return typeof value === 'string' ? `'${value}'` : JSON.stringify(value);
}

function pythonType(value: unknown): string {
  if (value === null) return 'NoneType';
  if (Array.isArray(value)) return 'list';
  if (typeof value === 'string') return 'str';
  if (typeof value === 'boolean') return 'bool';
  if (typeof value === 'number') return Number.isInteger(value) ? 'int' : 'float';
  return 'dict';
}

/** OpenAI's error `type` and `code` for a status when the script gives no type. */
const ERROR_KINDS: Record<number, { type: string; code: string | null }> = {
  400: { type: 'invalid_request_error', code: null },
  401: { type: 'invalid_request_error', code: 'invalid_api_key' },
  429: { type: 'rate_limit_error', code: 'rate_limit_exceeded' },
};

function errorKind(status: number): { type: string; code: string | null } {
  return (
    ERROR_KINDS[status] ??
    (status >= 500 ? { type: 'server_error', code: null } : { type: 'invalid_request_error', code: null })
  );
}

interface ToolCallOut {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

function toolCallsOf(exchange: FakeExchange, reply: FakeMessageReply): ToolCallOut[] {
  return (reply.toolCalls ?? []).map((call) => ({
    id: call.id ?? exchange.nextId('call_'),
    type: 'function',
    function: { name: call.name, arguments: call.arguments },
  }));
}

function usageBody(usage: FakeUsage) {
  return {
    prompt_tokens: usage.inputTokens,
    completion_tokens: usage.outputTokens,
    total_tokens: usage.inputTokens + usage.outputTokens,
    prompt_tokens_details: { cached_tokens: usage.cachedTokens, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: 0,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

function writeCompletion(exchange: FakeExchange, reply: FakeMessageReply, usage: FakeUsage): void {
  const toolCalls = toolCallsOf(exchange, reply);
  const message = {
    role: 'assistant',
    content: reply.content ?? (toolCalls.length > 0 ? null : ''),
    refusal: null,
    annotations: [],
    ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
  };
  const body = {
    id: exchange.nextId('chatcmpl-'),
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: exchange.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReasonOf(reply) }],
    usage: usageBody(usage),
    service_tier: 'default',
    system_fingerprint: 'fp_fake',
  };
  writeJson(exchange.response, 200, body, { 'x-request-id': exchange.requestId });
}

/** Streams the reply as `chat.completion.chunk`s: role, text pieces, each tool call's head then argument pieces, finish, usage, `[DONE]`. */
function writeCompletionStream(exchange: FakeExchange, reply: FakeMessageReply, usage: FakeUsage): void {
  const res = exchange.response;
  const toolCalls = toolCallsOf(exchange, reply);
  const includeUsage = exchange.request.body.stream_options?.include_usage === true;
  const head = {
    id: exchange.nextId('chatcmpl-'),
    object: 'chat.completion.chunk',
    created: Math.floor(Date.now() / 1000),
    model: exchange.model,
    service_tier: 'default',
    system_fingerprint: 'fp_fake',
  };
  const chunk = (delta: object, finishReason: string | null = null) => ({
    ...head,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    ...(includeUsage ? { usage: null } : {}),
  });

  openEventStream(res, { 'x-request-id': exchange.requestId });
  const hasText = reply.content !== undefined && reply.content !== '';
  writeEvent(
    res,
    chunk({ role: 'assistant', content: hasText || toolCalls.length === 0 ? '' : null, refusal: null }),
  );
  for (const piece of splitText(reply.content ?? '')) writeEvent(res, chunk({ content: piece }));
  toolCalls.forEach((call, index) => {
    const opening = {
      index,
      id: call.id,
      type: 'function',
      function: { name: call.function.name, arguments: '' },
    };
    writeEvent(res, chunk({ tool_calls: [opening] }));
    for (const piece of splitText(call.function.arguments)) {
      writeEvent(res, chunk({ tool_calls: [{ index, function: { arguments: piece } }] }));
    }
  });
  writeEvent(res, chunk({}, finishReasonOf(reply)));
  if (includeUsage) {
    writeEvent(res, { ...head, choices: [], usage: usageBody(usage) });
  }
  writeEvent(res, '[DONE]');
  res.end();
}

/** The Chat Completions protocol over one server's prompt cache (none: nothing is cached). */
function openAIProtocol(
  cache: OpenAIPromptCache | undefined,
  unknownFields: readonly string[],
  refusalShape: RefusalShape,
): FakeProtocol {
  return {
    basePath: '/v1',
    endpoint: '/v1/chat/completions',
    requestIdHeader: 'x-request-id',
    apiKeyOf: bearerToken,
    authFailure(presented): FakeErrorReply {
      return {
        kind: 'error',
        status: 401,
        message: `Incorrect API key provided: ${presented ?? '(none)'}.`,
      };
    },
    errorBody(status, message, type, _requestId, param) {
      const kind = type === undefined ? errorKind(status) : { type, code: null };
      return { error: { message, type: kind.type, param: param ?? null, code: kind.code } };
    },
    screen(request) {
      return unknownFields.length === 0
        ? undefined
        : unknownFieldsRefusal(request, unknownFields, refusalShape);
    },
    writeMessage(exchange, reply) {
      const body = exchange.request.body as OpenAIBody;
      const usage = usageOf(reply, cache ? cache.account(body) : uncachedInput(body));
      if (exchange.streaming) writeCompletionStream(exchange, reply, usage);
      else writeCompletion(exchange, reply, usage);
    },
    writeGarbage(exchange) {
      const res = exchange.response;
      if (!exchange.streaming) {
        res.writeHead(200, { 'content-type': 'application/json', 'x-request-id': exchange.requestId });
        res.end('<html>fake server: this is not JSON');
        return;
      }
      openEventStream(res, { 'x-request-id': exchange.requestId });
      writeEvent(res, '{"id": "chatcmpl-garbage", "choices": [');
      res.end();
    },
  };
}

/**
 * Starts a fake OpenAI Chat Completions server (`POST /v1/chat/completions`, JSON and SSE) on a free
 * local port, answering from scripted replies; the unmodified `openai` SDK talks to it.
 *
 * Errors use OpenAI's body `{ error: { message, type, param, code } }`; a 401 from `requireApiKey` has
 * `code: 'invalid_api_key'`. A request with `response_format` gets the scripted content as is, so a
 * test can script valid or invalid JSON. With `rejectUnknownFields`, it plays a strict compatible server.
 *
 * Prompts are cached automatically as OpenAI does (see {@link OpenAIPromptCache}; `promptCache: false` turns it
 * off): from the second request of 1,024 tokens or more sharing a prefix (same model and `prompt_cache_key`),
 * `prompt_tokens_details.cached_tokens` counts the shared part in 128-token steps; `prompt_tokens` stays the whole
 * prompt, so a prompt under 1,024 tokens is reported exactly as without the cache.
 *
 * @example
 * const fake = await startFakeOpenAI({ replies: [{ kind: 'message', content: 'hi' }] });
 * const client = new OpenAI({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });
 * await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hello' }] });
 * await fake.stop();
 */
export function startFakeOpenAI(options: FakeOpenAIOptions = {}): Promise<FakeModelServer> {
  const cache = options.promptCache === false ? undefined : new OpenAIPromptCache(options.now ?? Date.now);
  const protocol = openAIProtocol(cache, options.rejectUnknownFields ?? [], options.refusalShape ?? 'vllm');
  return startFakeModelServer(protocol, 'gpt-fake', options);
}
