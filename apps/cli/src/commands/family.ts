import { readFile } from 'node:fs/promises';
import { hostname, userInfo } from 'node:os';
import { text as readAll } from 'node:stream/consumers';
import { type FamilyTask, forkTask, OperationError, restartTask } from '@troupe/client';
import { CliError, connectCli, explain, type ServerOptions } from '../server.ts';

export interface RestartCliOptions extends ServerOptions {
  from: string;
  by?: string;
  newest: boolean;
}

export interface ForkCliOptions extends ServerOptions {
  at: string;
  /** The new input: JSON, or `@<path>` for a file holding it (`@-`: standard input). */
  input?: string;
  /** `steps.<id>.output=<text>`, each. */
  set: string[];
  by?: string;
  newest: boolean;
}

/**
 * `troupe restart`: a failed or cancelled task runs again from a step, as a new task linked to it; the steps that
 * completed before that step are reused, not run again.
 */
export async function restart(taskId: string, options: RestartCliOptions): Promise<number> {
  const made = await act(options, 'troupe-restart', (bus) =>
    restartTask(bus, taskId, {
      from: options.from,
      by: options.by ?? whoAmI(),
      ...(options.newest ? { newest: true } : {}),
    }),
  );
  say(made, `restart of ${taskId} from ${options.from}`);
  return 0;
}

/** `troupe fork`: a new task from an ended one at a step, with its input or earlier step outputs edited. */
export async function fork(taskId: string, options: ForkCliOptions): Promise<number> {
  const input = options.input === undefined ? undefined : await inputOf(options.input);
  const set = Object.fromEntries(options.set.map(setting));
  const made = await act(options, 'troupe-fork', (bus) =>
    forkTask(bus, taskId, {
      at: options.at,
      ...(input ? { input } : {}),
      ...(options.set.length > 0 ? { set } : {}),
      ...(options.newest ? { newest: true } : {}),
      by: options.by ?? whoAmI(),
    }),
  );
  say(made, `fork of ${taskId} at ${options.at}`);
  return 0;
}

function say({ taskId, pipeline }: FamilyTask, what: string): void {
  process.stdout.write(
    `${taskId}: ${what} (pipeline ${pipeline}); troupe tail --task ${taskId} follows it, troupe runs --family ${taskId} shows its family\n`,
  );
}

async function act(
  options: ServerOptions,
  name: string,
  make: (bus: Awaited<ReturnType<typeof connectCli>>) => Promise<FamilyTask>,
): Promise<FamilyTask> {
  const bus = await connectCli(options, name);
  try {
    return await make(bus).catch((error) => {
      if (OperationError.is(error, 'no_coordinator'))
        throw new CliError(`${error.message} — start one with troupe up`);
      return explain(error);
    });
  } finally {
    await bus.close();
  }
}

/** `--set steps.<id>.output=<text>` as `[id, text]`. */
function setting(pair: string): [string, string] {
  const match = /^steps\.([^.=]+)\.output=([\s\S]*)$/.exec(pair);
  if (!match?.[1] || match[2] === undefined) {
    throw new CliError(`--set takes steps.<step id>.output=<text>, got "${pair}"`, 2);
  }
  return [match[1], match[2]];
}

/** `--input`: a JSON object, given or read from `@<path>` (`@-`: standard input). */
async function inputOf(value: string): Promise<Record<string, unknown>> {
  const from = value.startsWith('@') ? value.slice(1) : undefined;
  let text = value;
  if (from !== undefined) {
    try {
      text = from === '-' ? await readAll(process.stdin) : await readFile(from, 'utf8');
    } catch (error) {
      throw new CliError(`cannot read --input ${value}: ${(error as Error).message}`, 2);
    }
  }
  let input: unknown;
  try {
    input = JSON.parse(text);
  } catch (error) {
    throw new CliError(`--input is not JSON: ${(error as Error).message}`, 2);
  }
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new CliError('--input must be a JSON object', 2);
  }
  return input as Record<string, unknown>;
}

const whoAmI = (): string => `${userInfo().username}@${hostname()}`;
