import { createHash } from 'node:crypto';
import type {
  AgentStepRequest,
  StepBudget,
  StepOutput,
  TaskFailureReason,
  UsageTotals,
} from '@troupe/protocol';
import {
  applyWorkspaceChanges,
  emptyUsage,
  errorMessage,
  noWorkspaceChanges,
  StepErrorCode,
  sumUsage,
  taskFailureReason,
  workspaceDiff,
} from '@troupe/protocol';
import { preview } from '@troupe/runtime';
import { assign, emit, enqueueActions, fromPromise, setup } from 'xstate';
import { ROUTE_END } from '../config/checkFlow.ts';
import { type ExpressionScope, evaluate, stepsReadBy } from '../config/expressions.ts';
import { actorOf, allSteps, type FlowScope, isWork, placesOf, type StepPlace } from '../config/flowLayout.ts';
import type {
  AgentAskedStep,
  AgentStepConfig,
  ForeachStepConfig,
  HumanStepConfig,
  ParallelStepConfig,
  PipelineConfig,
  PipelineStepConfig,
  ReviewStepConfig,
  RouteStepConfig,
  StepConfig,
} from '../config/pipelineSchema.ts';
import type {
  BranchOutcome,
  ForeachProgress,
  HumanRunInput,
  HumanRunOutput,
  ItemOutcome,
  ItemOutput,
  PipelineRunInput,
  PipelineRunOutput,
  StepRunInput,
  StepRunOutput,
  WorkflowContext,
  WorkflowEmitted,
  WorkflowEvent,
  WorkflowFailure,
  WorkflowInput,
  WorkflowOutput,
} from './workflowTypes.ts';

export { FINAL_STATES } from './workflowTypes.ts';

const workflowSetup = setup({
  types: {
    context: {} as WorkflowContext,
    input: {} as WorkflowInput,
    output: {} as WorkflowOutput,
    emitted: {} as WorkflowEmitted,
    events: {} as WorkflowEvent,
  },
  actors: {
    runStep: fromPromise<StepRunOutput, StepRunInput>(async () => {
      throw new Error('runStep is not provided');
    }),
    askPerson: fromPromise<HumanRunOutput, HumanRunInput>(async () => {
      throw new Error('askPerson is not provided');
    }),
    runPipeline: fromPromise<PipelineRunOutput, PipelineRunInput>(async () => {
      throw new Error('runPipeline is not provided');
    }),
    /** Waits before a step is retried; stopped (its timer cleared) when the workflow leaves the state. */
    backoff: fromPromise<void, { ms: number }>(
      ({ input, signal }) =>
        new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, input.ms);
          signal.addEventListener('abort', () => clearTimeout(timer), { once: true });
        }),
    ),
  },
  actions: {
    recordOutput: assign(({ context }, p: { step: AgentAskedStep; reply: StepRunOutput }) => {
      if (!p.reply.ok) return {};
      const output: StepOutput = {
        step: p.step.id,
        agent: p.step.agent,
        round: context.round,
        output: p.reply.output,
        ...(p.reply.outputRef ? { outputRef: p.reply.outputRef } : {}),
      };
      return {
        latest: { ...context.latest, [p.step.id]: output },
        lastAgent: p.step.agent,
        joined: undefined,
        ...(context.reworkTarget === p.step.id ? { reworkTarget: undefined } : {}),
      };
    }),
    /**
     * What a step changed in the task's workspace, whether it succeeded or not (a retry goes on from the files a
     * failed run left). Parallel steps' changes apply in the order the steps end: the last to end wins a path both
     * wrote (see docs/durability.md).
     */
    recordWorkspace: assign(({ context }, p: { step: AgentAskedStep; reply: StepRunOutput }) =>
      p.reply.workspace ? { workspace: applyWorkspaceChanges(context.workspace, p.reply.workspace) } : {},
    ),
    /** What a step spent counts towards the task whether the step succeeded or not. */
    recordUsage: assign(({ context }, p: { step: AgentAskedStep; reply: StepRunOutput }) => ({
      usage: sumUsage(context.usage, p.reply.usage),
      usageByAgent: {
        ...context.usageByAgent,
        [p.step.agent]: sumUsage(context.usageByAgent[p.step.agent] ?? emptyUsage(), p.reply.usage),
      },
    })),
    recordApproval: assign({ approved: true, feedback: undefined }),
    /**
     * A rejection: the next round starts at `onReject`. What the steps from there to the review produced is no
     * longer current — a route may not take them again, a condition must not see it — so it moves to `previous`,
     * where only each step's own next run reads it (its last output, the reviewer's last verdict).
     */
    recordRejection: assign(
      ({ context }, p: { step: ReviewStepConfig; feedback: string; stale: readonly string[] }) => {
        const latest = { ...context.latest };
        const previous = { ...context.previous };
        const errors = { ...context.errors };
        for (const id of p.stale) {
          const out = latest[id];
          if (out) previous[id] = out;
          delete latest[id];
          delete errors[id];
        }
        return {
          approved: false,
          feedback: p.feedback,
          reworkTarget: p.step.onReject,
          round: context.round + 1,
          rejections: { ...context.rejections, [p.step.id]: (context.rejections[p.step.id] ?? 0) + 1 },
          latest,
          previous,
          errors,
        };
      },
    ),
    fail: assign((_, failure: WorkflowFailure) => ({ failure })),
    /** How a branch of a parallel step ended. */
    recordBranch: assign(({ context }, p: { parallel: string; branch: string; outcome: BranchOutcome }) => ({
      branches: {
        ...context.branches,
        [p.parallel]: { ...context.branches?.[p.parallel], [p.branch]: p.outcome },
      },
    })),
  },
});

/**
 * Compiles a pipeline's `flow` into a workflow state machine. Each agent or review step is a state invoking
 * `runStep` (injected with `.provide()`); a parallel step is a parallel state with a region per branch, each region
 * its branch's steps; a route and a step's `when` are transient states whose eventless transitions pick where the
 * flow goes. The final states are `completed`, `failed`, `cancelled` and `released`. A review step's verdict picks
 * the next state: approve moves on; reject goes back to `onReject` with the feedback, at most `maxRounds` rounds,
 * then fails (or completes unapproved, as `onMaxRounds` says). A `cancel` event, in any state, ends the workflow
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
  const compiling: Compiling = { config, places: placesOf(config.flow), provided, actors: {} };
  const states: Record<string, object> = compileList(compiling, config.flow, TOP_SCOPE);
  for (const final of ['completed', 'failed', 'cancelled', 'released'] as const) {
    states[final] = { id: FINAL_IDS[final], type: 'final' };
  }

  return workflowSetup
    .createMachine({
      id: `workflow:${config.name}`,
      context: ({ input }) => ({
        task: input,
        round: 1,
        rejections: {},
        latest: {},
        usage: emptyUsage(),
        usageByAgent: {},
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
      // The states are built from config, so their shape is checked by the tests, not the compiler.
      states: states as never,
      output: ({ context }) => workflowOutput(config, context),
    })
    .provide({ actors: { ...provided, ...compiling.actors } as never });
}

/** The actors a workflow's steps invoke, as the host provides them (the defaults throw). */
export interface StepActors {
  runStep?: ActorLogic<StepRunOutput, StepRunInput>;
  askPerson?: ActorLogic<HumanRunOutput, HumanRunInput>;
  runPipeline?: ActorLogic<PipelineRunOutput, PipelineRunInput>;
}
type ActorLogic<Output, Input> = ReturnType<typeof fromPromise<Output, Input>>;

/** What compiling a list of steps needs, and collects: the item workflow of each foreach step, by actor key. */
interface Compiling {
  config: PipelineConfig;
  places: Map<string, StepPlace>;
  provided: StepActors;
  actors: Record<string, unknown>;
}

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
    const step = id.split('.')[1] as string;
    items.set(step, [...(items.get(step) ?? []), ...activeSteps(item.value)]);
  }
  return activeSteps(snapshot.value).flatMap((step) => items.get(step) ?? [step]);
}

/** A workflow's child actors, by id, as a snapshot holds them. */
type Children = Record<string, { getSnapshot(): unknown } | undefined>;

/** What is read of a foreach item's workflow: where it is, and how it ended. */
interface ItemSnapshot {
  status: string;
  value: unknown;
  output?: unknown;
  error?: unknown;
}

/** The workflows of foreach items among a workflow's children (ids `each.<step>.<round>.<index>`). */
function itemsOf(children: Children): { id: string; item: ItemSnapshot }[] {
  return Object.entries(children).flatMap(([id, child]) => {
    const item = child?.getSnapshot() as ItemSnapshot | undefined;
    return id.startsWith('each.') && item ? [{ id, item }] : [];
  });
}

/** Ids of the final states, which transitions anywhere in the machine target. */
const FINAL_IDS = {
  completed: 'final:completed',
  failed: 'final:failed',
  cancelled: 'final:cancelled',
  released: 'final:released',
} as const;

/** The scope of a workflow's own list of steps: it ends `completed`, or `failed` with the failure recorded. */
const TOP_SCOPE: ListScope = {
  exit: `#${FINAL_IDS.completed}`,
  fail: (failure) => ({
    target: `#${FINAL_IDS.failed}`,
    actions: [{ type: 'fail' as const, params: failure }],
  }),
};

/** A transition's target and actions, in the form xstate takes. */
interface Transition {
  target: string;
  actions?: unknown[];
}

/** Where a list of steps ends: its exit after the last step (or a route's `end`), and what a failure in it does. */
interface ListScope {
  exit: string;
  fail: (failure: ContextParam<WorkflowFailure>) => Transition;
}

type Args = { context: WorkflowContext; event: unknown };
/** An action parameter given whole or computed from the context and event. */
type ContextParam<T> = T | ((args: Args) => T);

/** The key of a step's gate state (its `when`); never in a checkpoint, since it leaves at once. */
const gateKey = (step: StepConfig) => `when:${step.id}`;
/** The key a list is entered by: its first step's gate, or the step. */
const initialKey = (list: readonly StepConfig[]) => {
  const first = list[0] as StepConfig;
  return first.when === undefined ? first.id : gateKey(first);
};
/** The target that enters a step: through its gate when it has a `when`. */
const enter = (step: StepConfig) => `#${step.when === undefined ? step.id : gateKey(step)}`;

function compileList(c: Compiling, list: readonly StepConfig[], scope: ListScope): Record<string, object> {
  const { config, places } = c;
  const states: Record<string, object> = {};
  /** Where a route's target, a step's `next` or a review's `onReject` leads. */
  const resolve = (id: string) => {
    if (id === ROUTE_END) return scope.exit;
    const target = list.find((s) => s.id === id);
    return target ? enter(target) : `#${id}`;
  };
  list.forEach((step, index) => {
    const following = list[index + 1];
    const next = step.next !== undefined ? resolve(step.next) : following ? enter(following) : scope.exit;
    const place = places.get(step.id) as StepPlace;
    if (step.when !== undefined)
      states[gateKey(step)] = gateState(step, step.when, next, scope, place.within);
    switch (step.kind) {
      case 'agent':
      case 'review':
        states[step.id] = agentState(config, place, step, next, resolve, scope);
        if (step.kind === 'agent' && step.retry) states[retryKey(step)] = retryState(step);
        break;
      case 'parallel':
        states[step.id] = parallelState(c, step, next, recoveryOf(step, scope, next, resolve));
        break;
      case 'route':
        states[step.id] =
          step.agent === undefined
            ? routeState(step, resolve, scope, place.within)
            : agentState(config, place, step as AgentAskedStep, next, resolve, scope);
        break;
      case 'human':
        states[step.id] = humanState(config, place, step, next, resolve, scope);
        break;
      case 'pipeline':
        states[step.id] = pipelineState(config, place, step, next, recoveryOf(step, scope, next, resolve));
        break;
      case 'foreach':
        states[step.id] = foreachState(c, step, next, recoveryOf(step, scope, next, resolve));
        break;
    }
  });
  return states;
}

/** The scope a CEL condition sees: the task, its input and what each step that has run produced. */
function scopeOf(context: WorkflowContext): ExpressionScope {
  const steps: ExpressionScope['steps'] = {};
  for (const [id, out] of Object.entries(context.latest)) steps[id] = { output: parsedOutput(out.output) };
  for (const [id, failure] of Object.entries(context.errors ?? {})) {
    steps[id] = { ...steps[id], output: steps[id]?.output ?? null, error: failure.message };
  }
  const { task } = context;
  return {
    input: task.input ?? {},
    steps,
    task: {
      id: task.taskId,
      goal: task.goal,
      pipeline: task.pipeline,
      metadata: task.metadata ?? {},
      round: context.round,
    },
  };
}

/** A step's output as conditions read it: its JSON when it is JSON, else its text. */
function parsedOutput(output: string): unknown {
  try {
    return JSON.parse(output);
  } catch {
    return output;
  }
}

/** A step's `when`: true enters the step; false skips to the next, saying so; an error fails the list. */
function gateState(
  step: StepConfig,
  when: string,
  next: string,
  scope: ListScope,
  within: readonly FlowScope[],
) {
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
      { guard: (args: Args) => (test(args) as { value: unknown }).value === true, target: `#${step.id}` },
      {
        target: next,
        actions: [
          say(({ context }: Args) => ({
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

/** Where a step is in the flow, for its events: nothing at the top of the flow. */
const placed = (within: readonly FlowScope[]) => (within.length > 0 ? { within: [...within] } : {});

/**
 * `step.started`, as a step that waits on `agent` (an agent, `human`, `pipeline`) enters its state, saying where in
 * the flow it is (and, for a `pipeline` step, which sub-task it runs).
 */
function startedEvent(
  place: Pick<StepPlace, 'within'>,
  step: Pick<StepConfig, 'id'>,
  agent: string,
  subTask?: (context: WorkflowContext) => { taskId: string; pipeline: string },
) {
  return say(({ context }: Args) => ({
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
    },
  }));
}

/** An agent or review step: a state that invokes `runStep` and goes where the reply says. */
function agentState(
  config: PipelineConfig,
  place: StepPlace,
  step: AgentAskedStep,
  next: string,
  resolve: (id: string) => string,
  scope: ListScope,
) {
  const timeoutMs = (step.timeout ?? config.defaults.stepTimeout) * 1_000;
  const recovery = recoveryOf(step, scope, next, resolve);
  return {
    id: step.id,
    entry: [say(({ context }: Args) => handoff(context, place, step)), startedEvent(place, step, step.agent)],
    invoke: {
      src: 'runStep',
      input: ({ context }: { context: WorkflowContext }): StepRunInput => ({
        request: buildRequest(config, context, step, place),
        timeoutMs,
      }),
      onDone: [
        ...stepCompleted(step, recovery),
        ...(step.kind === 'review'
          ? reviewTransitions(step, reworked(place, step), next, resolve, scope)
          : step.kind === 'route'
            ? routerTransitions(step, resolve, scope, place.within)
            : [{ target: next, actions: record(step) }]),
      ],
      // The request itself failed (no worker, a timeout): no reply, so no `step.completed`.
      onError: recovery(({ event }) => {
        const error = (event as { error: unknown }).error;
        return {
          reason: callFailureReason(error),
          message: `step ${step.id} (${step.agent}) could not be run: ${errorMessage(error)}`,
          step: step.id,
        };
      }, []).map(({ guard, ...t }) => (guard ? { ...t, guard: (args: Args) => guard(args, true) } : t)),
    },
  };
}

/** The steps a review's rejection runs again: from its `onReject` to the review, branches included. */
function reworked(place: StepPlace, step: ReviewStepConfig): string[] {
  const from = place.list.findIndex((s) => s.id === step.onReject);
  return allSteps(place.list.slice(Math.max(0, from), place.index + 1)).map((s) => s.id);
}

/** A router agent's reply: the target it picked (its structured output names one), with `route.chosen`. */
function routerTransitions(
  step: AgentAskedStep & RouteStepConfig,
  resolve: (id: string) => string,
  scope: ListScope,
  within: readonly FlowScope[],
) {
  const choice = (event: Done['event']) =>
    (event.output.ok ? event.output.structured : undefined) as
      | { target?: unknown; reason?: unknown }
      | undefined;
  return [
    ...Object.keys(step.targets ?? {}).map((target) => ({
      guard: ({ event }: Done) => choice(event)?.target === target,
      target: resolve(target),
      actions: [
        ...record(step),
        say(({ context, event }: Args) => ({
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
            reason: String(choice(event as Done['event'])?.reason ?? ''),
            ...placed(within),
          },
        })),
      ],
    })),
    // The reply matched the schema, which names only the targets: this is a bug, said as such.
    failing(scope, record(step), {
      reason: 'invalid_output',
      message: `route ${step.id}: ${step.agent} picked no target of ${Object.keys(step.targets ?? {}).join(', ')}`,
      step: step.id,
    }),
  ];
}

/** A route: a transient state whose value picks a case's target, the default's, or fails the list. */
function routeState(
  step: RouteStepConfig,
  resolve: (id: string) => string,
  scope: ListScope,
  within: readonly FlowScope[],
) {
  const on = step.on as string;
  const cases = step.cases ?? {};
  const routeValue = ({ context }: Args) => {
    const result = evaluate(on, scopeOf(context));
    return result.ok ? { ok: true as const, text: asText(result.value) } : result;
  };
  const chosen = (target: string, matched: string | undefined) => [
    assign(({ context }: Args) => ({
      latest: {
        ...context.latest,
        [step.id]: { step: step.id, agent: 'route', round: context.round, output: target },
      },
    })),
    say((args: Args) => ({
      type: 'event' as const,
      kind: 'route.chosen' as const,
      from: 'workflow',
      data: {
        step: step.id,
        round: args.context.round,
        value: (routeValue(args) as { text: string }).text,
        ...(matched === undefined ? {} : { case: matched }),
        target,
        ...placed(within),
      },
    })),
  ];
  return {
    id: step.id,
    always: [
      {
        guard: (args: Args) => !routeValue(args).ok,
        ...scope.fail((args) => ({
          reason: 'condition_failed',
          message: `route ${step.id}: ${(routeValue(args) as { message: string }).message}`,
          step: step.id,
        })),
      },
      ...Object.entries(cases).map(([value, target]) => ({
        guard: (args: Args) => (routeValue(args) as { text: string }).text === value,
        target: resolve(target),
        actions: chosen(target, value),
      })),
      step.default === undefined
        ? scope.fail((args) => ({
            reason: 'condition_failed',
            message: `route ${step.id}: ${step.on} gave ${JSON.stringify((routeValue(args) as { text: string }).text)}, which matches none of its cases (${Object.keys(cases).join(', ')}) and it has no default`,
            step: step.id,
          }))
        : { target: resolve(step.default), actions: chosen(step.default, undefined) },
    ],
  };
}

type Ran = { event: { output: PipelineRunOutput } };

/**
 * A sub-pipeline: invokes `runPipeline` with the sub-task — its id made from this step's (so a resumed task submits
 * the same one, which runs once), its parent this task one level deeper — and waits for it to end. Its output is
 * the step's; its usage counts in this task's. A sub-task that failed or was cancelled fails the step, and the
 * step's `onError` decides.
 */
function pipelineState(
  config: PipelineConfig,
  place: StepPlace,
  step: PipelineStepConfig,
  next: string,
  recovery: Recovery,
) {
  const timeoutMs = (step.timeout ?? config.defaults.stepTimeout) * 1_000;
  const agent = 'pipeline';
  const completed = say(({ context, event }: Args) => {
    const reply = (event as Ran['event']).output;
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
        usage: reply.usage,
        turns: 0,
        durationMs: reply.durationMs,
      },
    };
  });
  const spent = assign(({ context, event }: Args) => ({
    usage: sumUsage(context.usage, (event as Ran['event']).output.usage),
  }));
  const before = [completed, spent];
  return {
    id: step.id,
    entry: [
      startedEvent(place, step, agent, (context) => ({
        taskId: subTaskId(stepId(context, step)),
        pipeline: step.pipeline,
      })),
    ],
    invoke: {
      src: 'runPipeline',
      input: ({ context }: { context: WorkflowContext }): PipelineRunInput => {
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
          ...(context.approved === false && context.feedback !== undefined
            ? { feedback: context.feedback }
            : {}),
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
      },
      onDone: [
        {
          guard: ({ event }: Ran) => event.output.ok,
          target: next,
          actions: [
            ...before,
            assign(({ context, event }: Args) => ({
              latest: {
                ...context.latest,
                [step.id]: {
                  step: step.id,
                  agent,
                  round: context.round,
                  ...withRef((event as Ran['event']).output),
                },
              },
            })),
          ],
        },
        ...recovery(({ event }) => {
          const reply = (event as Ran['event']).output as Extract<PipelineRunOutput, { ok: false }>;
          return {
            reason: 'step_failed',
            message: `step ${step.id} (pipeline ${step.pipeline}): ${reply.message}`,
            step: step.id,
          };
        }, before).map(({ guard: _ignored, ...t }) => t),
      ],
      onError: recovery(
        ({ event }) => ({
          reason: 'internal',
          message: `step ${step.id} could not run pipeline ${step.pipeline}: ${errorMessage((event as { error: unknown }).error)}`,
          step: step.id,
        }),
        [],
      ).map(({ guard: _ignored, ...t }) => t),
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

type Answered = { event: { output: HumanRunOutput } };

/**
 * A person's step: invokes `askPerson` with the prompt and waits. An answer is the step's output; no answer in time
 * goes as `onTimeout` says (`fail`: the task fails with `approval_timeout`; `continue`: on, with no output; a step id:
 * there); an answer that kept missing the step's schema fails it with `invalid_output`.
 */
function humanState(
  config: PipelineConfig,
  place: StepPlace,
  step: HumanStepConfig,
  next: string,
  resolve: (id: string) => string,
  scope: ListScope,
) {
  const timeoutMs = (step.timeout ?? config.defaults.approvalTimeout) * 1_000;
  const completed = say(({ context, event }: Args) => {
    const reply = (event as Answered['event']).output;
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
        usage: emptyUsage(),
        turns: 0,
        durationMs: reply.durationMs,
      },
    };
  });
  const answered = assign(({ context, event }: Args) => {
    const reply = (event as Answered['event']).output;
    if (!reply.ok) return {};
    return {
      latest: {
        ...context.latest,
        [step.id]: { step: step.id, agent: 'human', round: context.round, output: reply.answer },
      },
    };
  });
  const failure = (reason: TaskFailureReason) =>
    scope.fail(({ event }) => ({
      reason,
      message: `step ${step.id} (a person): ${(event as { output?: { message?: string } }).output?.message ?? ''}`,
      step: step.id,
    }));
  const timedOut = ({ event }: Answered) => !event.output.ok && event.output.code === 'timeout';
  const onTimeout =
    step.onTimeout === 'fail'
      ? {
          ...failure('approval_timeout'),
          actions: [completed, ...(failure('approval_timeout').actions ?? [])],
        }
      : { target: step.onTimeout === 'continue' ? next : resolve(step.onTimeout), actions: [completed] };
  const invalid = recoveryOf(
    step,
    scope,
    next,
    resolve,
  )(
    ({ event }) => ({
      reason: 'invalid_output',
      message: `step ${step.id} (a person): ${(event as { output?: { message?: string } }).output?.message ?? ''}`,
      step: step.id,
    }),
    [completed],
  )[0] as Transition;
  return {
    id: step.id,
    entry: [startedEvent(place, step, 'human')],
    invoke: {
      src: 'askPerson',
      input: ({ context }: { context: WorkflowContext }): HumanRunInput => ({
        taskId: context.task.taskId,
        pipeline: context.task.pipeline,
        step: step.id,
        stepId: stepId(context, step),
        prompt: promptOf(step, context),
        timeoutMs,
        ...(step.answer === undefined ? {} : { answer: step.answer }),
        traceparent: context.task.traceparent,
      }),
      onDone: [
        { guard: ({ event }: Answered) => event.output.ok, target: next, actions: [completed, answered] },
        { guard: timedOut, ...onTimeout },
        invalid,
      ],
      onError: scope.fail(({ event }) => ({
        reason: 'internal',
        message: `step ${step.id} could not ask a person: ${errorMessage((event as { error: unknown }).error)}`,
        step: step.id,
      })),
    },
  };
}

/** A person's question: the step's prompt, and in a foreach step's item, which item it is about. */
function promptOf(step: HumanStepConfig, context: WorkflowContext): string {
  if (context.item === undefined) return step.prompt;
  const item = preview(JSON.stringify(context.task.input?.item) ?? 'null', 2_000);
  return `${step.prompt}\n\n(item ${context.item.index} of ${context.item.step}: ${item})`;
}

/** What a route matches its cases against: a string as it is, anything else as JSON (`true`, `3`). */
const asText = (value: unknown) => (typeof value === 'string' ? value : JSON.stringify(value));
export type WorkflowMachine = ReturnType<typeof compileFlow>;

type Done = { event: { output: StepRunOutput } };

/**
 * Every step ends with `step.completed`; a failed reply is retried (`retry`), then handled as the step's `onError`
 * says — by default it fails the list it is in.
 */
function stepCompleted(step: AgentAskedStep, recovery: Recovery) {
  const failure: ContextParam<WorkflowFailure> = ({ event }) => {
    const reply = (event as Done['event']).output;
    return {
      reason: reply.ok ? 'step_failed' : taskFailureReason(reply.error.code),
      message: reply.ok ? '' : `step ${step.id} (${step.agent}) failed: ${reply.error.message}`,
      step: step.id,
    };
  };
  const before = [
    completedEvent(step),
    { type: 'recordUsage', params: ({ event }: Done) => ({ step, reply: event.output }) },
    { type: 'recordWorkspace', params: ({ event }: Done) => ({ step, reply: event.output }) },
  ];
  const failed = ({ event }: Done) => !event.output.ok;
  const retriable = ({ event }: Done) => event.output.ok || event.output.error.code !== 'budget_exceeded';
  return recovery(failure, before).map((t) => ({
    ...t,
    guard: (args: Done & { context: WorkflowContext }) =>
      failed(args) && (t.guard === undefined || t.guard(args, retriable(args))),
  }));
}

/** A transition out of a failed step, after its own records: a retry, or what `onError` says. */
interface Recovering extends Transition {
  guard?: (args: Args, retriable: boolean) => boolean;
}

/** The transitions a failure of a step takes, given the failure and the actions that come first. */
type Recovery = (failure: ContextParam<WorkflowFailure>, before: unknown[]) => Recovering[];

/**
 * How a step's failure is handled: `retry` sends a retriable failure back to the step (through its backoff state)
 * while it has retries left; then `onError` — `fail` the list (default), `continue` to the next step without its
 * output, or jump to a later step. A failure that does not fail the list is kept in `errors`
 * (`steps.<id>.error` in conditions).
 */
function recoveryOf(
  step: StepConfig,
  scope: ListScope,
  next: string,
  resolve: (id: string) => string,
): Recovery {
  const onError = (step as { onError?: string }).onError;
  const retry = step.kind === 'agent' ? step.retry : undefined;
  return (failure, before) => {
    const resolved = (args: Args) => (typeof failure === 'function' ? failure(args) : failure);
    const keep = assign(({ context, event }: Args) => ({
      errors: { ...context.errors, [step.id]: resolved({ context, event }) },
    }));
    const transitions: Recovering[] = [];
    if (retry) {
      transitions.push({
        guard: ({ context }, retriable) => retriable && retriesOf(context, step) < retry.max,
        target: `#${retryKey(step)}`,
        actions: [
          ...before,
          assign(({ context }: Args) => ({
            attempts: { ...context.attempts, [attemptKey(context, step)]: retriesOf(context, step) + 1 },
          })),
        ],
      });
    }
    if (onError === undefined || onError === 'fail') transitions.push(failing(scope, before, failure));
    else
      transitions.push({
        target: onError === 'continue' ? next : resolve(onError),
        actions: [...before, keep],
      });
    return transitions;
  };
}

/** The key of the state a step waits in before it is retried. */
const retryKey = (step: StepConfig) => `retry:${step.id}`;
const attemptKey = (context: WorkflowContext, step: Pick<StepConfig, 'id'>) => `${step.id}.${context.round}`;
/** How many times the step has been retried in this round. */
const retriesOf = (context: WorkflowContext, step: Pick<StepConfig, 'id'>) =>
  context.attempts?.[attemptKey(context, step)] ?? 0;

/**
 * The state a step waits in before its next attempt: `backoff` seconds before the first retry, doubling. The wait is
 * an invoked actor, not an `after` timer: a task restored from a checkpoint in this state starts it again (xstate
 * does not restore timers), so the retry still comes.
 */
function retryState(step: AgentStepConfig) {
  const retry = step.retry as NonNullable<AgentStepConfig['retry']>;
  return {
    id: retryKey(step),
    invoke: {
      src: 'backoff',
      input: ({ context }: { context: WorkflowContext }) => ({
        ms: Math.round(retry.backoff * 1_000 * 2 ** (retriesOf(context, step) - 1)),
      }),
      onDone: { target: `#${step.id}` },
    },
  };
}

function record(step: AgentAskedStep) {
  return [
    completedEvent(step),
    { type: 'recordUsage', params: ({ event }: Done) => ({ step, reply: event.output }) },
    { type: 'recordWorkspace', params: ({ event }: Done) => ({ step, reply: event.output }) },
    { type: 'recordOutput', params: ({ event }: Done) => ({ step, reply: event.output }) },
  ];
}

/** A transition that fails the list after `before` (its step's records), as the scope fails it. */
function failing(scope: ListScope, before: unknown[], failure: ContextParam<WorkflowFailure>) {
  const transition = scope.fail(failure);
  return { target: transition.target, actions: [...before, ...(transition.actions ?? [])] };
}

function reviewTransitions(
  step: ReviewStepConfig,
  stale: readonly string[],
  next: string,
  resolve: (id: string) => string,
  scope: ListScope,
) {
  const verdictOf = (event: Done['event']) => (event.output.ok ? event.output.verdict : undefined);
  const atBound = ({ context }: { context: WorkflowContext }) =>
    (context.rejections[step.id] ?? 0) + 1 >= step.maxRounds;
  return [
    {
      guard: ({ event }: Done) => verdictOf(event) === undefined,
      ...failing(scope, record(step), {
        reason: 'invalid_output',
        message: `review ${step.id} returned no verdict`,
        step: step.id,
      }),
    },
    {
      guard: ({ event }: Done) => verdictOf(event)?.decision === 'approve',
      target: next,
      actions: [...record(step), 'recordApproval'],
    },
    {
      guard: (args: Done & { context: WorkflowContext }) => !atBound(args),
      target: resolve(step.onReject),
      actions: [
        ...record(step),
        {
          type: 'recordRejection',
          params: ({ event }: Done) => ({ step, feedback: verdictOf(event)?.feedback ?? '', stale }),
        },
      ],
    },
    step.onMaxRounds === 'complete'
      ? { target: scope.exit, actions: [...record(step), assign({ approved: false })] }
      : failing(scope, [...record(step), assign({ approved: false })], ({ event }) => ({
          reason: 'max_rounds',
          message: `review ${step.id} rejected the work in all ${step.maxRounds} rounds; last feedback: ${verdictOf(event as Done['event'])?.feedback ?? ''}`,
          step: step.id,
        })),
  ];
}

/**
 * A parallel step: a region per branch, each its branch's steps and two final states, `_done` and `_failed`. A
 * branch's failure is recorded in `branches` rather than failing the task, and the join decides: `all` with
 * `onError: fail` fails as soon as one branch does; `first` moves on as soon as one succeeds (leaving the state stops
 * the others' steps); otherwise the step ends when every branch has, and fails when none succeeded (unless
 * `onError: continue`).
 */
function parallelState(c: Compiling, step: ParallelStepConfig, next: string, recovery: Recovery) {
  const within = (c.places.get(step.id) as StepPlace).within;
  /** The step has failed: as its `onError` says (failing the list, unless it names a step to go to). */
  const failStep = (failure: ContextParam<WorkflowFailure>) =>
    recovery(failure, [joined(step, false, within)])[0] as Transition;
  const regions: Record<string, object> = {};
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
            params: (args: Args) => ({
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
  return {
    id: step.id,
    type: 'parallel',
    entry: [assign(({ context }: Args) => ({ branches: { ...context.branches, [step.id]: {} } }))],
    states: regions,
    onDone: [
      {
        guard: ({ context }: Args) =>
          step.onError !== 'continue' && !Object.values(outcomesOf(context, step)).some((o) => o.ok),
        ...failStep(({ context }) => ({
          reason: 'step_failed',
          message: `parallel step ${step.id}: no branch succeeded; ${failureSummary(outcomesOf(context, step))}`,
          step: step.id,
        })),
      },
      { target: next, actions: [joined(step, true, within)] },
    ],
  };
}

/** When one branch ends: `all` + `fail` fails at its first failure; `first` moves on at its first success. */
function regionDone(
  step: ParallelStepConfig,
  branch: string,
  next: string,
  failStep: (failure: ContextParam<WorkflowFailure>) => Transition,
  within: readonly FlowScope[],
) {
  const outcome = (context: WorkflowContext) => outcomesOf(context, step)[branch];
  const transitions: object[] = [];
  if (step.join === 'all' && step.onError !== 'continue') {
    transitions.push({
      guard: ({ context }: Args) => outcome(context)?.ok === false,
      ...failStep(({ context }) => {
        const failure = (outcome(context) as { failure: WorkflowFailure }).failure;
        return { ...failure, message: `branch ${branch} of ${step.id}: ${failure.message}` };
      }),
    });
  }
  if (step.join === 'first') {
    transitions.push({
      guard: ({ context }: Args) => outcome(context)?.ok === true,
      target: next,
      actions: [joined(step, true, within)],
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
function joined(step: ParallelStepConfig, ok: boolean, within: readonly FlowScope[]) {
  return enqueueActions(({ context, enqueue }: { context: WorkflowContext; enqueue: EnqueueLike }) => {
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

/**
 * A foreach step: on entry, `items` gives the list and the first `concurrency` items are spawned, each a workflow of
 * its own (its `do` steps, see {@link itemMachine}) kept in the task's checkpoint with its progress. As an item ends,
 * its outcome and spending are recorded, the item's workflow is stopped, and the next item is spawned. The step ends
 * when every item has: with each item's result, by its place in the list; it fails as soon as an item does when
 * `failFast`, else at the end if an item failed (never, with `onError: continue`). Leaving the state stops the items
 * still running.
 */
function foreachState(c: Compiling, step: ForeachStepConfig, next: string, recovery: Recovery) {
  const src = `foreach:${step.id}`;
  c.actors[src] = itemMachine(c, step);
  const outside = outsideOutputs(c, step);
  const failFast = step.failFast ?? step.onError !== 'continue';
  const within = (c.places.get(step.id) as StepPlace).within;
  const progressOf = (context: WorkflowContext) => context.foreach?.[step.id] as ForeachProgress;
  const childId = (round: number, index: number) => `each.${step.id}.${round}.${index}`;
  const spawn = (context: WorkflowContext, enqueue: EnqueueLike, items: readonly unknown[], index: number) =>
    enqueue.spawnChild(src, {
      id: childId(context.round, index),
      input: itemContext(context, step, outside, index, items[index]),
      syncSnapshot: true,
    });
  /** The step has failed: as its `onError` says, after `items.joined`. */
  const failStep = (failure: ContextParam<WorkflowFailure>) => {
    const { guard: _ignored, ...transition } = recovery(failure, [
      itemsJoined(step, false, within),
    ])[0] as Recovering;
    return { ...transition, actions: [...(transition.actions ?? []), forgetItems(step)] };
  };
  const failures = (context: WorkflowContext) =>
    progressOf(context).results.flatMap((r, index) => (r && !r.ok ? [{ index, failure: r.failure }] : []));
  const settled = (context: WorkflowContext) => progressOf(context).results.every((r) => r !== null);
  const ended = ({ context, event, enqueue }: Args & { enqueue: EnqueueLike }) => {
    const { type } = event as { type: string };
    const id =
      type === 'item.ended'
        ? (event as { id: string }).id
        : type.replace(/^xstate\.(done|error)\.actor\./, '');
    if (!id.startsWith(`each.${step.id}.`)) return;
    const [round, index] = id.split('.').slice(-2).map(Number) as [number, number];
    const progress = progressOf(context);
    // A stopped item's last word, or a round's before this one: nothing to record.
    if (round !== context.round || progress.results[index] !== null) return;
    const output = (event as { output?: ItemOutput }).output;
    const outcome: ItemOutcome = output
      ? output.ok
        ? { ok: true, output: output.output }
        : { ok: false, failure: output.failure }
      : {
          ok: false,
          failure: {
            reason: 'internal',
            message: `its workflow crashed: ${errorMessage((event as { error?: unknown }).error)}`,
            step: step.id,
          },
        };
    const results = progress.results.map((r, i) => (i === index ? outcome : r));
    const more = !(failFast && !outcome.ok) && progress.started < progress.items.length;
    const started = progress.started + (more ? 1 : 0);
    const usage = output?.usage ?? emptyUsage();
    const usageByAgent = { ...context.usageByAgent };
    for (const [agent, spent] of Object.entries(output?.usageByAgent ?? {}))
      usageByAgent[agent] = sumUsage(usageByAgent[agent] ?? emptyUsage(), spent);
    // An item's files join the task's as it ends, as a step's do: the last item to end wins a path two wrote.
    const workspace = output?.workspace
      ? applyWorkspaceChanges(context.workspace, output.workspace)
      : context.workspace;
    const updated: WorkflowContext = {
      ...context,
      usage: sumUsage(context.usage, usage),
      usageByAgent,
      foreach: { ...context.foreach, [step.id]: { ...progress, results, started } },
      ...(workspace ? { workspace } : {}),
    };
    enqueue.assign({
      usage: updated.usage,
      usageByAgent,
      foreach: updated.foreach as Record<string, ForeachProgress>,
      ...(workspace ? { workspace } : {}),
    });
    enqueue.stopChild(id);
    if (more) spawn(updated, enqueue, progress.items, progress.started);
  };
  return {
    id: step.id,
    entry: [
      enqueueActions(({ context, enqueue }: Args & { enqueue: EnqueueLike }) => {
        const listed = listItems(step, context);
        if (!listed.ok) {
          const progress: ForeachProgress = { items: [], started: 0, results: [], problem: listed.failure };
          enqueue.assign({ foreach: { ...context.foreach, [step.id]: progress } });
          return;
        }
        const { items } = listed;
        const started = Math.min(step.concurrency, items.length);
        const progress: ForeachProgress = { items, started, results: items.map(() => null) };
        const updated = { ...context, foreach: { ...context.foreach, [step.id]: progress } };
        enqueue.assign({ foreach: updated.foreach });
        for (let index = 0; index < started; index++) spawn(updated, enqueue, items, index);
      }),
    ],
    always: [
      {
        guard: ({ context }: Args) => progressOf(context).problem !== undefined,
        ...failStep(({ context }) => progressOf(context).problem as WorkflowFailure),
      },
      {
        guard: ({ context }: Args) => failFast && failures(context).length > 0,
        ...failStep(({ context }) => {
          const { index, failure } = failures(context)[0] as { index: number; failure: WorkflowFailure };
          return { ...failure, message: `item ${index} of ${step.id}: ${failure.message}`, step: step.id };
        }),
      },
      {
        guard: ({ context }: Args) =>
          settled(context) && step.onError !== 'continue' && failures(context).length > 0,
        ...failStep(({ context }) => ({
          reason: 'step_failed',
          message: `foreach step ${step.id}: ${failures(context).length} of ${progressOf(context).items.length} items failed; ${failureList(failures(context))}`,
          step: step.id,
        })),
      },
      {
        guard: ({ context }: Args) => settled(context),
        target: next,
        actions: [itemsJoined(step, true, within), forgetItems(step)],
      },
    ],
    on: {
      [`xstate.done.actor.each.${step.id}.*`]: { actions: enqueueActions(ended) },
      [`xstate.error.actor.each.${step.id}.*`]: { actions: enqueueActions(ended) },
      'item.ended': { actions: enqueueActions(ended) },
    },
    // Leaving the step — it failed fast, the task was cancelled, a `first` join moved on — stops what still runs,
    // counting what it spent (its steps that had finished) in the task's usage.
    exit: [
      enqueueActions(({ context, enqueue, self }: Args & { enqueue: EnqueueLike; self: ActorLike }) => {
        const progress = context.foreach?.[step.id];
        if (!progress) return;
        const children = self.getSnapshot().children;
        let usage = context.usage;
        const usageByAgent = { ...context.usageByAgent };
        progress.results.forEach((r, index) => {
          if (r !== null || index >= progress.started) return;
          const id = childId(context.round, index);
          const spent = (children[id]?.getSnapshot() as { context?: WorkflowContext } | undefined)?.context;
          if (spent) {
            usage = sumUsage(usage, spent.usage);
            for (const [agent, u] of Object.entries(spent.usageByAgent))
              usageByAgent[agent] = sumUsage(usageByAgent[agent] ?? emptyUsage(), u);
          }
          enqueue.stopChild(id);
        });
        enqueue.assign({ usage, usageByAgent });
      }),
    ],
  };
}

/**
 * Tells a restored workflow again of the items whose workflows had ended when its checkpoint was taken but whose
 * ends it had not yet taken (an item's last step says what it did before the item ends, and that is checkpointed):
 * xstate restores them ended and starts only those still active, so their ends would never be heard.
 */
export function hearEndedItems(actor: {
  getSnapshot(): { children: Children };
  send(event: WorkflowEvent): void;
}): void {
  for (const { id, item } of itemsOf(actor.getSnapshot().children)) {
    if (item.status === 'done') actor.send({ type: 'item.ended', id, output: item.output as ItemOutput });
    else if (item.status === 'error') actor.send({ type: 'item.ended', id, error: item.error });
  }
}

/**
 * Forgets a foreach step's items once it has ended (its output has their results): later checkpoints need not carry
 * them twice. Last in the step's final transition, after whatever reads them.
 */
function forgetItems(step: ForeachStepConfig) {
  return assign(({ context }: Args) => {
    const { [step.id]: _ended, ...others } = context.foreach ?? {};
    return { foreach: others };
  });
}

/** Failed items for a message: the first five, each its message cut at 500 characters, and how many more. */
function failureList(failed: readonly { index: number; failure: WorkflowFailure }[]): string {
  const shown = failed
    .slice(0, 5)
    .map(({ index, failure }) => `item ${index}: ${preview(failure.message, 500)}`);
  return `${shown.join('; ')}${failed.length > 5 ? `; and ${failed.length - 5} more` : ''}`;
}

/**
 * A foreach item whose workflow could not be restored from the task's checkpoint (its steps changed since), with
 * why; xstate restores each item apart, so the task's workflow restores fine without it.
 */
export function unfitItem(snapshot: { children: Children }): { error: unknown } | undefined {
  const unfit = itemsOf(snapshot.children).find(({ item }) => item.status === 'error');
  return unfit && { error: unfit.item.error };
}

/** A foreach step's list: what `items` gives, when it is a list no longer than `maxItems`; else why not. */
function listItems(
  step: ForeachStepConfig,
  context: WorkflowContext,
): { ok: true; items: unknown[] } | { ok: false; failure: WorkflowFailure } {
  const result = evaluate(step.items, scopeOf(context));
  const failure = (reason: TaskFailureReason, message: string) => ({
    ok: false as const,
    failure: { reason, message: `foreach step ${step.id}: ${message}`, step: step.id },
  });
  if (!result.ok) return failure('condition_failed', `its items could not be evaluated: ${result.message}`);
  if (!Array.isArray(result.value)) {
    return failure(
      'condition_failed',
      `${step.items} gave ${preview(JSON.stringify(result.value) ?? 'nothing', 200)}, not a list`,
    );
  }
  if (result.value.length > step.maxItems) {
    return failure(
      'step_failed',
      `${step.items} gave ${result.value.length} items, more than its maxItems of ${step.maxItems}; none was run`,
    );
  }
  return { ok: true, items: result.value };
}

/**
 * The workflow of one item of a foreach step: its `do` steps as a list of their own, ending `completed` or `failed`.
 * It starts from the task's workflow as the item starts (see {@link itemContext}), and passes what it emits up.
 */
function itemMachine(c: Compiling, step: ForeachStepConfig) {
  const inner: Compiling = { ...c, actors: {} };
  const states: Record<string, object> = compileList(inner, step.do, TOP_SCOPE);
  states.completed = { id: FINAL_IDS.completed, type: 'final' };
  states.failed = { id: FINAL_IDS.failed, type: 'final' };
  return workflowSetup
    .createMachine({
      id: `workflow:${c.config.name}:${step.id}`,
      context: ({ input }) => input as unknown as WorkflowContext,
      initial: initialKey(step.do),
      on: {
        'item.said': { actions: say(({ event }) => (event as { event: WorkflowEmitted }).event) as never },
      },
      states: states as never,
      output: ({ context }) => itemOutput(step, context) as never,
    })
    .provide({ actors: { ...c.provided, ...inner.actors } as never });
}

/**
 * The task with keys laid over its input (an item's, a sub-task's). A key laid over one cut to a preview is no
 * longer cut: the stored whole is not put back over it.
 */
function withInput(task: WorkflowInput, over: Record<string, unknown>): WorkflowInput {
  const { inputCut, ...rest } = task;
  const input = { ...task.input, ...over };
  const keys = inputCut?.keys.filter((key) => !(key in over)) ?? [];
  return { ...rest, input, ...(inputCut && keys.length > 0 ? { inputCut: { ...inputCut, keys } } : {}) };
}

/**
 * Where an item starts: the task as it is, its input with the item (`input.item`, `input.index`), the outputs of
 * earlier steps its `do` steps may read, the round and any feedback of a rework, and what the task has spent (its
 * budgets count it). Its own spending starts at nothing, and is added to the task's when it ends.
 */
function itemContext(
  context: WorkflowContext,
  step: ForeachStepConfig,
  outside: ReadonlySet<string>,
  index: number,
  item: unknown,
): WorkflowContext {
  const pick = <T>(record: Record<string, T> | undefined) =>
    Object.fromEntries(Object.entries(record ?? {}).filter(([id]) => outside.has(id)));
  const { task } = context;
  const previous = previousResult(context, step, index);
  return {
    task: withInput(task, { item, index }),
    round: context.round,
    rejections: {},
    latest: pick(context.latest),
    ...(previous ? { previous } : {}),
    errors: pick(context.errors),
    usage: emptyUsage(),
    usageByAgent: {},
    ...(context.approved === undefined ? {} : { approved: context.approved }),
    ...(context.feedback === undefined ? {} : { feedback: context.feedback }),
    ...(context.lastAgent === undefined ? {} : { lastAgent: context.lastAgent }),
    ...(context.joined === undefined ? {} : { joined: context.joined }),
    item: { step: step.id, index },
    spent: { usage: taskSpent(context), byAgent: context.usageByAgent },
    ...(context.workspace ? { workspace: context.workspace, itemBase: context.workspace } : {}),
  };
}

/**
 * What an item gave in the round a review rejected: its result, as its last step of work's own previous output, so
 * that step sees what it did last time, as any reworked step does.
 */
function previousResult(
  context: WorkflowContext,
  step: ForeachStepConfig,
  index: number,
): WorkflowContext['previous'] {
  const stale = context.previous?.[step.id];
  const last = [...step.do].reverse().find(isWork);
  if (!stale || !last) return undefined;
  const results = parsedOutput(stale.output);
  const result = Array.isArray(results) ? results[index] : undefined;
  if (result === undefined || result === null || (typeof result === 'object' && 'error' in result))
    return undefined;
  const output = typeof result === 'string' ? result : JSON.stringify(result);
  return { [last.id]: { step: last.id, agent: actorOf(last), round: stale.round, output } };
}

/**
 * The earlier steps whose outputs a foreach step's `do` steps may read (their `context`, else every step before
 * them, and what their conditions name): only those are copied into each item's checkpoint.
 */
function outsideOutputs(c: Compiling, step: ForeachStepConfig): Set<string> {
  const inside = new Set(allSteps(step.do).map((s) => s.id));
  const read = allSteps(step.do).flatMap((s) => {
    const place = c.places.get(s.id) as StepPlace;
    const context = (s as { context?: string[] }).context ?? place.before;
    const conditions = [s.when, s.kind === 'route' ? s.on : undefined].filter((e) => e !== undefined);
    return [...context, ...conditions.flatMap(stepsReadBy)];
  });
  // A parallel step before the foreach: its branches' steps may be read too.
  const expanded = read.flatMap((id) => {
    const held = c.places.get(id)?.step;
    return held?.kind === 'parallel' ? allSteps([held]).map((s) => s.id) : [id];
  });
  return new Set(expanded.filter((id) => !inside.has(id)));
}

/** How an item's workflow ended: the output of its last step of work, or its failure; and what it spent. */
function itemOutput(step: ForeachStepConfig, context: WorkflowContext): ItemOutput {
  const changed = context.workspace ? workspaceDiff(context.itemBase, context.workspace) : undefined;
  const spending = {
    usage: context.usage,
    usageByAgent: context.usageByAgent,
    ...(changed && !noWorkspaceChanges(changed) ? { workspace: changed } : {}),
  };
  if (context.failure) return { ok: false, failure: context.failure, ...spending };
  const lastWork = [...step.do].reverse().find((s) => isWork(s) && context.latest[s.id]);
  return { ok: true, output: lastWork ? (context.latest[lastWork.id]?.output ?? '') : '', ...spending };
}

/**
 * Ends a foreach step: its output (each item's result by its place in the list: its parsed output, `{"error": ...}`
 * for a failed item, null for one never run or stopped), and `items.joined` saying how the items ended. The next
 * hand-off is from the join.
 */
function itemsJoined(step: ForeachStepConfig, ok: boolean, within: readonly FlowScope[]) {
  return enqueueActions(({ context, enqueue }: { context: WorkflowContext; enqueue: EnqueueLike }) => {
    const progress = context.foreach?.[step.id] as ForeachProgress;
    const results = progress.results.map((r) =>
      r === null ? null : r.ok ? parsedOutput(r.output) : { error: r.failure.message },
    );
    enqueue.assign({ ...(ok ? withOutput(context, step, 'foreach', results) : {}), joined: step.id });
    sayNow(context, enqueue, {
      type: 'event',
      kind: 'items.joined',
      from: 'workflow',
      data: {
        step: step.id,
        round: context.round,
        items: progress.items.length,
        completed: progress.results.filter((r) => r?.ok).length,
        failed: progress.results.flatMap((r, index) =>
          r && !r.ok ? [{ index, message: preview(r.failure.message, 500) }] : [],
        ),
        stopped: progress.results.filter((r) => r === null).length,
        ok,
        ...placed(within),
      },
    });
  });
}

/** What the foreach step's exit reads of the workflow actor: the items' workflows, to count what they spent. */
interface ActorLike {
  getSnapshot(): { children: Children };
}

/** The outputs with a step's own: what a step holding steps (parallel, foreach) gives, as JSON. */
function withOutput(
  context: WorkflowContext,
  step: Pick<StepConfig, 'id'>,
  agent: string,
  output: unknown,
): Pick<WorkflowContext, 'latest'> {
  return {
    latest: {
      ...context.latest,
      [step.id]: { step: step.id, agent, round: context.round, output: JSON.stringify(output) },
    },
  };
}

/** What `joined` needs of xstate's `enqueue`: the states are built from config, so it is not inferred. */
interface EnqueueLike {
  assign(values: Partial<WorkflowContext>): void;
  emit(event: WorkflowEmitted): void;
  sendParent(event: WorkflowEvent): void;
  spawnChild(src: string, options: { id: string; input: unknown; syncSnapshot: boolean }): void;
  stopChild(id: string): void;
}

/**
 * An event of the task's, as the workflow says it: emitted (the runner publishes it), or, in an item's workflow,
 * passed up to the task's workflow to emit, marked with the item it is about.
 */
function say(make: (args: Args) => WorkflowEmitted) {
  return enqueueActions(({ context, event, enqueue }: Args & { enqueue: EnqueueLike }) =>
    sayNow(context, enqueue, make({ context, event })),
  );
}

function sayNow(context: WorkflowContext, enqueue: EnqueueLike, said: WorkflowEmitted): void {
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
  const within = said.data.within as (FlowScope & { item?: number; value?: string })[] | undefined;
  if (!item || !within) return {};
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

function completedEvent(step: AgentAskedStep) {
  return say(({ context, event }: Args) => {
    const reply = (event as Done['event']).output;
    return {
      type: 'event' as const,
      kind: 'step.completed' as const,
      from: step.agent,
      to: 'workflow',
      data: {
        step: step.id,
        agent: step.agent,
        round: context.round,
        stepId: stepId(context, step),
        ok: reply.ok,
        output: reply.ok ? preview(reply.output, 256 * 1024) : '',
        ...(reply.ok && reply.outputRef ? { outputRef: reply.outputRef } : {}),
        ...(reply.ok && reply.verdict ? { verdict: reply.verdict } : {}),
        ...(reply.ok ? {} : { error: reply.error }),
        usage: reply.usage,
        turns: reply.turns,
        durationMs: reply.durationMs,
      },
    };
  });
}

/** Who hands the work on: the join of a parallel or foreach step that just ended, the last agent, or the task. */
function handoff(context: WorkflowContext, place: StepPlace, step: AgentAskedStep): WorkflowEmitted {
  const from = context.joined ?? context.lastAgent ?? 'task';
  const reason = context.reworkTarget === step.id ? 'rework' : 'next';
  return {
    type: 'event',
    kind: 'agent.handoff',
    from,
    to: step.agent,
    data: {
      step: step.id,
      round: context.round,
      reason,
      ...(context.joined === undefined ? {} : { join: context.joined }),
      ...placed(place.within),
    },
  };
}

/**
 * `<taskId>.<step>.<round>`, and `-r<n>` for its n-th retry (a fresh run, with a journal of its own); a foreach step's
 * item adds `.i<index>`, so each item's run of a step is a step of its own.
 */
export const stepId = (context: WorkflowContext, step: Pick<StepConfig, 'id'>): string => {
  const retries = retriesOf(context, step);
  const item = context.item === undefined ? '' : `.i${context.item.index}`;
  return `${context.task.taskId}.${step.id}.${context.round}${retries > 0 ? `-r${retries}` : ''}${item}`;
};

/** The request for a step: the task, the outputs it may see, and the reviewer's feedback when reworking. */
function buildRequest(
  config: PipelineConfig,
  context: WorkflowContext,
  step: AgentAskedStep,
  place: StepPlace,
): AgentStepRequest {
  const visible = step.context ?? place.before;
  const own = context.latest[step.id] ?? context.previous?.[step.id];
  const outputs = [...visible.map((id) => context.latest[id]), ...(own ? [own] : [])].filter(
    (o): o is StepOutput => o !== undefined,
  );
  const reworking = context.approved === false && context.feedback !== undefined;
  return {
    stepId: stepId(context, step),
    taskId: context.task.taskId,
    pipeline: context.task.pipeline,
    agent: step.agent,
    step: step.id,
    round: context.round,
    goal: context.task.goal,
    ...(context.task.input ? { input: context.task.input } : {}),
    ...(context.task.inputCut ? { inputCut: context.task.inputCut } : {}),
    context: outputs,
    ...(reworking && step.kind === 'agent' ? { feedback: context.feedback } : {}),
    expect: step.kind === 'review' ? 'verdict' : 'text',
    ...budgetFor(config, context, step.agent, step.kind === 'agent' ? step : undefined),
    priorModelCalls: agentSpent(context, step.agent).modelCalls,
    ...(context.lastAgent ? { from: context.lastAgent } : {}),
    traceparent: context.task.traceparent,
    ...(step.kind === 'route' ? routerAsk(step) : {}),
    ...(context.workspace ? { workspace: context.workspace } : {}),
  };
}

/**
 * What a router agent is asked: to pick one of the route's targets, saying why, as structured output whose schema
 * names only those targets — a reply naming any other gets the runtime's one repair turn, then fails the step.
 */
function routerAsk(step: RouteStepConfig): Pick<AgentStepRequest, 'instructions' | 'output'> {
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

function workflowOutput(config: PipelineConfig, context: WorkflowContext): WorkflowOutput {
  const lastWork = [...config.flow].reverse().find((s) => isWork(s) && context.latest[s.id]);
  const outputRef = lastWork ? context.latest[lastWork.id]?.outputRef : undefined;
  return {
    status: context.released
      ? 'released'
      : context.cancelled
        ? 'cancelled'
        : context.failure
          ? 'failed'
          : 'completed',
    output: lastWork ? (context.latest[lastWork.id]?.output ?? '') : '',
    ...(outputRef ? { outputRef } : {}),
    approved: context.approved,
    rounds: context.round,
    usage: context.usage,
    usageByAgent: context.usageByAgent,
    ...(context.failure ? { failure: context.failure } : {}),
    ...(context.cancelled?.reason === undefined ? {} : { cancelReason: context.cancelled.reason }),
    ...(context.released ? { released: context.released.why } : {}),
  };
}

/** What the task has spent: in an item's workflow, what it had when the item started and what the item has. */
const taskSpent = (context: WorkflowContext): UsageTotals =>
  context.spent ? sumUsage(context.spent.usage, context.usage) : context.usage;

const agentSpent = (context: WorkflowContext, agent: string): UsageTotals =>
  sumUsage(context.spent?.byAgent[agent] ?? emptyUsage(), context.usageByAgent[agent] ?? emptyUsage());

/** The task's failure reason for a step that could not be run, from the code of the error its call threw. */
function callFailureReason(error: unknown): TaskFailureReason {
  const code = StepErrorCode.safeParse((error as { code?: unknown } | undefined)?.code);
  return taskFailureReason(code.data, 'call');
}

/** What the step may still spend: the tightest of the task's remaining budget, the agent's, and the step's own. */
function budgetFor(
  config: PipelineConfig,
  context: WorkflowContext,
  agent: string,
  step?: AgentStepConfig,
): { budget?: StepBudget } {
  const task = config.budget;
  const own = config.agents[agent]?.budget;
  // A step's own budget is for each run of it: nothing of it is spent when the step is sent.
  const mine = step?.budget;
  const spent = taskSpent(context);
  const spentByAgent = agentSpent(context, agent);
  const budget: StepBudget = { sources: {} };
  const limit = (
    key: 'tokens' | 'costUsd' | 'modelCalls',
    candidates: [number | undefined, number, string][],
  ) => {
    for (const [max, spent, source] of candidates) {
      if (max === undefined) continue;
      const left = Math.max(0, max - spent);
      const current = budget[key];
      if (current === undefined || left < current) {
        budget[key] = left;
        budget.sources[key] = source;
      }
    }
  };
  const tokens = (u: UsageTotals) => u.inputTokens + u.outputTokens;
  limit('tokens', [
    [task?.maxTokens, tokens(spent), `the task budget of ${task?.maxTokens} tokens`],
    [own?.maxTokens, tokens(spentByAgent), `agent ${agent}'s budget of ${own?.maxTokens} tokens`],
    [mine?.maxTokens, 0, `step ${step?.id}'s budget of ${mine?.maxTokens} tokens`],
  ]);
  limit('costUsd', [
    [task?.maxCostUsd, spent.costUsd, `the task budget of $${task?.maxCostUsd}`],
    [own?.maxCostUsd, spentByAgent.costUsd, `agent ${agent}'s budget of $${own?.maxCostUsd}`],
    [mine?.maxCostUsd, 0, `step ${step?.id}'s budget of $${mine?.maxCostUsd}`],
  ]);
  limit('modelCalls', [
    [task?.maxModelCalls, spent.modelCalls, `the task budget of ${task?.maxModelCalls} model calls`],
    [
      own?.maxModelCalls,
      spentByAgent.modelCalls,
      `agent ${agent}'s budget of ${own?.maxModelCalls} model calls`,
    ],
    [mine?.maxModelCalls, 0, `step ${step?.id}'s budget of ${mine?.maxModelCalls} model calls`],
  ]);
  if (context.task.deadline !== undefined) {
    budget.deadline = context.task.deadline;
    budget.sources.deadline = `the task's wall-clock budget of ${task?.timeout} s`;
  }
  return Object.keys(budget.sources).length > 0 ? { budget } : {};
}
