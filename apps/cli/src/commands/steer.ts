import { randomUUID } from 'node:crypto';
import { hostname, userInfo } from 'node:os';
import { text as readAll } from 'node:stream/consumers';
import { OperationError, pauseTask, resumeTask, tellTask } from '@troupe/client';
import { TransportError } from '@troupe/runtime/bus';
import { CliError, connectCli, explain, type ServerOptions } from '../server.ts';

export interface SteerOptions extends ServerOptions {
  /** Who steers, kept in the task's events and record (default: user@host). */
  by?: string;
}

/**
 * `troupe pause`: the step at work finishes its current model or tool call, then the task is held until `troupe
 * resume`; the pause is recorded before the coordinator answers, so it holds across a restart.
 */
export async function pause(taskId: string, options: SteerOptions & { reason?: string }): Promise<number> {
  await steer(options, 'troupe-pause', (bus) =>
    pauseTask(bus, taskId, {
      by: options.by ?? whoAmI(),
      ...(options.reason ? { reason: options.reason } : {}),
    }),
  );
  process.stdout.write(
    `${taskId}: paused; the step at work stops after its current model or tool call (troupe resume ${taskId} lets it go on)\n`,
  );
  return 0;
}

/** `troupe resume`: a paused task goes on from where it was held. */
export async function resume(taskId: string, options: SteerOptions): Promise<number> {
  await steer(options, 'troupe-resume', (bus) => resumeTask(bus, taskId, { by: options.by ?? whoAmI() }));
  process.stdout.write(`${taskId}: resumed\n`);
  return 0;
}

/**
 * `troupe tell`: a person's message for the agent at work, which reads it before its next model call (the next agent
 * step does when none is at work). The words are the message, or standard input when the only word is `-`.
 */
export async function tell(
  taskId: string,
  words: string[],
  options: SteerOptions & { key?: string; wait?: number },
): Promise<number> {
  const message = await messageOf(words);
  // Made here when not given, so that a tell whose answer was lost can be told again with it and is told once.
  const key = options.key ?? randomUUID();
  const { messageId } = await steer(
    options,
    'troupe-tell',
    (bus) =>
      tellTask(bus, taskId, message, {
        by: options.by ?? whoAmI(),
        key,
        ...(options.wait === undefined ? {} : { timeoutMs: Math.round(options.wait * 1000) }),
      }),
    `to tell it again, told once however often: troupe tell ${taskId} --key ${key} <message>`,
  );
  process.stdout.write(
    `${taskId}: told (${messageId}); the agent at work reads it before its next model call\n`,
  );
  return 0;
}

/**
 * Runs `act` on a bus of its own. `again`, when given, says how to ask again safely, for a failure after which what
 * was asked may have been taken or may be taken once its coordinator runs: no answer in time, or none running it now.
 */
async function steer<T>(
  options: SteerOptions,
  name: string,
  act: (bus: Awaited<ReturnType<typeof connectCli>>) => Promise<T>,
  again?: string,
): Promise<T> {
  const bus = await connectCli(options, name);
  try {
    return await act(bus).catch((error) => {
      // Heard but not answered: a coordinator runs, too slow (or stopped since), so starting one is no advice.
      const unanswered = OperationError.is(error) && TransportError.is(error.cause, 'timeout');
      if (again !== undefined && (unanswered || OperationError.is(error, 'unavailable')))
        throw new CliError(`${error.message}; ${again}`);
      if (OperationError.is(error, 'no_coordinator') && !unanswered)
        throw new CliError(`${error.message} — start one with troupe up`);
      return explain(error);
    });
  } finally {
    await bus.close();
  }
}

async function messageOf(words: string[]): Promise<string> {
  const message = words.length === 1 && words[0] === '-' ? await readAll(process.stdin) : words.join(' ');
  if (message.trim() === '') {
    throw new CliError(
      words[0] === '-' ? 'standard input held no message to tell' : 'say what to tell the task',
      2,
    );
  }
  return message;
}

const whoAmI = (): string => `${userInfo().username}@${hostname()}`;
