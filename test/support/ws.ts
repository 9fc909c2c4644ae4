import WebSocket from 'ws';

// biome-ignore lint/suspicious/noExplicitAny: the messages are JSON a test picks apart as it likes.
type Message = Record<string, any>;

export interface WsClient {
  received: Message[];
  send(message: unknown): void;
  sendRaw(text: string): void;
  /** Resolves with the first message received (before or after the call) that matches and was not taken yet. */
  next(match: (message: Message) => boolean, timeoutMs?: number): Promise<Message>;
  close(): void;
  /** Resolves with the close code and reason once the server (or the client) has closed the connection. */
  closed: Promise<{ code: number; reason: string }>;
}

/** A WebSocket client for tests: connects (rejecting with the HTTP status when the upgrade is refused). */
export function openWs(
  url: string,
  options: { origin?: string; headers?: Record<string, string> } = {},
): Promise<WsClient> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, {
      ...(options.origin ? { origin: options.origin } : {}),
      ...(options.headers ? { headers: options.headers } : {}),
    });
    const closed = new Promise<{ code: number; reason: string }>((done) =>
      socket.on('close', (code, reason) => done({ code, reason: reason.toString() })),
    );
    const received: Message[] = [];
    const taken = new Set<Message>();
    const waiting: (() => void)[] = [];
    socket.on('message', (data) => {
      received.push(JSON.parse(data.toString()));
      for (const wake of waiting.splice(0)) wake();
    });
    socket.on('unexpected-response', (_request, response) => {
      reject(new Error(`the upgrade was refused: ${response.statusCode}`));
    });
    socket.on('error', reject);
    socket.on('open', () =>
      resolve({
        received,
        send: (message) => socket.send(JSON.stringify(message)),
        sendRaw: (text) => socket.send(text),
        next: (match, timeoutMs = 30_000) =>
          new Promise((found, fail) => {
            const timer = setTimeout(() => fail(new Error('no such message came')), timeoutMs);
            const look = () => {
              const message = received.find((m) => !taken.has(m) && match(m));
              if (!message) return void waiting.push(look);
              taken.add(message);
              clearTimeout(timer);
              found(message);
            };
            look();
          }),
        close: () => socket.close(),
        closed,
      }),
    );
  });
}
