import {
  bearerToken,
  type FakeErrorReply,
  type FakeExchange,
  type FakeMessageReply,
  type FakeModelServer,
  type FakeProtocol,
  type FakeReply,
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

function writeMessage(exchange: FakeExchange, reply: FakeMessageReply): void {
  const usage = usageOf(reply, exchange.request.body);
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
    usage: {
      input_tokens: usage.inputTokens,
      output_tokens: usage.outputTokens,
      cache_read_input_tokens: usage.cachedTokens,
      cache_creation_input_tokens: 0,
      service_tier: 'standard',
    },
  };
  writeJson(exchange.response, 200, body, { 'request-id': exchange.requestId });
}

/** Streams the reply as Messages SSE events; text and tool input arrive in several deltas each. */
function writeMessageStream(exchange: FakeExchange, reply: FakeMessageReply): void {
  const res = exchange.response;
  const usage = usageOf(reply, exchange.request.body);
  const send = (data: { type: string; [field: string]: unknown }) => writeEvent(res, data, data.type);

  openEventStream(res, { 'request-id': exchange.requestId });
  send({
    type: 'message_start',
    message: {
      ...messageHead(exchange),
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: {
        input_tokens: usage.inputTokens,
        output_tokens: 1,
        cache_read_input_tokens: usage.cachedTokens,
        cache_creation_input_tokens: 0,
        service_tier: 'standard',
      },
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
    usage: { output_tokens: usage.outputTokens },
  });
  send({ type: 'message_stop' });
  res.end();
}

const anthropicProtocol: FakeProtocol = {
  basePath: '',
  endpoint: '/v1/messages',
  requestIdHeader: 'request-id',
  apiKeyOf(request: RecordedRequest) {
    return firstHeader(request, 'x-api-key') ?? bearerToken(request);
  },
  authFailure(): FakeErrorReply {
    return { kind: 'error', status: 401, message: 'invalid x-api-key' };
  },
  errorBody(status, message, type, requestId) {
    const fallback = ERROR_TYPES[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
    return { type: 'error', error: { type: type ?? fallback, message }, request_id: requestId };
  },
  writeMessage(exchange, reply) {
    if (exchange.streaming) writeMessageStream(exchange, reply);
    else writeMessage(exchange, reply);
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

/**
 * Starts a fake Anthropic Messages server (`POST /v1/messages`, JSON and SSE) on a free local port,
 * answering from scripted replies; the unmodified `@anthropic-ai/sdk` talks to it.
 *
 * Errors use Anthropic's body `{ type: 'error', error: { type, message }, request_id }` and every
 * response carries a `request-id` header. A tool call whose scripted `arguments` is malformed JSON
 * cannot become an object, so a JSON (non-streamed) response sends that raw string as `input`, which
 * the SDK passes through; a streamed response sends it as `partial_json` pieces unchanged.
 *
 * @example
 * const fake = await startFakeAnthropic({ replies: [{ kind: 'message', content: 'hi' }] });
 * const client = new Anthropic({ apiKey: 'test', baseURL: fake.baseURL, maxRetries: 0 });
 * await client.messages.create({ model: 'claude-opus-4-6', max_tokens: 100, messages: [{ role: 'user', content: 'hello' }] });
 * await fake.stop();
 */
export function startFakeAnthropic(options: FakeAnthropicOptions = {}): Promise<FakeModelServer> {
  return startFakeModelServer(anthropicProtocol, 'claude-fake', options);
}
