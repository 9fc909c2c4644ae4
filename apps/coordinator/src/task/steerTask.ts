import type { ControlRefusal, ErrorReply, ToldMessage } from '@troupe/protocol';
import type { RequestsHold } from '@troupe/runtime';
import { activeSteps } from '../workflow/compileFlow.ts';
import { parentBy } from '../workflow/subTaskSteering.ts';
import { isoNow, publishSafely, type TaskServices } from './taskServices.ts';
import type { Hold } from './taskSetup.ts';
import type { SteerAnswer, TaskSignal } from './taskSignals.ts';
import type { TaskSteering } from './taskSteering.ts';

/** A steering signal: a pause, a resume or a tell. */
export type SteerSignal = Extract<TaskSignal, { type: 'pause' | 'resume' | 'tell' }>;

/** Where the workflow stands as a steering event says it: its steps, and its round. */
export interface WorkflowPlace {
  state: string;
  round: number;
}

/** Where a workflow snapshot stands, for `task.paused` and `task.resumed`. */
export function placeOf(snapshot: { value: unknown; context: { round: number } }): WorkflowPlace {
  return { state: activeSteps(snapshot.value).join('+'), round: snapshot.context.round };
}

/**
 * Carries out a pause, a resume or a tell on the task held here: its steering changes at once (a pause holds every
 * step not sent yet, a message goes with every step sent from now on), its record is written with it, and only then
 * is its event published and the sender answered. A record that cannot be written (the task was taken over, or NATS
 * stayed out of reach) undoes the change, and the sender hears that nothing was changed. A tell with a key the task
 * has taken already is answered with that message's id, and tells nothing new.
 */
export function steerTask(
  services: Pick<
    TaskServices,
    'clock' | 'logger' | 'events' | 'bus' | 'pipeline' | 'holdRequests' | 'store' | 'signals'
  >,
  hold: Hold,
  place: WorkflowPlace,
  signal: SteerSignal,
): void {
  const { clock, logger } = services;
  const { steering, writer, claimed } = hold;
  const taskId = claimed.input.taskId;
  const route = { from: 'workflow', to: services.pipeline };
  const publish = (make: () => ReturnType<TaskServices['events']['make']>) =>
    publishSafely(services, taskId, make);
  const unrecorded = (what: string): ErrorReply =>
    writer.ending
      ? endingRefusal(taskId)
      : refusal(
          'not_running',
          `the ${what} of task ${taskId} could not be recorded (NATS out of reach, or another coordinator took the task over); nothing was changed, try again`,
        );

  if (signal.type === 'pause') {
    const { by, reason } = signal;
    const parentId = claimed.input.parent?.taskId;
    const parentPause = parentId === undefined ? undefined : parentBy(parentId);
    // A person pausing a sub-task its parent holds makes the pause theirs: the parent's resume lets go of none of it.
    if (steering.paused?.by === parentPause && by !== parentPause && parentPause !== undefined) {
      const before = steering.retakePause(by, reason);
      const since = steering.paused?.since ?? clock.now();
      void writer.steered().then((written) => {
        if (!written) {
          if (before) steering.restorePause(before);
          signal.answer(unrecorded('pause'));
          // The parent's resume that came meanwhile found the pause the person's and let go of none: as restored.
          if (parentId !== undefined) void steerWithParent(services, taskId, parentId, steering);
          return;
        }
        logger.info(
          { taskId, by },
          `task ${taskId}, held with its parent, is paused by ${by ?? 'a person'} now`,
        );
        publish(() => pausedEvent(services, claimed, place, { since, by, reason }));
        signal.answer({ ok: true, taskId, outcome: 'paused' });
      });
      return;
    }
    if (!steering.pause(clock.now(), by, reason)) {
      const since = steering.paused ? new Date(steering.paused.since).toISOString() : 'before';
      signal.answer(
        refusal('already_paused', `task ${taskId} is paused already (since ${since}); nothing was changed`),
      );
      return;
    }
    // Taken now: a resume may clear the pause before its record is written, and the event still says when it began.
    const since = steering.paused?.since ?? clock.now();
    void writer.steered().then((written) => {
      if (!written) {
        steering.undoPause();
        signal.answer(unrecorded('pause'));
        return;
      }
      logger.info({ taskId, by }, `task ${taskId} paused at ${place.state}`);
      publish(() => pausedEvent(services, claimed, place, { since, by, reason }));
      signal.answer({ ok: true, taskId, outcome: 'paused' });
      holdRequests(services, steering, taskId, { hold: true, since });
    });
    return;
  }

  if (signal.type === 'resume') {
    // A parent's resume lets go of the pause it forwarded, not of one a person made of the sub-task directly.
    const parentId = claimed.input.parent?.taskId;
    const pausedBy = steering.paused?.by;
    if (
      parentId !== undefined &&
      signal.by === parentBy(parentId) &&
      pausedBy !== signal.by &&
      steering.paused
    ) {
      signal.answer(
        refusal(
          'not_paused',
          `task ${taskId} was paused by ${pausedBy ?? 'a person'}, not with its parent task ${parentId}: it stays paused; nothing was changed`,
        ),
      );
      return;
    }
    const ended = steering.resume(clock.now());
    if (ended === undefined) {
      signal.answer(refusal('not_paused', `task ${taskId} is not paused; nothing was changed`));
      return;
    }
    const { by } = signal;
    void writer.steered().then((written) => {
      // Unrecorded, the task stays held, as the refusal says: its held steps were never let go.
      if (!written) {
        steering.undoResume();
        signal.answer(unrecorded('resume'));
        return;
      }
      steering.letGo();
      logger.info({ taskId, by }, `task ${taskId} resumed at ${place.state} after ${ended.heldMs} ms`);
      publish(() =>
        services.events.make(
          'task.resumed',
          claimed.scope,
          {
            ...place,
            deliveries: claimed.delivery.deliveryCount,
            after: 'pause',
            pausedMs: ended.heldMs,
            since: new Date(ended.since).toISOString(),
            ...(by === undefined ? {} : { by }),
          },
          route,
        ),
      );
      signal.answer({ ok: true, taskId, outcome: 'resumed' });
      holdRequests(services, steering, taskId, { hold: false, stillResumed: () => !steering.held });
    });
    return;
  }

  const { by, text, key } = signal;
  const taken = key === undefined ? undefined : steering.toldWith(key);
  if (key !== undefined && taken !== undefined) {
    // A retry (its answer lost, or slow): told once. Answered once the record holds the first, which may be on its way.
    void writer.steered().then((written) => {
      if (!written || steering.toldWith(key) !== taken) signal.answer(unrecorded('message'));
      else signal.answer({ ok: true, taskId, outcome: 'told', messageId: taken });
    });
    return;
  }
  const full = steering.refusal(text);
  if (full !== undefined) {
    signal.answer({
      ok: false,
      error: {
        code: 'told_backlog',
        message: `task ${taskId} takes no more messages now: ${full}; nothing was changed, tell it again once a step has read them`,
      },
    });
    return;
  }
  const message = steering.tell(text, isoNow(clock), by, key);
  void writer.steered().then((written) => {
    if (!written) {
      steering.read([message.id]);
      signal.answer(unrecorded('message'));
      return;
    }
    publish(() => toldEvent(services, claimed, message));
    // A `pipeline` step at work forwards it to its sub-task, whose agent at work reads it.
    steering.recorded(message);
    signal.answer({ ok: true, taskId, outcome: 'told', messageId: message.id });
  });
}

/**
 * A task restored (its coordinator killed or stopped) takes up its parent's steering where a forward of it was lost.
 * Restored held, its pending requests to people are held again, as the pause did (a coordinator killed between
 * recording the pause and holding them held none), and a sub-task held by its parent's pause lets itself go when its
 * parent's record says the parent runs, no longer paused. Restored running, a sub-task whose parent's record says the
 * parent is paused holds itself with it. The parent forwarded its pause or resume while nobody ran the sub-task (its
 * coordinator was down), and tried it only a while: the sub-task, restored, answers its own steering from then on, so
 * what the parent sends later reaches it, and what it sent before is in the parent's record. A pause a person made of
 * the sub-task directly is theirs to let go.
 */
export function steerRestored(
  services: Pick<TaskServices, 'clock' | 'logger' | 'store' | 'signals' | 'holdRequests'>,
  claimed: Pick<Hold['claimed'], 'input'>,
  steering: TaskSteering,
): void {
  const paused = steering.paused;
  const taskId = claimed.input.taskId;
  if (paused !== undefined) holdRequests(services, steering, taskId, { hold: true, since: paused.since });
  const parentId = claimed.input.parent?.taskId;
  if (parentId === undefined || (paused !== undefined && paused.by !== parentBy(parentId))) return;
  void steerWithParent(services, taskId, parentId, steering);
}

/** Holds a restored sub-task with its paused parent, or lets it go when the parent that held it no longer is. */
async function steerWithParent(
  services: Pick<TaskServices, 'logger' | 'store' | 'signals'>,
  taskId: string,
  parentId: string,
  steering: TaskSteering,
): Promise<void> {
  const { logger } = services;
  const by = parentBy(parentId);
  const held = steering.paused !== undefined;
  let parent: Awaited<ReturnType<TaskServices['store']['get']>>;
  try {
    parent = await services.store.get(parentId);
  } catch (error) {
    logger.warn(
      { err: error, taskId, parentId },
      held
        ? `cannot read parent task ${parentId}'s record: sub-task ${taskId} stays paused until its parent resumes it (or troupe resume ${taskId})`
        : `cannot read parent task ${parentId}'s record: sub-task ${taskId} goes on, paused only if its parent pauses it again (or troupe pause ${taskId})`,
    );
    return;
  }
  const record = parent?.value;
  if (record?.status !== 'running') return;
  const parentPaused = record.paused !== undefined;
  // Already as its parent is, or changed meanwhile (a person paused or resumed it): nothing to take up.
  if (parentPaused === held || (held ? steering.paused?.by !== by : steering.paused !== undefined)) return;
  const answer: SteerAnswer = (reply) => {
    const what = parentPaused ? 'is held with' : 'goes on with';
    if (reply.ok) {
      logger.info({ taskId, parentId }, `sub-task ${taskId} ${what} its parent task ${parentId}`);
      // The parent's record read again: a pause or resume it forwarded after the read found the sub-task as it was
      // then (already_paused, not_paused), and forwarded no more.
      void steerWithParent(services, taskId, parentId, steering);
    } else if (reply.error.code !== 'not_paused' && reply.error.code !== 'already_paused')
      logger.warn(
        { taskId, parentId },
        `sub-task ${taskId} could not go as its parent task ${parentId} does: ${reply.error.message}`,
      );
  };
  services.signals.send(
    taskId,
    parentPaused
      ? { type: 'pause', by, reason: `its parent task ${parentId} was paused`, answer }
      : { type: 'resume', by, answer },
  );
}

/** What the latest hold or let-go of each task's requests to people waits for: they are written in their order. */
const requestChanges = new WeakMap<TaskSteering, Promise<void>>();

/** Holds or lets go of the task's pending requests to people, after the changes before it, in the background. */
function holdRequests(
  services: Pick<TaskServices, 'logger' | 'holdRequests'>,
  steering: TaskSteering,
  taskId: string,
  change: RequestsHold,
): void {
  const { holdRequests: hold, logger } = services;
  if (hold === undefined) return;
  const what = change.hold ? 'hold' : 'let go of';
  const next = (requestChanges.get(steering) ?? Promise.resolve())
    .then(() => hold(taskId, change))
    .then(
      (changed) => {
        if (changed > 0) logger.info({ taskId }, `${what} ${changed} request(s) to people of task ${taskId}`);
      },
      (error: unknown) =>
        logger.warn(
          { err: error, taskId },
          `cannot ${what} the requests to people of task ${taskId}; their askers still do, if they run`,
        ),
    );
  requestChanges.set(steering, next);
}

/** The answer to a steering signal that reached a task already ending. */
export function endingRefusal(taskId: string | undefined): ErrorReply {
  return refusal('task_ended', `task ${taskId ?? ''} is ending already; nothing was changed`);
}

/** A refusal of a steer the task cannot take here now: nothing was changed, and trying again may work. */
export function notRunning(message: string): ErrorReply {
  return refusal('not_running', message);
}

function refusal(code: ControlRefusal, message: string): ErrorReply {
  return { ok: false, error: { code, message } };
}

/**
 * The `task.told` event of a message a task took: made when it is told, and again (marked `again`) when a restored
 * task has it unread.
 */
/** `task.paused`: where the workflow is held, and when, by whom and why the pause came. */
export function pausedEvent(
  services: Pick<TaskServices, 'events' | 'pipeline'>,
  claimed: Pick<Hold['claimed'], 'scope'>,
  place: WorkflowPlace,
  { since, by, reason }: { since: number; by?: string | undefined; reason?: string | undefined },
) {
  return services.events.make(
    'task.paused',
    claimed.scope,
    {
      ...place,
      ...(reason === undefined ? {} : { reason }),
      ...(by === undefined ? {} : { by }),
      since: new Date(since).toISOString(),
    },
    { from: 'workflow', to: services.pipeline },
  );
}

export function toldEvent(
  services: Pick<TaskServices, 'events' | 'pipeline'>,
  claimed: Pick<Hold['claimed'], 'scope'>,
  { id, text, by }: ToldMessage,
  again = false,
) {
  return services.events.make(
    'task.told',
    claimed.scope,
    { messageId: id, text, ...(by === undefined ? {} : { by }), ...(again ? { again: true as const } : {}) },
    { from: by === undefined ? 'user' : `user:${by}`, to: services.pipeline },
  );
}
