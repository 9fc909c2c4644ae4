import { eventBatchSetting } from '@troupe/runtime';
import { InvalidArgumentError, Option } from 'commander';
import { CliError } from '../cliError.ts';
import { parseDuration } from '../format/duration.ts';
import { parseSize } from '../format/size.ts';
import { HELP_DEFAULTS } from '../helpDefaults.ts';

// The argument parsers that check options' values, and the options several commands declare alike, so each command
// reads and checks a value the same way.

export const collect = (value: string, all: string[]): string[] => [...all, value];

export const positive = (value: string): number => {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('must be a positive number');
  return n;
};

/** A number of seconds, 0 included (what turns a wait off). */
export const seconds = (value: string): number => {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0)
    throw new InvalidArgumentError('must be 0 or a positive number of seconds');
  return n;
};

export const positiveInteger = (value: string): number => {
  const n = positive(value);
  if (!Number.isInteger(n)) throw new InvalidArgumentError('must be a whole number');
  return n;
};

export const duration = (value: string): number => {
  const ms = parseDuration(value);
  if (ms === undefined) throw new InvalidArgumentError('must be a duration such as 7d, 12h or 30m');
  return ms;
};

export const size = (value: string): number => {
  const bytes = parseSize(value);
  if (bytes === undefined) throw new InvalidArgumentError('must be a size such as 512MiB, 2GB or 1048576');
  return bytes;
};

/** The pino level of a long-running command's logs. */
export const logLevelOption = () =>
  new Option('--log-level <level>', 'trace, debug, info, warn, error, fatal or silent')
    .env('TROUPE_LOG_LEVEL')
    .default('info');

/** The bound on a long-running command's stop (docs/operations.md, "Stopping"). */
export const stopTimeoutOption = () =>
  new Option(
    '--stop-timeout <seconds>',
    'after a stop signal, exit within this long whatever NATS is doing (what is not handed back by then is redelivered)',
  )
    .argParser(positive)
    .env('TROUPE_STOP_TIMEOUT')
    .default(HELP_DEFAULTS.stopTimeoutSeconds);

export const homeOption = () =>
  new Option(
    '--home <dir>',
    'where troupe up keeps its data and records its server (default: $TROUPE_HOME, else the nearest .troupe in this directory or above, else ./.troupe)',
  );
export const serverOption = () =>
  new Option(
    '-s, --server <url>',
    'NATS server URL (default: $NATS_URL, else the embedded one a running `troupe up` recorded)',
  );

/** Replicas of Troupe's streams and buckets on a JetStream cluster (docs/operations.md). */
export const replicasOption = (
  description = 'how many servers of a JetStream cluster keep each stream and bucket (3 in a three-node cluster; default 1)',
) =>
  new Option('--replicas <n>', description)
    .argParser((value) => {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 1 || n > 5)
        throw new InvalidArgumentError('must be a whole number from 1 to 5');
      return n;
    })
    .env('TROUPE_REPLICAS');

/** The pipelines whose approvals a person may see, when their NATS user may read only those (an approver's). */
export const pipelinesOption = () =>
  new Option(
    '--pipelines <names>',
    "only these pipelines', comma-separated (a NATS user made by troupe nats-config may read no others' requests)",
  )
    .argParser((value) =>
      value
        .split(',')
        .map((name) => name.trim())
        .filter((name) => name !== ''),
    )
    .env('TROUPE_PIPELINES');

/** How to log in to NATS and talk TLS to it (docs/permissions.md), on every command that has `--server`. */
export const natsAccessOptions = () => [
  new Option('--creds <file>', 'NATS credentials file (a user JWT and its nkey seed)').env('NATS_CREDS'),
  new Option('--user <name>', 'NATS user').env('NATS_USER'),
  new Option(
    '--password <password>',
    'NATS password (safer in the environment than on the command line)',
  ).env('NATS_PASSWORD'),
  new Option('--nkey <file>', 'file holding a NATS user nkey seed (SU…)').env('NATS_NKEY'),
  new Option('--tls-ca <file>', 'CA certificate (PEM) that signed the NATS server’s').env('NATS_CA'),
  new Option('--tls-cert <file>', 'client certificate (PEM), for a server that verifies clients').env(
    'NATS_CERT',
  ),
  new Option('--tls-key <file>', 'the client certificate’s key (PEM)').env('NATS_KEY'),
  new Option(
    '--inbox <prefix>',
    `this client's reply inboxes, under ${'troupe._inbox'} (as its NATS user may read)`,
  ).env('TROUPE_INBOX'),
];

/**
 * `troupe up` and `troupe worker`: their events sent in batches (docs/protocol.md, "Event batches"), the default, or
 * each alone with `--no-event-batch`. Neither given, `TROUPE_EVENT_BATCH` decides (see {@link eventBatchOf}): commander's
 * `.env()` would take any value, `0` too, for a flag's yes.
 */
export const eventBatchOption = () =>
  new Option(
    '--event-batch',
    "send a task's model, tool and step events in batches (up to 20 ms, or until the task's record is written; 64 events a message): fewer messages; troupe's readers see each event, a raw NATS subscriber by kind does not (the default, unless $TROUPE_EVENT_BATCH=0)",
  );

/** See {@link eventBatchOption}. */
export const noEventBatchOption = () =>
  new Option(
    '--no-event-batch',
    'send each event alone on its own subject: for a raw NATS subscriber by kind, or readers older than batching (or $TROUPE_EVENT_BATCH=0)',
  );

/**
 * Whether `troupe up` or `troupe worker` sends events in batches: as its flag says, else as `TROUPE_EVENT_BATCH` does
 * (`0` no, `1` or unset yes). Fails with a usage error for another value, which would otherwise leave batching on for
 * someone who meant it off.
 */
export function eventBatchOf(flag: boolean | undefined, env: NodeJS.ProcessEnv = process.env): boolean {
  if (flag !== undefined) return flag;
  const value = env.TROUPE_EVENT_BATCH;
  const batching = eventBatchSetting(value);
  if (batching !== undefined) return batching;
  throw new CliError(
    `TROUPE_EVENT_BATCH must be 0 (each event alone) or 1 (events in batches, the default), not "${value}"`,
    2,
  );
}
