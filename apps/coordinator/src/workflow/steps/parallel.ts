import type { DoneStateEvent, EventObject } from 'xstate';
import { type FlowScope, isWork } from '../../config/flowLayout.ts';
import type { ParallelStepConfig } from '../../config/pipelineSchema.ts';
import { parsedOutput } from '../compile/conditions.ts';
import { type Compiling, compileList, initialKey, type ListScope, type StepAt } from '../compile/flowList.ts';
import { recoveryOf } from '../compile/recovery.ts';
import { placed, sayNow } from '../compile/stepEvents.ts';
import { withOutput } from '../compile/workflowOutput.ts';
import {
  type ActionOf,
  assignFor,
  type ContextParam,
  enqueueFor,
  type Transition,
  type WorkflowState,
  type WorkflowStates,
} from '../compile/workflowSetup.ts';
import type { BranchOutcome, WorkflowContext, WorkflowFailure } from '../workflowTypes.ts';

/**
 * A parallel step: a region per branch, each its branch's steps and two final states, `_done` and `_failed`. A
 * branch's failure is recorded in `branches` rather than failing the task, and the join decides: `all` with
 * `onError: fail` fails as soon as one branch does; `first` moves on as soon as one succeeds (leaving the state stops
 * the others' steps); otherwise the step ends when every branch has, and fails when none succeeded (unless
 * `onError: continue`).
 */
export function compileParallel(c: Compiling, step: ParallelStepConfig, at: StepAt): WorkflowStates {
  const { next, place } = at;
  const within = place.within;
  const recovery = recoveryOf(step, at.scope, next, at.resolve);
  /** The step has failed: as its `onError` says (failing the list, unless it names a step to go to). */
  const failStep = (failure: ContextParam<WorkflowFailure, DoneStateEvent>): Transition<DoneStateEvent> => {
    const [transition] = recovery<DoneStateEvent>(failure, [joined<DoneStateEvent>(step, false, within)]);
    return { target: transition.target, actions: transition.actions };
  };
  const regions: WorkflowStates = {};
  for (const [branch, list] of Object.entries(step.branches)) {
    const done = `branch:${step.id}:${branch}:done`;
    const failed = `branch:${step.id}:${branch}:failed`;
    const branchScope: ListScope = {
      exit: `#${done}`,
      fail: (failure) => ({
        target: `#${failed}`,
        actions: [
          {
            type: 'recordBranch',
            params: (args) => ({
              parallel: step.id,
              branch,
              outcome: { ok: false, failure: typeof failure === 'function' ? failure(args) : failure },
            }),
          },
        ],
      }),
    };
    regions[branch] = {
      initial: initialKey(list),
      states: {
        ...compileList(c, list, branchScope),
        _done: {
          id: done,
          type: 'final',
          entry: [{ type: 'recordBranch', params: { parallel: step.id, branch, outcome: { ok: true } } }],
        },
        _failed: { id: failed, type: 'final' },
      },
      onDone: regionDone(step, branch, next, failStep, within),
    };
  }
  const state: WorkflowState = {
    id: step.id,
    type: 'parallel',
    entry: [assignFor(({ context }) => ({ branches: { ...context.branches, [step.id]: {} } }))],
    states: regions,
    onDone: [
      {
        guard: ({ context }) =>
          step.onError !== 'continue' && !Object.values(outcomesOf(context, step)).some((o) => o.ok),
        ...failStep(({ context }) => ({
          reason: 'step_failed',
          message: `parallel step ${step.id}: no branch succeeded; ${failureSummary(outcomesOf(context, step))}`,
          step: step.id,
        })),
      },
      { target: next, actions: [joined<DoneStateEvent>(step, true, within)] },
    ],
  };
  return { [step.id]: state };
}

/** When one branch ends: `all` + `fail` fails at its first failure; `first` moves on at its first success. */
function regionDone(
  step: ParallelStepConfig,
  branch: string,
  next: string,
  failStep: (failure: ContextParam<WorkflowFailure, DoneStateEvent>) => Transition<DoneStateEvent>,
  within: readonly FlowScope[],
): Transition<DoneStateEvent>[] {
  const outcome = (context: WorkflowContext) => outcomesOf(context, step)[branch];
  const transitions: Transition<DoneStateEvent>[] = [];
  if (step.join === 'all' && step.onError !== 'continue') {
    transitions.push({
      guard: ({ context }) => outcome(context)?.ok === false,
      ...failStep(({ context }) => {
        const ended = outcome(context);
        const failure: WorkflowFailure =
          ended && !ended.ok ? ended.failure : { reason: 'internal', message: '', step: step.id };
        return { ...failure, message: `branch ${branch} of ${step.id}: ${failure.message}` };
      }),
    });
  }
  if (step.join === 'first') {
    transitions.push({
      guard: ({ context }) => outcome(context)?.ok === true,
      target: next,
      actions: [joined<DoneStateEvent>(step, true, within)],
    });
  }
  return transitions;
}

const outcomesOf = (context: WorkflowContext, step: ParallelStepConfig): Record<string, BranchOutcome> =>
  context.branches?.[step.id] ?? {};

const failureSummary = (outcomes: Record<string, BranchOutcome>) =>
  Object.entries(outcomes)
    .flatMap(([branch, o]) => (o.ok ? [] : [`${branch}: ${o.failure.message}`]))
    .join('; ');

/**
 * Ends a parallel step: its output (each completed branch's last output by branch id, and each failed branch's
 * error) for the steps after it, and `branches.joined` saying how each branch ended. The next hand-off is from the
 * join, not from whichever branch's agent answered last.
 */
function joined<E extends EventObject>(
  step: ParallelStepConfig,
  ok: boolean,
  within: readonly FlowScope[],
): ActionOf<E> {
  return enqueueFor<E>(({ context, enqueue }) => {
    const outcomes = outcomesOf(context, step);
    const merged: Record<string, unknown> = {};
    const branches: Record<string, { status: 'completed' | 'failed' | 'stopped'; message?: string }> = {};
    for (const [branch, list] of Object.entries(step.branches)) {
      const outcome = outcomes[branch];
      if (outcome?.ok) {
        const last = [...list].reverse().find((s) => isWork(s) && context.latest[s.id]);
        merged[branch] = last ? parsedOutput(context.latest[last.id]?.output ?? '') : null;
        branches[branch] = { status: 'completed' };
      } else if (outcome) {
        merged[branch] = { error: outcome.failure.message };
        branches[branch] = { status: 'failed', message: outcome.failure.message };
      } else branches[branch] = { status: 'stopped' };
    }
    enqueue.assign({ ...(ok ? withOutput(context, step, 'parallel', merged) : {}), joined: step.id });
    sayNow(context, enqueue, {
      type: 'event',
      kind: 'branches.joined',
      from: 'workflow',
      data: { step: step.id, round: context.round, join: step.join, branches, ok, ...placed(within) },
    });
  });
}
