import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One POST the receiver took. */
export interface ReceivedHook {
  /** The path and query it was sent to. */
  path: string;
  headers: IncomingHttpHeaders;
  /** The body parsed as JSON. */
  body: unknown;
}

/**
 * A webhook receiver on 127.0.0.1, as an A2A client would run one: records every POST's headers and body and answers
 * 200. It can be stopped (connections cut, so the port refuses) and started again on the same port.
 */
export class WebhookReceiver {
  readonly received: ReceivedHook[] = [];
  #server: Server | undefined;
  #port = 0;

  /** `http://127.0.0.1:<port>/hooks`. */
  get url(): string {
    return `http://127.0.0.1:${this.#port}/hooks`;
  }

  get running(): boolean {
    return this.#server !== undefined;
  }

  /** Listens: on a free port the first time, on the same port after a stop. */
  async start(): Promise<void> {
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        this.received.push({
          path: req.url ?? '',
          headers: req.headers,
          body: JSON.parse(Buffer.concat(chunks).toString('utf8')),
        });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.#port, '127.0.0.1', () => resolve());
    });
    this.#port = (server.address() as AddressInfo).port;
    this.#server = server;
  }

  /** Stops listening and cuts every open connection: from now on the port refuses. */
  async stop(): Promise<void> {
    const server = this.#server;
    if (!server) return;
    this.#server = undefined;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
