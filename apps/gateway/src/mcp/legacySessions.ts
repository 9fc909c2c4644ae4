import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { NodeStreamableHTTPServerTransport } from '@modelcontextprotocol/node';
import type { McpServer } from '@modelcontextprotocol/server';
import type { Principal } from '../auth.ts';

export interface LegacySessionLimits {
  /** The sessions one token may hold (20); past it, one idle is closed, or the new one refused (see `makeRoom`). */
  perToken?: number;
  /** A session with no request open for this long is closed; its client initializes a new one (30 minutes). */
  idleMs?: number;
}

interface Session {
  transport: NodeStreamableHTTPServerTransport;
  who: Principal;
  /** HTTP responses of the session still open (a call under way, the client's event stream). */
  open: number;
  lastSeen: number;
}

/**
 * The MCP 2025-11-25 sessions of one gateway: each a transport and a server of its own, for the principal that opened
 * it and no other. Only a session can carry the server's requests (elicitation) and the client's cancellations in
 * that revision; it lives in this process, so such clients need one gateway (sticky routing).
 */
export class LegacySessions {
  readonly #sessions = new Map<string, Session>();
  readonly #perToken: number;
  readonly #idleMs: number;
  readonly #sweep: NodeJS.Timeout;

  constructor(limits: LegacySessionLimits = {}) {
    this.#perToken = limits.perToken ?? 20;
    this.#idleMs = limits.idleMs ?? 30 * 60_000;
    this.#sweep = setInterval(() => this.#closeIdle(), Math.min(this.#idleMs, 60_000));
    this.#sweep.unref();
  }

  /**
   * Makes room for one more session of `who`: past its limit, its sessions with no request open are closed, the
   * longest idle first. A session with a request open (a call under way, its event stream) is never closed for another,
   * since that would cancel its calls' tasks: false when every one is in use.
   */
  makeRoom(who: Principal): boolean {
    const own = [...this.#sessions].filter(([, s]) => s.who.name === who.name);
    const excess = own.length - this.#perToken + 1;
    if (excess <= 0) return true;
    const idle = own.filter(([, s]) => s.open === 0).sort(([, a], [, b]) => a.lastSeen - b.lastSeen);
    for (const [id] of idle.slice(0, excess)) this.close(id);
    return idle.length >= excess;
  }

  /** The most sessions a token holds at once. */
  get perToken(): number {
    return this.#perToken;
  }

  /**
   * A new session for `who`, served by `server` (ask {@link makeRoom} first); its id exists once the client's
   * `initialize` has been handled.
   */
  async open(who: Principal, server: McpServer): Promise<NodeStreamableHTTPServerTransport> {
    const transport: NodeStreamableHTTPServerTransport = new NodeStreamableHTTPServerTransport({
      sessionIdGenerator: randomUUID,
      onsessioninitialized: (id) =>
        void this.#sessions.set(id, { transport, who, open: 0, lastSeen: Date.now() }),
    });
    transport.onclose = () => {
      if (transport.sessionId) this.#sessions.delete(transport.sessionId);
    };
    await server.connect(transport);
    return transport;
  }

  /** The session `id` when `who` opened it with the same token; another's reads as none. */
  find(id: string, who: Principal): NodeStreamableHTTPServerTransport | undefined {
    const session = this.#sessions.get(id);
    if (!session || session.who.name !== who.name || session.who.tokenSha256 !== who.tokenSha256)
      return undefined;
    return session.transport;
  }

  /** Counts `response` as open on session `id` until it closes, so a session in use is never idle. */
  track(id: string | undefined, response: ServerResponse): void {
    const session = id === undefined ? undefined : this.#sessions.get(id);
    if (!session) return;
    session.open += 1;
    session.lastSeen = Date.now();
    response.once('close', () => {
      session.open -= 1;
      session.lastSeen = Date.now();
    });
  }

  /** Closes the sessions of the principals `drop` names (a revoked or changed token). */
  closeWhere(drop: (who: Principal) => boolean): void {
    for (const [id, session] of this.#sessions) if (drop(session.who)) this.close(id);
  }

  close(id: string): void {
    const session = this.#sessions.get(id);
    this.#sessions.delete(id);
    void session?.transport.close().catch(() => undefined);
  }

  closeAll(): void {
    clearInterval(this.#sweep);
    for (const id of [...this.#sessions.keys()]) this.close(id);
  }

  get size(): number {
    return this.#sessions.size;
  }

  #closeIdle(): void {
    const before = Date.now() - this.#idleMs;
    for (const [id, session] of this.#sessions)
      if (session.open === 0 && session.lastSeen < before) this.close(id);
  }
}
