import {
  emptyUsage,
  errorMessage,
  type StepActivity,
  type TroupeEvent,
  type WorkflowRecord,
} from '@troupe/protocol';
import { isOutage, startWorkflowSpan, type TraceSpan, traceparentOf } from '@troupe/runtime';
import { assign, cancel, enqueueActions, fromPromise, raise, sendTo, setup, stateIn } from 'xstate';
import { type Claim, type ClaimedTask, claim } from '../intake/claim.ts';
import { type Conclusion, conclude } from '../intake/conclude.ts';
import { type GiveUp, giveUp } from '../intake/giveUp.ts';
import { HAND_BACK_DELAY_MS, type TaskDelivery } from '../intake/taskQueue.ts';
import { type Triage, type TriagedTask, triage } from '../intake/triage.ts';
import { activeSteps } from '../workflow/compileFlow.ts';
import type { FlowVersion } from '../workflow/flowVersions.ts';
import { endedTask, type WorkflowEmitted, type WorkflowOutput } from '../workflow/workflowTypes.ts';
import { type Checkpoint, checkpointOf } from './checkpoint.ts';
import { RUN_CONTEXT_ID, type RunContextEvent, type RunFacts, runContextLogic } from './runContext.ts';
import { type FencedWrite, fencedWrite, recordFailure, sameActivity } from './taskRecord.ts';
import { publishSafely, type TaskServices } from './taskServices.ts';
import { type MigrateAnswer, type TaskSignal, taskSignalsLogic } from './taskSignals.ts';
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
}

/** A record write waiting its turn, and what its failure means: a lost checkpoint, or only a lost activity note. */
interface PendingWrite {
  record: WorkflowRecord;
  of: 'checkpoint' | 'activity';
}

/**
 * This delivery's hold on the task while its workflow runs here: the lease and the record revision it last wrote,
 * the progress mark, the writes waiting their turn (in the workflow's order), and how the workflow's time here ends.
 */
interface Hold {
  claimed: ClaimedTask;
  flow: FlowVersion;
  facts: RunFacts;
  span: TraceSpan;
  revision: number;
  progress: number;
  /** The first checkpoint rewrites the one the task resumed from; each later one records a transition. */
  firstCheckpoint: boolean;
  writes: PendingWrite[];
  /** The record as this delivery last wrote it, or is about to. */
  latest?: WorkflowRecord;
  final?: TroupeEvent;
  finalWritten: boolean;
  /** Another coordinator took the task over: nothing more is written. */
  lost: boolean;
  ending?: WorkflowEnding;
  /** The workflow's totals as last seen, for an ending it did not record itself. */
  totals: { usage: WorkflowRecord['usage']; round: number };
  /** Told whether the version a migration let the workflow go for was recorded. */
  migrated?: (recorded: boolean) => void;
}

/** A snapshot of the workflow, and its persisted form (what a checkpoint stores). */
interface TakenSnapshot {
  snapshot: WorkflowSnapshot;
  persisted: unknown;
}

interface TaskContext extends TaskActorInput {
  /** Until claimed: the claim has what the workflow needs of it. */
  triaged?: TriagedTask | undefined;
  claimed?: ClaimedTask;
  /** Why a claimed task cannot run: it fails, saying so. */
  unrunnable?: string;
  flow?: FlowVersion;
  hold?: Hold;
  final?: TroupeEvent;
  settle: 'ack' | 'term';
  /** A stage failed (a fault of the code, or NATS lost for good): the message is left to a redelivery. */
  error?: unknown;
}

/** How a task actor ended, for its handler: with an error when a stage failed. */
export type TaskActorOutput = { error?: unknown };

type TaskEvent =
  | TaskSignal
  | RunContextEvent
  /** A write found another coordinator's lease on the record. */
  | { type: 'lease.lost' }
  /** A checkpoint could not be made or stored: the task fails. */
  | { type: 'checkpoint.poisoned'; error: unknown }
  /** Time to tell the server again that the task's message is being worked on. */
  | { type: 'keepAlive' };

/** What a stage's result needs of the context; one mistake here is a bug of ours, so it says so. */
function need<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new Error(`task actor: no ${what} at this stage (a bug in taskMachine.ts)`);
  return value;
}

/**
 * One delivery of a task message, from its arrival to how the message is settled, as an actor tree: the task actor
 * triages and claims the task, then invokes its workflow as a child (restored from the task's checkpoint when it
 * has one), writes a checkpoint of each of the workflow's snapshots under the delivery's lease, and concludes.
 *
 * ```
 * triaging --> claiming --> running --> concluding --> acked | terminated
 *    |  \          |  \         |             \
 *    |   givingUp -+   failing -+--------------+--> handedBack (nak) | left (another run owns it)
 *    +--> acked (a duplicate) | refused (not a task)
 * ```
 *
 * While the workflow runs, cancels, migrations, a parent's ending and the process's stop arrive as events from the
 * runner's {@link TaskSignals} (see `taskSignals.ts`); a write that finds another coordinator's lease ends it
 * `takenOver`. Every ending of the task goes through `concluding`, once its record holds the final status and event.
 * The message is settled only in the final states, each doing one thing. Built once per pipeline runner.
 */
export function createTaskMachine(services: TaskServices) {
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
      signals: taskSignalsLogic,
      runContext: runContextLogic,
      write: fromPromise<
        FencedWrite,
        { taskId: string; token: string; revision: number; record: WorkflowRecord }
      >(({ input }) => fencedWrite(services, input.taskId, input, input.record)),
      recordEnding: fromPromise<AfterWorkflow, Hold>(({ input }) =>
        recordWorkflowEnding(services, {
          claimed: input.claimed,
          ending: need(input.ending, 'ending'),
          lease: { token: input.claimed.lease.token, revision: input.revision },
          progress: input.progress,
          lost: input.lost,
          finalWritten: input.finalWritten,
          final: input.final,
          totals: input.totals,
          ...(input.migrated ? { migrated: input.migrated } : {}),
        }),
      ),
      conclude: fromPromise<Conclusion, { delivery: TaskDelivery; final: TroupeEvent }>(({ input }) =>
        conclude(services, input),
      ),
    },
    guards: {
      noEnding: ({ context }) => context.hold?.ending === undefined,
      hasWrites: ({ context }) => (context.hold?.writes.length ?? 0) > 0,
    },
    actions: {
      /** The message's next keep-alive, on the runner's clock: a third of the ack wait from now. */
      keepAliveLater: raise({ type: 'keepAlive' }, { id: 'keepAlive', delay: services.keepAliveMs }),
      /** Takes hold of the task for its workflow: its span, its facts for the steps, its first revision. */
      hold: assign(({ context }) => {
        const claimed = need(context.claimed, 'claimed task');
        const { input, scope, delivery } = claimed;
        const span = startWorkflowSpan(pipeline, scope.traceparent, claimed.firstDelivery, {
          'troupe.task.id': input.taskId,
          'troupe.pipeline': pipeline,
          'troupe.delivery': delivery.deliveryCount,
        });
        const hold: Hold = {
          claimed,
          flow: need(context.flow, 'flow'),
          facts: {
            taskId: input.taskId,
            firstDelivery: claimed.firstDelivery,
            traceparent: traceparentOf(span, scope.traceparent),
            ...(claimed.version === undefined ? {} : { version: claimed.version }),
          },
          span,
          revision: claimed.lease.revision,
          progress: claimed.lease.delivery.progress,
          firstCheckpoint: true,
          writes: [],
          finalWritten: false,
          lost: false,
          totals: { usage: emptyUsage(), round: 1 },
        };
        return { hold };
      }),
      /** Lets go of the task: its span ends with how the workflow's time here ended. */
      closeHold: ({ context }) => {
        const hold = need(context.hold, 'hold');
        // A migration whose workflow ended otherwise (taken over meanwhile) moved nothing.
        hold.migrated?.(false);
        endWorkflowSpan(hold.span, hold.ending);
      },
      /** Queues the record of the workflow's snapshot, fenced by the lease; parks or unparks the task. */
      checkpoint: enqueueActions(({ context, enqueue, self }, taken: TakenSnapshot | 'last') => {
        const hold = need(context.hold, 'hold');
        const workflow = self.getSnapshot().children.workflow;
        // A done workflow sends no snapshot of its own: its last one, with the task's ending, is read from it.
        const { snapshot, persisted } =
          taken === 'last'
            ? {
                snapshot: need(workflow, 'workflow').getSnapshot(),
                persisted: need(workflow, 'workflow').getPersistedSnapshot(),
              }
            : taken;
        // Let go by an ending from outside (shutdown, takeover, …): the last checkpoint stands, for the next run.
        if (snapshot.status === 'done' && !endedTask(snapshot.output)) return;
        if (hold.lost) return;
        const progress = hold.firstCheckpoint ? hold.progress : hold.progress + 1;
        let made: Checkpoint;
        try {
          made = checkpointOf(
            services,
            hold.claimed,
            hold.flow,
            { snapshot, persisted },
            {
              progress,
              latest: hold.latest,
              final: hold.final,
            },
          );
        } catch (error) {
          // A snapshot that cannot be made fails this task (logged as it ends); it never reaches the process.
          enqueue.raise({ type: 'checkpoint.poisoned', error });
          return;
        }
        enqueue(() => hold.claimed.delivery.park(made.parked));
        if (hold.firstCheckpoint && hold.claimed.snapshot !== undefined && !services.stopping())
          enqueue(() => announceResumed(hold, snapshot));
        enqueue.assign({
          hold: {
            ...hold,
            progress,
            firstCheckpoint: false,
            latest: made.record,
            ...(made.final ? { final: made.final } : {}),
            totals: { usage: snapshot.context.usage, round: snapshot.context.round },
            writes: [...hold.writes, { record: made.record, of: 'checkpoint' }],
          },
        });
      }),
      /** Settles how the workflow's time here ends (the first ending wins), and sends the workflow `release`. */
      letGo: enqueueActions(({ context, enqueue }, ending: Exclude<WorkflowEnding, { kind: 'done' }>) => {
        const hold = need(context.hold, 'hold');
        if (hold.ending !== undefined) return;
        enqueue.assign({ hold: { ...hold, ending } });
        // By id: the workflow may have been invoked in this very step, not yet in the actor's last snapshot.
        enqueue.sendTo('workflow', { type: 'release', why: RELEASES[ending.kind] });
      }),
      /** What the current step is doing: parks the task while it waits on a person or a model, and records it. */
      noteActivity: assign(({ context }, activity: StepActivity) => {
        const hold = need(context.hold, 'hold');
        // Waiting on a person or a slow model, the task does no work: its working slot goes to another task meanwhile.
        hold.claimed.delivery.park(activity.kind === 'person' || activity.kind === 'model');
        const latest = hold.latest;
        // The checkpoint that entered the step already says its agent works on it: the first heartbeat adds nothing.
        if (hold.lost || latest?.status !== 'running' || sameActivity(latest.activity, activity)) return {};
        const record: WorkflowRecord = {
          ...latest,
          activity,
          updatedAt: new Date(clock.now()).toISOString(),
        };
        return {
          hold: { ...hold, latest: record, writes: [...hold.writes, { record, of: 'activity' as const }] },
        };
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
  }).createMachine({
    id: 'task',
    context: ({ input }) => ({ ...input, settle: 'ack' }),
    initial: 'triaging',
    // Answered in every state, so a sender never waits on a task that has moved on.
    on: {
      cancel: { actions: ({ event }) => event.answer(false) },
      migrate: {
        actions: ({ event, context }) =>
          event.answer(`task ${context.claimed?.input.taskId ?? 'here'} is ending already`),
      },
    },
    states: {
      triaging: {
        invoke: {
          src: 'triage',
          input: ({ context }) => context.delivery,
          onDone: [
            {
              guard: ({ event }) => event.output.next === 'claim',
              target: 'claiming',
              actions: assign({ triaged: ({ event }) => triagedOf(event.output) }),
            },
            {
              guard: ({ event }) => event.output.next === 'giveUp',
              target: 'givingUp',
              actions: assign({ triaged: ({ event }) => triagedOf(event.output) }),
            },
            {
              guard: ({ event }) => event.output.next === 'conclude',
              target: 'concluding',
              actions: assign({ final: ({ event }) => finalOf(event.output) }),
            },
            { guard: ({ event }) => event.output.next === 'ack', target: 'acked' },
            { guard: ({ event }) => event.output.next === 'handBack', target: 'handedBack' },
            { guard: ({ event }) => event.output.next === 'refuse', target: 'refused' },
            { target: 'left' },
          ],
          onError: 'failed',
        },
      },
      givingUp: {
        invoke: {
          src: 'giveUp',
          input: ({ context }) => need(context.triaged, 'triaged task'),
          onDone: [
            {
              guard: ({ event }) => event.output.next === 'conclude',
              target: 'concluding',
              actions: assign({ final: ({ event }) => finalOf(event.output), settle: 'term' }),
            },
            { target: 'handedBack' },
          ],
          onError: 'failed',
        },
      },
      claiming: {
        invoke: {
          src: 'claim',
          input: ({ context }) => need(context.triaged, 'triaged task'),
          onDone: [
            {
              guard: ({ event }) => event.output.next === 'run',
              target: 'running',
              actions: assign(({ event }) =>
                event.output.next === 'run'
                  ? { claimed: event.output.claimed, flow: event.output.flow, triaged: undefined }
                  : {},
              ),
            },
            {
              guard: ({ event }) => event.output.next === 'fail',
              target: 'failing',
              actions: assign(({ event }) =>
                event.output.next === 'fail'
                  ? { claimed: event.output.claimed, unrunnable: event.output.message }
                  : {},
              ),
            },
            { guard: ({ event }) => event.output.next === 'ack', target: 'acked' },
            { target: 'handedBack' },
          ],
          onError: 'failed',
        },
      },
      /** Claimed, but it cannot run: its version is gone, its stored input unreadable, or its checkpoint unfit. */
      failing: {
        invoke: {
          src: 'fail',
          input: ({ context }) => ({
            claimed: need(context.claimed, 'claimed task'),
            message: need(context.unrunnable, 'reason'),
          }),
          onDone: [
            {
              guard: ({ event }) => event.output.next === 'conclude',
              target: '#task.concluding',
              actions: assign({ final: ({ event }) => finalOf(event.output) }),
            },
            { guard: ({ event }) => event.output.next === 'handBack', target: '#task.handedBack' },
            { target: '#task.left' },
          ],
          onError: 'failed',
        },
      },
      running: {
        entry: ['hold', 'keepAliveLater'],
        exit: [cancel('keepAlive'), 'closeHold'],
        invoke: [
          {
            src: 'signals',
            input: ({ context }) => {
              const { input, version } = need(context.claimed, 'claimed task');
              return {
                signals: services.signals,
                taskId: input.taskId,
                ...(input.parent ? { parent: input.parent.taskId } : {}),
                ...(version === undefined ? {} : { version }),
              };
            },
          },
          {
            src: 'runContext',
            systemId: RUN_CONTEXT_ID,
            input: ({ context }) => need(context.hold, 'hold').facts,
          },
        ],
        on: {
          activity: { actions: { type: 'noteActivity', params: ({ event }) => event.activity } },
          keepAlive: { actions: [({ context }) => context.delivery.working(), 'keepAliveLater'] },
        },
        initial: 'live',
        states: {
          live: {
            type: 'parallel',
            onDone: 'recording',
            states: {
              workflow: {
                initial: 'working',
                states: {
                  working: {
                    // A sub-task whose parent ended while it waited to run here ends too (unless this process stops).
                    entry: enqueueActions(({ context, enqueue }) => {
                      const reason = context.hold?.claimed.orphaned;
                      if (reason !== undefined && !services.stopping())
                        enqueue.sendTo('workflow', { type: 'cancel', reason });
                    }),
                    invoke: [
                      {
                        id: 'workflow',
                        src: 'workflow',
                        input: ({ context }) => {
                          const { claimed, flow } = need(context.hold, 'hold');
                          return {
                            machine: flow.machine,
                            input: claimed.input,
                            ...(claimed.snapshot === undefined ? {} : { saved: claimed.snapshot }),
                            onEmitted: (emitted: WorkflowEmitted) => publishEmitted(claimed, emitted),
                          };
                        },
                        onSnapshot: {
                          actions: {
                            type: 'checkpoint',
                            params: ({ event }) => ({
                              snapshot: event.snapshot,
                              persisted: workflowChildLogic.getPersistedSnapshot(event.snapshot),
                            }),
                          },
                        },
                        // A done workflow sends no snapshot of its own: its last one, with the task's ending, is read here.
                        onDone: {
                          target: 'ended',
                          actions: [
                            { type: 'checkpoint', params: 'last' },
                            assign(({ context, event }) =>
                              doneEnding(need(context.hold, 'hold'), event.output),
                            ),
                          ],
                        },
                        onError: {
                          target: 'ended',
                          actions: { type: 'crashed', params: ({ event }) => ({ error: event.error }) },
                        },
                      },
                    ],
                    // The stop began after the claim, before this actor listened for it: let go at once.
                    always: {
                      guard: ({ context }) => services.stopping() && context.hold?.ending === undefined,
                      actions: { type: 'letGo', params: { kind: 'stopped' } },
                    },
                    on: {
                      cancel: {
                        guard: 'noEnding',
                        actions: [
                          sendTo('workflow', ({ event }) => ({
                            type: 'cancel' as const,
                            ...(event.reason ? { reason: event.reason } : {}),
                          })),
                          ({ event }) => event.answer(true),
                        ],
                      },
                      parentEnded: {
                        guard: 'noEnding',
                        actions: [
                          sendTo('workflow', ({ event }) => ({
                            type: 'cancel' as const,
                            reason: event.reason,
                          })),
                          ({ context, event }) => {
                            const taskId = context.claimed?.input.taskId;
                            logger.info({ taskId }, `task ${taskId} cancelled: ${event.reason}`);
                          },
                        ],
                      },
                      migrate: {
                        guard: 'noEnding',
                        actions: enqueueActions(({ context, event, enqueue, self }) => {
                          const hold = need(context.hold, 'hold');
                          const workflow = need(self.getSnapshot().children.workflow, 'workflow');
                          // Checked and let go in one turn: no step reply can move the workflow in between.
                          const why =
                            workflow.getSnapshot().status === 'active'
                              ? event.problem(workflow.getPersistedSnapshot(), hold.claimed.input)
                              : `task ${hold.claimed.input.taskId} is ending already`;
                          if (why !== undefined) {
                            enqueue(() => event.answer(why));
                            return;
                          }
                          let migrated: (recorded: boolean) => void = () => {};
                          const recorded = new Promise<boolean>((resolve) => {
                            migrated = resolve;
                          });
                          const answer: MigrateAnswer = { recorded };
                          enqueue.assign({
                            hold: { ...hold, migrated, ending: { kind: 'migrated', version: event.version } },
                          });
                          enqueue.sendTo(workflow, { type: 'release', why: RELEASES.migrated });
                          enqueue(() => event.answer(answer));
                        }),
                      },
                      stop: { guard: 'noEnding', actions: { type: 'letGo', params: { kind: 'stopped' } } },
                      'lease.lost': {
                        guard: 'noEnding',
                        actions: { type: 'letGo', params: { kind: 'takenOver' } },
                      },
                      'checkpoint.poisoned': {
                        guard: 'noEnding',
                        actions: {
                          type: 'letGo',
                          params: ({ event, context }) => ({
                            kind: 'crashed',
                            reason: 'checkpoint_failed',
                            message: `cannot checkpoint task ${context.claimed?.input.taskId}: ${errorMessage(event.error)}`,
                            error: event.error,
                          }),
                        },
                      },
                    },
                  },
                  ended: { type: 'final' },
                },
              },
              checkpoints: {
                initial: 'idle',
                states: {
                  idle: {
                    always: [
                      { guard: 'hasWrites', target: 'writing' },
                      { guard: stateIn('#task.running.live.workflow.ended'), target: 'written' },
                    ],
                  },
                  writing: {
                    invoke: {
                      src: 'write',
                      input: ({ context }) => {
                        const hold = need(context.hold, 'hold');
                        const next = need(hold.writes[0], 'write');
                        return {
                          taskId: hold.claimed.input.taskId,
                          token: hold.claimed.lease.token,
                          revision: hold.revision,
                          record: next.record,
                        };
                      },
                      onDone: [
                        {
                          guard: ({ event }) => event.output.written,
                          target: 'idle',
                          actions: assign(({ context, event }) => {
                            const hold = need(context.hold, 'hold');
                            const [done, ...rest] = hold.writes;
                            return {
                              hold: {
                                ...hold,
                                revision: event.output.written ? event.output.revision : hold.revision,
                                finalWritten: hold.finalWritten || done?.record.final !== undefined,
                                writes: rest,
                              },
                            };
                          }),
                        },
                        {
                          target: 'idle',
                          actions: [
                            assign(({ context }) => ({
                              hold: { ...need(context.hold, 'hold'), lost: true, writes: [] },
                            })),
                            raise({ type: 'lease.lost' }),
                          ],
                        },
                      ],
                      onError: {
                        target: 'idle',
                        actions: enqueueActions(({ context, event, enqueue }) => {
                          const hold = need(context.hold, 'hold');
                          const taskId = hold.claimed.input.taskId;
                          const [failed, ...rest] = hold.writes;
                          enqueue.assign({ hold: { ...hold, writes: rest } });
                          if (failed?.of === 'activity')
                            enqueue(() =>
                              logger.warn(
                                { err: event.error, taskId },
                                'cannot record what the step is doing',
                              ),
                            );
                          // NATS stayed out of reach: the task goes on, and a crash now would resume it from an older checkpoint.
                          else if (isOutage(event.error))
                            enqueue(() =>
                              logger.error({ err: event.error, taskId }, 'cannot checkpoint workflow'),
                            );
                          else enqueue.raise({ type: 'checkpoint.poisoned', error: event.error });
                        }),
                      },
                    },
                  },
                  written: { type: 'final' },
                },
              },
            },
          },
          /** The workflow's time here has ended and its checkpoints are written: its ending is recorded. */
          recording: {
            invoke: {
              src: 'recordEnding',
              input: ({ context }) => need(context.hold, 'hold'),
              onDone: [
                {
                  guard: ({ event }) => event.output.next === 'conclude',
                  target: '#task.concluding',
                  actions: assign({ final: ({ event }) => finalOf(event.output) }),
                },
                { guard: ({ event }) => event.output.next === 'handBack', target: '#task.handedBack' },
                { target: '#task.left' },
              ],
              onError: '#task.failed',
            },
          },
        },
      },
      concluding: {
        invoke: {
          src: 'conclude',
          input: ({ context }) => ({ delivery: context.delivery, final: need(context.final, 'final event') }),
          onDone: [
            { guard: ({ event }) => event.output === 'left', target: 'left' },
            { guard: ({ context }) => context.settle === 'term', target: 'terminated' },
            { target: 'acked' },
          ],
          onError: 'failed',
        },
      },
      acked: { type: 'final', entry: ({ context }) => context.delivery.ack() },
      terminated: { type: 'final', entry: ({ context }) => context.delivery.term() },
      refused: { type: 'final', entry: ({ context }) => context.delivery.term() },
      handedBack: { type: 'final', entry: ({ context }) => context.delivery.nak(HAND_BACK_DELAY_MS) },
      left: { type: 'final' },
      failed: {
        type: 'final',
        entry: assign({ error: ({ event }) => ('error' in event ? event.error : undefined) }),
      },
    },
    output: ({ context }) => (context.error === undefined ? {} : { error: context.error }),
  });

  /** Publishes what the workflow emits, in the task's scope. */
  function publishEmitted(claimed: ClaimedTask, emitted: WorkflowEmitted): void {
    const route = {
      ...(emitted.from === undefined ? {} : { from: emitted.from }),
      ...(emitted.to === undefined ? {} : { to: emitted.to }),
    };
    publishSafely(services, claimed.input.taskId, () =>
      services.events.make(emitted.kind, claimed.scope, emitted.data as never, route),
    );
  }

  /** `task.resumed`, when a task's workflow is restored from its checkpoint. */
  function announceResumed(hold: Hold, restored: WorkflowSnapshot): void {
    const { claimed } = hold;
    publishSafely(services, claimed.input.taskId, () =>
      services.events.make(
        'task.resumed',
        claimed.scope,
        {
          state: activeSteps(restored.value).join('+'),
          round: restored.context.round,
          deliveries: claimed.delivery.deliveryCount,
        },
        { from: 'workflow', to: pipeline },
      ),
    );
  }
}

/** The workflow ended the task (or was let go, which an ending from outside already says). */
function doneEnding(hold: Hold, output: WorkflowOutput): Partial<TaskContext> {
  if (hold.ending !== undefined || !endedTask(output)) return {};
  return { hold: { ...hold, ending: { kind: 'done', output } } };
}

function triagedOf(triaged: Triage): TriagedTask | undefined {
  return triaged.next === 'claim' || triaged.next === 'giveUp' ? triaged.task : undefined;
}

function finalOf(result: Triage | GiveUp | AfterWorkflow): TroupeEvent | undefined {
  return result.next === 'conclude' ? result.final : undefined;
}
