import type { StepActivity, TroupeEvent } from '@troupe/protocol';
import { assign, cancel } from 'xstate';
import type { GiveUp } from '../intake/giveUp.ts';
import { HAND_BACK_DELAY_MS } from '../intake/taskQueue.ts';
import type { Triage, TriagedTask } from '../intake/triage.ts';
import { RUN_CONTEXT_ID } from './runContext.ts';
import { endingRefusal } from './steerTask.ts';
import type { TaskServices } from './taskServices.ts';
import { need, taskSetup } from './taskSetup.ts';
import type { AfterWorkflow } from './workflowEnding.ts';
import { workflowRegion } from './workflowRegions.ts';

export type { TaskActorInput, TaskActorOutput } from './taskSetup.ts';

/**
 * One delivery of a task message, from its arrival to how the message is settled, as an actor tree: the task actor
 * triages and claims the task, then invokes its workflow as a child (restored from the task's checkpoint when it
 * has one), whose checkpoint writer (`checkpointWriter.ts`) hears each of its snapshots and writes their records
 * under the delivery's lease, and concludes.
 *
 * ```
 * triaging --> claiming --> running --> concluding --> acked | terminated
 *    |  \          |  \         |             \
 *    |   givingUp -+   failing -+--------------+--> handedBack (nak) | left (another run owns it)
 *    +--> acked (a duplicate) | refused (not a task)
 * ```
 *
 * While the workflow runs, cancels, migrations, pauses, resumes, told messages, a parent's ending and the process's
 * stop arrive as events from the runner's {@link TaskSignals} (see `taskSignals.ts`), heard through the run context
 * (`runContext.ts`); a pause, resume or tell is carried out by `steerTask.ts`, recorded before it is answered. The
 * writer tells it only of a write that finds another coordinator's lease (it ends `takenOver`) or a checkpoint that
 * cannot be stored. Every ending of the task goes through `concluding`, once its record holds the final status and event.
 * The message is settled only in the final states, each doing one thing. Built once per pipeline runner.
 */
export function createTaskMachine(services: TaskServices) {
  const parts = taskSetup(services);
  return parts.createMachine({
    id: 'task',
    // Made as the message arrives (the queue hands it over at once): the server's ack wait runs from about then.
    context: ({ input: { delivery, woken } }) =>
      woken
        ? {
            delivery,
            claimed: woken.claimed,
            flow: woken.flow,
            hold: woken.hold,
            settle: 'ack',
            keptAliveAt: woken.keptAliveAt,
          }
        : { delivery, settle: 'ack', keptAliveAt: services.clock.now() },
    // A passivated task woken goes on running where it was; every other delivery is triaged.
    initial: 'arriving',
    // Answered in every state, so a sender never waits on a task that has moved on.
    on: {
      cancel: { actions: ({ event }) => event.answer(false) },
      migrate: {
        actions: ({ event, context }) =>
          event.answer(`task ${context.claimed?.input.taskId ?? 'here'} is ending already`),
      },
      pause: { actions: ({ event, context }) => event.answer(endingRefusal(context.claimed?.input.taskId)) },
      resume: { actions: ({ event, context }) => event.answer(endingRefusal(context.claimed?.input.taskId)) },
      tell: { actions: ({ event, context }) => event.answer(endingRefusal(context.claimed?.input.taskId)) },
    },
    states: {
      arriving: {
        always: [
          { guard: ({ context }) => context.hold !== undefined, target: 'running' },
          { target: 'triaging' },
        ],
      },
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
          onDone: afterWorkflow(),
          onError: 'failed',
        },
      },
      running: {
        entry: ['hold', 'keepAliveLater'],
        exit: [cancel('keepAlive'), 'closeHold'],
        // The run's facts for its steps, their activity reports, and the task's signals, all through one actor.
        invoke: {
          src: 'runContext',
          systemId: RUN_CONTEXT_ID,
          input: ({ context }) => {
            const { claimed, facts, writer, steering } = need(context.hold, 'hold');
            const parent = claimed.input.parent?.taskId;
            return {
              ...facts,
              signals: { from: services.signals, ...(parent ? { parent } : {}) },
              onActivity: (activity: StepActivity) => writer.activity(activity),
              steering,
              checkpoint: writer,
            };
          },
        },
        on: {
          // Thrown here, so a fault of ours in the writer fails the task actor as one in its own actions does.
          'writer.failed': {
            actions: ({ event }) => {
              throw event.error;
            },
          },
          keepAlive: {
            actions: [
              ({ context }) => context.delivery.working(),
              assign({ keptAliveAt: () => services.clock.now() }),
              'keepAliveLater',
            ],
          },
        },
        initial: 'live',
        states: {
          live: { ...workflowRegion(parts, services), onDone: 'recording' },
          /** The workflow's time here has ended: once its checkpoints are written, its ending is recorded. */
          recording: {
            invoke: {
              src: 'recordEnding',
              input: ({ context }) => need(context.hold, 'hold'),
              onDone: afterWorkflow(),
              onError: '#task.failed',
            },
          },
        },
      },
      concluding: {
        invoke: {
          src: 'conclude',
          input: ({ context }) => ({
            delivery: context.delivery,
            final: need(context.final, 'final event'),
            keptAliveAt: context.keptAliveAt,
            ...(context.askedNobody ? { askedNobody: true as const } : {}),
          }),
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

/** A stage's result that says what the delivery does once the workflow's time here is over (or never began). */
type AfterWorkflowDone = { event: { output: AfterWorkflow } };

/**
 * Where `failing` and `recording` go, by what their stage returned: conclude with the final event, hand the task
 * back, or leave it to the run that owns it now. One definition for both; the guards and the action's params are typed by
 * the stage's output alone, so they fit either state's done event.
 */
function afterWorkflow() {
  return [
    {
      guard: ({ event }: AfterWorkflowDone) => event.output.next === 'conclude',
      target: '#task.concluding',
      actions: {
        type: 'noteFinal' as const,
        params: ({ event }: AfterWorkflowDone) => ({
          final: finalOf(event.output),
          askedNobody: event.output.next === 'conclude' && event.output.askedNobody === true,
        }),
      },
    },
    { guard: ({ event }: AfterWorkflowDone) => event.output.next === 'handBack', target: '#task.handedBack' },
    { target: '#task.left' },
  ];
}

function triagedOf(triaged: Triage): TriagedTask | undefined {
  return triaged.next === 'claim' || triaged.next === 'giveUp' ? triaged.task : undefined;
}

function finalOf(result: Triage | GiveUp | AfterWorkflow): TroupeEvent | undefined {
  return result.next === 'conclude' ? result.final : undefined;
}
