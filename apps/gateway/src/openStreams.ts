import type { Principal, TokenStore } from './auth.ts';

/** Why the gateway ends a stream, as its last message tells the client. */
export interface StreamEnd {
  code: string;
  message: string;
}

/** Ends a stream: with the reason the client is told (a revoked token), or none when the gateway stops. */
export type StopStream = (why?: StreamEnd) => void;

/** The last message of an event stream ended by the gateway's stop. */
export const GATEWAY_STOPPING: StreamEnd = {
  code: 'gateway_stopping',
  message: 'the gateway is stopping; connect again, with Last-Event-ID, to resume where this stream ended',
};

/**
 * The event streams, WebSockets and long requests open now, each with the principal it serves: ended when the gateway
 * stops (a client that never goes must not keep it up) or when the principal's token is revoked.
 */
export class OpenStreams {
  readonly #open = new Map<StopStream, Principal>();

  /** Holds `stop` as one open stream of `who`'s until the returned function is called. */
  hold(stop: StopStream, who: Principal): () => void {
    this.#open.set(stop, who);
    return () => {
      this.#open.delete(stop);
    };
  }

  /** Ends every stream, telling none of them why: the gateway is stopping. */
  stopAll(): void {
    for (const stop of [...this.#open.keys()]) stop();
  }

  /** Ends the streams of every token `tokens` no longer holds (revoked, or changed in the tokens file). */
  endRevoked(tokens: TokenStore): void {
    for (const [stop, who] of [...this.#open]) {
      if (!tokens.holds(who)) {
        stop({
          code: 'unauthenticated',
          message: `token ${who.name} was revoked or changed; connect again with a valid token`,
        });
      }
    }
  }
}
