import type { Principal } from './auth.ts';
import { GatewayError } from './gatewayError.ts';

/** What one token's open streams may hold at once, across every connection to this gateway. */
export interface StreamCaps {
  /** Event streams open at once: SSE (Troupe or AG-UI) and WebSocket connections. */
  streams: number;
  /** NATS consumers those streams hold: one per SSE stream, one per task a WebSocket follows. */
  consumers: number;
}

/** Enough for a team's dashboards and front-ends on one token; a runaway client meets its own cap, not the server's. */
export const DEFAULT_STREAM_CAPS: StreamCaps = { streams: 100, consumers: 300 };

const CAP_NAMES = {
  streams: { code: 'too_many_streams', what: 'event streams and WebSockets open', flag: '--max-streams' },
  consumers: { code: 'too_many_consumers', what: 'NATS consumers held', flag: '--max-consumers' },
} as const;

/** A token has every slot of a kind: 429, naming the cap. */
export class TooManyStreams extends GatewayError {
  override readonly name = 'TooManyStreams';
  declare readonly code: (typeof CAP_NAMES)[keyof StreamCaps]['code'];

  constructor(who: Principal, kind: keyof StreamCaps, cap: number, flag: string = CAP_NAMES[kind].flag) {
    const { code, what } = CAP_NAMES[kind];
    super(
      code,
      429,
      `token ${who.name} has ${cap} ${what} on this gateway, its cap (${flag}); close one before opening another`,
    );
  }
}

/**
 * Counts each token's open streams and the consumers they hold, and refuses one past its cap. A slot is taken when a
 * stream opens and given back when it closes, whatever closes it.
 */
export class StreamQuota {
  readonly #caps: StreamCaps;
  readonly #held = new Map<string, StreamCaps>();

  /** The flags that set the caps, for the refusal to name (`troupe gateway`'s when absent). */
  readonly #flags: Partial<Record<keyof StreamCaps, string>>;

  constructor(caps: Partial<StreamCaps> = {}, flags: Partial<Record<keyof StreamCaps, string>> = {}) {
    this.#caps = { ...DEFAULT_STREAM_CAPS, ...caps };
    this.#flags = flags;
  }

  /** Throws {@link TooManyStreams} when the token has every slot of `kind`. */
  check(who: Principal, kind: keyof StreamCaps): void {
    if (this.held(who)[kind] >= this.#caps[kind])
      throw new TooManyStreams(who, kind, this.#caps[kind], this.#flags[kind]);
  }

  /** Takes a slot of `kind`, or throws {@link TooManyStreams}; the function returned gives it back (once). */
  take(who: Principal, kind: keyof StreamCaps): () => void {
    this.check(who, kind);
    const held = this.held(who);
    this.#held.set(who.name, { ...held, [kind]: held[kind] + 1 });
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const now = this.held(who);
      const next = { ...now, [kind]: now[kind] - 1 };
      if (next.streams === 0 && next.consumers === 0) this.#held.delete(who.name);
      else this.#held.set(who.name, next);
    };
  }

  /** What the token holds now. */
  held(who: Principal): StreamCaps {
    return this.#held.get(who.name) ?? { streams: 0, consumers: 0 };
  }
}
