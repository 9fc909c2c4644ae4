import type { NatsConnection } from '@nats-io/transport-node';
import { errorMessage } from '@troupe/protocol';
import type { Logger } from '../logging/logger.ts';
import type { StatusListener } from './bus.ts';

/**
 * Follows a connection's status changes for the life of the connection: logs each, keeps whether the server is
 * reachable, tells the bus's own parts (`onChange`) and then the listeners added with {@link onStatus}.
 */
export class ConnectionStatus {
  readonly #connection: NatsConnection;
  readonly #logger: Logger;
  readonly #onChange: (type: string) => void;
  readonly #listeners = new Set<StatusListener>();
  /** False from a lost connection until it is back. */
  #reachable = true;

  constructor(connection: NatsConnection, logger: Logger, onChange: (type: string) => void) {
    this.#connection = connection;
    this.#logger = logger;
    this.#onChange = onChange;
    void this.#watch();
  }

  /** Whether the connection is up now: false while it is lost and being made again, and once it is closed. */
  get reachable(): boolean {
    return this.#reachable && !this.#connection.isClosed();
  }

  /** Calls `listener` on every status change; returns how to stop. */
  onStatus(listener: StatusListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async #watch(): Promise<void> {
    try {
      for await (const status of this.#connection.status()) {
        const { type, ...data } = status;
        const log = statusLogs[type] ?? statusLogs.default;
        log?.(this.#logger, data);
        if (type === 'disconnect') this.#reachable = false;
        else if (type === 'reconnect') this.#reachable = true;
        this.#onChange(type);
        // Over a copy: a listener added while a change is told (a step call's next send) does not hear that change.
        for (const listener of [...this.#listeners]) {
          try {
            listener({ type, data });
          } catch (error) {
            this.#logger.warn({ err: error }, 'a status listener threw');
          }
        }
      }
    } catch (error) {
      this.#logger.warn({ err: error }, 'stopped watching the NATS connection status');
    }
  }
}

const statusLogs: Record<string, (logger: Logger, data: Record<string, unknown>) => void> = {
  disconnect: (logger, data) => logger.warn(data, `disconnected from NATS at ${String(data.server)}`),
  reconnecting: (logger) => logger.debug('reconnecting to NATS'),
  reconnect: (logger, data) => logger.info(data, `reconnected to NATS at ${String(data.server)}`),
  error: (logger, data) =>
    logger.error({ err: data.error }, `NATS connection error: ${errorMessage(data.error)}`),
  ldm: (logger, data) => logger.warn(data, `NATS server ${String(data.server)} is entering lame duck mode`),
  staleConnection: (logger) => logger.warn('NATS connection is stale; reconnecting'),
  slowConsumer: (logger, data) =>
    logger.warn({ pending: data.pending }, 'a subscription is falling behind (slow consumer)'),
  close: (logger) => logger.debug('NATS connection closed'),
  ping: () => {},
  default: (logger, data) => logger.debug(data, 'NATS connection status'),
};
