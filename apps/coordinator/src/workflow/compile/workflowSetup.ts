import type { StepOutput } from '@troupe/protocol';
import { applyWorkspaceChanges, emptyUsage, sumUsage } from '@troupe/protocol';
import {
  type ActionFunction,
  type AnyStateMachine,
  assign,
  type DoneActorEvent,
  type ErrorActorEvent,
  type EventObject,
  enqueueActions,
  fromPromise,
  type NonReducibleUnknown,
  type PromiseActorLogic,
  type StateNodeConfig,
  setup,
  type TransitionConfig,
} from 'xstate';
import type { AgentAskedStep, ReviewStepConfig } from '../../config/pipelineSchema.ts';
import { steeringOf } from '../../task/runContext.ts';
import type { StepCallActorLogic } from '../stepCall.ts';
import type {
  BranchOutcome,
  HumanRunInput,
  HumanRunOutput,
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
} from '../workflowTypes.ts';

/**
 * The ends of a foreach step's items, as the task's workflow hears them: xstate's own events for a child that
 * reached its final state or threw (ids `each.<step>.<round>.<index>`).
 */
export type ItemEndEvent =
  | DoneActorEvent<ItemOutput, `each.${string}`>
  | ErrorActorEvent<unknown, `each.${string}`>;

/** Every event a workflow's states handle: what it is sent, and its items' ends. */
export type FlowEvent = WorkflowEvent | ItemEndEvent;

/**
 * A foreach item's workflow, as the task's workflow spawns it. Its own type is a machine of this same setup (whose
 * actors include it), a recursion TypeScript cannot name, so it is any machine here; what goes in is typed where it
 * is spawned (`itemContext`), and what comes out by {@link ItemEndEvent}.
 */
export type ItemLogic = AnyStateMachine;

/** The key a foreach step's item workflow is provided under: `foreach:<step id>` (kept in checkpoints as `src`). */
export type ItemSrc = `foreach:${string}`;

/**
 * The actors a workflow's steps invoke: the host provides `runStep`, `askPerson` and `runPipeline` (the defaults
 * throw); `backoff` is the wait before a retry; and each foreach step's item workflow, by {@link ItemSrc}.
 */
type WorkflowActors = {
  /** The step call (`stepCall.ts`), invoked as the step's child; or a stand-in that answers the step itself. */
  runStep: StepCallActorLogic;
  askPerson: PromiseActorLogic<HumanRunOutput, HumanRunInput>;
  runPipeline: PromiseActorLogic<PipelineRunOutput, PipelineRunInput>;
  backoff: PromiseActorLogic<void, { ms: number; stepId?: string }>;
} & Record<ItemSrc, ItemLogic>;

/** The actions a workflow's steps name, by their parameters. */
type WorkflowActions = {
  recordOutput: StepReply;
  recordWorkspace: StepReply;
  recordUsage: StepReply;
  recordApproval: undefined;
  recordRejection: { step: ReviewStepConfig; feedback: string; stale: readonly string[] };
  fail: WorkflowFailure;
  recordBranch: { parallel: string; branch: string; outcome: BranchOutcome };
};

/** No named guards, no children map: the workflow's guards are inline, its children's ids made at run time. */
type None = Record<never, never>;

/**
 * The typed setup of a workflow machine: its context, events, actors and the actions its steps share. One setup for
 * the task's workflow and one for a foreach item's (which starts from a context, not a task, and ends with its
 * item's output); their states are the same type, so one compiler builds both. The type parameters are given, not
 * inferred, since the item actors' keys are a pattern (`foreach:<step id>`) no object literal can hold.
 */
function workflowSetupFor<TInput, TOutput extends NonReducibleUnknown>() {
  return setup<
    WorkflowContext,
    FlowEvent,
    WorkflowActors,
    None,
    WorkflowActions,
    None,
    never,
    string,
    TInput,
    TOutput,
    WorkflowEmitted
  >({
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
      /**
       * Waits before a step is retried, on the clock of the actor system the workflow runs in (the one given to
       * `createActor`, a SimulatedClock in tests); stopped (its timer cleared) when the workflow leaves the state.
       */
      backoff: fromPromise<void, { ms: number; stepId?: string }>(({ input, signal, system }) => {
        // The step is still at work while it waits to be retried: the messages it was owed are kept for its retry.
        const ended = input.stepId === undefined ? undefined : steeringOf(system)?.atWork(input.stepId);
        return new Promise<void>((resolve) => {
          const clock = system._clock;
          const timer = clock.setTimeout(() => {
            ended?.();
            resolve();
          }, input.ms);
          signal.addEventListener(
            'abort',
            () => {
              clock.clearTimeout(timer);
              ended?.();
            },
            { once: true },
          );
        });
      }),
    },
    actions: {
      recordOutput: assign(({ context }, p: StepReply) => {
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
      recordWorkspace: assign(({ context }, p: StepReply) =>
        p.reply.workspace ? { workspace: applyWorkspaceChanges(context.workspace, p.reply.workspace) } : {},
      ),
      /** What a step spent counts towards the task whether the step succeeded or not. */
      recordUsage: assign(({ context }, p: StepReply) => ({
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
      recordBranch: assign(
        ({ context }, p: { parallel: string; branch: string; outcome: BranchOutcome }) => ({
          branches: {
            ...context.branches,
            [p.parallel]: { ...context.branches?.[p.parallel], [p.branch]: p.outcome },
          },
        }),
      ),
    },
  });
}

/** The actors a workflow's steps invoke, as the host provides them (the defaults throw). */
export type StepActors = Partial<Pick<WorkflowActors, 'runStep' | 'askPerson' | 'runPipeline'>>;

/** An agent's reply to a step, as the actions that record it take it. */
export interface StepReply {
  step: AgentAskedStep;
  reply: StepRunOutput;
}

/** The setup of a task's workflow: it starts from the task and ends with the workflow's output. */
export const workflowSetup = workflowSetupFor<WorkflowInput, WorkflowOutput>();
/** The setup of a foreach item's workflow: it starts from a context made for the item and ends with its output. */
export const itemSetup = workflowSetupFor<WorkflowContext, ItemOutput>();

/**
 * The type parameters xstate gives a state config of this setup (its actors, actions, guards, delays and emitted
 * events), read from `createStateConfig`'s own constraint, so every compiled state is checked against the setup.
 */
export type WorkflowState = Parameters<typeof workflowSetup.createStateConfig>[0];
/** States by key, as a list of steps compiles to. */
export type WorkflowStates = Record<string, WorkflowState>;

type Parts =
  WorkflowState extends StateNodeConfig<
    WorkflowContext,
    FlowEvent,
    infer TActor,
    infer TAction,
    infer TGuard,
    infer TDelay,
    string,
    unknown,
    WorkflowEmitted,
    infer _TMeta
  >
    ? { actor: TActor; action: TAction; guard: TGuard; delay: TDelay }
    : never;

/** A transition of a workflow's states, taken on an event of type `E` (a step's reply, an eventless check). */
export type Transition<E extends EventObject = FlowEvent> = TransitionConfig<
  WorkflowContext,
  E,
  FlowEvent,
  Parts['actor'],
  Parts['action'],
  Parts['guard'],
  Parts['delay'],
  WorkflowEmitted
>;

/** What a transition taken on an event of type `E` does, one action of its list. */
export type StepAction<E extends EventObject = FlowEvent> =
  NonNullable<Transition<E>['actions']> extends readonly (infer A)[] | infer B
    ? Exclude<A | B, readonly unknown[]>
    : never;

/** An action function of the workflow's, built in code rather than named in the setup. */
export type ActionOf<E extends EventObject> = ActionFunction<
  WorkflowContext,
  E,
  FlowEvent,
  undefined,
  Parts['actor'],
  Parts['action'],
  Parts['guard'],
  Parts['delay'],
  WorkflowEmitted
>;

/** `enqueueActions` with the workflow's types, for an action taken on an event of type `E`. */
export const enqueueFor = <E extends EventObject>(
  collect: Parameters<
    typeof enqueueActions<
      WorkflowContext,
      E,
      undefined,
      FlowEvent,
      Parts['actor'],
      Parts['action'],
      Parts['guard'],
      Parts['delay'],
      WorkflowEmitted
    >
  >[0],
): ActionOf<E> => enqueueActions(collect);

/** The `enqueue` an action built with {@link enqueueFor} is given. */
export type EnqueueOf<E extends EventObject> = Parameters<Parameters<typeof enqueueFor<E>>[0]>[0]['enqueue'];

/** `assign` with the workflow's types, for an action taken on an event of type `E`. */
export const assignFor = <E extends EventObject>(
  assignment: (args: { context: WorkflowContext; event: E }) => Partial<WorkflowContext>,
): ActionOf<E> => assign<WorkflowContext, E, undefined, FlowEvent, Parts['actor']>(assignment);

/** What a guard or a computed parameter is given: the context, and the event of type `E`. */
export interface Args<E extends EventObject = FlowEvent> {
  context: WorkflowContext;
  event: E;
}
/** A value given whole or computed from the context and event. */
export type ContextParam<T, E extends EventObject = FlowEvent> = T | ((args: Args<E>) => T);

/** A step's reply, as its call's `onDone` hears it. */
export type StepDone = DoneActorEvent<StepRunOutput>;
/** A person's answer, as a `human` step's `onDone` hears it. */
export type HumanDone = DoneActorEvent<HumanRunOutput>;
/** A sub-task's end, as a `pipeline` step's `onDone` hears it. */
export type PipelineDone = DoneActorEvent<PipelineRunOutput>;
export type { ErrorActorEvent };

/** Ids of the final states, which transitions anywhere in the machine target. */
export const FINAL_IDS = {
  completed: 'final:completed',
  failed: 'final:failed',
  cancelled: 'final:cancelled',
  released: 'final:released',
} as const;
