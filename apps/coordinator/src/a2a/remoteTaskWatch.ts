import { type Task, TaskState } from '@a2a-js/sdk';
import type { Client } from '@a2a-js/sdk/client';
import { errorMessage } from '@troupe/protocol';
import { sleep } from '@troupe/runtime';
import { mayPass, retrying } from './a2aConnection.ts';
import type { RemoteRun } from './remoteStep.ts';

/**
 * How a step watches the remote task it waits on: on the agent's stream when it streams, else by reading the task
 * every poll interval, waiting out an agent that cannot be reached until the step's own timeout.
 */

export /** The states after which a remote task changes no more. */
const TERMINAL: readonly TaskState[] = [
  TaskState.TASK_STATE_COMPLETED,
  TaskState.TASK_STATE_FAILED,
  TaskState.TASK_STATE_CANCELED,
  TaskState.TASK_STATE_REJECTED,
];

export function getTask(run: RemoteRun, client: Client, id: string): Promise<Task> {
  return retrying(run.call, `read task ${id}`, () =>
    client.getTask({ tenant: '', id }, { signal: run.call.signal }),
  );
}

/** The states a waiting step acts on: the task ended, or asks for something. */
const DECISIVE: readonly TaskState[] = [
  ...TERMINAL,
  TaskState.TASK_STATE_INPUT_REQUIRED,
  TaskState.TASK_STATE_AUTH_REQUIRED,
];

const statusKey = (status: Task['status']): string =>
  [status?.state ?? '', status?.timestamp ?? '', status?.message?.messageId ?? ''].join('|');

/**
 * Waits for the task to reach a state other than `task`'s that the step acts on, then reads it (GetTask). An agent
 * that streams is followed on SubscribeToTask; a stream refused, cut (by the request's timeout, too) or ended without
 * such a state falls back to a poll interval, as for an agent that does not stream.
 */
export async function changed(run: RemoteRun, client: Client, task: Task, streams: boolean): Promise<Task> {
  if (!streams) return later(run, client, task.id);
  const from = statusKey(task.status);
  let decided = false;
  // Leaving the stream closes its connection at once, rather than when the agent or the request's timeout ends it.
  const done = new AbortController();
  const signal = AbortSignal.any([run.call.signal, done.signal]);
  try {
    for await (const event of client.resubscribeTask({ tenant: '', id: task.id }, { signal })) {
      const payload = event.payload;
      const status =
        payload?.$case === 'task' || payload?.$case === 'statusUpdate' ? payload.value.status : undefined;
      if (status && DECISIVE.includes(status.state) && statusKey(status) !== from) {
        decided = true;
        break;
      }
    }
  } catch (error) {
    if (run.call.signal.aborted) throw error;
  } finally {
    done.abort();
  }
  return decided ? readWhileWaiting(run, client, task.id) : later(run, client, task.id);
}

/** The task, read again after the poll interval. */
async function later(run: RemoteRun, client: Client, id: string): Promise<Task> {
  await sleep(run.deps.clock, run.settings.pollIntervalMs, run.call.signal);
  return readWhileWaiting(run, client, id);
}

/** The longest wait between reads of a remote task that cannot be reached. */
const UNREACHABLE_WAIT_MS = 30_000;

/**
 * The task read while the step waits on it. The remote task exists and works on: a fault that outlasts the request's
 * retries (the agent restarting, a network down for minutes) is waited out, read again at growing intervals, until
 * the step's own timeout ends the wait. A fault that will not pass (refused, no such task) fails the step.
 */
async function readWhileWaiting(run: RemoteRun, client: Client, id: string): Promise<Task> {
  for (let wait = run.settings.pollIntervalMs; ; wait = Math.min(wait * 2, UNREACHABLE_WAIT_MS)) {
    try {
      return await getTask(run, client, id);
    } catch (error) {
      if (run.call.signal.aborted || !mayPass(error)) throw error;
      run.deps.logger?.warn(
        { stepId: run.request.stepId, agent: run.settings.name, a2aTaskId: id },
        `${errorMessage(error)}; reading it again in ${Math.round(wait / 1_000)} s, until the step's timeout`,
      );
      await sleep(run.deps.clock, wait, run.call.signal);
    }
  }
}
