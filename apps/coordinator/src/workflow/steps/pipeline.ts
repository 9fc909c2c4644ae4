import { createHash } from 'node:crypto';
import type { StepOutput } from '@troupe/protocol';
import { errorMessage, sumUsage } from '@troupe/protocol';
import { preview } from '@troupe/runtime';
import type { StepPlace } from '../../config/flowLayout.ts';
import type { PipelineStepConfig } from '../../config/pipelineSchema.ts';
import { parsedOutput } from '../compile/conditions.ts';
import type { Compiling, StepAt } from '../compile/flowList.ts';
import { recoveryOf } from '../compile/recovery.ts';
import { say, startedEvent } from '../compile/stepEvents.ts';
import { stepId, withInput } from '../compile/stepRequest.ts';
import {
  assignFor,
  type ErrorActorEvent,
  type PipelineDone,
  type StepAction,
  type WorkflowStates,
} from '../compile/workflowSetup.ts';
import { reusedSubTask, reusedSubTaskOf } from '../reusedStep.ts';
import type { PipelineRunInput, PipelineRunOutput, WorkflowContext } from '../workflowTypes.ts';

/**
 * A sub-pipeline: invokes `runPipeline` with the sub-task — its id made from this step's (so a resumed task submits
 * the same one, which runs once), its parent this task one level deeper — and waits for it to end. Its output is
 * the step's; its usage counts in this task's. A sub-task that failed or was cancelled fails the step, and the
 * step's `onError` decides.
 */
export function compilePipeline(c: Compiling, step: PipelineStepConfig, at: StepAt): WorkflowStates {
  const { place, next } = at;
  const recovery = recoveryOf(step, at.scope, next, at.resolve);
  const timeoutMs = (step.timeout ?? c.config.defaults.stepTimeout) * 1_000;
  const agent = 'pipeline';
  const completed = say<PipelineDone>(({ context, event }) => {
    const reply = event.output;
    return {
      type: 'event' as const,
      kind: 'step.completed' as const,
      from: agent,
      to: 'workflow',
      data: {
        step: step.id,
        agent,
        round: context.round,
        stepId: stepId(context, step),
        ok: reply.ok,
        output: reply.ok ? preview(reply.output, 256 * 1024) : '',
        ...(reply.ok && reply.outputRef ? { outputRef: reply.outputRef } : {}),
        ...(reply.ok ? {} : { error: { code: reply.code, message: reply.message } }),
        ...(reply.ok && reply.reused ? { reused: true } : {}),
        usage: reply.usage,
        turns: 0,
        durationMs: reply.durationMs,
      },
    };
  });
  const spent = assignFor<PipelineDone>(({ context, event }) => ({
    usage: sumUsage(context.usage, event.output.usage),
  }));
  const before: StepAction<PipelineDone>[] = [completed, spent];
  return {
    [step.id]: {
      id: step.id,
      entry: [
        // A reused step names the sub-task of its origin that gave its output.
        startedEvent(
          place,
          step,
          agent,
          (context) =>
            reusedSubTaskOf(context, step) ?? {
              taskId: subTaskId(stepId(context, step)),
              pipeline: step.pipeline,
            },
        ),
      ],
      invoke: {
        src: 'runPipeline',
        // A restart's or fork's hook: a sub-task its origin ran is not submitted again; its output is reused.
        input: ({ context }) => ({
          ...subTaskRun(step, place, timeoutMs, context),
          ...reusedSubTask(context, step),
        }),
        onDone: [
          {
            guard: ({ event }) => event.output.ok,
            target: next,
            actions: [
              ...before,
              assignFor<PipelineDone>(({ context, event }) => ({
                latest: {
                  ...context.latest,
                  [step.id]: { step: step.id, agent, round: context.round, ...withRef(event.output) },
                },
              })),
            ],
          },
          ...recovery<PipelineDone>(
            ({ event }) => ({
              reason: 'step_failed',
              message: `step ${step.id} (pipeline ${step.pipeline}): ${event.output.ok ? '' : event.output.message}`,
              step: step.id,
            }),
            before,
          ).map(({ when: _ignored, ...t }) => t),
        ],
        onError: recovery<ErrorActorEvent>(
          ({ event }) => ({
            reason: 'internal',
            message: `step ${step.id} could not run pipeline ${step.pipeline}: ${errorMessage(event.error)}`,
            step: step.id,
          }),
          [],
        ).map(({ when: _ignored, ...t }) => t),
      },
    },
  };
}

/**
 * What `runPipeline` is given: the sub-task — its id made from the step's, its input the outputs the step may see
 * (and a review's feedback with what it gave last time, when sent back), its parent this task one level deeper.
 */
function subTaskRun(
  step: PipelineStepConfig,
  place: StepPlace,
  timeoutMs: number,
  context: WorkflowContext,
): PipelineRunInput {
  const visible = step.context ?? place.before;
  const outputs = Object.fromEntries(
    visible.flatMap((id) => {
      const out = context.latest[id];
      return out ? [[id, parsedOutput(out.output)]] : [];
    }),
  );
  const { task } = context;
  const own = {
    context: outputs,
    // Sent back by a review: what it said, and what this step's sub-task gave last time.
    ...(context.approved === false && context.feedback !== undefined ? { feedback: context.feedback } : {}),
    ...(context.previous?.[step.id]
      ? { previous: parsedOutput(context.previous[step.id]?.output ?? '') }
      : {}),
  };
  const given = withInput(task, own);
  return {
    pipeline: step.pipeline,
    timeoutMs,
    ...(given.inputCut ? { inputCut: given.inputCut } : {}),
    task: {
      id: subTaskId(stepId(context, step)),
      goal: step.goal ?? task.goal,
      input: given.input ?? {},
      ...(task.metadata ? { metadata: task.metadata } : {}),
      parent: {
        taskId: task.taskId,
        pipeline: task.pipeline,
        step: step.id,
        depth: (task.parent?.depth ?? 0) + 1,
        traceparent: task.traceparent,
      },
    },
  };
}

/** A sub-task's output as a step output: its text (a preview when it is kept in the object store) and its reference. */
function withRef(ran: PipelineRunOutput): Pick<StepOutput, 'output' | 'outputRef'> {
  if (!ran.ok) return { output: '' };
  return { output: ran.output, ...(ran.outputRef ? { outputRef: ran.outputRef } : {}) };
}

/**
 * A sub-task's id, made from its step's: `<task>-<step>-<round>-<6 characters of its digest>` (the digest tells
 * task `a-b`'s step `c` from task `a`'s step `b-c`), or `sub-` and a longer digest when that is over 64 characters.
 */
export function subTaskId(stepId: string): string {
  const digest = createHash('sha256')
    .update(stepId)
    .digest('base64url')
    .replaceAll(/[^A-Za-z0-9]/g, 'x');
  const id = `${stepId.replaceAll('.', '-')}-${digest.slice(0, 6)}`;
  return id.length <= 64 ? id : `sub-${digest.slice(0, 40)}`;
}
