/** One Server-Sent Events message as a client reads it. */
export interface SseMessage {
  id?: string;
  event?: string;
  data: string;
}

export interface SseRead {
  status: number;
  headers: Headers;
  messages: SseMessage[];
  /** The stream ended on the server's side (not cut short by `stopAfter`). */
  ended: boolean;
  /** The body of a response that was not a stream (an error). */
  body?: string;
}

/**
 * Reads an SSE response the way a browser's EventSource parses it, until the server ends it, or — to play a
 * client whose connection drops — after `stopAfter` messages, when the connection is cut.
 */
export async function readSse(
  url: string,
  options: {
    headers?: Record<string, string>;
    stopAfter?: number;
    onMessage?: (message: SseMessage) => void;
  } = {},
): Promise<SseRead> {
  const controller = new AbortController();
  const response = await fetch(url, {
    headers: { accept: 'text/event-stream', ...options.headers },
    signal: controller.signal,
  });
  if (!response.headers.get('content-type')?.startsWith('text/event-stream') || !response.body) {
    return {
      status: response.status,
      headers: response.headers,
      messages: [],
      ended: true,
      body: await response.text(),
    };
  }
  const messages: SseMessage[] = [];
  const decoder = new TextDecoder();
  const reader = response.body.getReader();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return { status: response.status, headers: response.headers, messages, ended: true };
      buffer += decoder.decode(value, { stream: true });
      for (let at = buffer.indexOf('\n\n'); at >= 0; at = buffer.indexOf('\n\n')) {
        const block = buffer.slice(0, at);
        buffer = buffer.slice(at + 2);
        const message = parseBlock(block);
        if (!message) continue;
        messages.push(message);
        options.onMessage?.(message);
        if (options.stopAfter !== undefined && messages.length >= options.stopAfter) {
          controller.abort();
          return { status: response.status, headers: response.headers, messages, ended: false };
        }
      }
    }
  } catch (error) {
    if (controller.signal.aborted)
      return { status: response.status, headers: response.headers, messages, ended: false };
    throw error;
  }
}

function parseBlock(block: string): SseMessage | undefined {
  const message: Partial<SseMessage> & { data?: string } = {};
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'data') message.data = message.data === undefined ? value : `${message.data}\n${value}`;
    else if (field === 'id') message.id = value;
    else if (field === 'event') message.event = value;
  }
  return message.data === undefined ? undefined : (message as SseMessage);
}
