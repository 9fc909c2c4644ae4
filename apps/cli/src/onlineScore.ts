import { CLIENT_WAIT } from '@troupe/client';
import { PipelineConfig, scoreWaitMs } from '@troupe/coordinator';
import { BUCKETS, PipelineVersion, type TroupeEvent } from '@troupe/protocol';
import { type JetStreamBus, KvStore } from '@troupe/runtime';

/**
 * How long a watcher of an ended task waits after its final event for its `eval.scored` (online scoring,
 * docs/evals.md): by the `evals:` block of the version the task ran on, its slowest scorer's time limit and a margin.
 * Undefined when no score will come (no block, or its sample leaves the task out) or it cannot be told: the task's
 * record names no version, or the version cannot be read (a user allowed only the pipeline's events). Never throws.
 */
export async function scoreWaitOf(
  bus: JetStreamBus,
  task: { taskId: string; pipeline: string; version?: string | undefined },
): Promise<number | undefined> {
  if (task.version === undefined) return undefined;
  try {
    const versions = await KvStore.open(bus, BUCKETS.versions, PipelineVersion, CLIENT_WAIT);
    const config = (await versions.get(`${task.pipeline}.${task.version}`))?.value.config;
    const parsed = config === undefined ? undefined : PipelineConfig.safeParse(config);
    return parsed?.success ? scoreWaitMs(parsed.data.evals, task.taskId) : undefined;
  } catch {
    return undefined;
  }
}

/** Keeps a task's `eval.scored` among the events it is shown, for a look now or to wait for. */
export interface ScoreTracker {
  note(event: TroupeEvent): void;
  readonly current: TroupeEvent | undefined;
  /**
   * Resolves with the `eval.scored` once noted, or undefined once `ms` have passed or `signal` aborts, whichever is
   * first; the timer lets the process exit.
   */
  within(ms: number, signal?: AbortSignal): Promise<TroupeEvent | undefined>;
}

export function scoreTracker(): ScoreTracker {
  let current: TroupeEvent | undefined;
  let resolve: (event: TroupeEvent) => void = () => {};
  const arrived = new Promise<TroupeEvent>((r) => (resolve = r));
  return {
    note(event) {
      if (event.kind !== 'eval.scored') return;
      current ??= event;
      resolve(event);
    },
    get current() {
      return current;
    },
    async within(ms, signal) {
      if (current !== undefined) return current;
      let timer: NodeJS.Timeout | undefined;
      let onAbort = () => {};
      const over = new Promise<undefined>((r) => {
        timer = setTimeout(() => r(undefined), ms);
        timer.unref();
        onAbort = () => r(undefined);
        if (signal?.aborted) r(undefined);
        signal?.addEventListener('abort', onAbort, { once: true });
      });
      try {
        return await Promise.race([arrived, over]);
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      }
    },
  };
}

/** How long {@link awaitScore} waits, and what stops it. */
export interface ScoreWait {
  /** Stops the wait at once (SIGINT), saying nothing more. */
  signal?: AbortSignal;
  /** How long to wait, when known already (what is left of the wait for a task that ended a while ago). */
  known?: number;
  /** When it must end, whatever the scorers' limit (a command's `--timeout`, in ms since the epoch), and what sets it. */
  until?: { at: number; by: string };
}

/**
 * After a task's final event: waits for its online score when one will come (see {@link scoreWaitOf}), no longer
 * than `until`, saying on stderr how long at most, and says when none came in time (it may come later: scoring waits
 * its turn on the coordinator). The events' listener shows it as it comes; nothing changes the exit code.
 */
export async function awaitScore(
  bus: JetStreamBus,
  task: { taskId: string; pipeline: string; version?: string | undefined },
  score: ScoreTracker,
  wait: ScoreWait = {},
): Promise<void> {
  if (score.current !== undefined) return;
  const due = wait.known ?? (await scoreWaitOf(bus, task));
  if (due === undefined || score.current !== undefined) return;
  const { signal, until } = wait;
  const left = until === undefined ? due : until.at - Date.now();
  const bounded = left < due;
  const ms = bounded ? Math.max(0, left) : due;
  const later = `it may come later (troupe tail --task ${task.taskId} shows it then)`;
  if (ms <= 0) {
    process.stderr.write(
      `not waiting for task ${task.taskId}'s online score (eval.scored): ${until?.by} leaves no time; ${later}\n`,
    );
    return;
  }
  const seconds = Math.ceil(ms / 1000);
  process.stderr.write(
    `waiting up to ${seconds} s for task ${task.taskId}'s online score (eval.scored${bounded ? `; what ${until?.by} leaves` : ''})\n`,
  );
  if ((await score.within(ms, signal)) === undefined && !signal?.aborted)
    process.stderr.write(`no online score for task ${task.taskId} within ${seconds} s; ${later}\n`);
}
