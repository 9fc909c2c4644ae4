import { dirname, resolve } from 'node:path';
import {
  type EvalCase,
  errorMessage,
  FINAL_EVENT_KINDS,
  type Score,
  type TroupeEvent,
} from '@troupe/protocol';
import {
  type Bus,
  type Clock,
  type EventFactory,
  type Logger,
  sleep,
  type ValueStore,
  withTimeout,
} from '@troupe/runtime';
import type { Problem } from '../config/checkFlow.ts';
import type { LoadedPipeline } from '../config/loadPipeline.ts';
import { type Env, keyEnvOf, modelLabel, resolveModelRef } from '../config/modelFactory.ts';
import { shortVersion } from '../config/pipelineVersion.ts';
import { caseRunOf } from './caseRun.ts';
import type { Scorer } from './evalTypes.ts';
import { sampled } from './onlineSampling.ts';
import { runPasses } from './runPasses.ts';
import { makeScorers, scoreRun, scorerProblems } from './scoreCase.ts';

/** Tasks scored at once by one pipeline's online scoring; the rest wait their turn. */
const SCORING_CONCURRENCY = 4;
/** Ended tasks waiting to be scored above which a newly ended one is not scored (said in the log). */
const MAX_WAITING = 1_000;
/** How many times a run's events are read when they look cut short, and how long apart. */
const READS = 4;
const READ_AGAIN_MS = 500;
/** How long a stop waits for the scorings it aborted to end. */
const STOP_WAIT_MS = 5_000;

export interface OnlineScoringOptions {
  bus: Pick<Bus, 'publishEvent'>;
  events: EventFactory;
  clock: Clock;
  logger: Logger;
  /**
   * Every event of an ended task, read back from the `EVENTS` stream: of a task whose events {@link OnlineScoring.ended}
   * is not handed. Without it, such a task is scored from its final event alone.
   */
  taskEvents?: (taskId: string, pipeline: string) => Promise<TroupeEvent[]>;
  /** Where an output too large for its final event is read from, so scorers read the whole of it. */
  values?: Pick<ValueStore, 'read'>;
  /** Model keys for judges; `process.env` when absent. */
  env?: Env;
  /**
   * A stored version of the pipeline, loaded (undefined when it is not stored): a task that ran on a version this
   * process has not loaded is scored by that version's `evals:` block. Without it, every task is scored by the
   * current block, as a runner without stored versions runs every task on its own.
   */
  loadVersion?: (hash: string) => Promise<LoadedPipeline | undefined>;
}

/** One version's online scoring: its pipeline, its scorers (made once) and where its module scorers are read from. */
interface VersionScoring {
  pipeline: LoadedPipeline;
  scorers: readonly Scorer[];
  baseDir: string;
}

/** An ended task waiting to be scored: by a version's scoring known now, or by a version still to be loaded. */
interface Waiting {
  final: TroupeEvent;
  /** The run's events, when they were handed over rather than read from the stream. */
  events?: readonly TroupeEvent[];
  /** Called once its scoring is over, published or not (see {@link OnlineScoring.scored}). */
  over: () => void;
  scoring?: VersionScoring;
  version?: string;
}

/**
 * Online scoring of one pipeline (its file's `evals:` block): each task that ends on this coordinator and falls in
 * the sample (by its id, {@link sampled}) is scored off the task's path, once its message is settled, and an
 * `eval.scored` event follows its final event on the task's subject; the metrics count it from there.
 *
 * A task is scored by the `evals:` block of the version it ran on (its sample rate and its scorers): the current
 * file's, or a stored version's, loaded once and its scorers made once, on the first of its tasks to end here.
 *
 * The run's events are read back from the `EVENTS` stream after the end rather than collected while the task runs:
 * a task resumed here after another coordinator stopped has events from before that this process never saw, and the
 * stream has them all (an in-process run, which has no stream, hands over the events it collected). Scoring never delays, fails or changes its task: the task is acknowledged first, and an error
 * in scoring is logged and published as the event's `error`. A judge's model calls are not the task's: their cost is
 * the event's `costUsd`, and they publish no `llm.*` events.
 */
export class OnlineScoring {
  readonly #options: OnlineScoringOptions;
  /** The scoring of the version this process runs new tasks on (its file's, or its last reload's). */
  #current: VersionScoring;
  /** Each version's scoring made so far, by its hash; undefined for a version whose `evals:` block cannot be used. */
  readonly #versions = new Map<string, VersionScoring | undefined>();
  /** Versions being read from the store, so two tasks of one version load it once. */
  readonly #loading = new Map<string, Promise<VersionScoring | undefined>>();
  /** Where a stored version's module scorers are read from: the folder of the file this process loaded. */
  readonly #baseDir: string;
  readonly #stop = new AbortController();
  readonly #waiting: Waiting[] = [];
  readonly #running = new Set<Promise<void>>();
  /** The scorings not over yet, by task id. */
  readonly #scoring = new Map<string, Promise<void>>();

  /** Throws, naming the scorer and what is wrong, when the pipeline's `evals:` block cannot be used. */
  constructor(pipeline: LoadedPipeline, options: OnlineScoringOptions) {
    this.#options = options;
    this.#baseDir = baseDirOf(pipeline);
    this.#current = this.#made(pipeline, this.#baseDir);
  }

  /** The pipeline reloaded: tasks that end on its version are scored by its `evals:` block. */
  use(pipeline: LoadedPipeline): void {
    this.#current = this.#made(pipeline, baseDirOf(pipeline));
  }

  /** Scorings begun and not done, and ended tasks waiting for one. */
  get pending(): number {
    return this.#running.size + this.#waiting.length;
  }

  /**
   * A task's message was settled after its end (`final`, its final event), having run on the pipeline version
   * `version` (the current one when absent): scored in the background if that version's `evals:` block samples it.
   * `events`, when given, are the run's every event, the final one included (an in-process run collects them as it
   * goes): scored as they are, not read back from the stream.
   */
  ended(final: TroupeEvent, version?: string, events?: readonly TroupeEvent[]): void {
    if (this.#stop.signal.aborted || !FINAL_EVENT_KINDS.includes(final.kind)) return;
    // Told again of a task it scores now (a redelivery concluded from its record): scored once.
    if (this.#scoring.has(final.taskId)) return;
    let over: () => void = () => {};
    const done = new Promise<void>((resolve) => (over = resolve));
    let waiting: Waiting;
    const ran = { final, over, ...(events ? { events } : {}) };
    if (version === undefined || !this.#options.loadVersion) waiting = { ...ran, scoring: this.#current };
    else if (!this.#versions.has(version)) waiting = { ...ran, version };
    else {
      const known = this.#versions.get(version);
      // A version whose `evals:` block cannot be used scores nothing.
      if (!known) return;
      waiting = { ...ran, scoring: known };
    }
    // A version not loaded yet is sampled by its block once it is.
    if (waiting.scoring && !inSample(waiting.scoring, final.taskId)) return;
    if (this.#waiting.length >= MAX_WAITING) {
      this.#options.logger.warn(
        { taskId: final.taskId, waiting: this.#waiting.length },
        `online scoring is ${MAX_WAITING} tasks behind; task ${final.taskId} is not scored`,
      );
      return;
    }
    const { taskId } = final;
    const scoring = done.finally(() => {
      if (this.#scoring.get(taskId) === scoring) this.#scoring.delete(taskId);
    });
    this.#scoring.set(taskId, scoring);
    this.#waiting.push(waiting);
    this.#next();
  }

  /**
   * Resolves once the scoring of task `taskId` is over (its `eval.scored` published, or not: out of the sample, its
   * version unknown, this scoring stopped); at once when none is waiting or at work. Never rejects.
   */
  scored(taskId: string): Promise<void> {
    return this.#scoring.get(taskId) ?? Promise.resolve();
  }

  /**
   * Stops scoring: scorings at work are aborted (a judge's call with them; their tasks publish no score), and what
   * waits is dropped. Waits for those at work to end, at most {@link STOP_WAIT_MS} (a module scorer may not listen).
   */
  async stop(): Promise<void> {
    this.#stop.abort();
    const waiting = this.#waiting.splice(0);
    for (const { over } of waiting) over();
    const dropped = waiting.length;
    if (dropped > 0)
      this.#options.logger.info(
        { dropped },
        `${dropped} ended task(s) not scored: this coordinator is stopping`,
      );
    await withTimeout(Promise.allSettled([...this.#running]), STOP_WAIT_MS, { unref: true });
  }

  #next(): void {
    while (this.#running.size < SCORING_CONCURRENCY) {
      const waiting = this.#waiting.shift();
      if (!waiting) return;
      const scoring: Promise<void> = this.#score(waiting).finally(() => {
        waiting.over();
        this.#running.delete(scoring);
        this.#next();
      });
      this.#running.add(scoring);
    }
  }

  async #score({ final, ...waiting }: Waiting): Promise<void> {
    const { bus, events, clock, logger } = this.#options;
    const { taskId } = final;
    const version = waiting.scoring ?? (await this.#versionScoring(waiting.version ?? '', taskId));
    if (!version || !inSample(version, taskId) || this.#stop.signal.aborted) return;
    const { pipeline, scorers, baseDir } = version;
    const sample = pipeline.config.evals?.sample ?? 1;
    const started = clock.now();
    let data: ScoredData;
    try {
      const run = await this.#runOf(final, waiting.events);
      if (run === undefined) return;
      const scores = await scoreRun(run, scorers, {
        pipeline,
        baseDir,
        ...(this.#options.env ? { env: this.#options.env } : {}),
        signal: this.#stop.signal,
      });
      data = {
        status: run.status,
        scores,
        pass: runPasses(run.status, scores),
        sample,
        costUsd: judgesCost(scores),
        durationMs: clock.now() - started,
      };
    } catch (error) {
      if (this.#stop.signal.aborted) return;
      logger.warn(
        { err: error, taskId },
        `cannot score task ${taskId} (online scoring); the task is not affected`,
      );
      data = {
        status: statusOf(final),
        scores: [],
        pass: false,
        sample,
        costUsd: 0,
        durationMs: clock.now() - started,
        error: errorMessage(error),
      };
    }
    if (this.#stop.signal.aborted) return;
    try {
      await bus.publishEvent(events.make('eval.scored', final, data, { from: 'evals', to: final.pipeline }));
    } catch (error) {
      logger.warn({ err: error, taskId }, `cannot publish the online score of task ${taskId}`);
    }
  }

  /** A version's scoring, made with its pipeline's `evals:` block, and kept for the next task of that version. */
  #made(pipeline: LoadedPipeline, baseDir: string, hash = pipeline.version.hash): VersionScoring {
    const made = { pipeline, scorers: scorersOf(pipeline, baseDir), baseDir };
    this.#versions.set(hash, made);
    return made;
  }

  /**
   * The scoring of a version this process did not load, read from the store once: undefined (said in the log) when it
   * is not stored, cannot be read now (the next task of it tries again) or its `evals:` block cannot be used.
   */
  async #versionScoring(hash: string, taskId: string): Promise<VersionScoring | undefined> {
    if (this.#versions.has(hash)) return this.#versions.get(hash);
    const loadVersion = this.#options.loadVersion;
    if (!loadVersion) return this.#current;
    let loading = this.#loading.get(hash);
    if (!loading) {
      loading = this.#loaded(loadVersion, hash, taskId).finally(() => this.#loading.delete(hash));
      this.#loading.set(hash, loading);
    }
    return loading;
  }

  async #loaded(
    loadVersion: (hash: string) => Promise<LoadedPipeline | undefined>,
    hash: string,
    taskId: string,
  ): Promise<VersionScoring | undefined> {
    const { logger } = this.#options;
    const short = shortVersion(hash);
    let pipeline: LoadedPipeline | undefined;
    try {
      pipeline = await loadVersion(hash);
    } catch (error) {
      logger.warn(
        { err: error, taskId, version: hash },
        `cannot read version ${short} of the pipeline; task ${taskId}, which ran on it, is not scored`,
      );
      return undefined;
    }
    if (pipeline === undefined) {
      logger.warn(
        { taskId, version: hash },
        `version ${short} of the pipeline is not stored; task ${taskId}, which ran on it, is not scored`,
      );
      return undefined;
    }
    if (this.#versions.has(hash)) return this.#versions.get(hash);
    try {
      // A stored version keeps no scorer module: its paths are read from this process's pipeline file's folder, and
      // imported as this process imports its own (TypeScript too, under `troupe`).
      const { importModule } = this.#current.pipeline;
      return this.#made(importModule ? { ...pipeline, importModule } : pipeline, this.#baseDir, hash);
    } catch (error) {
      logger.warn(
        { err: error, version: hash },
        `version ${short} of the pipeline: its tasks are not scored online: ${errorMessage(error)}`,
      );
      this.#versions.set(hash, undefined);
      return undefined;
    }
  }

  /**
   * The ended task's run, from its events in the stream and the whole of its output; undefined when the stream has its
   * `eval.scored` already: a task concluded again from its record (its final event stored, its message's ack lost)
   * was scored after its first end, and is not scored (nor its judges paid, nor its metrics counted) again. One whose
   * first coordinator stopped before scoring it has none, and is scored now.
   */
  async #runOf(final: TroupeEvent, handed?: readonly TroupeEvent[]) {
    const { taskId } = final;
    const events = handed ? withFinal(handed, final) : await this.#eventsOf(final);
    if (events.some((event) => event.kind === 'eval.scored' && event.taskId === taskId)) {
      this.#options.logger.info({ taskId }, `task ${taskId} is scored already; not scored again`);
      return undefined;
    }
    const ref = final.kind === 'task.completed' ? final.data.outputRef : undefined;
    const output = ref && this.#options.values ? await this.#options.values.read(ref) : undefined;
    return caseRunOf(caseOf(taskId, events), events, output === undefined ? {} : { output });
  }

  /**
   * The ended task's events in the stream. Its final event is stored, and with it every event this process published
   * before; a worker elsewhere publishes its steps' model and tool events on its own, and may store the last of them
   * after the step's reply: a run whose steps' calls are not all there yet is read again, a few times, then scored
   * as it is.
   */
  async #eventsOf(final: TroupeEvent): Promise<TroupeEvent[]> {
    const { taskEvents, clock, logger } = this.#options;
    if (!taskEvents) return [final];
    for (let read = 1; ; read++) {
      // The final event was stored before the message was settled; it is added should the read have missed it.
      const events = withFinal(await taskEvents(final.taskId, final.pipeline), final);
      const missing = missingCalls(events);
      if (missing === undefined) return events;
      if (read >= READS) {
        logger.info({ taskId: final.taskId, missing }, 'scoring a run whose events look incomplete');
        return events;
      }
      await sleep(clock, READ_AGAIN_MS, this.#stop.signal);
    }
  }
}

/**
 * What a run's events lack, if anything: a step that ended after `turns` model calls with fewer of them in the
 * events (`llm.response` or `llm.error`), or a step whose replies asked for more tool calls than it has `tool.result`s.
 */
export function missingCalls(events: readonly TroupeEvent[]): string | undefined {
  const turns = new Map<string, Set<number>>();
  const calls = new Map<string, number>();
  const results = new Map<string, number>();
  const add = (counts: Map<string, number>, stepId: string, n: number) =>
    counts.set(stepId, (counts.get(stepId) ?? 0) + n);
  for (const event of events) {
    if (event.kind === 'llm.response' || event.kind === 'llm.error') {
      const { stepId, turn } = event.data;
      turns.set(stepId, (turns.get(stepId) ?? new Set()).add(turn));
      if (event.kind === 'llm.response') add(calls, stepId, event.data.toolCalls.length);
    } else if (event.kind === 'tool.result') add(results, event.data.stepId, 1);
  }
  for (const event of events) {
    if (event.kind !== 'step.completed' || event.data.reused) continue;
    const { stepId } = event.data;
    const seen = turns.get(stepId)?.size ?? 0;
    if (seen < event.data.turns) return `step ${stepId}: ${seen} of ${event.data.turns} model calls`;
    const asked = calls.get(stepId) ?? 0;
    const answered = results.get(stepId) ?? 0;
    if (answered < asked) return `step ${stepId}: ${answered} of ${asked} tool results`;
  }
  return undefined;
}

type ScoredData = Extract<TroupeEvent, { kind: 'eval.scored' }>['data'];

/**
 * What is wrong with a pipeline's `evals:` block that its schema cannot tell, each problem at its scorer's path: each
 * scorer is made as scoring will make it (a CEL expression parsed, a regular expression compiled, a judge's model
 * found among `models:`, an `exact` scorer given its `value`: a live task has no expected output), and a judge's
 * model needs its API key when keys are required.
 */
export function evalsProblems(
  pipeline: LoadedPipeline,
  options: { env: Env; requireKeys: boolean },
): Problem[] {
  const evals = pipeline.config.evals;
  if (!evals) return [];
  const problems: Problem[] = [];
  const made = { baseDir: baseDirOf(pipeline), pipeline, online: true };
  const unmade = new Map(scorerProblems(evals.scorers, made).map(({ index, error }) => [index, error]));
  for (const [i, spec] of evals.scorers.entries()) {
    const path = ['evals', 'scorers', i];
    const error = unmade.get(i);
    if (error) problems.push({ path, message: error.message });
    if (spec.type === 'judge' && options.requireKeys) {
      const model = resolveModelRef(pipeline.config, spec.model);
      const keyEnv = model && keyEnvOf(model);
      if (model && keyEnv !== undefined && !options.env[keyEnv])
        problems.push({
          path: [...path, 'model'],
          message: `judge ${spec.name ?? `(${spec.model})`} uses ${modelLabel(model)}, which needs the environment variable ${keyEnv}; it is not set`,
        });
    }
  }
  return problems;
}

/** A run's events with its final event, added when they lack it. */
function withFinal(events: readonly TroupeEvent[], final: TroupeEvent): TroupeEvent[] {
  return events.some((event) => event.id === final.id) ? [...events] : [...events, final];
}

/** Whether a version's `evals:` block scores the task `taskId`: it has one, and its sample takes the task. */
function inSample(version: VersionScoring, taskId: string): boolean {
  const evals = version.pipeline.config.evals;
  return evals !== undefined && sampled(taskId, evals.sample);
}

/** The pipeline's scorers; none without an `evals:` block. */
function scorersOf(pipeline: LoadedPipeline, baseDir: string): Scorer[] {
  const evals = pipeline.config.evals;
  if (!evals) return [];
  try {
    return makeScorers(evals.scorers, { baseDir, pipeline, online: true });
  } catch (error) {
    throw new Error(`pipeline ${pipeline.config.name}: evals: ${errorMessage(error)}`, { cause: error });
  }
}

/** Where a `module` scorer's path is read from: the pipeline file's folder. */
function baseDirOf(pipeline: Pick<LoadedPipeline, 'file'>): string {
  return dirname(resolve(pipeline.file));
}

/** The case an online score is of: the task's goal, input and metadata, with nothing expected. */
function caseOf(taskId: string, events: readonly TroupeEvent[]): EvalCase {
  const accepted = events.find((event) => event.kind === 'task.accepted' && event.taskId === taskId);
  const data = accepted?.kind === 'task.accepted' ? accepted.data : undefined;
  return {
    id: taskId,
    goal: data?.goal || '(unknown: the task.accepted event is no longer in the stream)',
    ...(data?.input ? { input: data.input } : {}),
    ...(data?.metadata ? { metadata: data.metadata } : {}),
  };
}

function statusOf(final: TroupeEvent): ScoredData['status'] {
  if (final.kind === 'task.completed') return 'completed';
  if (final.kind === 'task.cancelled') return 'cancelled';
  return 'failed';
}

function judgesCost(scores: readonly Score[]): number {
  return scores.reduce((sum, score) => sum + (score.costUsd ?? 0), 0);
}
