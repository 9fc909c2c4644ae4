import { z } from 'zod';
import { FINAL_STATES } from '../workflow/workflowTypes.ts';
import { conditionTypeChecker, type Want } from './conditionTypes.ts';
import { suggestion } from './didYouMean.ts';
import { expressionProblem, stepsReadBy } from './expressions.ts';
import { allSteps, innerLists, placesOf, type StepPlace } from './flowLayout.ts';
import type { PipelineConfig, StepConfig } from './pipelineSchema.ts';

/** A problem with a pipeline, at its path in the file. */
export interface Problem {
  path: PropertyKey[];
  message: string;
}

/** Where a route ends its list of steps (the task, at the top level; the branch, or the item, in a step holding steps). */
export const ROUTE_END = 'end';

/**
 * The flow's references, checked: unique step ids, agents that exist, `context`, `onReject` and route targets that
 * name steps where they must be, conditions that are CEL, read steps that will have run and type-check against the
 * JSON Schemas the pipeline declares, and step timeouts that outlast a person's approval.
 */
export function checkFlow(config: PipelineConfig): Problem[] {
  const problems: Problem[] = [];
  const agents = Object.keys(config.agents);
  const places = placesOf(config.flow);
  const seen = new Set<string>();
  const typeProblem = conditionTypeChecker(
    config,
    [...places.values()].map((place) => place.step),
  );
  for (const step of allSteps(config.flow)) {
    const place = places.get(step.id) as StepPlace;
    // A duplicate's own place is the first one's: find where this one is written for the error.
    const at = seen.has(step.id) ? (pathOf(config.flow, step) ?? ['flow']) : [...place.path];
    const problem = (key: PropertyKey[], message: string) =>
      problems.push({ path: [...at, ...key], message });
    if ([...FINAL_STATES, ROUTE_END].includes(step.id)) {
      problem(['id'], `"${step.id}" is reserved (a final state or a route's end); pick another step id`);
    }
    if (seen.has(step.id)) {
      problem(
        ['id'],
        `duplicate step id "${step.id}": step ids are unique across the whole flow, branches too`,
      );
      continue;
    }
    seen.add(step.id);
    const visible = visibleFrom(place, places);
    /** Checks an expression: that it is CEL, reads steps that have run by then, and gives what it must. */
    const readable = (expression: string, key: PropertyKey[], want: Want) => {
      const invalid = expressionProblem(expression, want === 'any' ? undefined : want);
      if (invalid) {
        problem(key, invalid);
        return;
      }
      const unseen = stepsReadBy(expression).filter((ref) => !visible.includes(ref));
      for (const ref of unseen) {
        problem(
          key,
          `reads steps.${ref}, which is not a step that has run by then${suggestion(ref, visible)}`,
        );
      }
      const mistyped = unseen.length === 0 ? typeProblem(expression, want, place.foreach) : undefined;
      if (mistyped) problem(key, mistyped);
    };
    if (step.when !== undefined) readable(step.when, ['when'], 'bool');
    // Every kind that names an agent (agent, review, a router) or the outputs it sees (those and a sub-pipeline).
    const { agent, context } = step as { agent?: string; context?: string[] };
    if (agent !== undefined && !(agent in config.agents)) {
      problem(['agent'], `no agent named "${agent}" under agents${suggestion(agent, agents)}`);
    }
    if (step.kind === 'route' && agent !== undefined && config.agents[agent]?.a2a !== undefined) {
      problem(
        ['agent'],
        `agent ${agent} is remote (a2a) and cannot be a router: a router picks its target through its model's structured output here; route on a value (on: steps.<id>.output…) from a step the remote agent ran instead`,
      );
    }
    context?.forEach((ref, j) => {
      if (!visible.includes(ref))
        problem(['context', j], `"${ref}" is not an earlier step${suggestion(ref, visible)}`);
    });
    if (step.kind === 'agent' || step.kind === 'review') checkApprovalWait(config, step, problem);
    if (step.kind === 'review' && place.branch) {
      problem(
        ['kind'],
        `a review cannot be inside a branch of parallel step ${place.branch.parallel.id}: its rework rounds count for the whole task; review after the parallel step`,
      );
    }
    if (step.kind === 'review' && place.foreach) {
      problem(
        ['kind'],
        `a review cannot be inside foreach step ${place.foreach.id}: its rework rounds count for the whole task; review after the foreach step`,
      );
    }
    if (step.kind === 'foreach') {
      readable(step.items, ['items'], 'list');
      if (place.foreach) {
        problem(
          ['kind'],
          `a foreach step cannot be inside foreach step ${place.foreach.id}; run a pipeline with a foreach step of its own for each item instead (kind: pipeline)`,
        );
      }
      if (step.failFast === true && step.onError === 'continue') {
        problem(
          ['failFast'],
          'failFast stops the items at the first failure, but onError: continue lets items fail without failing the step; drop one',
        );
      }
    }
    if (step.kind === 'review') {
      const earlier = place.list.slice(0, place.index).map((s) => s.id);
      if (!earlier.includes(step.onReject)) {
        problem(
          ['onReject'],
          `"${step.onReject}" is not an earlier step of the same list${suggestion(step.onReject, earlier)}; a review sends work back to a step before it`,
        );
      }
    }
    const later = [...place.list.slice(place.index + 1).map((s) => s.id), ROUTE_END];
    const target = (to: string, key: PropertyKey[]) => {
      if (!later.includes(to)) {
        problem(
          key,
          `"${to}" is not a later step of the same list, nor "${ROUTE_END}"${suggestion(to, later)}; the flow only jumps forward`,
        );
      }
    };
    if (step.next !== undefined) {
      if (step.kind === 'route') problem(['next'], 'a route picks where the flow goes itself: drop next');
      else target(step.next, ['next']);
    }
    const onError = (step as { onError?: unknown }).onError;
    if (typeof onError === 'string' && onError !== 'fail' && onError !== 'continue')
      target(onError, ['onError']);
    if (step.kind === 'human') {
      if (step.onTimeout !== 'fail' && step.onTimeout !== 'continue') target(step.onTimeout, ['onTimeout']);
      const invalid = step.answer === undefined ? undefined : jsonSchemaProblem(step.answer);
      if (invalid) problem(['answer'], `not a usable JSON Schema: ${invalid}`);
    }
    if (step.kind === 'route') {
      const byValue = step.on !== undefined || step.cases !== undefined || step.default !== undefined;
      const byAgent = step.agent !== undefined || step.targets !== undefined;
      if (
        byValue === byAgent ||
        (byValue && (!step.on || !step.cases)) ||
        (byAgent && (!step.agent || !step.targets))
      ) {
        problem(
          [],
          'a route needs either `on` and `cases` (and maybe `default`), to route on a value, or `agent` and `targets`, for a router agent to choose',
        );
      }
      if (step.on !== undefined) readable(step.on, ['on'], 'any');
      for (const [value, to] of Object.entries(step.cases ?? {})) target(to, ['cases', value]);
      if (step.default !== undefined) target(step.default, ['default']);
      for (const to of Object.keys(step.targets ?? {})) target(to, ['targets', to]);
    }
  }
  return problems;
}

/**
 * The steps whose outputs a step may read: those before it, and the steps inside the parallel ones among them (not
 * a foreach step's: they ran once per item, and the foreach step's output has each item's result).
 */
function visibleFrom(place: StepPlace, places: Map<string, StepPlace>): string[] {
  const inside = (step: StepConfig): string[] =>
    step.kind === 'parallel' ? [step.id, ...Object.values(step.branches).flat().flatMap(inside)] : [step.id];
  return place.before.flatMap((id) => {
    const step = places.get(id)?.step;
    return step ? inside(step) : [id];
  });
}

/**
 * A step's timeout does not pause while a person decides: a step whose agent asks people must outlast the agent's
 * approval timeout, so an approval nobody answers is denied rather than overtaken by the step's end.
 */
function checkApprovalWait(
  config: PipelineConfig,
  step: Extract<StepConfig, { agent: string }>,
  problem: (key: PropertyKey[], message: string) => void,
) {
  const agent = config.agents[step.agent];
  const asksPeople =
    agent !== undefined &&
    (agent.tools.includes('ask_human') || agent.permissions.some((r) => r.decision === 'ask'));
  const waits = agent?.approvalTimeout ?? config.defaults.approvalTimeout;
  const stepTimeout = step.timeout ?? config.defaults.stepTimeout;
  if (asksPeople && waits >= stepTimeout) {
    problem(
      ['timeout'],
      `step ${step.id} times out after ${stepTimeout} s, but agent ${step.agent} gives a person ${waits} s to decide; make the step timeout longer than the approval timeout`,
    );
  }
}

/** The path of this very step object (not the first with its id), for an error about a duplicate. */
function pathOf(
  list: readonly StepConfig[],
  target: StepConfig,
  at: PropertyKey[] = ['flow'],
): PropertyKey[] | undefined {
  for (const [i, step] of list.entries()) {
    if (step === target) return [...at, i];
    for (const [key, steps] of innerLists(step)) {
      const found = pathOf(steps, target, [...at, i, ...key]);
      if (found) return found;
    }
  }
  return undefined;
}

/** Why a JSON Schema cannot be used to check a value (zod cannot build a schema from it), or undefined. */
export function jsonSchemaProblem(schema: Record<string, unknown>): string | undefined {
  try {
    z.fromJSONSchema(schema as Parameters<typeof z.fromJSONSchema>[0]);
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}
