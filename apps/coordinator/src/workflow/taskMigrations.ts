import type { ControlReceipt, ControlRefusal, ErrorReply } from '@troupe/protocol';
import { type Clock, type Logger, sleep } from '@troupe/runtime';
import { shortVersion } from '../config/pipelineVersion.ts';
import type { MigrateAnswer, TaskSignals } from '../task/taskSignals.ts';
import type { FlowVersion, FlowVersions } from './flowVersions.ts';
import { migrationProblem } from './migration.ts';

export interface TaskMigrationsOptions {
  pipeline: string;
  /** The pipeline's versions, as the runner runs them. */
  versions: FlowVersions;
  /** Reaches the task actors running here: a migration is a signal to one of them. */
  signals: TaskSignals;
  /** Leaves a `human` step's question pending when its run is let go (the people gate's `leavePending`). */
  leavePending?: (stepId: string) => void;
  clock: Clock;
  /**
   * How long a migration may take to find and compile the version asked for before it is answered "ask again"
   * (default 500 ms): half the control responder's grace, so this coordinator's answer is the one its sender gets.
   */
  prepareMs?: number;
  logger: Logger;
}

/** Default of `prepareMs`. */
export const MIGRATE_PREPARE_MS = 500;

/**
 * Moves tasks running in this process to another version of their pipeline (`troupe migrate`), and keeps what a
 * moved task's run leaves behind: its questions to people stay pending and its sub-tasks keep running, for the run
 * that resumes it on the new version.
 */
export class TaskMigrations {
  readonly #o: TaskMigrationsOptions;
  /** The `human` steps of each task here waiting on a person now, by step id. */
  readonly #questions = new Map<string, Set<string>>();
  /** Tasks whose run was let go to move them: their sub-tasks are left running, as at a shutdown. */
  readonly #moving = new Set<string>();

  constructor(options: TaskMigrationsOptions) {
    this.#o = options;
  }

  /** Runs `ask`, a `human` step of the task waiting on a person, noting it meanwhile. */
  async asking<T>(taskId: string, stepId: string, ask: () => Promise<T>): Promise<T> {
    const asking = this.#questions.get(taskId) ?? new Set<string>();
    this.#questions.set(taskId, asking);
    asking.add(stepId);
    try {
      return await ask();
    } finally {
      asking.delete(stepId);
      if (asking.size === 0) this.#questions.delete(taskId);
    }
  }

  /** Whether the task's run was let go to move it, and has not finished ending. */
  moving(taskId: string): boolean {
    return this.#moving.has(taskId);
  }

  /**
   * Moves a task running here to another version (`to`, a hash or a unique prefix; the newest when absent) when its
   * state fits that version (see `migrationProblem`); says why not otherwise, changing nothing. It answers as soon
   * as the task is checked and its run let go (one turn), not once the run has ended: a sender takes the first
   * answer, and the control responder of another coordinator answers a task nobody seems to run after its grace.
   */
  async migrate(taskId: string, to: string | undefined): Promise<ControlReceipt | ErrorReply> {
    const { pipeline, versions, clock, signals } = this.#o;
    const from = signals.versionOf(taskId) ?? versions.current.hash;
    const timer = new AbortController();
    const prepared = await Promise.race([
      this.#prepare(taskId, from, to),
      sleep(clock, this.#o.prepareMs ?? MIGRATE_PREPARE_MS, timer.signal).then(
        () => undefined,
        () => undefined,
      ),
    ]).finally(() => timer.abort());
    if (prepared === undefined) {
      return refusal(
        'not_migratable',
        `cannot migrate task ${taskId} yet: the version asked for of pipeline ${pipeline} is still being read; ask again in a moment; nothing was changed`,
      );
    }
    if ('error' in prepared) return prepared.error;
    const { source, target } = prepared;
    const moved = await new Promise<MigrateAnswer>((answer) => {
      const heard = signals.send(taskId, {
        type: 'migrate',
        version: target.hash,
        problem: (snapshot, input) => {
          const problem = migrationProblem(snapshot, input, source.config, target);
          if (problem !== undefined) return problem;
          // Let go as at a shutdown: its questions stay pending, its sub-tasks running, for the run that resumes it.
          this.#moving.add(taskId);
          for (const stepId of this.#questions.get(taskId) ?? []) this.#o.leavePending?.(stepId);
          return undefined;
        },
        answer,
      });
      if (!heard) answer(`task ${taskId} is ending already`);
    });
    if (typeof moved === 'string') {
      return refusal(
        'not_migratable',
        `task ${taskId} cannot move from version ${shortVersion(from)} to ${shortVersion(target.hash)}: ${moved}; nothing was changed`,
      );
    }
    void moved.recorded.finally(() => this.#moving.delete(taskId));
    return { ok: true, taskId, outcome: 'migrated', from, to: target.hash };
  }

  /** The flows a migration compares: the task's version's and the target's; or the refusal saying why not. */
  async #prepare(
    taskId: string,
    from: string,
    to: string | undefined,
  ): Promise<{ source: FlowVersion; target: FlowVersion } | { error: ErrorReply }> {
    const { pipeline, versions } = this.#o;
    const hash = to === undefined ? await versions.newestHash() : await versions.named(to);
    if (hash === undefined) {
      const known = await versions.hashes();
      return {
        error: refusal(
          'unknown_version',
          `no single stored version of pipeline ${pipeline} starts with ${to}; stored: ${known.map(shortVersion).join(', ')}`,
        ),
      };
    }
    if (hash === from) {
      return {
        error: refusal(
          'not_migratable',
          `task ${taskId} runs on version ${shortVersion(from)} already; nothing was changed`,
        ),
      };
    }
    const [source, target] = await Promise.all([versions.flowFor(from), versions.flowFor(hash)]);
    if (typeof target === 'string')
      return { error: refusal('unknown_version', `${target}; nothing was changed`) };
    if (typeof source === 'string')
      return { error: refusal('not_migratable', `${source}; nothing was changed`) };
    return { source, target };
  }
}

function refusal(code: ControlRefusal, message: string): ErrorReply {
  return { ok: false, error: { code, message } };
}
