import { emptyUsage, errorMessage, type TaskFailureReason } from '@troupe/protocol';
import { preview } from '@troupe/runtime';
import type { HumanStepConfig } from '../../config/pipelineSchema.ts';
import type { Compiling, StepAt } from '../compile/flowList.ts';
import { recoveryOf } from '../compile/recovery.ts';
import { say, startedEvent } from '../compile/stepEvents.ts';
import { stepId } from '../compile/stepRequest.ts';
import { assignFor, type HumanDone, type Transition, type WorkflowStates } from '../compile/workflowSetup.ts';
import { reusedAnswer } from '../reusedStep.ts';
import type { HumanRunInput, WorkflowContext } from '../workflowTypes.ts';

/**
 * A person's step: invokes `askPerson` with the prompt and waits. An answer is the step's output; no answer in time
 * goes as `onTimeout` says (`fail`: the task fails with `approval_timeout`; `continue`: on, with no output; a step id:
 * there); an answer that kept missing the step's schema fails it with `invalid_output`.
 */
export function compileHuman(c: Compiling, step: HumanStepConfig, at: StepAt): WorkflowStates {
  const { place, next, resolve, scope } = at;
  const timeoutMs = (step.timeout ?? c.config.defaults.approvalTimeout) * 1_000;
  const completed = say<HumanDone>(({ context, event }) => {
    const reply = event.output;
    return {
      type: 'event' as const,
      kind: 'step.completed' as const,
      from: 'human',
      to: 'workflow',
      data: {
        step: step.id,
        agent: 'human',
        round: context.round,
        stepId: stepId(context, step),
        ok: reply.ok,
        output: reply.ok ? preview(reply.answer, 256 * 1024) : '',
        ...(reply.ok ? {} : { error: { code: reply.code, message: reply.message } }),
        ...(reply.ok && reply.reused ? { reused: true } : {}),
        usage: emptyUsage(),
        turns: 0,
        durationMs: reply.durationMs,
      },
    };
  });
  const answered = assignFor<HumanDone>(({ context, event }) => {
    const reply = event.output;
    if (!reply.ok) return {};
    return {
      latest: {
        ...context.latest,
        [step.id]: { step: step.id, agent: 'human', round: context.round, output: reply.answer },
      },
    };
  });
  const why = (event: HumanDone) =>
    `step ${step.id} (a person): ${event.output.ok ? '' : event.output.message}`;
  const failure = (reason: TaskFailureReason) =>
    scope.fail<HumanDone>(({ event }) => ({ reason, message: why(event), step: step.id }));
  const onTimeout: Transition<HumanDone> =
    step.onTimeout === 'fail'
      ? { ...failure('approval_timeout'), actions: [completed, ...failure('approval_timeout').actions] }
      : { target: step.onTimeout === 'continue' ? next : resolve(step.onTimeout), actions: [completed] };
  const [invalid] = recoveryOf(
    step,
    scope,
    next,
    resolve,
  )<HumanDone>(
    ({ event }) => ({ reason: 'invalid_output', message: why(event), step: step.id }),
    [completed],
  );
  return {
    [step.id]: {
      id: step.id,
      // A person is asked (or was, by the task's origin): the task's end reads its requests to close them.
      entry: [startedEvent(place, step, 'human'), assignFor(() => ({ askedPeople: true }))],
      invoke: {
        src: 'askPerson',
        input: ({ context }): HumanRunInput => ({
          taskId: context.task.taskId,
          pipeline: context.task.pipeline,
          step: step.id,
          stepId: stepId(context, step),
          prompt: promptOf(step, context),
          timeoutMs,
          ...(step.answer === undefined ? {} : { answer: step.answer }),
          traceparent: context.task.traceparent,
          // A restart's or fork's hook: an answer its origin recorded is reused; nobody is asked again.
          ...reusedAnswer(context, step),
        }),
        onDone: [
          { guard: ({ event }) => event.output.ok, target: next, actions: [completed, answered] },
          { guard: ({ event }) => !event.output.ok && event.output.code === 'timeout', ...onTimeout },
          { target: invalid.target, actions: invalid.actions },
        ],
        onError: scope.fail(({ event }) => ({
          reason: 'internal',
          message: `step ${step.id} could not ask a person: ${errorMessage(event.error)}`,
          step: step.id,
        })),
      },
    },
  };
}

/** A person's question: the step's prompt, and in a foreach step's item, which item it is about. */
function promptOf(step: HumanStepConfig, context: WorkflowContext): string {
  if (context.item === undefined) return step.prompt;
  const item = preview(JSON.stringify(context.task.input?.item) ?? 'null', 2_000);
  return `${step.prompt}\n\n(item ${context.item.index} of ${context.item.step}: ${item})`;
}
