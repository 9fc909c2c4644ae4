import type { AgentAskedStep, ForeachStepConfig, ParallelStepConfig, StepConfig } from './pipelineSchema.ts';

/** Where a step stands in a flow: the list it is in, and what comes before it. */
export interface StepPlace {
  step: StepConfig;
  /** The list of steps it is in: the flow itself, a branch of a parallel step, or a foreach step's `do`. */
  list: readonly StepConfig[];
  index: number;
  /** The parallel step and branch it runs in, when it does. */
  branch?: { parallel: ParallelStepConfig; id: string };
  /** The foreach step it runs for each item of (the innermost, when they nest), when it does. */
  foreach?: ForeachStepConfig;
  /** The parallel steps (with the branch) and foreach steps holding it, outermost first: where events place it. */
  within: readonly FlowScope[];
  /**
   * The steps whose outputs it sees by default, oldest first: the steps before it in its list, and what the step
   * holding that list sees. A step after a parallel step sees the parallel step (its merged output), not its
   * branches' steps.
   */
  before: readonly string[];
  /** Its path in the pipeline file, for errors: `['flow', 2, 'branches', 'docs', 0]`. */
  path: readonly PropertyKey[];
}

/** A step holding others: a parallel step and the branch, or a foreach step. */
export interface FlowScope {
  step: string;
  branch?: string;
}

/** The lists of steps a step holds: a parallel step's branches by branch id, a foreach step's `do`. */
export function innerLists(step: StepConfig): [key: PropertyKey[], list: StepConfig[]][] {
  if (step.kind === 'parallel')
    return Object.entries(step.branches).map(([id, list]) => [['branches', id], list]);
  if (step.kind === 'foreach') return [[['do'], step.do]];
  return [];
}

/** Every step of a flow, branches and foreach steps' `do` included, depth first in the order they are written. */
export function allSteps(flow: readonly StepConfig[]): StepConfig[] {
  return flow.flatMap((step) => [step, ...innerLists(step).flatMap(([, list]) => allSteps(list))]);
}

/** The steps that ask an agent something (work, a verdict, a router's choice), branches included, in order. */
export function agentSteps(flow: readonly StepConfig[]): AgentAskedStep[] {
  return allSteps(flow).filter(
    (s): s is AgentAskedStep =>
      s.kind === 'agent' || s.kind === 'review' || (s.kind === 'route' && s.agent !== undefined),
  );
}

/** Each step's place, by step id (step ids are unique across the whole flow; the loader checks it). */
export function placesOf(flow: readonly StepConfig[]): Map<string, StepPlace> {
  const places = new Map<string, StepPlace>();
  const visit = (
    list: readonly StepConfig[],
    at: readonly PropertyKey[],
    seen: readonly string[],
    branch: StepPlace['branch'],
    foreach: ForeachStepConfig | undefined,
    within: readonly FlowScope[],
  ) => {
    list.forEach((step, index) => {
      const before = [...seen, ...list.slice(0, index).map((s) => s.id)];
      const path = [...at, index];
      // The first place a duplicated id has is the one kept; the loader reports the second.
      if (!places.has(step.id)) {
        places.set(step.id, {
          step,
          list,
          index,
          ...(branch ? { branch } : {}),
          ...(foreach ? { foreach } : {}),
          within,
          before,
          path,
        });
      }
      if (step.kind === 'parallel') {
        for (const [id, steps] of Object.entries(step.branches)) {
          visit(steps, [...path, 'branches', id], before, { parallel: step, id }, foreach, [
            ...within,
            { step: step.id, branch: id },
          ]);
        }
      }
      if (step.kind === 'foreach')
        visit(step.do, [...path, 'do'], before, undefined, step, [...within, { step: step.id }]);
    });
  };
  visit(flow, ['flow'], [], undefined, undefined, []);
  return places;
}

/** The agent that answers for a step in events and handoffs: its own, or the step kind for steps without one. */
export const actorOf = (step: StepConfig): string =>
  step.kind === 'agent' || step.kind === 'review' || (step.kind === 'route' && step.agent !== undefined)
    ? (step.agent as string)
    : step.kind;

/** Steps whose output is work — not a verdict, not a route's choice: what a list's result is taken from. */
export const isWork = (step: StepConfig): boolean =>
  step.kind === 'agent' ||
  step.kind === 'parallel' ||
  step.kind === 'human' ||
  step.kind === 'pipeline' ||
  step.kind === 'foreach';
