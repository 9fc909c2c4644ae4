import { errorMessage, type TroupeEvent } from '@troupe/protocol';
import { isOutage } from '@troupe/runtime';
import { assign, cancel, enqueueActions, raise, sendTo, stateIn } from 'xstate';
import type { GiveUp } from '../intake/giveUp.ts';
import { HAND_BACK_DELAY_MS } from '../intake/taskQueue.ts';
import type { Triage, TriagedTask } from '../intake/triage.ts';
import { endedTask, type WorkflowEmitted, type WorkflowOutput } from '../workflow/workflowTypes.ts';
import { RUN_CONTEXT_ID } from './runContext.ts';
import type { TaskServices } from './taskServices.ts';
import { type Hold, need, publishEmitted, type TaskContext, taskSetup } from './taskSetup.ts';
import type { MigrateAnswer } from './taskSignals.ts';
import { workflowChildLogic } from './workflowChild.ts';
import { type AfterWorkflow, RELEASES } from './workflowEnding.ts';

export type { TaskActorInput, TaskActorOutput } from './taskSetup.ts';

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
  const { logger } = services;
  return taskSetup(services).createMachine({
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
                            onEmitted: (emitted: WorkflowEmitted) =>
                              publishEmitted(services, claimed, emitted),
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
