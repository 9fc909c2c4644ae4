import { cancelTask, OperationError, readTask, submitToPipeline } from '@troupe/client';
import {
  emptyUsage,
  errorMessage,
  FINAL_EVENT_KINDS,
  MAX_PIPELINE_DEPTH,
  parseEvent,
  subjects,
  type TroupeEvent,
} from '@troupe/protocol';
import { type Clock, every, type JetStreamBus, type ValueStore } from '@troupe/runtime';
import type { PipelineRunInput, PipelineRunOutput } from './workflowTypes.ts';

/**
 * Runs a `pipeline` step: submits the sub-task (its id is the step's, so submitting it again after a crash runs
 * nothing new) and waits for its final event, its timeout, or the step being left. The final event is listened for
 * before the task is submitted, and a sub-task that ended already is read from its record, so no ending is missed.
 */
export function createSubPipelineRunner(bus: JetStreamBus, clock: Clock, values?: ValueStore) {
  return async (
    input: PipelineRunInput,
    signal: AbortSignal,
    stopping: () => boolean,
  ): Promise<PipelineRunOutput> => {
    const started = clock.now();
    const ended = (code: string, message: string): PipelineRunOutput => ({
      ok: false,
      code,
      message,
      usage: emptyUsage(),
      durationMs: Math.max(0, clock.now() - started),
    });
    const { task, pipeline } = input;
    if (task.parent.depth > MAX_PIPELINE_DEPTH) {
      return ended(
        'too_deep',
        `pipelines nest at most ${MAX_PIPELINE_DEPTH} deep; task ${task.parent.taskId} is already at depth ${task.parent.depth - 1}`,
      );
    }
    let settle: (event: TroupeEvent) => void = () => {};
    const final = new Promise<TroupeEvent>((resolve) => (settle = resolve));
    const subscription = bus.subscribeText(subjects.event(pipeline, task.id, 'task.*'), (delivery) => {
      const parsed = parseEvent(delivery.value, delivery.subject);
      if (parsed.ok && FINAL_EVENT_KINDS.includes(parsed.value.kind)) settle(parsed.value);
    });
    let timer: unknown;
    // The event may be missed (a reconnect while it went by): the sub-task's record says it too.
    const stopPolling = every(clock, RECHECK_MS, () => {
      void readTask(bus, task.id).then(
        (record) => record.final && settle(record.final),
        () => undefined,
      );
    });
    try {
      await bus.flush();
      try {
        const submitted = await submitToPipeline(bus, pipeline, task, {
          ...(values ? { values } : {}),
          ...(input.inputCut ? { inputCut: input.inputCut } : {}),
        });
        const known = submitted.record;
        if (known && known.pipeline !== pipeline) {
          return ended('conflict', `task id ${task.id} is taken by a task of pipeline ${known.pipeline}`);
        }
        if (known?.final) settle(known.final);
      } catch (error) {
        if (error instanceof OperationError) return ended(error.code, error.message);
        throw error;
      }
      const outcome = await new Promise<TroupeEvent | 'timeout' | 'left'>((resolve) => {
        timer = clock.setTimeout(() => resolve('timeout'), input.timeoutMs);
        signal.addEventListener('abort', () => resolve('left'), { once: true });
        void final.then(resolve);
      });
      if (outcome === 'left') {
        // Left by the flow (a join that went on without it, the task cancelled): the sub-task is not needed. Left
        // because this coordinator stops: it goes on, for the run that resumes this task.
        if (!stopping())
          await cancelQuietly(task.id, `its parent step ${task.parent.taskId}/${task.parent.step} was left`);
        return ended('aborted', 'the step was left');
      }
      if (outcome === 'timeout') {
        // The step has given up on it: it must not go on unobserved.
        await cancelTask(
          bus,
          task.id,
          `its parent step ${task.parent.taskId}/${task.parent.step} timed out`,
        ).catch(() => undefined);
        return ended(
          'step_timeout',
          `task ${task.id} did not end within ${Math.round(input.timeoutMs / 1000)} s`,
        );
      }
      const result = outcomeOf(outcome, Math.max(0, clock.now() - started));
      if (!values || !result.ok || !result.outputRef) return result;
      // A large output is copied into this pipeline's own bucket, so this pipeline's workers read it from their own.
      try {
        const whole = await values.read(result.outputRef);
        const kept = await values.offload(task.parent.pipeline, `${task.id}.output`, whole);
        const { outputRef: _theirs, ...rest } = result;
        return { ...rest, output: kept.text, ...(kept.ref ? { outputRef: kept.ref } : {}) };
      } catch (error) {
        return ended(
          'value_unavailable',
          `the output of task ${task.id} cannot be read back whole from ${result.outputRef.bucket}: ${errorMessage(error)}`,
        );
      }
    } finally {
      clock.clearTimeout(timer);
      stopPolling();
      subscription.unsubscribe();
    }
  };

  /**
   * Cancels a sub-task the parent no longer waits for. One not running yet cannot be cancelled now: it cancels
   * itself when it starts if its parent task has ended by then (`orphaned` in the pipeline runner).
   */
  async function cancelQuietly(taskId: string, reason: string): Promise<void> {
    await cancelTask(bus, taskId, reason).catch(() => undefined);
  }
}

/** How often a step waiting on its sub-task reads the sub-task's record, in case its final event went by unseen. */
const RECHECK_MS = 10_000;

function outcomeOf(final: TroupeEvent, durationMs: number): PipelineRunOutput {
  switch (final.kind) {
    case 'task.completed': {
      const { output, outputRef } = final.data;
      return {
        ok: true,
        output: typeof output === 'string' ? output : JSON.stringify(output),
        ...(outputRef ? { outputRef } : {}),
        usage: final.data.usage,
        durationMs,
      };
    }
    case 'task.failed':
      return {
        ok: false,
        code: final.data.reason,
        message: `task ${final.taskId} failed (${final.data.reason}): ${final.data.message}`,
        usage: final.data.usage,
        durationMs,
      };
    case 'task.cancelled':
      return {
        ok: false,
        code: 'cancelled',
        message: `task ${final.taskId} was cancelled${final.data.reason ? `: ${final.data.reason}` : ''}`,
        usage: final.data.usage,
        durationMs,
      };
    default:
      return {
        ok: false,
        code: 'internal',
        message: `task ${final.taskId} ended with ${final.kind}`,
        usage: emptyUsage(),
        durationMs,
      };
  }
}
