import { type ReusedStep, type ReusedSteps, reuseKey } from '@troupe/client';
import { emptyUsage, type TroupeEvent } from '@troupe/protocol';
import { preview } from '@troupe/runtime';
import { type AnyActorLogic, fromPromise } from 'xstate';
import type { AgentAskedStep, StepConfig } from '../config/pipelineSchema.ts';
import { stepId } from './compile/stepRequest.ts';
import type { StepActors } from './compile/workflowSetup.ts';
import type {
  HumanRunInput,
  HumanRunOutput,
  PipelineRunInput,
  PipelineRunOutput,
  StepRunInput,
  StepRunOutput,
  WorkflowContext,
  WorkflowInput,
} from './workflowTypes.ts';

/**
 * A restart's or fork's reuse (see docs/durability.md, "Restart and fork"): a step the new task's origin ran to its
 * end before the step it runs on from is answered from the origin's record, not sent. The workflow runs the step as
 * ever (its `when`, its events, its transitions: a route chooses from the reused output, a review's verdict is
 * reused with it); only the actor it invokes ends at once, with the reused reply, which its input carries. What is
 * reused was read once, as the task was claimed, and kept in `context.task.reuse`, so every checkpoint holds it.
 */

/**
 * The task as one item of a foreach step sees it: its reuse cut to the runs of that item (their keys end `.i<index>`,
 * as the item's step ids do), so each item's workflow, and its checkpoint, holds its own runs, not every item's. A
 * run the origin made for another item at this place (a fork edited the list) is not this item's, and runs again.
 */
export function reuseOfItem(
  task: WorkflowInput,
  index: number,
  at?: { step: string; item: unknown },
): WorkflowInput {
  if (task.reuse === undefined) return task;
  // The item as step.started records it (stepEvents.ts), so the two compare.
  const item = at === undefined ? undefined : preview(JSON.stringify(at.item) ?? 'null', 200);
  const mine = Object.entries(task.reuse).filter(
    ([key, run]) =>
      key.endsWith(`.i${index}`) &&
      (at === undefined || run.items?.[at.step] === undefined || run.items[at.step] === item),
  );
  const { reuse: _all, ...rest } = task;
  return mine.length > 0 ? { ...rest, reuse: Object.fromEntries(mine) } : rest;
}

/** The step's run in the task's reuse, if the origin's record has it. */
function reusedRun(context: WorkflowContext, step: Pick<StepConfig, 'id'>): ReusedStep | undefined {
  const reuse = context.task.reuse;
  if (reuse === undefined) return undefined;
  const key = reuseKey(context.task.taskId, stepId(context, step));
  return Object.hasOwn(reuse, key) ? reuse[key] : undefined;
}

/**
 * An agent's step (agent, review, route) as its origin's reply, when it is reused: nothing spent, nothing changed. A
 * router's choice is its output's JSON, as the router's structured reply was.
 */
export function reusedReply(context: WorkflowContext, step: AgentAskedStep): { reused?: StepRunOutput } {
  const run = reusedRun(context, step);
  if (run === undefined) return {};
  const structured = step.kind === 'route' ? jsonOf(run.output) : undefined;
  const reply: StepRunOutput = {
    ok: true,
    stepId: stepId(context, step),
    output: run.output,
    ...(run.outputRef ? { outputRef: run.outputRef } : {}),
    ...(run.verdict ? { verdict: run.verdict } : {}),
    ...(structured === undefined ? {} : { structured }),
    usage: emptyUsage(),
    turns: 0,
    durationMs: 0,
    reused: true,
    // Nothing is sent: nobody is asked under this task.
    askedPeople: false,
  };
  return { reused: reply };
}

function jsonOf(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * A `pipeline` step as the end of the sub-task its origin ran, when it is reused: no sub-task is submitted, and the
 * step names the origin's sub-task (`subTaskOf`), whose trace holds how the output was made.
 */
export function reusedSubTask(
  context: WorkflowContext,
  step: Pick<StepConfig, 'id'>,
): { reused?: PipelineRunOutput } {
  const run = reusedRun(context, step);
  if (run === undefined) return {};
  const reply: PipelineRunOutput = {
    ok: true,
    output: run.output,
    ...(run.outputRef ? { outputRef: run.outputRef } : {}),
    usage: emptyUsage(),
    durationMs: 0,
    reused: true,
  };
  return { reused: reply };
}

/** The origin's sub-task a reused `pipeline` step names, if the step is reused. */
export function reusedSubTaskOf(
  context: WorkflowContext,
  step: Pick<StepConfig, 'id'>,
): { taskId: string; pipeline: string } | undefined {
  return reusedRun(context, step)?.subTask;
}

/** A `human` step as the person's answer its origin recorded, when it is reused: nobody is asked again. */
export function reusedAnswer(
  context: WorkflowContext,
  step: Pick<StepConfig, 'id'>,
): { reused?: HumanRunOutput } {
  const run = reusedRun(context, step);
  return run === undefined ? {} : { reused: { ok: true, answer: run.output, durationMs: 0, reused: true } };
}

/** What a reused step's actor is: a promise that resolves to its input's reused output. */
const reusedLogic = fromPromise<unknown, { reused?: unknown }>(async ({ input }) => input.reused);

/** A snapshot of {@link reusedLogic}: a promise's (no state value), whose input holds the reused output. */
const isReused = (snapshot: unknown): boolean =>
  typeof snapshot === 'object' &&
  snapshot !== null &&
  !('value' in snapshot) &&
  (snapshot as { input?: { reused?: unknown } }).input?.reused !== undefined;

/**
 * `logic` that answers an input with a `reused` output by itself, at once, and otherwise is `logic`: so the step
 * call, or any stand-in for it, is never started for a reused step. The answer is a promise's, as XState runs one:
 * it ends a tick after it starts, so a checkpoint taken meanwhile holds it active, and a restore runs it again.
 */
export function reusing<Logic extends AnyActorLogic>(logic: Logic): Logic {
  const wrapped: AnyActorLogic = Object.create(logic);
  const logicOf = (snapshot: unknown): AnyActorLogic => (isReused(snapshot) ? reusedLogic : logic);
  wrapped.getInitialSnapshot = (scope, input) =>
    (input as { reused?: unknown } | undefined)?.reused === undefined
      ? logic.getInitialSnapshot(scope, input)
      : reusedLogic.getInitialSnapshot(scope as never, input as { reused?: unknown });
  wrapped.transition = (snapshot, event, scope) => logicOf(snapshot).transition(snapshot, event, scope);
  wrapped.start = (snapshot, scope) => logicOf(snapshot).start?.(snapshot, scope);
  wrapped.getPersistedSnapshot = (snapshot, options) =>
    logicOf(snapshot).getPersistedSnapshot(snapshot, options);
  wrapped.restoreSnapshot = (snapshot, scope) => {
    const restoring = logicOf(snapshot);
    return restoring.restoreSnapshot ? restoring.restoreSnapshot(snapshot, scope) : snapshot;
  };
  return wrapped as Logic;
}

/** Stands in for a step actor the host did not provide, as the workflow's own default does: it fails, saying so. */
const notProvided = <Output, Input>(name: string) =>
  fromPromise<Output, Input>(async () => {
    throw new Error(`${name} is not provided`);
  });

/**
 * The host's step actors, each answering a reused step from its input; one the host did not provide still answers a
 * reused step (a replay, which submits no sub-task, replays a restart's reused `pipeline` step).
 */
export function reusingStepActors(provided: StepActors): Required<StepActors> {
  return {
    runStep: reusing(provided.runStep ?? notProvided<StepRunOutput, StepRunInput>('runStep')),
    askPerson: reusing(provided.askPerson ?? notProvided<HumanRunOutput, HumanRunInput>('askPerson')),
    runPipeline: reusing(
      provided.runPipeline ?? notProvided<PipelineRunOutput, PipelineRunInput>('runPipeline'),
    ),
  };
}

/**
 * What a recorded restart or fork reused, from its own events (its `step.completed` marked `reused`), for `troupe
 * replay`: the replay takes the same outputs from the same record, and runs only what the task ran.
 */
export function recordedReuse(events: readonly TroupeEvent[], taskId: string): { reuse?: ReusedSteps } {
  const reuse: ReusedSteps = {};
  const subTasks = new Map<string, { taskId: string; pipeline: string }>();
  for (const event of events) {
    if (event.taskId !== taskId) continue;
    if (event.kind === 'step.started' && event.data.subTask)
      subTasks.set(event.data.stepId, event.data.subTask);
    if (event.kind !== 'step.completed' || !event.data.reused) continue;
    const { step, agent, output, outputRef, verdict, stepId } = event.data;
    const subTask = subTasks.get(stepId);
    reuse[reuseKey(taskId, stepId)] = {
      step,
      agent,
      output,
      ...(outputRef ? { outputRef } : {}),
      ...(verdict ? { verdict } : {}),
      ...(subTask ? { subTask: { taskId: subTask.taskId, pipeline: subTask.pipeline } } : {}),
    };
  }
  return Object.keys(reuse).length > 0 ? { reuse } : {};
}
