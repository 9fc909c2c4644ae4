import {
  type AnthropicBody,
  AnthropicPromptCache,
  DEFAULT_MIN_CACHEABLE_TOKENS,
} from './anthropicPromptCache.ts';
import {
  bearerToken,
  type FakeErrorReply,
  type FakeExchange,
  type FakeMessageReply,
  type FakeModelServer,
  type FakeProtocol,
  type FakeReply,
  type FakeUsage,
  finishReasonOf,
  firstHeader,
  openEventStream,
  type RecordedRequest,
  splitText,
  startFakeModelServer,
  usageOf,
  writeEvent,
  writeJson,
} from './fakeModelServer.ts';

export interface FakeAnthropicOptions {
  /** Replies to serve first; more can be added with `enqueue`. */
  replies?: FakeReply[];
  /** The model every response reports; by default the request's model is echoed. */
  model?: string;
  /**
   * When set, a request presenting another key gets 401 `authentication_error` (and consumes no reply).
   * The key is read from `x-api-key`, else from `Authorization: Bearer`, which is how @anthropic-ai/sdk 1.x sends it.
   */
  requireApiKey?: string;
  /** The clock cache entries expire on, in ms (default `Date.now`); a test moves it to pass a 5-minute lifetime. */
  now?: () => number;
  /** The shortest prefix the prompt cache stores, in tokens of about 4 characters (default 1024). */
  minCacheableTokens?: number;
}

/** Anthropic's error `type` for a status when the script gives none. */
const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  529: 'overloaded_error',
};

const STOP_REASONS = { stop: 'end_turn', length: 'max_tokens', tool_calls: 'tool_use' } as const;

type ContentBlock =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown; rawInput: string };

/** The reply's blocks: text first (omitted when empty and there are tool calls), then one `tool_use` per call. */
function blocksOf(exchange: FakeExchange, reply: FakeMessageReply): ContentBlock[] {
  const calls = reply.toolCalls ?? [];
  const text = reply.content ?? '';
  const blocks: ContentBlock[] = text !== '' || calls.length === 0 ? [{ type: 'text', text }] : [];
  for (const call of calls) {
    blocks.push({
      type: 'tool_use',
      id: call.id ?? exchange.nextId('toolu_'),
      name: call.name,
      input: parseOrRaw(call.arguments),
      rawInput: call.arguments,
    });
  }
  return blocks;
}

/** Parsed arguments; malformed JSON stays the raw string, which is what a JSON-mode client then sees as `input`. */
function parseOrRaw(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function messageHead(exchange: FakeExchange) {
  return {
    id: exchange.nextId('msg_'),
    type: 'message',
    role: 'assistant',
    model: exchange.model,
  };
}

/** Anthropic's input usage fields: reads and writes apart from `input_tokens`, the writes split by lifetime. */
function inputUsageBody(usage: FakeUsage) {
  return {
    input_tokens: usage.inputTokens,
    cache_read_input_tokens: usage.cachedTokens,
    cache_creation_input_tokens: usage.cacheWriteTokens,
    cache_creation: {
      ephemeral_5m_input_tokens: usage.cacheWriteTokens - usage.cacheWrite1hTokens,
      ephemeral_1h_input_tokens: usage.cacheWrite1hTokens,
    },
  };
}

function writeMessage(exchange: FakeExchange, reply: FakeMessageReply, usage: FakeUsage): void {
  const content = blocksOf(exchange, reply).map((block) =>
    block.type === 'text'
      ? { type: 'text', text: block.text, citations: null }
      : { type: 'tool_use', id: block.id, name: block.name, input: block.input },
  );
  const body = {
    ...messageHead(exchange),
    content,
    stop_reason: STOP_REASONS[finishReasonOf(reply)],
    stop_sequence: null,
    usage: { ...inputUsageBody(usage), output_tokens: usage.outputTokens, service_tier: 'standard' },
  };
  writeJson(exchange.response, 200, body, { 'request-id': exchange.requestId });
}

/** Streams the reply as Messages SSE events; text and tool input arrive in several deltas each. */
function writeMessageStream(exchange: FakeExchange, reply: FakeMessageReply, usage: FakeUsage): void {
  const res = exchange.response;
  const send = (data: { type: string; [field: string]: unknown }) => writeEvent(res, data, data.type);

  openEventStream(res, { 'request-id': exchange.requestId });
  send({
    type: 'message_start',
    message: {
      ...messageHead(exchange),
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { ...inputUsageBody(usage), output_tokens: 1, service_tier: 'standard' },
    },
  });
  blocksOf(exchange, reply).forEach((block, index) => {
    if (block.type === 'text') {
      send({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
      if (index === 0) send({ type: 'ping' });
      for (const text of splitText(block.text)) {
        send({ type: 'content_block_delta', index, delta: { type: 'text_delta', text } });
      }
    } else {
      const start = { type: 'tool_use', id: block.id, name: block.name, input: {} };
      send({ type: 'content_block_start', index, content_block: start });
      if (index === 0) send({ type: 'ping' });
      for (const partial_json of splitText(block.rawInput)) {
        send({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json } });
      }
    }
    send({ type: 'content_block_stop', index });
  });
  send({
    type: 'message_delta',
    delta: { stop_reason: STOP_REASONS[finishReasonOf(reply)], stop_sequence: null },
    // Cumulative, as the API sends it: the input counts again (without their split by lifetime) and the output.
    usage: {
      input_tokens: usage.inputTokens,
      cache_creation_input_tokens: usage.cacheWriteTokens,
      cache_read_input_tokens: usage.cachedTokens,
      output_tokens: usage.outputTokens,
    },
  });
  send({ type: 'message_stop' });
  res.end();
}

function errorBody(status: number, message: string, type: string | undefined, requestId: string) {
  const fallback = ERROR_TYPES[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
  return { type: 'error', error: { type: type ?? fallback, message }, request_id: requestId };
}

/** The Messages protocol over one server's prompt cache. */
function anthropicProtocol(cache: AnthropicPromptCache): FakeProtocol {
  return {
    basePath: '',
    endpoint: '/v1/messages',
    requestIdHeader: 'request-id',
    apiKeyOf(request: RecordedRequest) {
      return firstHeader(request, 'x-api-key') ?? bearerToken(request);
    },
    authFailure(): FakeErrorReply {
      return { kind: 'error', status: 401, message: 'invalid x-api-key' };
    },
    errorBody,
    screen(request, requestId) {
      const refused = cache.refusal(request.body as AnthropicBody);
      return refused === undefined
        ? undefined
        : { status: 400, body: errorBody(400, refused, 'invalid_request_error', requestId) };
    },
    writeMessage(exchange, reply) {
      const usage = usageOf(reply, cache.account(exchange.request.body as AnthropicBody));
      if (exchange.streaming) writeMessageStream(exchange, reply, usage);
      else writeMessage(exchange, reply, usage);
    },
    writeGarbage(exchange) {
      const res = exchange.response;
      if (!exchange.streaming) {
        res.writeHead(200, { 'content-type': 'application/json', 'request-id': exchange.requestId });
        res.end('<html>fake server: this is not JSON');
        return;
      }
      openEventStream(res, { 'request-id': exchange.requestId });
      writeEvent(res, '{"type": "message_start", "message": {', 'message_start');
      res.end();
    },
  };
}

/**
 * Starts a fake Anthropic Messages server (`POST /v1/messages`, JSON and SSE) on a free local port,
 * answering from scripted replies; the unmodified `@anthropic-ai/sdk` talks to it.
 *
 * Errors use Anthropic's body `{ type: 'error', error: { type, message }, request_id }` and every
 * response carries a `request-id` header. A tool call whose scripted `arguments` is malformed JSON
 * cannot become an object, so a JSON (non-streamed) response sends that raw string as `input`, which
 * the SDK passes through; a streamed response sends it as `partial_json` pieces unchanged.
 *
 * Prompt caching is accounted as the API does it (see {@link AnthropicPromptCache}): `cache_control` breakpoints on
 * tools, system blocks and message content blocks (or the request-level `cache_control`) write the prefix up to
 * them, once it reaches `minCacheableTokens`; a later request reads the longest cached prefix found at one of its
 * breakpoints or up to 20 blocks before one; usage reports `input_tokens` (neither read nor written),
 * `cache_read_input_tokens`, `cache_creation_input_tokens` and `cache_creation` by lifetime. More than 4
 * breakpoints, or a 1-hour one after a 5-minute one, get the API's 400 `invalid_request_error` and use no reply.
 * A request without breakpoints is billed whole as `input_tokens`, as before.
 *
 * @example
 * const fake = await startFakeAnthropic({ replies: [{ kind: 'message', content: 'hi' }] });
 * const client = new Anthropic({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });
 * await client.messages.create({ model: 'claude-opus-4-6', max_tokens: 100, messages: [{ role: 'user', content: 'hello' }] });
 * await fake.stop();
 */
export function startFakeAnthropic(options: FakeAnthropicOptions = {}): Promise<FakeModelServer> {
  const cache = new AnthropicPromptCache({
    now: options.now ?? Date.now,
    minCacheableTokens: options.minCacheableTokens ?? DEFAULT_MIN_CACHEABLE_TOKENS,
  });
  return startFakeModelServer(anthropicProtocol(cache), 'claude-fake', options);
}
