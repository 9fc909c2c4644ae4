import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** How long a WebSocket client is given to answer the close frame before its socket is cut (ws waits 30 s). */
export const CLOSE_HANDSHAKE_MS = 1_000;

/**
 * The connections of a gateway's HTTP server, each with its requests under way, so a stop can close each as soon as
 * nothing is owed on it. Node's `server.close()` closes only the sockets idle at that moment: a socket that has not
 * sent a request yet (a browser opens them ahead, and keeps them after its page has gone) is held until the headers
 * timeout (60 s), one whose request ends after the stop began until the keep-alive timeout (72 s), an upgraded one
 * until ws gives up on the close handshake (30 s).
 */
export class Connections {
  /** Each open socket with its requests under way (0: idle or never used); upgraded ones are not here. */
  readonly #sockets = new Map<Socket, number>();
  readonly #upgraded = new Set<Socket>();
  #closing = false;

  constructor(server: Server) {
    server.on('connection', (socket: Socket) => {
      this.#sockets.set(socket, 0);
      socket.once('close', () => {
        this.#sockets.delete(socket);
        this.#upgraded.delete(socket);
      });
    });
    server.on('request', (request: IncomingMessage, response: ServerResponse) => {
      const socket = request.socket;
      this.#sockets.set(socket, (this.#sockets.get(socket) ?? 0) + 1);
      response.once('close', () => {
        const left = (this.#sockets.get(socket) ?? 1) - 1;
        if (!this.#sockets.has(socket)) return;
        this.#sockets.set(socket, left);
        if (this.#closing && left === 0) ends(socket);
      });
    });
    server.on('upgrade', (request: IncomingMessage) => {
      // Not a request under way any more: the WebSocket's own close (a close frame) ends it.
      this.#sockets.delete(request.socket);
      this.#upgraded.add(request.socket);
    });
  }

  /** Sockets open (upgraded ones included), and those with a request under way. */
  count(): { open: number; busy: number } {
    let busy = 0;
    for (const requests of this.#sockets.values()) if (requests > 0) busy += 1;
    return { open: this.#sockets.size + this.#upgraded.size, busy };
  }

  /**
   * Begins the stop: sockets with nothing under way close now, the others as soon as their last request is
   * answered, upgraded ones after {@link CLOSE_HANDSHAKE_MS}, and whatever is still open after `graceMs`.
   * Returns what cancels the timers, for when every socket closed first.
   */
  close(graceMs: number): () => void {
    this.#closing = true;
    for (const [socket, requests] of this.#sockets) if (requests === 0) ends(socket);
    const handshake = setTimeout(
      () => {
        for (const socket of this.#upgraded) socket.destroy();
      },
      Math.min(CLOSE_HANDSHAKE_MS, graceMs),
    );
    const grace = setTimeout(() => {
      for (const socket of [...this.#sockets.keys(), ...this.#upgraded]) socket.destroy();
    }, graceMs);
    return () => {
      clearTimeout(handshake);
      clearTimeout(grace);
    };
  }
}

/** Closes a socket once what was written to it has gone out, without waiting for the client's own end. */
function ends(socket: Socket): void {
  if (socket.destroyed) return;
  socket.end(() => socket.destroy());
}
