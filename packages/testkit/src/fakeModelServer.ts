import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/** One scripted answer of a fake model server; each request consumes the next one, in order. */
export type FakeReply =
  | {
      kind: 'message';
      content?: string;
      /** `arguments` is raw JSON text and may be malformed on purpose. */
      toolCalls?: { id?: string; name: string; arguments: string }[];
      /**
       * Sent as given, in place of what the fake works out (the request's size at about 4 characters a token, its
       * cache reads and writes as the vendor counts them, the reply's size). Each field goes on the wire as is:
       * `inputTokens` is Anthropic's `input_tokens` (the part neither read from nor written to the cache) and
       * OpenAI's `prompt_tokens` (the whole prompt); `cachedTokens` is the cache read; the writes are Anthropic's
       * `cache_creation_input_tokens` and, of them, `cache_creation.ephemeral_1h_input_tokens`.
       */
      usage?: {
        inputTokens: number;
        outputTokens: number;
        cachedTokens?: number;
        cacheWriteTokens?: number;
        cacheWrite1hTokens?: number;
      };
      /** Defaults to `tool_calls` when there are tool calls, else `stop`. */
      finishReason?: 'stop' | 'length' | 'tool_calls';
      /** Waits this long before the response starts. */
      delayMs?: number;
    }
  | {
      kind: 'error';
      status: number;
      message?: string;
      /** The protocol's error type; defaults from the status (429 → `rate_limit_error`, …). */
      type?: string;
      /** The request field the error is about, as OpenAI's `param` (null when not given); Anthropic has none. */
      param?: string;
      /** Sent as response headers, e.g. `{ 'retry-after': '1' }`. */
      headers?: Record<string, string>;
    }
  /** Accepts the request and never answers, so the client's timeout fires. */
  | { kind: 'hang' }
  /** Destroys the socket without a response, as a connection reset would. */
  | { kind: 'reset' }
  /** Answers 200 with a body that is not the protocol (invalid JSON, or an SSE event that is not JSON). */
  | { kind: 'garbage' };

export type FakeMessageReply = Extract<FakeReply, { kind: 'message' }>;
export type FakeErrorReply = Extract<FakeReply, { kind: 'error' }>;

/** A request as the fake server received it; `body` is the parsed JSON, or the raw text when it was not JSON. */
export interface RecordedRequest {
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  // biome-ignore lint/suspicious/noExplicitAny: tests read whatever JSON the client sent.
  body: any;
}

/** A local HTTP server that speaks one model vendor's wire protocol from scripted replies. */
export interface FakeModelServer {
  /** Base URL to give the SDK: for OpenAI `http://127.0.0.1:<port>/v1`; for Anthropic `http://127.0.0.1:<port>` (the SDK adds /v1/messages). */
  baseURL: string;
  /** Every request received, in arrival order, recorded before it is answered. */
  requests: RecordedRequest[];
  /** Requests whose connection closed before their answer was sent (the client cancelled the call, or `stop`), in order. */
  abandoned: RecordedRequest[];
  /** Appends replies; each request consumes the next one, in order. When none is left: HTTP 500 with a protocol error body saying "fake server: no scripted reply left". */
  enqueue(...replies: FakeReply[]): void;
  /** Closes the server, cutting hanging and delayed requests. */
  stop(): Promise<void>;
}

/** How a request's input is billed, as the vendor's usage fields count it (see `FakeReply`'s `usage`). */
export interface FakeInputUsage {
  inputTokens: number;
  cachedTokens: number;
  cacheWriteTokens: number;
  cacheWrite1hTokens: number;
}

/** Token counts after defaults are applied. */
export interface FakeUsage extends FakeInputUsage {
  outputTokens: number;
}

/** A request refused before it reaches the model: the status and the exact JSON body sent. */
export interface FakeRefusal {
  status: number;
  body: unknown;
}

/** What a protocol module hands the shared server: how to authenticate, answer and fail in its own wire shape. */
export interface FakeProtocol {
  /** Path prefix of the base URL the SDK is given ('/v1' for OpenAI, '' for Anthropic). */
  basePath: string;
  /** The one endpoint served, e.g. '/v1/chat/completions'. */
  endpoint: string;
  /** Header carrying the request id, e.g. 'x-request-id'. */
  requestIdHeader: string;
  /** The API key the request presents, if any. */
  apiKeyOf(request: RecordedRequest): string | undefined;
  /** The reply sent when `requireApiKey` is set and the key differs. */
  authFailure(presented: string | undefined): FakeErrorReply;
  /** The JSON error body for `status`; `type` and `param` are the scripted ones, if any. */
  errorBody(
    status: number,
    message: string,
    type: string | undefined,
    requestId: string,
    param?: string | undefined,
  ): unknown;
  /**
   * Checks a request the way the vendor validates it before any model runs; a refusal is sent as is and consumes
   * no scripted reply.
   */
  screen?(request: RecordedRequest, requestId: string): FakeRefusal | undefined;
  /** Writes a scripted message as JSON or SSE, depending on the request. */
  writeMessage(exchange: FakeExchange, reply: FakeMessageReply): void;
  /** Writes a 200 that the SDK cannot parse. */
  writeGarbage(exchange: FakeExchange): void;
}

/** One request being answered, with what a protocol module needs to write the answer. */
export interface FakeExchange {
  request: RecordedRequest;
  response: ServerResponse;
  requestId: string;
  /** The model to report: the server's `model` option, else the request's model, else the protocol default. */
  model: string;
  /** Whether the request asked for SSE (`stream: true`). */
  streaming: boolean;
  /** Ids unique within this server, e.g. `nextId('call_')` → `call_fake3`. */
  nextId(prefix: string): string;
}

export interface FakeServerOptions {
  replies?: FakeReply[] | undefined;
  model?: string | undefined;
  requireApiKey?: string | undefined;
}

const NO_REPLY_LEFT = 'fake server: no scripted reply left';

/**
 * Starts a fake model server on 127.0.0.1 with an OS-chosen port, speaking `protocol`.
 * Used by `startFakeOpenAI` and `startFakeAnthropic`; tests call those.
 *
 * Requests that never reach the model consume no scripted reply, as on the real service: another
 * path or method gets 404, a wrong key (with `requireApiKey`) 401, a body that is not a JSON object 400, and
 * whatever the protocol's `screen` refuses. All of them are still recorded.
 */
export async function startFakeModelServer(
  protocol: FakeProtocol,
  defaultModel: string,
  options: FakeServerOptions = {},
): Promise<FakeModelServer> {
  const queue: FakeReply[] = [...(options.replies ?? [])];
  const requests: RecordedRequest[] = [];
  const abandoned: RecordedRequest[] = [];
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  let counter = 0;
  const nextId = (prefix: string) => `${prefix}fake${++counter}`;

  const server = createServer((req, res) => {
    readBody(req).then(
      (raw) => answer(req, res, raw),
      () => req.socket.destroy(),
    );
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  function answer(req: IncomingMessage, res: ServerResponse, raw: string): void {
    const request: RecordedRequest = {
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      headers: { ...req.headers },
      body: parseJson(raw),
    };
    requests.push(request);
    res.once('close', () => {
      if (!res.writableFinished) abandoned.push(request);
    });
    const requestId = nextId('req_');
    const sendError = (reply: FakeErrorReply) => writeError(res, protocol, reply, requestId);

    const route = request.path.split('?')[0];
    if (request.method !== 'POST' || route !== protocol.endpoint) {
      sendError({ kind: 'error', status: 404, message: `Invalid URL (${request.method} ${request.path})` });
      return;
    }
    const presented = protocol.apiKeyOf(request);
    if (options.requireApiKey !== undefined && presented !== options.requireApiKey) {
      sendError(protocol.authFailure(presented));
      return;
    }
    if (typeof request.body !== 'object' || request.body === null) {
      sendError({ kind: 'error', status: 400, message: 'fake server: request body is not a JSON object' });
      return;
    }
    const refusal = protocol.screen?.(request, requestId);
    if (refusal) {
      writeJson(res, refusal.status, refusal.body, { [protocol.requestIdHeader]: requestId });
      return;
    }

    const reply = queue.shift();
    const exchange: FakeExchange = {
      request,
      response: res,
      requestId,
      model: options.model ?? stringOr(request.body.model, defaultModel),
      streaming: request.body.stream === true,
      nextId,
    };
    dispatch(exchange, reply, sendError);
  }

  function dispatch(
    exchange: FakeExchange,
    reply: FakeReply | undefined,
    sendError: (reply: FakeErrorReply) => void,
  ): void {
    if (!reply) {
      sendError({ kind: 'error', status: 500, message: NO_REPLY_LEFT });
      return;
    }
    switch (reply.kind) {
      case 'message':
        later(reply.delayMs ?? 0, () => protocol.writeMessage(exchange, reply));
        return;
      case 'error':
        sendError(reply);
        return;
      case 'hang':
        return;
      case 'reset':
        exchange.response.socket?.destroy();
        return;
      case 'garbage':
        protocol.writeGarbage(exchange);
        return;
    }
  }

  function later(delayMs: number, work: () => void): void {
    if (delayMs <= 0) {
      work();
      return;
    }
    const timer = setTimeout(() => {
      timers.delete(timer);
      work();
    }, delayMs);
    timers.add(timer);
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;

  return {
    baseURL: `http://127.0.0.1:${port}${protocol.basePath}`,
    requests,
    abandoned,
    enqueue(...replies) {
      queue.push(...replies);
    },
    stop() {
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      return closed;
    },
  };
}

/** Writes `reply` as the protocol's JSON error, with its headers passed through. */
function writeError(
  res: ServerResponse,
  protocol: FakeProtocol,
  reply: FakeErrorReply,
  requestId: string,
): void {
  const message = reply.message ?? `fake server: scripted error ${reply.status}`;
  const body = protocol.errorBody(reply.status, message, reply.type, requestId, reply.param);
  writeJson(res, reply.status, body, { [protocol.requestIdHeader]: requestId, ...reply.headers });
}

/** Sends `body` as a complete JSON response. */
export function writeJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, {
    ...headers,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

/** Starts a 200 `text/event-stream` response. */
export function openEventStream(res: ServerResponse, headers: Record<string, string> = {}): void {
  if (res.destroyed) return;
  res.writeHead(200, {
    ...headers,
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
  });
}

/** Writes one SSE event; `data` is JSON-encoded unless it is already a string. */
export function writeEvent(res: ServerResponse, data: unknown, event?: string): void {
  if (res.destroyed) return;
  const payload = typeof data === 'string' ? data : JSON.stringify(data);
  res.write(`${event === undefined ? '' : `event: ${event}\n`}data: ${payload}\n\n`);
}

/** Splits text into pieces of at most `size` characters, never inside a surrogate pair. */
export function splitText(text: string, size = 5): string[] {
  const chars = Array.from(text);
  const pieces: string[] = [];
  for (let i = 0; i < chars.length; i += size) pieces.push(chars.slice(i, i + size).join(''));
  return pieces;
}

/** About 4 characters a token, never less than one: the fakes' estimate of a request's size. */
export function estimateTokens(body: unknown): number {
  return Math.max(1, Math.ceil(JSON.stringify(body).length / 4));
}

/** The whole request billed as fresh input, as the fakes count a request that neither reads nor writes a cache. */
export function uncachedInput(requestBody: unknown): FakeInputUsage {
  return {
    inputTokens: estimateTokens(requestBody),
    cachedTokens: 0,
    cacheWriteTokens: 0,
    cacheWrite1hTokens: 0,
  };
}

/** The scripted usage, else `input` as the fake accounted it and the reply's size at about 4 characters a token. */
export function usageOf(reply: FakeMessageReply, input: FakeInputUsage): FakeUsage {
  if (reply.usage) return { cachedTokens: 0, cacheWriteTokens: 0, cacheWrite1hTokens: 0, ...reply.usage };
  const replyText = (reply.content ?? '') + (reply.toolCalls ?? []).map((c) => c.name + c.arguments).join('');
  return { ...input, outputTokens: Math.max(1, Math.ceil(replyText.length / 4)) };
}

/** The scripted finish reason, or `tool_calls` when the reply has tool calls, else `stop`. */
export function finishReasonOf(reply: FakeMessageReply): 'stop' | 'length' | 'tool_calls' {
  return reply.finishReason ?? (reply.toolCalls?.length ? 'tool_calls' : 'stop');
}

/** The first value of a request header. */
export function firstHeader(request: RecordedRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** The token of an `Authorization: Bearer <token>` header. */
export function bearerToken(request: RecordedRequest): string | undefined {
  return firstHeader(request, 'authorization')?.replace(/^Bearer\s+/i, '');
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function parseJson(raw: string): unknown {
  if (raw === '') return undefined;
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

function stringOr(value: unknown, fallback: string): string {
  return typeof value === 'string' && value !== '' ? value : fallback;
}
