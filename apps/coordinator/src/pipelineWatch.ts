import { dirname, resolve } from 'node:path';
import { errorMessage } from '@troupe/protocol';
import type { Logger } from '@troupe/runtime';
import { ConfigError, formatIssue } from './config/configError.ts';
import { type FileWatch, watchFiles } from './config/fileWatch.ts';
import type { LoadedPipeline } from './config/loadPipeline.ts';
import { shortVersion } from './config/pipelineVersion.ts';
import type { PipelineReload } from './coordinator.ts';

/** What came of one change to a watched pipeline file (or a script it names). */
export type ReloadOutcome =
  | { kind: 'reloaded'; file: string; pipeline: string; from?: string; to: string; message: string }
  /** Nothing changed: the version already serving. */
  | { kind: 'unchanged'; file: string; pipeline: string; version: string }
  /** The file cannot be used now; `version` keeps serving. */
  | { kind: 'refused'; file: string; pipeline: string; version: string; message: string }
  /** A tool module the pipeline names changed: its code is loaded once, so only a restart runs the change. */
  | { kind: 'restart'; file: string; pipeline: string; module: string; message: string };

export interface PipelineWatchOptions {
  /** The pipelines as loaded at start, each with its file. */
  pipelines: readonly LoadedPipeline[];
  /** Loads a file again, as it was loaded at start. */
  load: (file: string) => Promise<LoadedPipeline>;
  /** Makes a loaded version the one new tasks start on (`Coordinator.reload`). */
  reload: (pipeline: LoadedPipeline) => Promise<PipelineReload>;
  logger: Logger;
  debounceMs?: number;
  /** Told each outcome once it is logged (tests, a CLI that prints them). */
  onOutcome?: (outcome: ReloadOutcome) => void;
}

/** Watched pipeline files; {@link watchPipelines} makes one. */
export interface PipelineWatch {
  /** Resolves once every change seen so far has been dealt with. */
  settled(): Promise<void>;
  close(): Promise<void>;
}

/**
 * `troupe up --watch`: reloads a pipeline when its file, or a file it names (a scripted model's script), changes.
 * A file that loads makes a new version the one new tasks start on, while running tasks finish on theirs; a file
 * that does not (invalid, gone, naming another pipeline) is logged with its problems, and the last good version keeps
 * serving until a save that loads. Reloads run one at a time, in the order the changes were seen.
 */
export function watchPipelines(options: PipelineWatchOptions): PipelineWatch {
  const { logger } = options;
  /** The version serving for each pipeline file, and what it names. */
  const serving = new Map(options.pipelines.map((p) => [p.file, p]));
  let queue: Promise<void> = Promise.resolve();

  /** The files to watch, each mapped to the pipeline files it belongs to. */
  const followed = () => {
    const owners = new Map<string, string[]>();
    for (const [file, pipeline] of serving) {
      for (const path of [file, ...namedFiles(file, pipeline)]) {
        owners.set(path, [...(owners.get(path) ?? []), file]);
      }
    }
    return owners;
  };
  let owners = followed();

  /** Each pipeline's tool modules, by path, with the pipeline files naming them and the path as each writes it. */
  const modulesFollowed = () => {
    const named = new Map<string, { file: string; written: string }[]>();
    for (const [file, pipeline] of serving) {
      for (const written of pipeline.config.tools?.modules ?? []) {
        const path = resolve(dirname(resolve(file)), written);
        named.set(path, [...(named.get(path) ?? []), { file, written }]);
      }
    }
    return named;
  };
  let modules = modulesFollowed();
  const following = () => [...new Set([...owners.keys(), ...modules.keys()])];

  const reloadOne = async (file: string): Promise<ReloadOutcome> => {
    const current = serving.get(file);
    if (!current) throw new Error(`${file} is not a watched pipeline file`);
    const name = current.config.name;
    const version = current.version.hash;
    const refused = (message: string): ReloadOutcome => ({
      kind: 'refused',
      file,
      pipeline: name,
      version,
      message: `pipeline ${name}: ${file} not reloaded, version ${shortVersion(version)} keeps serving: ${message}`,
    });
    let next: LoadedPipeline;
    try {
      next = await options.load(file);
    } catch (error) {
      return refused(problemsOf(error));
    }
    if (next.config.name !== name) {
      return refused(
        `it now names pipeline ${next.config.name}; a reload keeps a file's pipeline, so restart to run ${next.config.name}`,
      );
    }
    if (next.version.hash === version) return { kind: 'unchanged', file, pipeline: name, version };
    try {
      const done = await options.reload(next);
      serving.set(file, next);
      const from = done.from ?? version;
      return {
        kind: 'reloaded',
        file,
        pipeline: name,
        from,
        to: done.to,
        message: `pipeline ${name} reloaded from ${file}: version ${shortVersion(from)} → ${shortVersion(done.to)}; new tasks start on ${shortVersion(done.to)}, running ones finish on theirs`,
      };
    } catch (error) {
      return refused(problemsOf(error));
    }
  };

  const report = (outcome: ReloadOutcome) => {
    const fields = { pipeline: outcome.pipeline, file: outcome.file };
    if (outcome.kind === 'reloaded')
      logger.info({ ...fields, from: outcome.from, to: outcome.to }, outcome.message);
    else if (outcome.kind === 'refused')
      logger.error({ ...fields, version: outcome.version }, outcome.message);
    else if (outcome.kind === 'restart') logger.warn({ ...fields, module: outcome.module }, outcome.message);
    else
      logger.debug(
        { ...fields, version: outcome.version },
        `pipeline ${outcome.pipeline}: ${outcome.file} saved with no change`,
      );
    options.onOutcome?.(outcome);
  };

  const changed = (paths: string[]) => {
    const files = [...new Set(paths.flatMap((path) => owners.get(path) ?? []))];
    const restarts = paths.flatMap((path) => modules.get(path) ?? []);
    queue = queue.then(async () => {
      for (const { file, written } of restarts) {
        const pipeline = serving.get(file)?.config.name ?? file;
        report({
          kind: 'restart',
          file,
          pipeline,
          module: written,
          message: `pipeline ${pipeline}: its tool module ${written} changed, but tool modules are loaded once, at start: the tools that run are still those loaded then; restart troupe up (and the workers that load it) to run the change`,
        });
      }
      for (const file of files) {
        const outcome = await reloadOne(file).catch((error: unknown) =>
          refusedUnexpectedly(file, serving.get(file), error),
        );
        report(outcome);
      }
      // A version may name other scripts than the last: follow those.
      owners = followed();
      modules = modulesFollowed();
      watch.follow(following());
    });
  };

  const watch: FileWatch = watchFiles(following(), {
    onChange: changed,
    onError: (error, directory) =>
      logger.error(
        { err: error, directory },
        `cannot watch ${directory} any more; changes to the pipeline files there are not reloaded until restart`,
      ),
    ...(options.debounceMs === undefined ? {} : { debounceMs: options.debounceMs }),
  });
  logger.info(
    { files: [...serving.keys()] },
    `watching ${[...serving.keys()].join(', ')}: a saved change is reloaded`,
  );

  return {
    settled: () => queue,
    async close() {
      watch.close();
      await queue;
    },
  };
}

/** The files a loaded pipeline names (its scripts), as paths from where the process runs, like its own. */
function namedFiles(file: string, pipeline: LoadedPipeline): string[] {
  const base = dirname(resolve(file));
  return Object.keys(pipeline.version.files).map((path) => resolve(base, path));
}

/** Every problem of a file that does not load, each `file:line:col path: what`, on one line. */
function problemsOf(error: unknown): string {
  if (error instanceof ConfigError) {
    // A file that is gone or empty has a headline; one with problems has them listed.
    if (error.issues.length === 1 && error.issues[0]?.path === '' && error.issues[0].line === undefined)
      return error.message;
    return error.issues.map((issue) => formatIssue(error.file, issue)).join('; ');
  }
  return errorMessage(error);
}

function refusedUnexpectedly(
  file: string,
  current: LoadedPipeline | undefined,
  error: unknown,
): ReloadOutcome {
  const pipeline = current?.config.name ?? file;
  const version = current?.version.hash ?? '';
  return {
    kind: 'refused',
    file,
    pipeline,
    version,
    message: `pipeline ${pipeline}: ${file} not reloaded: ${errorMessage(error)}`,
  };
}
