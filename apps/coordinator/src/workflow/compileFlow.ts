import { emptyUsage } from '@troupe/protocol';
import { assign, emit } from 'xstate';
import { placesOf } from '../config/flowLayout.ts';
import type { PipelineConfig } from '../config/pipelineSchema.ts';
import { type Compiling, compileList, initialKey, TOP_SCOPE } from './compile/flowList.ts';
import { workflowOutput } from './compile/workflowOutput.ts';
import { FINAL_IDS, type StepActors, type WorkflowStates, workflowSetup } from './compile/workflowSetup.ts';
import { reusingStepActors } from './reusedStep.ts';
import { type Children, itemsOf } from './steps/foreachItem.ts';

// task/workflowChild.ts imports these from here; their home is steps/foreachItem.ts.
export { hearEndedItems, unfitItem } from './steps/foreachItem.ts';
export type { StepActors };

/**
 * Compiles a pipeline's `flow` into a workflow state machine. Each step compiles to states in the module of its kind
 * (`steps/<kind>.ts`); the list of steps, with each step's `when` gate, in `compile/flowList.ts`. The final states
 * are `completed`, `failed`, `cancelled` and `released`. A `cancel` event, in any state, ends the workflow
 * `cancelled`; a `release` event ends this run of it `released`, leaving the task to resume elsewhere (leaving a
 * step stops its call to the agent, either way).
 *
 * Every state that waits (a step's call, a branch's) is keyed by its step id, so a checkpoint names where the task
 * is; transient states are never in one.
 *
 * The host's step actors are given here (`provided`), not with `.provide()`: a foreach step's items are workflows
 * of their own, compiled here, and only these reach them.
 */
export function compileFlow(config: PipelineConfig, provided: StepActors = {}) {
  const compiling: Compiling = {
    config,
    places: placesOf(config.flow),
    provided: reusingStepActors(provided),
    actors: {},
  };
  const states: WorkflowStates = {
    ...compileList(compiling, config.flow, TOP_SCOPE),
    completed: { id: FINAL_IDS.completed, type: 'final' },
    failed: { id: FINAL_IDS.failed, type: 'final' },
    cancelled: { id: FINAL_IDS.cancelled, type: 'final' },
    released: { id: FINAL_IDS.released, type: 'final' },
  };
  return workflowSetup
    .createMachine({
      id: `workflow:${config.name}`,
      // A restart's or fork's carried files are the manifest's start, kept once in the checkpoint.
      context: ({ input: { workspace, ...task } }) => ({
        task,
        round: 1,
        rejections: {},
        latest: {},
        usage: emptyUsage(),
        usageByAgent: {},
        ...(workspace ? { workspace } : {}),
      }),
      initial: initialKey(config.flow),
      on: {
        cancel: {
          target: '.cancelled',
          actions: assign(({ event }) => ({
            cancelled: event.reason === undefined ? {} : { reason: event.reason },
          })),
        },
        release: {
          target: '.released',
          actions: assign(({ event }) => ({ released: { why: event.why } })),
        },
        'item.said': { actions: emit(({ event }) => event.event) },
      },
      states,
      output: ({ context }) => workflowOutput(config, context),
    })
    .provide({ actors: { ...compiling.provided, ...compiling.actors } });
}
export type WorkflowMachine = ReturnType<typeof compileFlow>;

/**
 * The steps a workflow is in, from its state value: one for a line of steps, one a branch for a parallel step
 * (a branch that has ended adds none). What the task record's `state` says, joined by `+`.
 */
export function activeSteps(value: unknown): string[] {
  if (typeof value === 'string') return [value];
  if (typeof value !== 'object' || value === null) return [];
  return Object.values(value).flatMap((inner) =>
    typeof inner === 'string' ? (inner.startsWith('_') ? [] : [inner]) : activeSteps(inner),
  );
}

/**
 * The steps a workflow is at work in: its active steps, a foreach step giving way to the steps its items are in (it
 * has none of its own). What decides whether the task only waits, and which agent works on it.
 */
export function stepsAtWork(snapshot: { value: unknown; children: Children }): string[] {
  const items = new Map<string, string[]>();
  for (const { id, item } of itemsOf(snapshot.children)) {
    if (item.status !== 'active') continue;
    const step = id.split('.')[1] ?? '';
    items.set(step, [...(items.get(step) ?? []), ...activeSteps(item.value)]);
  }
  return activeSteps(snapshot.value).flatMap((step) => items.get(step) ?? [step]);
}
