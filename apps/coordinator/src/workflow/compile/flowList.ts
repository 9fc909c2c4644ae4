import type { EventObject } from 'xstate';
import { ROUTE_END } from '../../config/checkFlow.ts';
import { evaluate } from '../../config/expressions.ts';
import type { FlowScope, StepPlace } from '../../config/flowLayout.ts';
import type { PipelineConfig, StepConfig } from '../../config/pipelineSchema.ts';
import { compileAgent } from '../steps/agent.ts';
import { compileForeach } from '../steps/foreach.ts';
import { compileHuman } from '../steps/human.ts';
import { compileParallel } from '../steps/parallel.ts';
import { compilePipeline } from '../steps/pipeline.ts';
import { compileReview } from '../steps/review.ts';
import { compileRoute } from '../steps/route.ts';
import type { WorkflowFailure } from '../workflowTypes.ts';
import { scopeOf } from './conditions.ts';
import { placed, say } from './stepEvents.ts';
import {
  type Args,
  type ContextParam,
  FINAL_IDS,
  type ItemLogic,
  type ItemSrc,
  type StepAction,
  type StepActors,
  type WorkflowState,
  type WorkflowStates,
} from './workflowSetup.ts';

/** What compiling a list of steps needs, and collects: the item workflow of each foreach step, by actor key. */
export interface Compiling {
  config: PipelineConfig;
  places: Map<string, StepPlace>;
  provided: StepActors;
  actors: Record<ItemSrc, ItemLogic>;
}

/** Where a list of steps ends: its exit after the last step (or a route's `end`), and what a failure in it does. */
export interface ListScope {
  exit: string;
  fail: <E extends EventObject>(
    failure: ContextParam<WorkflowFailure, E>,
  ) => {
    target: string;
    actions: StepAction<E>[];
  };
}

/** Where a step is compiled: its place in the flow, where it goes next, how a step id resolves, and its list's scope. */
export interface StepAt {
  place: StepPlace;
  next: string;
  resolve: (id: string) => string;
  scope: ListScope;
}

/** The scope of a workflow's own list of steps: it ends `completed`, or `failed` with the failure recorded. */
export const TOP_SCOPE: ListScope = {
  exit: `#${FINAL_IDS.completed}`,
  fail: (failure) => ({
    target: `#${FINAL_IDS.failed}`,
    actions: [{ type: 'fail', params: failure }],
  }),
};

/** The key of a step's gate state (its `when`); never in a checkpoint, since it leaves at once. */
const gateKey = (step: StepConfig) => `when:${step.id}`;
/** The key a list is entered by: its first step's gate, or the step. */
export const initialKey = (list: readonly StepConfig[]) => {
  const [first] = list;
  if (!first) throw new Error('a list of steps is empty; the pipeline schema allows none');
  return first.when === undefined ? first.id : gateKey(first);
};

/** Where a step is in the flow, as `placesOf` found it (it finds every step). */
export function placeOf(c: Compiling, id: string): StepPlace {
  const place = c.places.get(id);
  if (!place) throw new Error(`step ${id} has no place in the flow`);
  return place;
}
/** The target that enters a step: through its gate when it has a `when`. */
const enter = (step: StepConfig) => `#${step.when === undefined ? step.id : gateKey(step)}`;

/**
 * A list of steps as states: each step compiled by the module of its kind (`steps/<kind>.ts`), going on to the next
 * (or its `next`), and, before a step with a `when`, its gate.
 */
export function compileList(c: Compiling, list: readonly StepConfig[], scope: ListScope): WorkflowStates {
  const states: WorkflowStates = {};
  /** Where a route's target, a step's `next` or a review's `onReject` leads. */
  const resolve = (id: string) => {
    if (id === ROUTE_END) return scope.exit;
    const target = list.find((s) => s.id === id);
    return target ? enter(target) : `#${id}`;
  };
  list.forEach((step, index) => {
    const following = list[index + 1];
    const next = step.next !== undefined ? resolve(step.next) : following ? enter(following) : scope.exit;
    const place = placeOf(c, step.id);
    const at: StepAt = { place, next, resolve, scope };
    if (step.when !== undefined)
      states[gateKey(step)] = gateState(step, step.when, next, scope, place.within);
    Object.assign(states, compileStep(c, step, at));
  });
  return states;
}

/** One step, by its kind. */
function compileStep(c: Compiling, step: StepConfig, at: StepAt): WorkflowStates {
  switch (step.kind) {
    case 'agent':
      return compileAgent(c, step, at);
    case 'review':
      return compileReview(c, step, at);
    case 'parallel':
      return compileParallel(c, step, at);
    case 'route':
      return compileRoute(c, step, at);
    case 'human':
      return compileHuman(c, step, at);
    case 'pipeline':
      return compilePipeline(c, step, at);
    case 'foreach':
      return compileForeach(c, step, at);
  }
}

/** A step's `when`: true enters the step; false skips to the next, saying so; an error fails the list. */
function gateState(
  step: StepConfig,
  when: string,
  next: string,
  scope: ListScope,
  within: readonly FlowScope[],
): WorkflowState {
  const test = ({ context }: Args) => evaluate(when, scopeOf(context));
  const failed = (args: Args) => {
    const result = test(args);
    return !result.ok || typeof result.value !== 'boolean';
  };
  return {
    id: gateKey(step),
    always: [
      {
        guard: failed,
        ...scope.fail((args) => {
          const result = test(args);
          return {
            reason: 'condition_failed',
            message: `step ${step.id}: its condition could not be evaluated: ${
              result.ok ? `${when} gave ${JSON.stringify(result.value)}, not true or false` : result.message
            }`,
            step: step.id,
          };
        }),
      },
      {
        guard: (args) => {
          const result = test(args);
          return result.ok && result.value === true;
        },
        target: `#${step.id}`,
      },
      {
        target: next,
        actions: [
          say(({ context }) => ({
            type: 'event' as const,
            kind: 'step.skipped' as const,
            from: 'workflow',
            data: { step: step.id, round: context.round, when, ...placed(within) },
          })),
        ],
      },
    ],
  };
}
