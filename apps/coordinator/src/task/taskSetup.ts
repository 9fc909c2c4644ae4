import { emptyUsage, type TroupeEvent } from '@troupe/protocol';
import { startWorkflowSpan, type TraceSpan, traceparentOf } from '@troupe/runtime';
import { assign, enqueueActions, fromPromise, raise, setup } from 'xstate';
import { type Claim, type ClaimedTask, claim } from '../intake/claim.ts';
import { type Concluding, type Conclusion, conclude } from '../intake/conclude.ts';
import { type GiveUp, giveUp } from '../intake/giveUp.ts';
import type { TaskDelivery } from '../intake/taskQueue.ts';
import { type Triage, type TriagedTask, triage } from '../intake/triage.ts';
import { activeSteps } from '../workflow/compileFlow.ts';
import type { FlowVersion } from '../workflow/flowVersions.ts';
import type { WorkflowEmitted } from '../workflow/workflowTypes.ts';
import { CheckpointWriter, type CheckpointWriterEvent } from './checkpointWriter.ts';
import { type RunFacts, runContextLogic } from './runContext.ts';
import { pausedEvent, placeOf, steerRestored, toldEvent } from './steerTask.ts';
import { recordFailure } from './taskRecord.ts';
import { publishSafely, type TaskServices } from './taskServices.ts';
import type { TaskSignal } from './taskSignals.ts';
import { TaskSteering } from './taskSteering.ts';
import { type WorkflowSnapshot, workflowChildLogic } from './workflowChild.ts';
import {
  type AfterWorkflow,
  crashMessage,
  endWorkflowSpan,
  RELEASES,
  recordWorkflowEnding,
  type WorkflowEnding,
} from './workflowEnding.ts';

export interface TaskActorInput {
  delivery: TaskDelivery;
  /** A passivated task woken (see `passivation.ts`): it goes on running with the hold it had, its workflow restored. */
  woken?: Passivated;
}

/** What a passivated task kept of its task actor, to run on from where its tree was stopped. */
export interface Passivated {
  claimed: ClaimedTask;
  flow: FlowVersion;
  /** Its hold, with the workflow's persisted snapshot as its tree was stopped (`restored`). */
  hold: Hold & { restored: unknown };
  keptAliveAt: number;
}

/**
 * This delivery's hold on the task while its workflow runs here: its checkpoint writer (which keeps the lease's
 * revision, the progress mark and the writes in the workflow's order), and how the workflow's time here ends.
 */
export interface Hold {
  claimed: ClaimedTask;
  flow: FlowVersion;
  facts: RunFacts;
  span: TraceSpan;
  writer: CheckpointWriter;
  /** What people did to the task (pause, resume, tell), restored from its record; the writer records it. */
  steering: TaskSteering;
  ending?: WorkflowEnding;
  /**
   * The workflow's persisted snapshot as its passivated tree was stopped: restored from it, not from the claim's.
   * Dropped once the woken workflow has read it.
   */
  restored?: unknown;
  /** Told whether the version a migration let the workflow go for was recorded. */
  migrated?: (recorded: boolean) => void;
}

export interface TaskContext extends TaskActorInput {
  /** Until claimed: the claim has what the workflow needs of it. */
  triaged?: TriagedTask | undefined;
  claimed?: ClaimedTask;
  /** Why a claimed task cannot run: it fails, saying so. */
  unrunnable?: string;
  flow?: FlowVersion;
  hold?: Hold;
  final?: TroupeEvent | undefined;
  /** The task ran whole in this delivery and no step of it asked a person: its end reads no requests to close. */
  askedNobody?: boolean;
  /** When the message was last kept alive (`working()`), or arrived. */
  keptAliveAt: number;
  settle: 'ack' | 'term';
  /** A stage failed (a fault of the code, or NATS lost for good): the message is left to a redelivery. */
  error?: unknown;
}

/** How a task actor ended, for its handler: with an error when a stage failed. */
export type TaskActorOutput = { error?: unknown };

export type TaskEvent =
  | TaskSignal
  /** From the checkpoint writer: the lease lost, or a checkpoint that cannot be made or stored. */
  | CheckpointWriterEvent
  /** Time to tell the server again that the task's message is being worked on. */
  | { type: 'keepAlive' };

/** What a stage's result needs of the context; one mistake here is a bug of ours, so it says so. */
export function need<T>(value: T | undefined, what: string): T {
  if (value === undefined)
    throw new Error(`task actor: no ${what} at this stage (a bug in the task actor, task/taskMachine.ts)`);
  return value;
}

/**
 * The parts of a task actor, built once per pipeline runner: its stages (the intake functions, the workflow as a
 * child, the fenced record writes, how the workflow's time here is recorded), its guards, and its actions on the
 * context (the hold on the task, checkpoints, activity, letting the workflow go). The chart that joins them is
 * `taskMachine.ts`.
 */
export function taskSetup(services: TaskServices) {
  const { clock, logger, pipeline } = services;

  return setup({
    types: {
      context: {} as TaskContext,
      input: {} as TaskActorInput,
      events: {} as TaskEvent,
      output: {} as TaskActorOutput,
    },
    actors: {
      triage: fromPromise<Triage, TaskDelivery>(({ input }) => triage(services, input)),
      claim: fromPromise<Claim, TriagedTask>(({ input }) => claim(services, input)),
      giveUp: fromPromise<GiveUp, TriagedTask>(({ input }) => giveUp(services, input)),
      fail: fromPromise<AfterWorkflow, { claimed: ClaimedTask; message: string }>(async ({ input }) => {
        const { claimed, message } = input;
        logger.error({ taskId: claimed.input.taskId }, message);
        const durationMs = Math.max(0, clock.now() - Date.parse(claimed.createdAt));
        const usage = emptyUsage();
        const final = services.finalEvents.failed(claimed.scope, 'unresumable', message, usage, durationMs);
        const progress = claimed.lease.delivery.progress;
        const recorded = await recordFailure(services, claimed, claimed.lease, progress, final, {
          usage,
          round: 1,
        });
        return recorded ? { next: 'conclude', final } : { next: 'leave' };
      }),
      workflow: workflowChildLogic,
      runContext: runContextLogic,
      // Once every checkpoint is written: they come first, and the ending is written at the revision they leave.
      recordEnding: fromPromise<AfterWorkflow, Hold>(async ({ input }) => {
        const written = await input.writer.written();
        return recordWorkflowEnding(services, {
          claimed: input.claimed,
          ending: need(input.ending, 'ending'),
          lease: { token: input.claimed.lease.token, revision: written.revision },
          progress: written.progress,
          lost: written.lost,
          finalWritten: written.finalWritten,
          final: written.final,
          totals: written.totals,
          ...(input.migrated ? { migrated: input.migrated } : {}),
        });
      }),
      conclude: fromPromise<Conclusion, Concluding>(({ input }) => conclude(services, input)),
    },
    guards: {
      noEnding: ({ context }) => context.hold?.ending === undefined,
    },
    actions: {
      /** The task's final event, as the stage that ended it made it, and whether its steps asked nobody. */
      noteFinal: assign((_, p: { final: TroupeEvent | undefined; askedNobody: boolean }) => p),
      /**
       * The message's next keep-alive, on the runner's clock: a third of the ack wait after the last one (a woken
       * task's was kept alive while it slept, maybe most of an interval ago).
       */
      keepAliveLater: raise(
        { type: 'keepAlive' },
        {
          id: 'keepAlive',
          delay: ({ context }) =>
            Math.max(0, context.keptAliveAt + services.keepAliveMs - services.clock.now()),
        },
      ),
      /** Takes hold of the task for its workflow: its span, its facts for the steps, its first revision. */
      hold: assign(({ context, self }) => {
        // Woken from passivation: the hold it had, its writer telling this actor now.
        if (context.hold) {
          context.hold.writer.reattach((event) => self.send(event));
          services.passivation?.ownedBy(context.hold.writer, self);
          return {};
        }
        const claimed = need(context.claimed, 'claimed task');
        const { input, scope, delivery } = claimed;
        const span = startWorkflowSpan(pipeline, scope.traceparent, claimed.firstDelivery, {
          'troupe.task.id': input.taskId,
          'troupe.pipeline': pipeline,
          'troupe.delivery': delivery.deliveryCount,
        });
        const flow = need(context.flow, 'flow');
        const steering = new TaskSteering(claimed.steering);
        const writer = new CheckpointWriter(
          services,
          claimed,
          flow,
          (event) => self.send(event),
          checkpointed(services, claimed, steering),
          steering,
        );
        services.passivation?.ownedBy(writer, self);
        const hold: Hold = {
          claimed,
          flow,
          writer,
          steering,
          facts: {
            taskId: input.taskId,
            firstDelivery: claimed.firstDelivery,
            traceparent: traceparentOf(span, scope.traceparent),
            ...(claimed.version === undefined ? {} : { version: claimed.version }),
          },
          span,
        };
        return { hold };
      }),
      /** Lets go of the task: its span ends with how the workflow's time here ended. */
      closeHold: ({ context }) => {
        const hold = need(context.hold, 'hold');
        hold.writer.close();
        // A migration whose workflow ended otherwise (taken over meanwhile) moved nothing.
        hold.migrated?.(false);
        endWorkflowSpan(hold.span, hold.ending);
      },
      /** Settles how the workflow's time here ends (the first ending wins), and sends the workflow `release`. */
      letGo: enqueueActions(({ context, enqueue }, ending: Exclude<WorkflowEnding, { kind: 'done' }>) => {
        const hold = need(context.hold, 'hold');
        if (hold.ending !== undefined) return;
        enqueue.assign({ hold: { ...hold, ending } });
        // By id: the workflow may have been invoked in this very step, not yet in the actor's last snapshot.
        enqueue.sendTo('workflow', { type: 'release', why: RELEASES[ending.kind] });
      }),
      /** The workflow crashed (threw outside a step): the task fails, saying so. */
      crashed: assign(({ context }, { error }: { error: unknown }) => {
        const hold = need(context.hold, 'hold');
        if (hold.ending !== undefined) return {};
        const ending: WorkflowEnding = {
          kind: 'crashed',
          reason: 'internal',
          message: crashMessage(error),
          error,
        };
        return { hold: { ...hold, ending } };
      }),
    },
  });
}

/**
 * What a task does as each checkpoint is taken: parks or unparks its message and, on the first of a resumed run,
 * announces it. Made apart from the task actor, so the writer keeping it keeps no actor (a passivated task's does not).
 */
function checkpointed(
  services: TaskServices,
  claimed: ClaimedTask,
  steering: TaskSteering,
): ConstructorParameters<typeof CheckpointWriter>[4] {
  return (snapshot, { parked, resumed }) => {
    claimed.delivery.park(parked);
    // Its restored steps have said they are at work: a message owed only to steps gone is dropped.
    if (resumed) steering.restored();
    if (resumed && !services.stopping()) {
      announceResumed(services, claimed, snapshot);
      announceSteering(services, claimed, steering, snapshot);
      steerRestored(services, claimed, steering);
    }
  };
}

/** The setup of a runner's task actors, as the chart uses it. */
export type TaskSetup = ReturnType<typeof taskSetup>;

/** Publishes what the workflow emits, in the task's scope. */
export function publishEmitted(services: TaskServices, claimed: ClaimedTask, emitted: WorkflowEmitted): void {
  const route = {
    ...(emitted.from === undefined ? {} : { from: emitted.from }),
    ...(emitted.to === undefined ? {} : { to: emitted.to }),
  };
  publishSafely(services, claimed.input.taskId, () =>
    services.events.make(emitted.kind, claimed.scope, emitted.data as never, route),
  );
}

/**
 * The pause and the unread told messages a restored task's record holds, published again: a run killed between
 * recording one and publishing its event left EVENTS without it, so a host still running the task's step would not
 * stop for the pause, and the trace and `troupe replay` would lack the message. Each event has the id it had (a
 * pause's is its start, a message's its id), so EVENTS keeps one of each within its duplicate window, and readers
 * dedupe on the id past it. A message's copy is marked `again`: hosts take it for no step's steering.
 */
function announceSteering(
  services: TaskServices,
  claimed: ClaimedTask,
  steering: TaskSteering,
  restored: WorkflowSnapshot,
): void {
  const paused = steering.paused;
  if (paused !== undefined) {
    // Where the task is held now, which may be past where the pause came (a step ended after it).
    publishSafely(services, claimed.input.taskId, () =>
      pausedEvent(services, claimed, placeOf(restored), paused),
    );
  }
  for (const message of steering.told) {
    // Marked `again`: hosts give it to no step. Each step at work is sent again with the messages it still owes in
    // its request's `told`; as live steering the copy would reach a step that read it already, or one sent before.
    publishSafely(services, claimed.input.taskId, () => toldEvent(services, claimed, message, true));
  }
}

/** `task.resumed`, when a task's workflow is restored from its checkpoint. */
function announceResumed(services: TaskServices, claimed: ClaimedTask, restored: WorkflowSnapshot): void {
  publishSafely(services, claimed.input.taskId, () =>
    services.events.make(
      'task.resumed',
      claimed.scope,
      {
        state: activeSteps(restored.value).join('+'),
        round: restored.context.round,
        deliveries: claimed.delivery.deliveryCount,
      },
      { from: 'workflow', to: services.pipeline },
    ),
  );
}
