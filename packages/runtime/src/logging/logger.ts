import pino from 'pino';

/** The logger every part of the runtime takes; a pino logger. */
export type Logger = pino.Logger;

export interface LoggerOptions {
  /** A pino level name; default `info`. */
  level?: string;
  /** Human-readable output through `pino-pretty` when it can be loaded; JSON otherwise. */
  pretty?: boolean;
  /** Logged as `name` on every line. */
  name?: string;
  /** Where JSON lines go; default stdout. Ignored when `pretty` output is available. */
  destination?: pino.DestinationStream;
}

/** Keys whose values never reach a log line, at the top level or one object down. */
const SECRET_KEYS = ['apiKey', 'api_key', 'authorization', 'password', 'token', 'secret'];

/** Paths pino censors in every log line. */
export const REDACT_PATHS: readonly string[] = [
  ...SECRET_KEYS,
  ...SECRET_KEYS.map((key) => `*.${key}`),
  'headers.authorization',
  '*.headers.authorization',
];

export const REDACTED = '[redacted]';

/**
 * Creates the runtime's logger: JSON lines by default, secrets redacted.
 *
 * @example
 * const logger = createLogger({ name: 'troupe-coordinator', pretty: process.stdout.isTTY });
 * logger.info({ pipeline: 'demo' }, 'pipeline loaded');
 */
export function createLogger(opts: LoggerOptions = {}): Logger {
  const options: pino.LoggerOptions = {
    level: opts.level ?? 'info',
    redact: { paths: [...REDACT_PATHS], censor: REDACTED },
    ...(opts.name === undefined ? {} : { name: opts.name }),
  };
  const pretty = opts.pretty ? prettyStream() : undefined;
  const destination = pretty ?? opts.destination;
  return destination === undefined ? pino(options) : pino(options, destination);
}

// pino-pretty is an optional peer: the CLI ships it, a service need not. Without it we log JSON.
function prettyStream(): pino.DestinationStream | undefined {
  try {
    return pino.transport({
      target: 'pino-pretty',
      options: { colorize: true, translateTime: 'SYS:HH:MM:ss.l' },
    });
  } catch {
    return undefined;
  }
}
