import { randomBytes } from 'node:crypto';
import type { TroupeEvent } from '@troupe/protocol';
import type { Logger } from '@troupe/runtime';
import type { LoadedPipeline } from './config/loadPipeline.ts';
import { type FinalEvent, leaseStack } from './inProcess/inProcessStack.ts';
import { loadedFile } from './inProcess/loadedFiles.ts';

export interface RunTaskOptions {
  /** The pipeline, loaded, or the path of its file (loaded as `loadPipeline` does with the built-in tools). */
  pipeline: LoadedPipeline | string;
  goal: string;
  input?: unknown;
  /** Labels carried on every event of the task, as a submitted task's `metadata`. */
  metadata?: Record<string, string>;
  /** The task's id; a fresh `t-…` one when absent. */
  taskId?: string;
  /**
   * Each event of the task, in order, as `troupe tail` would show them: the object the run made (no copy), to be read,
   * not changed. A listener that throws is logged; the task goes on.
   */
  onEvent?: (event: TroupeEvent) => void;
  /** Cancels the task (`troupe cancel`'s path: the task ends `task.cancelled`). */
  signal?: AbortSignal;
  /** Where the task's workspace is made (`<workspaceRoot>/<pipeline>/<taskId>`). */
  workspaceRoot: string;
  /**
   * What an `ask` permission rule gets with no person to ask: `allow` approves every such call, `deny` (default)
   * refuses it saying why. A question (`ask_human`) fails either way.
   */
  approvals?: 'allow' | 'deny';
  logger?: Logger;
  /**
   * Score the task as a coordinator scores a live one, by the pipeline's `evals:` block if its sample takes the task
   * (default true): its `eval.scored` event reaches `onEvent`, and the run resolves once it is published, so the result
   * comes later than the task's end by the scoring's time (each scorer at most its `timeoutMs`). An eval case run live
   * passes false: its dataset's scorers score it.
   */
  onlineScoring?: boolean;
}

export interface RunTaskResult {
  /** `task.completed`, `task.failed` or `task.cancelled`. */
  final: FinalEvent;
}

/**
 * Runs one task of a pipeline in this process, with no server: an in-memory bus carries its step requests and
 * events, its task record is held in memory (never serialised) and dropped when it ends, and it has no step journal,
 * no stored values and no event outbox. The same pipeline file gives the same events and result as under `troupe
 * up`, but **nothing is durable**: a crash of this process loses the task, and nothing of it can be read afterwards
 * but its workspace. For tests, evals and scripts (`troupe run`). The client API does not offer it, since
 * `@troupe/client` never depends on the coordinator.
 *
 * Runs of the same pipeline (the same loaded object, or the same unchanged file) with the same workspace root,
 * approvals and logger share one agent host and runner, and so one compiled flow, kept until none has run for a
 * second (see `inProcess/inProcessStack.ts`). A task id run lately on the shared stack gets one of its own, so it runs
 * in full again, as it would in a new process.
 */
export async function runTask(options: RunTaskOptions): Promise<RunTaskResult> {
  const loaded = typeof options.pipeline === 'string' ? await loadedFile(options.pipeline) : options.pipeline;
  const taskId = options.taskId ?? `t-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
  const lease = await leaseStack(
    loaded,
    {
      workspaceRoot: options.workspaceRoot,
      approvals: options.approvals ?? 'deny',
      logger: options.logger,
    },
    taskId,
  );
  try {
    const final = await lease.stack.run({
      taskId,
      goal: options.goal,
      ...(options.input === undefined ? {} : { input: options.input }),
      ...(options.metadata === undefined ? {} : { metadata: options.metadata }),
      ...(options.onEvent ? { onEvent: options.onEvent } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
      ...(options.onlineScoring === false ? { onlineScoring: false } : {}),
    });
    return { final };
  } finally {
    lease.release();
  }
}
