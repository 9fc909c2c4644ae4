import {
  type ControlMessage,
  ControlReceipt,
  subjects,
  type ToldMessage,
  type WorkflowRecord,
} from '@troupe/protocol';
import { type Bus, type Clock, type Logger, sleep, TransportError } from '@troupe/runtime';
import type { WorkflowStore } from '../task/taskServices.ts';
import type { TaskSteering } from '../task/taskSteering.ts';

/** How often a pause or resume of a sub-task is tried while nobody runs it yet (it was only just submitted). */
const TRIES = 20;
const RETRY_MS = 500;
/** The longest wait between two forwards of a message to a sub-task nobody runs yet (it may wait its turn a while). */
const MAX_FORWARD_RETRY_MS = 10_000;

/**
 * Holds a `pipeline` step's sub-task while its parent is held, and lets it go with its parent: each hold and letting
 * go of the parent's steering is sent to the sub-task as `pause` or `resume` over `troupe.control.<sub-task id>`,
 * tried again while no coordinator runs the sub-task yet. `restored` (a later delivery of the parent, whose earlier
 * run may have paused the sub-task) sends a resume at once when the parent is not held; an unknown sub-task then
 * (not submitted yet) needs none. Returns how to stop following the parent.
 */
export function followParentHold(
  deps: { bus: Bus; clock: Clock; logger?: Logger | undefined },
  subTaskId: string,
  parentId: string,
  steering: TaskSteering,
  restored = false,
): () => void {
  let stopped = false;
  let wanted: boolean | undefined;
  const send = async (held: boolean): Promise<void> => {
    wanted = held;
    const by = parentBy(parentId);
    const message: ControlMessage = held
      ? { action: 'pause', by, reason: `its parent task ${parentId} was paused` }
      : { action: 'resume', by };
    for (let tries = 0; tries < TRIES && !stopped && wanted === held; tries++) {
      try {
        await deps.bus.request(subjects.control(subTaskId), message, ControlReceipt, {
          timeoutMs: 5_000,
          meta: { taskId: subTaskId, from: `task:${parentId}`, kind: message.action },
        });
        return;
      } catch (error) {
        // Held already, not held, or ended: the sub-task is as its parent wants it.
        if (['already_paused', 'not_paused', 'task_ended'].some((code) => isCode(error, code))) return;
        // No such sub-task yet: none was paused, so none needs resuming.
        if (!held && isCode(error, 'unknown_task')) return;
        // Not claimed yet, or between coordinators: it may run in a moment.
        await sleep(deps.clock, RETRY_MS);
      }
    }
    if (!stopped && wanted === held)
      deps.logger?.warn(
        { taskId: parentId, subTaskId },
        `could not ${message.action} sub-task ${subTaskId} with its parent task ${parentId}; ${message.action} it yourself (troupe ${message.action} ${subTaskId})`,
      );
  };
  if (steering.held) void send(true);
  else if (restored) void send(false);
  const unlisten = steering.listen((held) => void send(held));
  return () => {
    stopped = true;
    unlisten();
  };
}

/**
 * Who a parent's pause and resume of its sub-task are by, as the sub-task records them: a sub-task held by this
 * pause lets itself go when it finds its parent running and not paused (see `steerTask.ts`), and this resume lets go
 * of no pause a person made.
 */
export function parentBy(parentId: string): string {
  return `task ${parentId}`;
}

/**
 * Settles once the task is not held (at once when it is not), or when `signal` aborts: a `pipeline` step entered
 * while its task is paused submits no sub-task until the task is resumed.
 */
export function whileHeld(steering: TaskSteering, signal: AbortSignal): Promise<void> {
  if (!steering.held || signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      unlisten();
      signal.removeEventListener('abort', done);
      resolve();
    };
    const unlisten = steering.listen((held) => {
      if (!held) done();
    });
    signal.addEventListener('abort', done, { once: true });
  });
}

/** What a `pipeline` step forwarding its parent's messages says of them once its sub-task has ended. */
export interface ToldForwarding {
  /**
   * Stops forwarding, and answers with the ids of the parent's messages the sub-task's agents read: of those it took,
   * the ones its record no longer keeps unread. None when it did not complete: its steps' reads do not count, as a
   * failed agent step's do not, and the messages stay for the step that comes next.
   */
  settle(completed: boolean): Promise<string[]>;
  /** Stops forwarding; the messages go on being kept for the step, as they were. */
  stop(): void;
}

/**
 * The key a parent's message is forwarded to its sub-task with: the same for every forward of it, from this run or a
 * restored one, so the sub-task takes it once.
 */
export function forwardKey(parentId: string, messageId: string): string {
  return `${FORWARD_KEY_PREFIX}${parentId}:${messageId}`;
}

/** How every key a parent forwards a message with begins: the sub-task keeps these apart from people's keys. */
export const FORWARD_KEY_PREFIX = 'parent:';

/**
 * Forwards the messages people tell a task to the sub-task of its `pipeline` step at work (which the task's steering
 * knows by the sub-task's id): those the step is owed as it starts, and each one told while it works, as a `tell`
 * over `troupe.control.<sub-task id>` with the key {@link forwardKey} and the teller's name. A tell the sub-task cannot
 * take yet (not claimed yet, between coordinators, its backlog full) is tried again, later each time, until the step
 * ends or is left; one it has ended for is not. The parent counts a message read only once the sub-task completed
 * and its record no longer keeps it unread ({@link ToldForwarding.settle}): an agent of the sub-task read it.
 */
export function forwardTold(
  deps: {
    bus: Bus;
    clock: Clock;
    store: Pick<WorkflowStore, 'get'>;
    logger?: Logger | undefined;
  },
  subTaskId: string,
  parentId: string,
  steering: TaskSteering,
  signal: AbortSignal,
): ToldForwarding {
  const stopped = new AbortController();
  /** Each message forwarded, by the parent's id, with the sub-task's id for it once the sub-task answered. */
  const forwarded = new Map<string, string | undefined>();
  const send = async (message: ToldMessage): Promise<void> => {
    const tell: ControlMessage = {
      action: 'tell',
      text: message.text,
      key: forwardKey(parentId, message.id),
      ...(message.by === undefined ? {} : { by: message.by }),
    };
    for (let tries = 0; !stopped.signal.aborted; tries++) {
      try {
        const receipt = await deps.bus.request(subjects.control(subTaskId), tell, ControlReceipt, {
          timeoutMs: 5_000,
          meta: { taskId: subTaskId, from: `task:${parentId}`, kind: 'tell' },
        });
        forwarded.set(message.id, receipt.messageId);
        return;
      } catch (error) {
        // Ended (or ending): its record says whether it took the message before.
        if (isCode(error, 'task_ended')) return;
        // Not submitted or claimed yet, between coordinators, or its unread backlog full: it may take it later.
        const waitMs = Math.min(RETRY_MS * 2 ** Math.min(tries, 10), MAX_FORWARD_RETRY_MS);
        await sleep(deps.clock, waitMs, stopped.signal).catch(() => undefined);
      }
    }
  };
  const forward = (message: ToldMessage): void => {
    if (stopped.signal.aborted || forwarded.has(message.id)) return;
    forwarded.set(message.id, undefined);
    void send(message);
  };
  // One not recorded yet goes once it is (onTold): a tell whose record fails is taken back, and told nowhere.
  for (const message of steering.toldFor(subTaskId)) if (steering.isRecorded(message.id)) forward(message);
  const unlisten = steering.onTold(forward);
  const stop = () => {
    stopped.abort();
    unlisten();
  };
  // The step left (the task cancelled, this coordinator stopping): nothing more is forwarded from this run.
  signal.addEventListener('abort', stop, { once: true });
  return {
    stop,
    async settle(completed) {
      stop();
      if (!completed || forwarded.size === 0) return [];
      let record: WorkflowRecord | undefined;
      try {
        record = (await deps.store.get(subTaskId))?.value;
      } catch (error) {
        deps.logger?.warn(
          { err: error, taskId: parentId, subTaskId },
          `cannot read sub-task ${subTaskId}'s record: the messages it took count as read`,
        );
      }
      const taken = new Map((record?.toldKeys ?? []).map(({ key, messageId }) => [key, messageId]));
      const unread = new Set((record?.told ?? []).map(({ id }) => id));
      return [...forwarded].flatMap(([id, answered]) => {
        const theirs = taken.get(forwardKey(parentId, id)) ?? answered;
        return theirs !== undefined && !unread.has(theirs) ? [id] : [];
      });
    },
  };
}

function isCode(error: unknown, code: string): boolean {
  return TransportError.is(error) && error.code === code;
}
