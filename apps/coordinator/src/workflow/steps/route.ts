import type { AgentStepRequest } from '@troupe/protocol';
import { evaluate } from '../../config/expressions.ts';
import type { RouteStepConfig } from '../../config/pipelineSchema.ts';
import { asText, scopeOf } from '../compile/conditions.ts';
import type { Compiling, ListScope, StepAt } from '../compile/flowList.ts';
import { failing } from '../compile/recovery.ts';
import { placed, say } from '../compile/stepEvents.ts';
import {
  type Args,
  assignFor,
  type StepAction,
  type StepDone,
  type Transition,
  type WorkflowState,
  type WorkflowStates,
} from '../compile/workflowSetup.ts';
import { askAgent, record } from './agent.ts';

/**
 * A route: with `on`, a transient state whose value picks a case's target, the default's, or fails the list; with
 * `agent`, a router agent's step whose structured reply names the target.
 */
export function compileRoute(c: Compiling, step: RouteStepConfig, at: StepAt): WorkflowStates {
  if (step.agent !== undefined) {
    const router = { ...step, agent: step.agent };
    return { [step.id]: askAgent(c, router, at, routerTransitions(router, at)) };
  }
  if (step.on === undefined) throw new Error(`route ${step.id} has neither on nor agent`);
  return { [step.id]: routeState(step, step.on, at) };
}

/**
 * What a router agent is asked: to pick one of the route's targets, saying why, as structured output whose schema
 * names only those targets — a reply naming any other gets the runtime's one repair turn, then fails the step.
 */
export function routerAsk(step: RouteStepConfig): Pick<AgentStepRequest, 'instructions' | 'output'> {
  const targets = step.targets ?? {};
  const choices = Object.entries(targets)
    .map(([target, what]) => `- ${target}: ${what}`)
    .join('\n');
  return {
    instructions:
      `Decide where the work goes next. The choices:\n${choices}\n\n` +
      'Reply with only a JSON object: {"target": "<one of the choices>", "reason": "<why, in a sentence>"}.',
    output: {
      name: `${step.id.replaceAll('-', '_')}_route`,
      schema: {
        type: 'object',
        properties: { target: { type: 'string', enum: Object.keys(targets) }, reason: { type: 'string' } },
        required: ['target', 'reason'],
      },
    },
  };
}

/** A router agent's reply: the target it picked (its structured output names one), with `route.chosen`. */
function routerTransitions(
  step: RouteStepConfig & { agent: string },
  { resolve, scope, place }: StepAt,
): Transition<StepDone>[] {
  const choice = (event: StepDone): { target?: unknown; reason?: unknown } | undefined => {
    const structured = event.output.ok ? event.output.structured : undefined;
    return typeof structured === 'object' && structured !== null ? structured : undefined;
  };
  return [
    ...Object.keys(step.targets ?? {}).map(
      (target): Transition<StepDone> => ({
        guard: ({ event }) => choice(event)?.target === target,
        target: resolve(target),
        actions: [
          ...record(step),
          say<StepDone>(({ context, event }) => ({
            type: 'event' as const,
            kind: 'route.chosen' as const,
            from: step.agent,
            data: {
              step: step.id,
              round: context.round,
              value: target,
              case: target,
              target,
              agent: step.agent,
              reason: String(choice(event)?.reason ?? ''),
              ...placed(place.within),
            },
          })),
        ],
      }),
    ),
    // The reply matched the schema, which names only the targets: this is a bug, said as such.
    failing(scope, record(step), {
      reason: 'invalid_output',
      message: `route ${step.id}: ${step.agent} picked no target of ${Object.keys(step.targets ?? {}).join(', ')}`,
      step: step.id,
    }),
  ];
}

function routeState(step: RouteStepConfig, on: string, { resolve, scope, place }: StepAt): WorkflowState {
  const cases = step.cases ?? {};
  const routeValue = ({ context }: Args) => {
    const result = evaluate(on, scopeOf(context));
    return result.ok ? { ok: true as const, text: asText(result.value) } : result;
  };
  /** The route's value as text, in a transition taken after the check that it could be evaluated. */
  const valueText = (args: Args) => {
    const value = routeValue(args);
    return value.ok ? value.text : '';
  };
  const chosen = (target: string, matched: string | undefined): StepAction[] => [
    assignFor(({ context }) => ({
      latest: {
        ...context.latest,
        [step.id]: { step: step.id, agent: 'route', round: context.round, output: target },
      },
    })),
    say((args) => ({
      type: 'event' as const,
      kind: 'route.chosen' as const,
      from: 'workflow',
      data: {
        step: step.id,
        round: args.context.round,
        value: valueText(args),
        ...(matched === undefined ? {} : { case: matched }),
        target,
        ...placed(place.within),
      },
    })),
  ];
  return {
    id: step.id,
    always: [
      {
        guard: (args) => !routeValue(args).ok,
        ...scope.fail((args) => {
          const value = routeValue(args);
          return {
            reason: 'condition_failed',
            message: `route ${step.id}: ${value.ok ? '' : value.message}`,
            step: step.id,
          };
        }),
      },
      ...Object.entries(cases).map(
        ([value, target]): Transition => ({
          guard: (args) => valueText(args) === value,
          target: resolve(target),
          actions: chosen(target, value),
        }),
      ),
      step.default === undefined
        ? noMatch(step, on, cases, scope, valueText)
        : { target: resolve(step.default), actions: chosen(step.default, undefined) },
    ],
  };
}

/** A route whose value matches none of its cases, and has no default: the list fails. */
function noMatch(
  step: RouteStepConfig,
  on: string,
  cases: Record<string, string>,
  scope: ListScope,
  valueText: (args: Args) => string,
) {
  return scope.fail((args: Args) => ({
    reason: 'condition_failed',
    message: `route ${step.id}: ${on} gave ${JSON.stringify(valueText(args))}, which matches none of its cases (${Object.keys(cases).join(', ')}) and it has no default`,
    step: step.id,
  }));
}
