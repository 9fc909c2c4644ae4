import type { ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';

/** How often a quiet stream sends a comment, so proxies and load balancers keep the connection open. */
const KEEPALIVE_MS = 15_000;

/**
 * A Server-Sent Events response: `send` writes one message (with an `id` for `Last-Event-ID` when given), and
 * waits when the client reads slower than events come, so a slow client holds back its own stream, not memory.
 */
export class SseStream {
  readonly #res: ServerResponse;
  readonly #keepalive: NodeJS.Timeout;
  #closed = false;

  constructor(res: ServerResponse, headers: Record<string, string> = {}) {
    this.#res = res;
    res.writeHead(200, {
      ...headers,
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      // nginx buffers responses unless told otherwise.
      'x-accel-buffering': 'no',
    });
    res.flushHeaders();
    this.#keepalive = setInterval(() => this.#write(': keepalive\n\n'), KEEPALIVE_MS);
    this.#keepalive.unref();
    res.on('close', () => this.#end());
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Writes one message; resolves once the socket has taken it (or the client is gone). */
  async send(message: { event?: string; data: unknown; id?: number | string }): Promise<void> {
    let text = '';
    if (message.id !== undefined) text += `id: ${message.id}\n`;
    if (message.event !== undefined) text += `event: ${message.event}\n`;
    // JSON has no raw newline: one data line per message.
    text += `data: ${JSON.stringify(message.data)}\n\n`;
    if (!this.#write(text)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          this.#res.off('drain', done);
          this.#res.off('close', done);
          resolve();
        };
        this.#res.on('drain', done);
        this.#res.on('close', done);
      });
    }
  }

  end(): void {
    if (!this.#closed) this.#res.end();
    this.#end();
  }

  /** False when the socket's buffer is full (or the stream closed). */
  #write(text: string): boolean {
    if (this.#closed) return true;
    return this.#res.write(text);
  }

  #end(): void {
    this.#closed = true;
    clearInterval(this.#keepalive);
  }
}

/** The CORS headers @fastify/cors set on the reply, for a response written past Fastify (SSE). */
export function corsHeaders(reply: FastifyReply): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (name.startsWith('access-control-') && value !== undefined) headers[name] = String(value);
  }
  return headers;
}
