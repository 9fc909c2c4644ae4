import { type ControlMessage, ControlReceipt, subjects } from '@troupe/protocol';
import { type Bus, type Clock, type Logger, sleep, TransportError } from '@troupe/runtime';
import type { TaskSteering } from '../task/taskSteering.ts';

/** How often a pause or resume of a sub-task is tried while nobody runs it yet (it was only just submitted). */
const TRIES = 20;
const RETRY_MS = 500;

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
    const by = `task ${parentId}`;
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

function isCode(error: unknown, code: string): boolean {
  return TransportError.is(error) && error.code === code;
}
