import { preview } from '@troupe/runtime';
import type { EventObject } from 'xstate';
import type { FlowScope, StepPlace } from '../../config/flowLayout.ts';
import type { StepConfig } from '../../config/pipelineSchema.ts';
import type { WorkflowContext, WorkflowEmitted, WorkflowEvent } from '../workflowTypes.ts';
import { stepId } from './stepRequest.ts';
import { type ActionOf, type Args, enqueueFor } from './workflowSetup.ts';

/**
 * An event of the task's, as the workflow says it: emitted (the runner publishes it), or, in an item's workflow,
 * passed up to the task's workflow to emit, marked with the item it is about.
 */
export function say<E extends EventObject>(make: (args: Args<E>) => WorkflowEmitted): ActionOf<E> {
  return enqueueFor<E>(({ context, event, enqueue }) => sayNow(context, enqueue, make({ context, event })));
}

/** What saying an event needs of xstate's `enqueue`. */
interface Sayer {
  emit(event: WorkflowEmitted): void;
  sendParent(event: WorkflowEvent): void;
}

/** Says an event at once, from inside an action that has its own `enqueue`. */
export function sayNow(context: WorkflowContext, enqueue: Sayer, said: WorkflowEmitted): void {
  if (context.item === undefined) enqueue.emit(said);
  else
    enqueue.sendParent({
      type: 'item.said',
      event: { ...said, data: { ...said.data, item: context.item.index, ...itemPlaced(context, said) } },
    });
}

/**
 * The item an item's workflow runs for, written into where its event says it is: the item's place in the list and,
 * as a step starts, the item itself (its start, as JSON). Each workflow fills its own foreach step's entry as the
 * event passes up, so nested items each name theirs.
 */
function itemPlaced(context: WorkflowContext, said: WorkflowEmitted): { within?: FlowScope[] } {
  const item = context.item;
  const within = said.data.within;
  if (!item || !isWithin(within)) return {};
  const value =
    said.kind === 'step.started'
      ? preview(JSON.stringify(context.task.input?.item) ?? 'null', 200)
      : undefined;
  return {
    within: within.map((scope) =>
      scope.step === item.step && scope.branch === undefined && scope.item === undefined
        ? { ...scope, item: item.index, ...(value === undefined ? {} : { value }) }
        : scope,
    ),
  };
}

/** Where an event says its step is: the scopes `placed` wrote, each an item's once its workflow has said so. */
function isWithin(within: unknown): within is (FlowScope & { item?: number; value?: string })[] {
  return Array.isArray(within);
}

/** Where a step is in the flow, for its events: nothing at the top of the flow. */
export const placed = (within: readonly FlowScope[]) => (within.length > 0 ? { within: [...within] } : {});

/**
 * `step.started`, as a step that waits on `agent` (an agent, `human`, `pipeline`) enters its state, saying where in
 * the flow it is (and, for a `pipeline` step, which sub-task it runs). With files handed on, it holds the task's
 * workspace manifest as the step starts: a restart or fork from the step reads there what files it starts with.
 */
export function startedEvent(
  place: Pick<StepPlace, 'within'>,
  step: Pick<StepConfig, 'id'>,
  agent: string,
  subTask?: (context: WorkflowContext) => { taskId: string; pipeline: string },
) {
  return say(({ context }) => ({
    type: 'event' as const,
    kind: 'step.started' as const,
    from: 'workflow',
    to: agent,
    data: {
      step: step.id,
      agent,
      round: context.round,
      stepId: stepId(context, step),
      ...placed(place.within),
      ...(subTask ? { subTask: subTask(context) } : {}),
      ...(context.workspace ? { workspace: context.workspace } : {}),
    },
  }));
}
