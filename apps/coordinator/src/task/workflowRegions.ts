import { errorMessage } from '@troupe/protocol';
import { assign, enqueueActions, sendTo } from 'xstate';
import { endedTask, type WorkflowEmitted, type WorkflowOutput } from '../workflow/workflowTypes.ts';
import { placeOf, type SteerSignal, steerTask } from './steerTask.ts';
import type { TaskServices } from './taskServices.ts';
import { type Hold, need, publishEmitted, type TaskContext, type TaskSetup } from './taskSetup.ts';
import type { MigrateAnswer } from './taskSignals.ts';
import type { WorkflowSnapshot } from './workflowChild.ts';
import { RELEASES } from './workflowEnding.ts';

/**
 * The task's workflow while it runs here: invoked as the task actor's child (restored from the checkpoint when there
 * is one), each snapshot a checkpoint, and the signals that reach it (cancel, a parent's end, migrate, stop, a lost
 * lease, a checkpoint that cannot be made), until it ends or is let go.
 */
export function workflowRegion(parts: TaskSetup, services: TaskServices) {
  const { logger } = services;
  return parts.createStateConfig({
    initial: 'working',
    states: {
      working: {
        entry: enqueueActions(({ context, enqueue }) => {
          // The stop began after the claim looked, before the run context listened for it: let go at once. Checked
          // once, here: the run context starts listening in this same turn, so every later stop reaches it as `stop`.
          if (services.stopping()) {
            enqueue({ type: 'letGo', params: { kind: 'stopped' } });
            return;
          }
          // A sub-task whose parent ended while it waited to run here ends too (a woken one was told when it ran first).
          const reason = context.hold?.restored === undefined ? context.hold?.claimed.orphaned : undefined;
          if (reason !== undefined) enqueue.sendTo('workflow', { type: 'cancel', reason });
        }),
        invoke: [
          {
            id: 'workflow',
            src: 'workflow',
            input: ({ context }) => {
              const hold = need(context.hold, 'hold');
              const { claimed, flow, writer, restored } = hold;
              const saved = restored ?? claimed.snapshot;
              // Read once, as the workflow starts: the woken task does not keep the snapshot through its run. Set
              // rather than deleted, which would put the hold in V8's slow (dictionary) mode for the rest of its run.
              hold.restored = undefined;
              return {
                machine: flow.machine,
                input: claimed.input,
                ...(saved === undefined ? {} : { saved }),
                onEmitted: (emitted: WorkflowEmitted) => publishEmitted(services, claimed, emitted),
                // Each snapshot, the done one too, reaches the writer before the task actor hears the workflow is done.
                onSnapshot: (snapshot: WorkflowSnapshot) => writer.snapshot(snapshot),
              };
            },
            onDone: {
              target: 'ended',
              actions: assign(({ context, event }) => doneEnding(need(context.hold, 'hold'), event.output)),
            },
            onError: {
              target: 'ended',
              actions: { type: 'crashed', params: ({ event }) => ({ error: event.error }) },
            },
          },
        ],
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
                  ? migrationProblem(() => event.problem(workflow.getPersistedSnapshot(), hold.claimed.input))
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
          pause: {
            guard: 'noEnding',
            actions: ({ context, event, self }) =>
              steer(services, context, self.getSnapshot().children.workflow, event),
          },
          resume: {
            guard: 'noEnding',
            actions: ({ context, event, self }) =>
              steer(services, context, self.getSnapshot().children.workflow, event),
          },
          tell: {
            guard: 'noEnding',
            actions: ({ context, event, self }) =>
              steer(services, context, self.getSnapshot().children.workflow, event),
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
  });
}

/** A pause, resume or tell, carried out on the task where its workflow stands now (see `steerTask.ts`). */
function steer(
  services: TaskServices,
  context: TaskContext,
  workflow: { getSnapshot(): WorkflowSnapshot } | undefined,
  signal: SteerSignal,
): void {
  steerTask(services, need(context.hold, 'hold'), placeOf(need(workflow, 'workflow').getSnapshot()), signal);
}

/** The workflow ended the task (or was let go, which an ending from outside already says). */
function doneEnding(hold: Hold, output: WorkflowOutput): Partial<TaskContext> {
  if (hold.ending !== undefined || !endedTask(output)) return {};
  return { hold: { ...hold, ending: { kind: 'done', output } } };
}

/** What stands against a migration; a check that throws is a refusal saying why, never a fault of the task actor. */
function migrationProblem(check: () => string | undefined): string | undefined {
  try {
    return check();
  } catch (error) {
    return `its checkpoint cannot be checked against that version (${errorMessage(error)})`;
  }
}
