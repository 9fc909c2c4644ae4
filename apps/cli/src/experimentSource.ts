import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { EvalStore } from '@troupe/client';
import { Experiment, errorMessage } from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime';
import { CliError } from './cliError.ts';
import { connectCli, type ServerOptions } from './server.ts';

/**
 * Whether an `<experiment>` argument names a file (an experiment `troupe eval run --save` wrote) rather than a stored
 * experiment's id: it ends in `.json`, or has a path separator (ids made by `eval run` have neither).
 */
export const isExperimentFile = (arg: string): boolean => arg.endsWith('.json') || /[/\\]/.test(arg);

/** An experiment read from a JSON file; a file that is missing or not an experiment is a usage error (exit 2). */
export async function readExperimentFile(path: string): Promise<Experiment> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new CliError(
      `${path}: ${(error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : errorMessage(error)}`,
      2,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new CliError(
      `${path}: not an experiment (as troupe eval run --save writes one): not JSON: ${errorMessage(error)}`,
      2,
    );
  }
  const parsed = Experiment.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new CliError(
      `${path}: not an experiment (as troupe eval run --save writes one): ${issue?.path.join('.') || 'its top'}: ${issue?.message}`,
      2,
    );
  }
  return parsed.data;
}

/**
 * The eval store of the server the options name, connected only when first asked for (a command given only files
 * talks to no server); `close` closes the connection if one was made.
 */
export class LazyEvalStore {
  #bus: Promise<JetStreamBus> | undefined;
  readonly #options: ServerOptions;
  readonly #name: string;

  constructor(options: ServerOptions, name: string) {
    this.#options = options;
    this.#name = name;
  }

  async bus(): Promise<JetStreamBus> {
    this.#bus ??= connectCli(this.#options, this.#name).catch((error) => {
      // Not being able to reach the server means the command could not run: exit 2, as the plan's other usage errors.
      throw new CliError(errorMessage(error), 2);
    });
    return this.#bus;
  }

  async store(): Promise<EvalStore> {
    return new EvalStore(await this.bus());
  }

  async close(): Promise<void> {
    const bus = await this.#bus?.catch(() => undefined);
    await bus?.close();
  }
}

/** An experiment by its argument: a file, or an id stored on the server. */
export async function experimentOf(arg: string, stores: LazyEvalStore): Promise<Experiment> {
  // A file here by that name (notes.yaml, given by mistake) is read as one, so it is told it is not an experiment.
  if (isExperimentFile(arg) || existsSync(arg)) return readExperimentFile(arg);
  const found = await (await stores.store()).experiment(arg);
  if (!found)
    throw new CliError(
      `no experiment ${arg} is stored on this server (troupe eval list shows them; a file's name ends in .json)`,
      2,
    );
  return found;
}

/** Any error of a command as one that says it could not run (exit 2), keeping a CliError's message. */
export function couldNotRun(error: unknown, what: string): never {
  if (CliError.is(error)) {
    if (error.exitCode === 2) throw error;
    throw new CliError(error.message, 2);
  }
  throw new CliError(`${what}: ${errorMessage(error)}`, 2);
}
