import pino from 'pino';
import { oneLineStream } from './formatLogLine.ts';
import { REDACTED, redactDeep, redactSecrets } from './secrets.ts';

/** The logger every part of the runtime takes; a pino logger. */
export type Logger = pino.Logger;

export interface LoggerOptions {
  /** A pino level name; default `info`. */
  level?: string;
  /** One readable line per record (see `formatLogLine.ts`) instead of JSON: for a terminal. */
  pretty?: boolean;
  /** Colours in `pretty` lines; by default when they go to a stdout that takes them (not with `NO_COLOR`). */
  color?: boolean;
  /** Logged as `name` on every line. */
  name?: string;
  /** Where lines go; default stdout. */
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

export { REDACTED };

/**
 * Creates the runtime's logger: JSON lines by default, one readable line per record with `pretty`; secrets
 * redacted, and a child logger's bindings not repeated by the fields of a call.
 *
 * @example
 * const logger = createLogger({ name: 'troupe-coordinator', pretty: process.stdout.isTTY });
 * logger.info({ pipeline: 'demo' }, 'pipeline loaded');
 */
export function createLogger(opts: LoggerOptions = {}): Logger {
  const level = opts.level ?? 'info';
  const options: pino.LoggerOptions = {
    level,
    redact: { paths: [...REDACT_PATHS], censor: REDACTED },
    // Secrets by value too, wherever they turn up: in a message, a field, an error's message or stack.
    formatters: { log: (fields) => redactDeep(fields) },
    serializers: { err: redactedError },
    hooks: { logMethod: withoutRepeatedBindings },
    ...(opts.name === undefined ? {} : { name: opts.name }),
  };
  if (!opts.pretty) return opts.destination === undefined ? pino(options) : pino(options, opts.destination);
  const lines = oneLineStream(opts.destination ?? pino.destination({ dest: 1, sync: true }), {
    color: opts.color ?? (opts.destination === undefined && (process.stdout.hasColors?.() ?? false)),
    // Stacks are for whoever debugs; at `info` an error's message says enough.
    stacks: (pino.levels.values[level] ?? 30) <= 20,
  });
  return pino(options, lines);
}

/** pino's error serializer, with no secret left in the message or the stack. */
function redactedError(error: unknown): unknown {
  const serialized = pino.stdSerializers.err(error as Error) as unknown as Record<string, unknown>;
  if (serialized === null || typeof serialized !== 'object') return serialized;
  // Every field: a cause's message, a code, a URL the error names.
  return redactDeep({ ...serialized });
}

/** The bindings of each (child) logger, parsed once for each set of bindings it has had. */
const boundFields = new WeakMap<pino.Logger, { chindings: unknown; fields: Record<string, unknown> }>();

/**
 * Leaves out of a call's fields those its (child) logger binds already with the same value: pino writes both,
 * so `logger.child({ pipeline }).info({ pipeline }, …)` would give a JSON line with `pipeline` twice.
 */
function withoutRepeatedBindings(this: pino.Logger, given: Parameters<pino.LogFn>, method: pino.LogFn): void {
  // The message and its format arguments, with no secret in them.
  const args = given.map((arg) =>
    typeof arg === 'string' ? redactSecrets(arg) : arg,
  ) as Parameters<pino.LogFn>;
  const [first, ...rest] = args as unknown[];
  if (typeof first !== 'object' || first === null || first instanceof Error) {
    method.apply(this, args);
    return;
  }
  const bound = bindingsOf(this);
  const fields = first as Record<string, unknown>;
  const repeated = Object.keys(fields).filter(
    (key) => key in bound && JSON.stringify(bound[key]) === JSON.stringify(fields[key]),
  );
  if (repeated.length === 0) {
    method.apply(this, args);
    return;
  }
  const kept = { ...fields };
  for (const key of repeated) delete kept[key];
  method.apply(this, [kept, ...rest] as Parameters<pino.LogFn>);
}

function bindingsOf(logger: pino.Logger): Record<string, unknown> {
  const chindings = (logger as unknown as Record<symbol, unknown>)[pino.symbols.chindingsSym];
  const known = boundFields.get(logger);
  if (known !== undefined && known.chindings === chindings) return known.fields;
  const fields = logger.bindings();
  boundFields.set(logger, { chindings, fields });
  return fields;
}
